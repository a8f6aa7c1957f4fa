/* Property test: however a usage stream is cut into periods, the money of
 * the periods adds up to exactly the price of the whole.
 *
 * Part A streams random quantities of one resource, cuts every interval at
 * random points, accrues every piece with money_accrue and one carry, and
 * compares the sum with floor(Q × rate / divisor) computed here, on its own,
 * in __int128 (Q, the whole stream, may exceed int64_t). Every piece must
 * also equal money_period() of the cumulative quantities around it, and the
 * final carry must be (Q × rate) mod divisor.
 *
 * Part B does the same for whole struct usage_qty values (all three
 * resources at once) cut with usage_qty_split, priced with usage_price and a
 * usage_carry, and checks that each split adds back exactly and that each
 * field of the first part is floor(field × part / whole).
 *
 * A fixed-seed splitmix64 makes every run the same; failures are counted,
 * and only the first few are printed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "money.h"
#include "usage.h"

#define CASES_A	      700000
#define CASES_B	      350000
#define MAX_INTERVALS 6
#define MAX_CUTS      3
#define PRINT_MAX     5

/* The divisors of DESIGN.md §2, written out here rather than taken from
 * money.c: unit × 3,600,000,000 µs. */
#define REF_CPU_DIV INT64_C(3600000000000)
#define REF_GIB_DIV INT64_C(3686400000000)

static uint64_t rng_state = UINT64_C(0x6d657465722d3031); /* "meter-01" */
static long failures;
static long long accruals;

