/* Unit tests of the day ledger's decision rules (meter/ledger.h) and of the
 * webhook signature: pure, no database. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ledger.h"
#include "usage.h"
#include "webhook.h"

#define SEC  INT64_C(1000000)
#define HOUR (3600 * SEC)

static const struct price_rates *R = &price_rates_default;

/* The worst case of a whole lease equals usage_lease_max_cost(). */
static void test_worst_case(void)
{
	int64_t a = 0, b = 0;

	CHECK(usage_lease_max_cost_usec(R, 2, 4096, 900 * SEC, &a) == METER_OK);
	CHECK_I64(a, 20000); /* DESIGN.md §2 */
	for (int64_t v = 1; v <= 1024; v *= 4)
		for (int64_t m = 1; m <= 16777216; m *= 64)
			for (int64_t s = 1; s <= 86400; s = s * 7 + 3) {
				CHECK(usage_lease_max_cost_usec(R, v, m, s * SEC, &a) == METER_OK);
				CHECK(usage_lease_max_cost(R, v, m, s, &b) == METER_OK);
				if (a != b)
					CHECK_I64(a, b);
			}
	/* Rounded up: one microsecond of one vCPU costs a whole micro. */
	CHECK(usage_lease_max_cost_usec(R, 1, 0, 1, &a) == METER_OK);
	CHECK_I64(a, 1);
	CHECK(usage_lease_max_cost_usec(R, 0, 1, 1, &a) == METER_EINVAL);
	CHECK(usage_lease_max_cost_usec(R, 1, -1, 1, &a) == METER_EINVAL);
	CHECK(usage_lease_max_cost_usec(R, 1, 1, -1, &a) == METER_EINVAL);
	CHECK(usage_lease_max_cost_usec(R, INT64_MAX / 10, 1, HOUR, &a) == METER_ERANGE);
}

/* Day starts of a UTC key from midnight d0: 24 h apart. */
static void utc_bounds(int64_t d0, int64_t *b)
{
	for (int i = 0; i < LEDGER_BOUNDS; i++)
		b[i] = d0 + i * 24 * HOUR;
}

