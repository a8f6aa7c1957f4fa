/* Unit tests of the check engine's facts (meter/check_facts.h): what a fast
 * batch is decided on. Pure, no database. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "check_facts.h"
#include "clock.h"

static const struct ledger_day day0 = {
    .spent_micros = 100, .held_micros = 50, .has_limit = true, .limit_micros = 1000};

static enum check_facts_predict predict(struct check_facts *f, const char *key, const char *day,
					int64_t now_ms, struct ledger_day *out)
{
	enum check_facts_predict p;

	check_facts_lock(f);
	p = check_facts_row_predict_locked(f, "acc", key, day, now_ms, out);
	check_facts_unlock(f);
	return p;
}

/* Reserves delta on key's row under ticket; returns how many tickets the
 * batch must wait for, the first in *after0. */
static int reserve(struct check_facts *f, const char *key, int64_t delta, int32_t ticket,
		   int32_t *after0)
{
	int32_t after[DB_FAST_AFTER_MAX];
	int n = 0;

	check_facts_lock(f);
	check_facts_row_reserve_locked(f, "acc", key, "2026-12-01", delta, ticket, after, &n);
	check_facts_unlock(f);
	*after0 = n > 0 ? after[0] : 0;
	return n;
}

static void test_keys(void)
{
	struct check_facts *f = NULL;
	struct check_key_fact k = {.has_limit = true, .limit_micros = 5}, out;

	CHECK(check_facts_new(&f) == METER_OK);
	CHECK(!check_facts_key_get(f, "k1", &out));
	snprintf(k.account_id, sizeof(k.account_id), "acc");
	snprintf(k.time_zone, sizeof(k.time_zone), "Europe/Paris");
	check_facts_key_put(f, "k1", &k);
	CHECK(check_facts_key_get(f, "k1", &out));
	CHECK_STR(out.account_id, "acc");
	CHECK_STR(out.time_zone, "Europe/Paris");
	CHECK_I64(out.limit_micros, 5);
	CHECK(!check_facts_key_get(f, "k2", &out));
	check_facts_key_forget(f, "k2"); /* not known: nothing happens */
	CHECK(check_facts_key_get(f, "k1", &out));
	check_facts_key_forget(f, "k1");
	CHECK(!check_facts_key_get(f, "k1", &out));
	check_facts_free(f);
}

static void test_prices(void)
{
	struct check_facts *f = NULL;
	struct db_price_version p[3] = {{.from_usec = 0}, {.from_usec = 1000}, {.from_usec = 5000}},
				out[DB_CHECKS_PRICES_MAX];
	int n = 0;
	int64_t version = 0;

	p[0].rates.cpu_micros_per_vcpu_hour = 1;
	p[1].rates.cpu_micros_per_vcpu_hour = 2;
	p[2].rates.cpu_micros_per_vcpu_hour = 3;
	CHECK(check_facts_new(&f) == METER_OK);
	CHECK(!check_facts_prices_get(f, 10, 20, out, &n, &version));
	/* Read at 10, known up to 8000. */
	check_facts_prices_put(f, p, 3, 7, 10, 8000);
	CHECK(check_facts_prices_get(f, 10, 20, out, &n, &version));
	CHECK_I64(n, 1);
	CHECK_I64(out[0].rates.cpu_micros_per_vcpu_hour, 1);
	CHECK_I64(version, 7);
	/* A lease over a change of version: both, the one in force first. */
	CHECK(check_facts_prices_get(f, 500, 1500, out, &n, &version));
	CHECK_I64(n, 2);
	CHECK_I64(out[0].from_usec, 0);
	CHECK_I64(out[1].from_usec, 1000);
	/* Later: the earlier versions no longer count. */
	CHECK(check_facts_prices_get(f, 2000, 6000, out, &n, &version));
	CHECK_I64(n, 2);
	CHECK_I64(out[0].from_usec, 1000);
	CHECK_I64(out[1].from_usec, 5000);
	/* Before the read, or past what was read: not known. */
	CHECK(!check_facts_prices_get(f, 5, 20, out, &n, &version));
	CHECK(!check_facts_prices_get(f, 2000, 8001, out, &n, &version));
	check_facts_free(f);
}