/* splitmix64 (Steele, Lea, Flood 2014). */
static uint64_t rng(void)
{
	uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform-ish in [0, n], n >= 0 (modulo bias is irrelevant here). */
static int64_t rng_upto(int64_t n)
{
	return (int64_t)(rng() % ((uint64_t)n + 1));
}

/* A quantity: mostly ordinary, often at or near the int64 limit. */
static int64_t rand_qty(void)
{
	switch (rng() % 10) {
	case 0:
		return 0;
	case 1:
	case 2:
		return rng_upto(1000);
	case 3:
		return rng_upto(INT64_C(1000000000));
	case 4:
		return rng_upto(INT64_C(1000000000000000));
	case 5:
	case 6:
		return INT64_MAX - rng_upto(1000000);
	case 7:
		return INT64_MAX;
	default:
		return rng_upto(INT64_MAX);
	}
}

/* A rate within price_rates_validate's range, often a special one. */
static int64_t rand_rate(void)
{
	switch (rng() % 8) {
	case 0:
		return 0;
	case 1:
		return 1;
	case 2:
		return INT64_C(1000000000000);
	case 3:
		return rng_upto(100000);
	case 4:
		return 25000 + rng_upto(2) - 1;
	default:
		return rng_upto(INT64_C(1000000000000));
	}
}

static struct price_rates rand_rates(void)
{
	struct price_rates r = {
	    .cpu_micros_per_vcpu_hour = rand_rate(),
	    .memory_micros_per_gib_hour = rand_rate(),
	    .storage_micros_per_gib_hour = rand_rate(),
	    .floor_millicores = rng_upto(1000000),
	};
	return r;
}

static int64_t ref_rate(enum money_resource r, const struct price_rates *rates)
{
	switch (r) {
	case MONEY_CPU:
		return rates->cpu_micros_per_vcpu_hour;
	case MONEY_MEMORY:
		return rates->memory_micros_per_gib_hour;
	default:
		return rates->storage_micros_per_gib_hour;
	}
}

static int64_t ref_div(enum money_resource r)
{
	return r == MONEY_CPU ? REF_CPU_DIV : REF_GIB_DIV;
}

/* Q < 2^67 and rate <= 10^12 < 2^40: the product stays below 2^107. */
static __int128 ref_price(enum money_resource r, const struct price_rates *rates, __int128 q)
{
	return q * ref_rate(r, rates) / ref_div(r);
}

/* Decimal text of v into buf (at least 41 bytes); returns buf. */
static const char *i128_str(__int128 v, char *buf, size_t size)
{
	char tmp[48];
	size_t n = 0, k = 0;
	unsigned __int128 u = v < 0 ? -(unsigned __int128)v : (unsigned __int128)v;

	do {
		tmp[n++] = (char)('0' + (int)(u % 10));
		u /= 10;
	} while (u && n < sizeof(tmp));
	if (v < 0 && k + 1 < size)
		buf[k++] = '-';
	while (n && k + 1 < size)
		buf[k++] = tmp[--n];
	buf[k] = '\0';
	return buf;
}

static void fail(const char *what, long long case_no, __int128 got, __int128 want)
{
	char g[48], w[48];

	failures++;
	if (failures <= PRINT_MAX)
		fprintf(stderr, "case %lld: %s: got %s, want %s\n", case_no, what,
			i128_str(got, g, sizeof(g)), i128_str(want, w, sizeof(w)));
}

/* Cuts q into 1 + up to MAX_CUTS non-negative pieces summing to q. */
static int cut(int64_t q, int64_t *pieces)
{
	int n = 1 + (int)(rng() % (MAX_CUTS + 1));
	int64_t left = q;

	for (int i = 0; i < n - 1; i++) {
		int64_t p;

		switch (rng() % 4) {
		case 0:
			p = 0;
			break;
		case 1:
			p = left;
			break;
		case 2:
			p = rng_upto(left < 1000 ? left : 1000);
			break;
		default:
			p = rng_upto(left);
			break;
		}
		pieces[i] = p;
		left -= p;
	}
	pieces[n - 1] = left;
	return n;
}

/* Part A: one resource, money_accrue with a carry. */
static void case_accrue(long long case_no)
{
	const enum money_resource r = (enum money_resource)(rng() % 3);
	const struct price_rates rates = rand_rates();
	const int n = 1 + (int)(rng() % MAX_INTERVALS);
	struct money_carry carry = {0};
	__int128 cum = 0, sum = 0, want;

	if (price_rates_validate(&rates) != METER_OK) {
		fail("random rates invalid", case_no, 0, 0);
		return;
	}
	for (int i = 0; i < n; i++) {
		int64_t pieces[MAX_CUTS + 1];
		const int np = cut(rand_qty(), pieces);

		for (int j = 0; j < np; j++) {
			int64_t m = -1, p = -1;

			accruals++;
			if (money_accrue(r, &rates, &carry, pieces[j], &m) != METER_OK) {
				fail("money_accrue failed", case_no, 0, 0);
				return;
			}
			if (money_period(r, &rates, cum, cum + pieces[j], &p) != METER_OK) {
				fail("money_period failed", case_no, 0, 0);
				return;
			}
			if (m != p)
				fail("piece != money_period", case_no, m, p);
			cum += pieces[j];
			sum += m;
		}
	}
	want = ref_price(r, &rates, cum);
	if (sum != want)
		fail("sum of periods != price of whole", case_no, sum, want);
	if (carry.rem != (int64_t)(cum * ref_rate(r, &rates) % ref_div(r)))
		fail("carry != (Q x rate) mod divisor", case_no, carry.rem,
		     cum * ref_rate(r, &rates) % ref_div(r));
	/* When the whole fits int64_t, money_price agrees as well. */
	if (cum <= INT64_MAX) {
		int64_t m = -1;

		if (money_price(r, &rates, (int64_t)cum, &m) != METER_OK || m != want)
			fail("money_price of whole", case_no, m, want);
	}
}

static struct usage_qty rand_usage_qty(void)
{
	struct usage_qty q = {
	    .running_usec = rand_qty(),
	    .paused_usec = rand_qty(),
	    .cpu_used_mcus = rand_qty(),
	    .cpu_billed_mcus = rand_qty(),
	    .memory_mibus = rand_qty(),
	    .storage_mibus = rand_qty(),
	};
	return q;
}

static int64_t rand_whole(void)
{
	switch (rng() % 4) {
	case 0:
		return 0;
	case 1:
		return 1 + rng_upto(3600);
	case 2:
		return 1 + rng_upto(INT64_C(3600000000));
	default:
		return rand_qty();
	}
}

static int64_t rand_part(int64_t whole)
{
	switch (rng() % 4) {
	case 0:
		return 0;
	case 1:
		return whole;
	default:
		return rng_upto(whole);
	}
}

/* Checks one field of a split; returns false (after counting) on failure. */
static bool split_field_ok(long long case_no, int64_t field, int64_t part, int64_t whole,
			   int64_t first, int64_t rest)
{
	const __int128 want = whole ? (__int128)field * part / whole : 0;

	if ((__int128)first + rest != field) {
		fail("split parts do not add back", case_no, (__int128)first + rest, field);
		return false;
	}
	if (first != want) {
		fail("split first != floor(field x part / whole)", case_no, first, want);
		return false;
	}
	return true;
}

static bool split_ok(long long case_no, const struct usage_qty *q, int64_t part, int64_t whole,
		     const struct usage_qty *f, const struct usage_qty *r)
{
	return split_field_ok(case_no, q->running_usec, part, whole, f->running_usec,
			      r->running_usec) &&
	       split_field_ok(case_no, q->paused_usec, part, whole, f->paused_usec,
			      r->paused_usec) &&
	       split_field_ok(case_no, q->cpu_used_mcus, part, whole, f->cpu_used_mcus,
			      r->cpu_used_mcus) &&
	       split_field_ok(case_no, q->cpu_billed_mcus, part, whole, f->cpu_billed_mcus,
			      r->cpu_billed_mcus) &&
	       split_field_ok(case_no, q->memory_mibus, part, whole, f->memory_mibus,
			      r->memory_mibus) &&
	       split_field_ok(case_no, q->storage_mibus, part, whole, f->storage_mibus,
			      r->storage_mibus);
}

/* Part B: whole usage_qty values, usage_qty_split, usage_price with a carry. */
static void case_usage(long long case_no)
{
	const struct price_rates rates = rand_rates();
	const int n = 1 + (int)(rng() % 3);
	struct usage_carry carry;
	__int128 q_cpu = 0, q_mem = 0, q_sto = 0;
	__int128 m_cpu = 0, m_mem = 0, m_sto = 0, m_total = 0;

	memset(&carry, 0, sizeof(carry));
	for (int i = 0; i < n; i++) {
		struct usage_qty pieces[3];
		const struct usage_qty q = rand_usage_qty();
		int64_t whole = rand_whole();
		int64_t part = rand_part(whole);
		int np = 1;

		pieces[0] = q;
		if (rng() % 4 != 0) {
			struct usage_qty f, r;

			if (usage_qty_split(&q, part, whole, &f, &r) != METER_OK) {
				fail("usage_qty_split failed", case_no, part, whole);
				return;
			}
			if (!split_ok(case_no, &q, part, whole, &f, &r))
				return;
			pieces[0] = f;
			pieces[1] = r;
			np = 2;
			/* Cut the rest again, over what is left of the wall time. */
			if (rng() % 2) {
				struct usage_qty r1, r2;

				whole -= part;
				part = rand_part(whole);
				if (usage_qty_split(&r, part, whole, &r1, &r2) != METER_OK) {
					fail("usage_qty_split failed", case_no, part, whole);
					return;
				}
				if (!split_ok(case_no, &r, part, whole, &r1, &r2))
					return;
				pieces[1] = r1;
				pieces[2] = r2;
				np = 3;
			}
		}
		q_cpu += q.cpu_billed_mcus;
		q_mem += q.memory_mibus;
		q_sto += q.storage_mibus;
		for (int j = 0; j < np; j++) {
			struct usage_cost c;

			accruals++;
			if (usage_price(&rates, &carry, &pieces[j], &c) != METER_OK) {
				fail("usage_price failed", case_no, 0, 0);
				return;
			}
			if ((__int128)c.cpu_micros + c.memory_micros + c.storage_micros !=
			    c.total_micros)
				fail("total != sum of components", case_no, c.total_micros,
				     (__int128)c.cpu_micros + c.memory_micros + c.storage_micros);
			m_cpu += c.cpu_micros;
			m_mem += c.memory_micros;
			m_sto += c.storage_micros;
			m_total += c.total_micros;
		}
	}
	if (m_cpu != ref_price(MONEY_CPU, &rates, q_cpu))
		fail("cpu periods != cpu whole", case_no, m_cpu,
		     ref_price(MONEY_CPU, &rates, q_cpu));
	if (m_mem != ref_price(MONEY_MEMORY, &rates, q_mem))
		fail("memory periods != memory whole", case_no, m_mem,
		     ref_price(MONEY_MEMORY, &rates, q_mem));
	if (m_sto != ref_price(MONEY_STORAGE, &rates, q_sto))
		fail("storage periods != storage whole", case_no, m_sto,
		     ref_price(MONEY_STORAGE, &rates, q_sto));
	if (m_total != m_cpu + m_mem + m_sto)
		fail("total periods != sum of components", case_no, m_total, m_cpu + m_mem + m_sto);
}

int main(void)
{
	long long cases = 0;

	for (long long i = 0; i < CASES_A; i++, cases++)
		case_accrue(cases);
	for (long long i = 0; i < CASES_B; i++, cases++)
		case_usage(cases);
	printf("split property: %lld cases (%d accrual streams, %d usage streams), %lld "
	       "pieces priced, %ld failures\n",
	       cases, CASES_A, CASES_B, accruals, failures);
	CHECK(cases >= 1000000);
	CHECK_I64(failures, 0);
	return check_done();
}