static void test_split(void)
{
	struct ledger_part p[LEDGER_PARTS_MAX];
	int64_t b[LEDGER_BOUNDS], whole = 0;
	int n = 0;

	utc_bounds(0, b);
	/* Within one day: one part, the whole lease. */
	CHECK(ledger_split(R, 2, 4096, 10 * HOUR, 10 * HOUR + 900 * SEC, b, LEDGER_BOUNDS, p, &n) ==
	      METER_OK);
	CHECK_I64(n, 1);
	CHECK_I64(p[0].day_index, 0);
	CHECK_I64(p[0].micros, 20000);
	/* Ending exactly at midnight: still one part. */
	CHECK(ledger_split(R, 1, 1024, 23 * HOUR, 24 * HOUR, b, LEDGER_BOUNDS, p, &n) == METER_OK);
	CHECK_I64(n, 1);
	/* Across midnight: two parts, each rounded up, summing to at least the whole. */
	CHECK(ledger_split(R, 2, 4096, 23 * HOUR + 1800 * SEC + 7,
			   23 * HOUR + 1800 * SEC + 7 + 3600 * SEC, b, LEDGER_BOUNDS, p,
			   &n) == METER_OK);
	CHECK_I64(n, 2);
	CHECK_I64(p[0].day_index, 0);
	CHECK_I64(p[1].day_index, 1);
	CHECK_I64(p[0].end_usec, 24 * HOUR);
	CHECK_I64(p[1].start_usec, 24 * HOUR);
	CHECK(usage_lease_max_cost_usec(R, 2, 4096, 3600 * SEC, &whole) == METER_OK);
	CHECK(p[0].micros + p[1].micros >= whole);
	CHECK(p[0].micros + p[1].micros <= whole + 2);
	/* A 23-hour day (spring forward): a 24 h lease from 23:30 touches three days. */
	b[0] = 0;
	b[1] = 24 * HOUR;
	b[2] = b[1] + 23 * HOUR;
	b[3] = b[2] + 24 * HOUR;
	b[4] = b[3] + 24 * HOUR;
	b[5] = b[4] + 24 * HOUR;
	CHECK(ledger_split(R, 1, 1024, 23 * HOUR + 1800 * SEC, 47 * HOUR + 1800 * SEC, b,
			   LEDGER_BOUNDS, p, &n) == METER_OK);
	CHECK_I64(n, 3);
	CHECK_I64(p[0].end_usec - p[0].start_usec, 1800 * SEC);
	CHECK_I64(p[1].end_usec - p[1].start_usec, 23 * HOUR);
	CHECK_I64(p[2].end_usec - p[2].start_usec, 1800 * SEC);
	/* Bad input. */
	CHECK(ledger_split(R, 1, 1, 5, 5, b, LEDGER_BOUNDS, p, &n) == METER_EINVAL);
	CHECK(ledger_split(R, 1, 1, 24 * HOUR, 25 * HOUR, b, LEDGER_BOUNDS, p, &n) ==
	      METER_EINVAL); /* does not start on day 0 */
	CHECK(ledger_split(R, 1, 1, HOUR, b[5] + 1, b, LEDGER_BOUNDS, p, &n) == METER_ERANGE);
	b[3] = b[2] - 1;
	CHECK(ledger_split(R, 1, 1, HOUR, 2 * HOUR, b, LEDGER_BOUNDS, p, &n) == METER_EINVAL);
	/* A day the zone skipped (Pacific/Apia, 2011-12-30): two equal
	 * starts, a day no part falls on; a lease across it is cut at its
	 * one start, into the days either side. */
	utc_bounds(0, b);
	b[2] = b[1];
	CHECK(ledger_split(R, 1, 1024, HOUR, 2 * HOUR, b, LEDGER_BOUNDS, p, &n) == METER_OK);
	CHECK_I64(n, 1);
	CHECK(ledger_split(R, 1, 1024, 23 * HOUR, 25 * HOUR, b, LEDGER_BOUNDS, p, &n) == METER_OK);
	CHECK_I64(n, 2);
	CHECK_I64(p[0].day_index, 0);
	CHECK_I64(p[1].day_index, 2);
	CHECK_I64(p[0].end_usec, 24 * HOUR);
	CHECK_I64(p[1].start_usec, 24 * HOUR);
	CHECK_I64(p[1].end_usec, 25 * HOUR);
}

static void test_fits(void)
{
	struct ledger_day d = {
	    .spent_micros = 300, .held_micros = 200, .has_limit = true, .limit_micros = 1000};
	struct ledger_day none = {.spent_micros = INT64_MAX, .held_micros = 0};
	struct ledger_day huge = {.spent_micros = INT64_MAX,
				  .held_micros = INT64_MAX,
				  .has_limit = true,
				  .limit_micros = INT64_MAX};

	CHECK(ledger_fits(&d, 500));  /* equal to the limit: allowed */
	CHECK(!ledger_fits(&d, 501)); /* one micro more: refused */
	CHECK(ledger_fits(&d, 0));
	CHECK(!ledger_fits(&d, -1));
	CHECK(ledger_fits(&none, INT64_MAX)); /* no limit */
	CHECK(!ledger_fits(&huge, 1));	      /* no overflow */
	CHECK(ledger_max_cost_ok(20000, 20000));
	CHECK(!ledger_max_cost_ok(20000, 19999));
}

/* ledger_place is all or nothing, and a random sequence never commits past
 * the limit while every refusal really would have. */