/* Predictions: as seen plus the held of the batches in flight; committed
 * batches move what is seen, others do not. */
static void test_rows(void)
{
	struct check_facts *f = NULL;
	struct ledger_day d;
	int32_t after = 0;

	CHECK(check_facts_new(&f) == METER_OK);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_UNKNOWN);
	check_facts_row_put(f, "acc", "k", "2026-12-01", &day0, false, 0);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.spent_micros, 100);
	CHECK_I64(d.held_micros, 50);
	CHECK(d.has_limit);
	CHECK_I64(d.limit_micros, 1000);
	/* Another day, account or key is another row. */
	CHECK(predict(f, "k", "2026-12-02", 0, &d) == CHECK_FACTS_UNKNOWN);
	CHECK(predict(f, "k2", "2026-12-01", 0, &d) == CHECK_FACTS_UNKNOWN);

	/* Two batches in flight: the second expects the first's held. */
	CHECK_I64(reserve(f, "k", 30, 1, &after), 0);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 80);
	CHECK_I64(reserve(f, "k", 20, 2, &after), 1);
	CHECK_I64(after, 1); /* it waits for batch 1 */
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 100);
	/* The first commits: seen moves by it; the second still in flight. */
	check_facts_row_release(f, "acc", "k", "2026-12-01", 30, 1, true);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 100);
	/* A third waits for the second only. */
	CHECK_I64(reserve(f, "k", 5, 3, &after), 1);
	CHECK_I64(after, 2);
	/* The second does not commit: its held is gone from the prediction. */
	check_facts_row_release(f, "acc", "k", "2026-12-01", 20, 2, false);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 85);
	check_facts_row_release(f, "acc", "k", "2026-12-01", 5, 3, true);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 85);
	/* Nothing in flight: a new batch waits for none. */
	CHECK_I64(reserve(f, "k", 1, 4, &after), 0);
	check_facts_row_release(f, "acc", "k", "2026-12-01", 1, 4, true);

	/* The row as read again replaces what was seen. */
	check_facts_row_put(f, "acc", "k", "2026-12-01", &day0, false, 0);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 50);
	check_facts_row_forget(f, "acc", "k", "2026-12-01");
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_UNKNOWN);
	check_facts_free(f);
}

/* Contention: fast batches that keep meeting other figures leave the row
 * to the classic path for a while; a lock granted out of order is not
 * contention. */