static void test_place(void)
{
	struct ledger_day a = {.has_limit = true, .limit_micros = 100};
	struct ledger_day b = {.has_limit = true, .limit_micros = 50};
	struct ledger_day *days[2] = {&a, &b};
	int64_t amounts[2] = {60, 40};
	int failed = -1;
	unsigned seed = 42;

	CHECK(ledger_place(days, amounts, 2, &failed));
	CHECK_I64(a.held_micros, 60);
	CHECK_I64(b.held_micros, 40);
	amounts[0] = 40;
	amounts[1] = 11;
	CHECK(!ledger_place(days, amounts, 2, &failed));
	CHECK_I64(failed, 1);
	CHECK_I64(a.held_micros, 60); /* untouched: all or nothing */
	amounts[1] = 10;
	CHECK(ledger_place(days, amounts, 2, &failed));
	CHECK_I64(a.held_micros, 100);
	CHECK_I64(b.held_micros, 50);

	for (int round = 0; round < 200; round++) {
		struct ledger_day x = {.spent_micros = rand_r(&seed) % 500,
				       .has_limit = true,
				       .limit_micros = 500 + rand_r(&seed) % 1000};
		struct ledger_day *xd[1] = {&x};
		int ok = 1;

		for (int i = 0; i < 100; i++) {
			int64_t amt = rand_r(&seed) % 200;
			int64_t before = x.spent_micros + x.held_micros;
			bool placed = ledger_place(xd, &amt, 1, NULL);

			if (placed != (before + amt <= x.limit_micros))
				ok = 0;
			if (x.spent_micros + x.held_micros > x.limit_micros)
				ok = 0;
		}
		CHECK(ok);
	}
}

/* An open hold for ledger_consume: no consumption yet, not settling. */
static struct ledger_hold hold(int64_t id, int64_t amount, int64_t starts)
{
	return (struct ledger_hold){.hold_id = id,
				    .amount_micros = amount,
				    .lease_starts_usec = starts,
				    .settles_usec = LEDGER_SETTLES_NONE};
}

/* The rule before leases' times counted: the whole sandbox-day's money on
 * its holds oldest first, each up to what it has left, the rest to the
 * newest. */
static int64_t old_consume(int64_t money, struct ledger_hold *h, size_t n)
{
	int64_t covered = 0;

	for (size_t j = 0; j < n; j++) {
		int64_t rem = h[j].amount_micros > h[j].consumed_micros
				  ? h[j].amount_micros - h[j].consumed_micros
				  : 0;
		int64_t take = rem < money ? rem : money;
		h[j].add_micros = take;
		money -= take;
		covered += take;
	}
	if (n > 0)
		h[n - 1].add_micros += money;
	return covered;
}

/* A hold consumes only pieces of usage from its lease's time: not those
 * that ended by its lease's start, nor those that began at or after its
 * kept tail's end (settles_usec); the rest goes to the newest eligible. */
static void test_consume_times(void)
{
	struct ledger_piece p[3];
	struct ledger_hold h[3];
	int64_t covered = -1;

	/* Before the lease: skipped; ending past its start: the floor of
	 * the share of the time after it, floor(30 × 1 µs / (100 s + 1 µs))
	 * = 0 for one µs, floor(30 × 4 s / 104 s) = 1 for four seconds. */
	h[0] = hold(1, 50, 100 * SEC);
	p[0] = (struct ledger_piece){0, 100 * SEC, 30};
	CHECK(ledger_consume(p, 1, h, 1, &covered) == METER_OK);
	CHECK_I64(covered, 0);
	CHECK_I64(h[0].add_micros, 0);
	p[0].end_usec = 100 * SEC + 1;
	CHECK(ledger_consume(p, 1, h, 1, &covered) == METER_OK);
	CHECK_I64(covered, 0);
	CHECK_I64(h[0].add_micros, 0);
	p[0].end_usec = 104 * SEC;
	CHECK(ledger_consume(p, 1, h, 1, &covered) == METER_OK);
	CHECK_I64(covered, 1);
	CHECK_I64(h[0].add_micros, 1);

	/* A piece across a lease's start: the hold takes the share of the
	 * time from its start (the wake's running event came after it, so
	 * no sample or event cuts the piece there). */
	p[0] = (struct ledger_piece){50 * SEC, 150 * SEC, 31};
	CHECK(ledger_consume(p, 1, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 15); /* floor(31 × 50 / 100) */
	CHECK_I64(covered, 15);
	/* ...across a kept tail's end (the lease-end sweep's): the share
	 * before it; and across both, a tail ending at 100 s and a wake at
	 * 120 s: 15 to the tail, floor(15 × 20 / 50) = 6 to none, 9 to the
	 * wake. */
	h[0] = hold(1, 50, 0);
	h[0].settles_usec = 100 * SEC;
	p[0] = (struct ledger_piece){50 * SEC, 150 * SEC, 30};
	CHECK(ledger_consume(p, 1, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 15);
	CHECK_I64(covered, 15);
	h[1] = hold(2, 50, 120 * SEC);
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 15);
	CHECK_I64(h[1].add_micros, 9);
	CHECK_I64(covered, 24);
	/* A piece of no time is not cut. */
	p[0] = (struct ledger_piece){120 * SEC, 120 * SEC, 5};
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_OK);
	CHECK_I64(h[1].add_micros, 0);
	CHECK_I64(covered, 0);
	p[0].end_usec = 120 * SEC - 1;
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_EINVAL);

	/* A review's lease, sampled 6 s before it started, at its worst case
	 * (26,667, rounded up) from then on: 221 µ$ in the 10 s piece across
	 * its start, 26,579 after. The hold takes floor(221 × 4 / 10) = 88
	 * of the first, so exactly its amount: not 89, the rounding of the
	 * 6 s before it (132.6), which read as outrun (hold_consumed). */
	h[0] = hold(3, 26667, 6 * SEC);
	p[0] = (struct ledger_piece){0, 10 * SEC, 221};
	p[1] = (struct ledger_piece){10 * SEC, 1206 * SEC, 26579};
	CHECK(ledger_consume(p, 2, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 26667);
	CHECK_I64(covered, 26667);
	/* Two leases starting in one piece: the time from each takes the
	 * floor of its share, floor(100 × 50 / 100) = 50 from 50 s, of which
	 * floor(50 × 25 / 50) = 25 from 75 s. The first 25 are the first
	 * hold's alone (10 held, 15 outrun); the last go to the first hold's
	 * nothing left, then the second. */
	h[0] = hold(1, 10, 50 * SEC);
	h[1] = hold(2, 100, 75 * SEC);
	p[0] = (struct ledger_piece){0, 100 * SEC, 100};
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 25);
	CHECK_I64(h[1].add_micros, 25);
	CHECK_I64(covered, 35);
	/* 99: 49 from 50 s, floor(49 × 25 / 50) = 24 from 75 s, all the
	 * first hold's, oldest first. */
	p[0].micros = 99;
	h[0].amount_micros = 100;
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 49);
	CHECK_I64(h[1].add_micros, 0);
	CHECK_I64(covered, 49);

	/* The audit's wake: a paused stretch before the wake's lease and the
	 * woken minute after it, in one call. The wake hold (91) takes only
	 * its own 84, nothing outrun; the stretch has no hold. */
	h[0] = hold(7, 91, 600 * SEC);
	p[0] = (struct ledger_piece){300 * SEC, 600 * SEC, 25};
	p[1] = (struct ledger_piece){600 * SEC, 660 * SEC, 84};
	CHECK(ledger_consume(p, 2, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 84);
	CHECK_I64(covered, 84);

	/* A kept tail (settles at 100 s) takes what came before its event,
	 * nothing after it, not even as the only hold. */
	h[0] = hold(1, 40, 0);
	h[0].consumed_micros = 10;
	h[0].settles_usec = 100 * SEC;
	p[0] = (struct ledger_piece){50 * SEC, 100 * SEC, 20};
	p[1] = (struct ledger_piece){100 * SEC, 200 * SEC, 25};
	CHECK(ledger_consume(p, 2, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 20);
	CHECK_I64(covered, 20);
	/* Beyond its amount before the event: the tail takes the rest. */
	p[0].micros = 45;
	CHECK(ledger_consume(p, 2, h, 1, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 45);
	CHECK_I64(covered, 30);

	/* Left over: to the newest eligible hold, not to a newer one whose
	 * lease starts later. */
	h[0] = hold(1, 10, 0);
	h[1] = hold(2, 10, 0);
	h[2] = hold(3, 100, 500 * SEC);
	p[0] = (struct ledger_piece){0, 100 * SEC, 50};
	CHECK(ledger_consume(p, 1, h, 3, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 10);
	CHECK_I64(h[1].add_micros, 40);
	CHECK_I64(h[2].add_micros, 0);
	CHECK_I64(covered, 20);

	/* A tail settled before the piece and a lease after it: no eligible
	 * hold, nothing covered, nothing consumed. */
	h[0] = hold(1, 100, 0);
	h[0].settles_usec = 100 * SEC;
	h[1] = hold(2, 100, 300 * SEC);
	p[0] = (struct ledger_piece){100 * SEC, 300 * SEC, 70};
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_OK);
	CHECK_I64(covered, 0);
	CHECK_I64(h[0].add_micros, 0);
	CHECK_I64(h[1].add_micros, 0);
	/* No hold at all. */
	CHECK(ledger_consume(p, 1, h, 0, &covered) == METER_OK);
	CHECK_I64(covered, 0);

	/* In time order, a piece's consumption is the next one's less: the
	 * first piece outruns the only hold of its time, the second finds
	 * that hold spent and goes to the lease started since. */
	h[0] = hold(1, 30, 0);
	h[1] = hold(2, 100, 100 * SEC);
	p[0] = (struct ledger_piece){0, 100 * SEC, 50};
	p[1] = (struct ledger_piece){100 * SEC, 200 * SEC, 40};
	CHECK(ledger_consume(p, 2, h, 2, &covered) == METER_OK);
	CHECK_I64(h[0].add_micros, 50);
	CHECK_I64(h[1].add_micros, 40);
	CHECK_I64(covered, 70);

	/* Bad input and overflow. */
	p[0] = (struct ledger_piece){0, SEC, -1};
	CHECK(ledger_consume(p, 1, h, 2, &covered) == METER_EINVAL);
	h[0] = hold(1, 0, 0);
	p[0] = (struct ledger_piece){0, SEC, INT64_MAX};
	p[1] = (struct ledger_piece){SEC, 2 * SEC, 1};
	CHECK(ledger_consume(p, 2, h, 1, &covered) == METER_ERANGE);
}

/* When every hold's lease started before every piece and none is
 * settling, the pieces come out as their sum did under the old rule. */
static void test_consume_as_before(void)
{
	uint64_t x = 88172645463325252ULL;

	for (int round = 0; round < 20000; round++) {
		struct ledger_piece p[5];
		struct ledger_hold h[4], old[4];
		size_t np, nh;
		int64_t covered = -1, sum = 0, t = 1000 * SEC;

		memset(h, 0, sizeof(h));
		memset(old, 0, sizeof(old));
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		np = 1 + x % 5;
		nh = (x >> 8) % 5;
		for (size_t j = 0; j < nh; j++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			h[j] = hold((int64_t)j + 1, (int64_t)(x % 200),
				    (int64_t)((x >> 20) % 1000) * SEC);
			h[j].consumed_micros = (int64_t)((x >> 40) % 250);
			old[j] = h[j];
		}
		for (size_t i = 0; i < np; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			p[i] = (struct ledger_piece){t, t + 10 * SEC, (int64_t)(x % 120)};
			t += 10 * SEC;
			sum += p[i].micros;
		}
		CHECK(ledger_consume(p, np, h, nh, &covered) == METER_OK);
		if (covered != old_consume(sum, old, nh))
			CHECK_I64(covered, old_consume(sum, old, nh));
		for (size_t j = 0; j < nh; j++)
			if (h[j].add_micros != old[j].add_micros)
				CHECK_I64(h[j].add_micros, old[j].add_micros);
	}
}

/* The webhook signature: HMAC-SHA256("key", "1700000000.{}"), and the
 * retry schedule. */
static void test_webhook(void)
{
	char hex[65];

	CHECK(webhook_sign("key", 1700000000, "{}", 2, hex) == METER_OK);
	/* printf '1700000000.{}' | openssl dgst -sha256 -hmac key */
	CHECK_STR(hex, "9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae");
	CHECK_I64(webhook_retry_delay_s(1), 1);
	CHECK_I64(webhook_retry_delay_s(2), 2);
	CHECK_I64(webhook_retry_delay_s(5), 16);
	CHECK_I64(webhook_retry_delay_s(40), WEBHOOK_RETRY_MAX_S);
}

int main(void)
{
	test_worst_case();
	test_split();
	test_fits();
	test_place();
	test_consume_times();
	test_consume_as_before();
	test_webhook();
	return check_done();
}