static void test_contention(void)
{
	struct check_facts *f = NULL;
	struct ledger_day d, other = day0;
	int32_t after = 0;

	CHECK(check_facts_new(&f) == METER_OK);
	check_facts_row_put(f, "acc", "k", "2026-12-01", &day0, false, 0);
	other.spent_micros += 7; /* metering moved the row */
	check_facts_row_put(f, "acc", "k", "2026-12-01", &other, true, 1000);
	CHECK(predict(f, "k", "2026-12-01", 1000, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.spent_micros, 107);
	other.spent_micros += 7;
	check_facts_row_put(f, "acc", "k", "2026-12-01", &other, true, 1000);
	CHECK(predict(f, "k", "2026-12-01", 1000, &d) == CHECK_FACTS_UNKNOWN);
	CHECK(predict(f, "k", "2026-12-01", 1000 + CHECK_FACTS_CONTENDED_MS - 1, &d) ==
	      CHECK_FACTS_UNKNOWN);
	CHECK(predict(f, "k", "2026-12-01", 1000 + CHECK_FACTS_CONTENDED_MS, &d) ==
	      CHECK_FACTS_KNOWN);
	CHECK_I64(d.spent_micros, 114);

	/* A committed fast batch clears the count: one miss later is not
	 * contention yet. */
	check_facts_row_put(f, "acc", "k", "2026-12-01", &other, true, 5000);
	CHECK_I64(reserve(f, "k", 1, 9, &after), 0);
	check_facts_row_release(f, "acc", "k", "2026-12-01", 1, 9, true);
	check_facts_row_put(f, "acc", "k", "2026-12-01", &other, true, 5000);
	CHECK(predict(f, "k", "2026-12-01", 5000, &d) == CHECK_FACTS_KNOWN);

	/* The row met as already seen while another batch is in flight on
	 * it: that batch's lock came later, nobody else wrote. Never
	 * contention, however often. */
	check_facts_row_put(f, "acc", "k2", "2026-12-01", &day0, false, 0);
	CHECK_I64(reserve(f, "k2", 10, 20, &after), 0);
	for (int i = 0; i < 5; i++)
		check_facts_row_put(f, "acc", "k2", "2026-12-01", &day0, true, 6000);
	CHECK(predict(f, "k2", "2026-12-01", 6000, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 60);
	check_facts_row_release(f, "acc", "k2", "2026-12-01", 10, 20, false);
	check_facts_free(f);
}

struct classic_end {
	struct check_facts *f;
};

static void *end_classic(void *arg)
{
	struct classic_end *c = arg;
	struct ledger_day after = day0;

	after.held_micros = 999;
	nanosleep(&(struct timespec){.tv_nsec = 100000000L}, NULL);
	check_facts_row_classic_end(c->f, "acc", "k", "2026-12-01", &after);
	return NULL;
}

/* A classic batch in flight makes the row busy; its end sets the row as
 * it wrote it and wakes the waiters. */
static void test_classic(void)
{
	struct check_facts *f = NULL;
	struct classic_end c;
	struct ledger_day d;
	pthread_t th;
	bool woke;

	CHECK(check_facts_new(&f) == METER_OK);
	check_facts_row_put(f, "acc", "k", "2026-12-01", &day0, false, 0);
	check_facts_row_classic_begin(f, "acc", "k", "2026-12-01");
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_BUSY);
	/* Waiting times out while it runs. */
	check_facts_lock(f);
	CHECK(!check_facts_wait_locked(f, clock_mono_ms() + 20));
	check_facts_unlock(f);
	c.f = f;
	CHECK(pthread_create(&th, NULL, end_classic, &c) == 0);
	check_facts_lock(f);
	woke = check_facts_wait_locked(f, clock_mono_ms() + 5000);
	check_facts_unlock(f);
	CHECK(woke);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 999);
	/* A classic batch that did not commit leaves what was seen. */
	check_facts_row_classic_begin(f, "acc", "k", "2026-12-01");
	check_facts_row_classic_end(f, "acc", "k", "2026-12-01", NULL);
	CHECK(predict(f, "k", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 999);
	check_facts_free(f);
}

/* More rows than slots: rows make room for each other, except one with a
 * batch in flight, which is never dropped under it. */
static void test_eviction(void)
{
	struct check_facts *f = NULL;
	struct ledger_day d;
	char key[32];
	int32_t after = 0;
	int known = 0;

	CHECK(check_facts_new(&f) == METER_OK);
	check_facts_row_put(f, "acc", "pinned", "2026-12-01", &day0, false, 0);
	CHECK_I64(reserve(f, "pinned", 1, 1, &after), 0);
	for (int i = 0; i < 4 * CHECK_FACTS_ROWS; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		check_facts_row_put(f, "acc", key, "2026-12-01", &day0, false, 0);
	}
	for (int i = 0; i < 4 * CHECK_FACTS_ROWS; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		known += predict(f, key, "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN;
	}
	CHECK(known <= CHECK_FACTS_ROWS);
	CHECK(known >= CHECK_FACTS_ROWS / 2);
	CHECK(predict(f, "pinned", "2026-12-01", 0, &d) == CHECK_FACTS_KNOWN);
	CHECK_I64(d.held_micros, 51);
	/* Ids too long for a slot are not kept. */
	check_facts_row_put(f, "acc", "k", "not-a-day", &day0, false, 0);
	CHECK(predict(f, "k", "not-a-day", 0, &d) == CHECK_FACTS_UNKNOWN);
	check_facts_free(f);
}

int main(void)
{
	test_keys();
	test_prices();
	test_rows();
	test_contention();
	test_classic();
	test_eviction();
	return check_done();
}
