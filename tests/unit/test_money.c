/* Unit tests for meter/money.c: exact prices, rounding, accrual, overflow. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "money.h"

#define CPU_DIV	  (INT64_C(1000) * INT64_C(3600000000))
#define GIB_DIV	  (INT64_C(1024) * INT64_C(3600000000))
#define HOUR_USEC INT64_C(3600000000)
#define SENTINEL  INT64_C(-777)

static const struct price_rates *dflt = &price_rates_default;

static void test_defaults(void)
{
	CHECK_I64(price_rates_default.cpu_micros_per_vcpu_hour, 25000);
	CHECK_I64(price_rates_default.memory_micros_per_gib_hour, 7500);
	CHECK_I64(price_rates_default.storage_micros_per_gib_hour, 100);
	CHECK_I64(price_rates_default.floor_millicores, 50);
	CHECK(price_rates_validate(dflt) == METER_OK);
}

static void test_validate(void)
{
	struct price_rates r = price_rates_default;

	CHECK(price_rates_validate(NULL) == METER_EINVAL);
	r.cpu_micros_per_vcpu_hour = INT64_C(1000000000000);
	r.memory_micros_per_gib_hour = INT64_C(1000000000000);
	r.storage_micros_per_gib_hour = INT64_C(1000000000000);
	r.floor_millicores = 1000000;
	CHECK(price_rates_validate(&r) == METER_OK);
	r = (struct price_rates){0, 0, 0, 0};
	CHECK(price_rates_validate(&r) == METER_OK);

	r = price_rates_default;
	r.cpu_micros_per_vcpu_hour = INT64_C(1000000000001);
	CHECK(price_rates_validate(&r) == METER_ERANGE);
	r = price_rates_default;
	r.memory_micros_per_gib_hour = -1;
	CHECK(price_rates_validate(&r) == METER_ERANGE);
	r = price_rates_default;
	r.storage_micros_per_gib_hour = INT64_MAX;
	CHECK(price_rates_validate(&r) == METER_ERANGE);
	r = price_rates_default;
	r.floor_millicores = 1000001;
	CHECK(price_rates_validate(&r) == METER_ERANGE);
	r = price_rates_default;
	r.floor_millicores = -1;
	CHECK(price_rates_validate(&r) == METER_ERANGE);
}

/* The figures the product documents promise, straight from quantities. */
static void test_worked_figures(void)
{
	int64_t m = SENTINEL;

	/* 50 millicores floor for one hour. */
	CHECK(money_price(MONEY_CPU, dflt, 50 * HOUR_USEC, &m) == METER_OK);
	CHECK_I64(m, 1250);
	/* 2 vCPUs busy for one hour. */
	CHECK(money_price(MONEY_CPU, dflt, 2000 * HOUR_USEC, &m) == METER_OK);
	CHECK_I64(m, 50000);
	/* 4096 MiB reserved for one hour. */
	CHECK(money_price(MONEY_MEMORY, dflt, 4096 * HOUR_USEC, &m) == METER_OK);
	CHECK_I64(m, 30000);
	/* 1 GiB snapshot for one hour. */
	CHECK(money_price(MONEY_STORAGE, dflt, 1024 * HOUR_USEC, &m) == METER_OK);
	CHECK_I64(m, 100);
	/* Lease worst case, 2 vCPU / 4096 MiB / 900 s, rounded up. */
	CHECK(money_price_up(MONEY_CPU, dflt, 2000 * INT64_C(900000000), &m) == METER_OK);
	CHECK_I64(m, 12500);
	CHECK(money_price_up(MONEY_MEMORY, dflt, 4096 * INT64_C(900000000), &m) == METER_OK);
	CHECK_I64(m, 7500);
}

static void test_rounding(void)
{
	/* 25,000 µ$ per 3.6e12 millicore-µs: one µ$ is exactly 1.44e8. */
	const int64_t one = CPU_DIV / 25000;
	int64_t m = SENTINEL;

	CHECK_I64(one * 25000, CPU_DIV);
	CHECK(money_price(MONEY_CPU, dflt, 0, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK(money_price_up(MONEY_CPU, dflt, 0, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK(money_price(MONEY_CPU, dflt, 1, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK(money_price_up(MONEY_CPU, dflt, 1, &m) == METER_OK);
	CHECK_I64(m, 1);
	CHECK(money_price(MONEY_CPU, dflt, one - 1, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK(money_price_up(MONEY_CPU, dflt, one - 1, &m) == METER_OK);
	CHECK_I64(m, 1);
	CHECK(money_price(MONEY_CPU, dflt, one, &m) == METER_OK);
	CHECK_I64(m, 1);
	CHECK(money_price_up(MONEY_CPU, dflt, one, &m) == METER_OK);
	CHECK_I64(m, 1);
	CHECK(money_price(MONEY_CPU, dflt, one + 1, &m) == METER_OK);
	CHECK_I64(m, 1);
	CHECK(money_price_up(MONEY_CPU, dflt, one + 1, &m) == METER_OK);
	CHECK_I64(m, 2);
	/* A zero rate is free whatever the quantity, up or down. */
	{
		struct price_rates z = {0, 0, 0, 0};

		CHECK(money_price_up(MONEY_STORAGE, &z, INT64_MAX, &m) == METER_OK);
		CHECK_I64(m, 0);
	}
	/* Largest quantity at the largest valid rate still fits. */
	{
		struct price_rates big = {INT64_C(1000000000000), INT64_C(1000000000000),
					  INT64_C(1000000000000), 0};
		__int128 want = (__int128)INT64_MAX * INT64_C(1000000000000) / GIB_DIV;

		CHECK(money_price(MONEY_MEMORY, &big, INT64_MAX, &m) == METER_OK);
		CHECK_I64(m, (int64_t)want);
		CHECK(money_price_up(MONEY_MEMORY, &big, INT64_MAX, &m) == METER_OK);
		CHECK_I64(m, (int64_t)want + 1);
	}
}

static void test_bad_input(void)
{
	struct money_carry c = {0};
	int64_t m = SENTINEL;

	CHECK(money_price(MONEY_CPU, dflt, -1, &m) == METER_EINVAL);
	CHECK(money_price_up(MONEY_CPU, dflt, INT64_MIN, &m) == METER_EINVAL);
	CHECK(money_price(MONEY_CPU, NULL, 1, &m) == METER_EINVAL);
	CHECK(money_price((enum money_resource)7, dflt, 1, &m) == METER_EINVAL);
	CHECK_I64(m, SENTINEL);
	CHECK(money_accrue(MONEY_CPU, dflt, &c, -1, &m) == METER_EINVAL);
	c.rem = CPU_DIV; /* not a remainder */
	CHECK(money_accrue(MONEY_CPU, dflt, &c, 1, &m) == METER_EINVAL);
	c.rem = -1;
	CHECK(money_accrue(MONEY_CPU, dflt, &c, 1, &m) == METER_EINVAL);
	CHECK_I64(c.rem, -1);
	CHECK_I64(m, SENTINEL);
	{
		struct price_rates neg = price_rates_default;

		neg.memory_micros_per_gib_hour = -5;
		CHECK(money_price(MONEY_MEMORY, &neg, 1, &m) == METER_EINVAL);
	}
	CHECK(money_period(MONEY_CPU, dflt, 5, 4, &m) == METER_EINVAL);
	CHECK(money_period(MONEY_CPU, dflt, -1, 4, &m) == METER_EINVAL);
	CHECK_I64(m, SENTINEL);
}

/* Rates beyond price_rates_validate's range make the quotient overflow:
 * reported, never wrapped, and nothing written. */
static void test_overflow(void)
{
	struct price_rates huge = {INT64_MAX, INT64_MAX, INT64_MAX, 0};
	struct money_carry c = {12345};
	int64_t m = SENTINEL;
	int64_t v = SENTINEL;
	/* Smallest q whose price exceeds INT64_MAX at rate INT64_MAX:
	 * q × (2^63 − 1) / CPU_DIV > 2^63 − 1  iff  q > CPU_DIV. */
	const int64_t q_edge = CPU_DIV;

	CHECK(money_price(MONEY_CPU, &huge, INT64_MAX, &m) == METER_ERANGE);
	CHECK(money_price_up(MONEY_MEMORY, &huge, INT64_MAX, &m) == METER_ERANGE);
	CHECK_I64(m, SENTINEL);
	CHECK(money_price(MONEY_CPU, &huge, q_edge, &m) == METER_OK);
	CHECK_I64(m, INT64_MAX);
	CHECK(money_price_up(MONEY_CPU, &huge, q_edge, &m) == METER_OK);
	CHECK_I64(m, INT64_MAX);
	m = SENTINEL;
	CHECK(money_price(MONEY_CPU, &huge, q_edge + 1, &m) == METER_ERANGE);
	CHECK_I64(m, SENTINEL);
	/* Accrual at the edge: with the carry at d − 1 an exact INT64_MAX stays. */
	c.rem = CPU_DIV - 1;
	CHECK(money_accrue(MONEY_CPU, &huge, &c, q_edge, &m) == METER_OK);
	CHECK_I64(m, INT64_MAX);
	CHECK_I64(c.rem, CPU_DIV - 1);
	m = SENTINEL;
	CHECK(money_accrue(MONEY_CPU, &huge, &c, q_edge + 1, &m) == METER_ERANGE);
	CHECK_I64(c.rem, CPU_DIV - 1);
	CHECK_I64(m, SENTINEL);
	c.rem = 0;
	CHECK(money_accrue(MONEY_STORAGE, &huge, &c, INT64_MAX, &m) == METER_ERANGE);
	CHECK_I64(c.rem, 0);
	CHECK_I64(m, SENTINEL);
	/* The carry alone can push a price of exactly INT64_MAX over: at rate
	 * d + 1, q below prices to INT64_MAX with remainder 2836852213760, so a
	 * carry of d − 2836852213760 adds the one µ$ that does not fit. */
	{
		struct price_rates edge = {CPU_DIV + 1, 0, 0, 0};
		const int64_t q = INT64_C(9223372036852213760);
		const int64_t x = INT64_C(2836852213760);

		CHECK(money_price(MONEY_CPU, &edge, q, &m) == METER_OK);
		CHECK_I64(m, INT64_MAX);
		c.rem = CPU_DIV - x - 1;
		CHECK(money_accrue(MONEY_CPU, &edge, &c, q, &m) == METER_OK);
		CHECK_I64(m, INT64_MAX);
		CHECK_I64(c.rem, CPU_DIV - 1);
		c.rem = CPU_DIV - x;
		m = SENTINEL;
		CHECK(money_accrue(MONEY_CPU, &edge, &c, q, &m) == METER_ERANGE);
		CHECK_I64(c.rem, CPU_DIV - x);
		CHECK_I64(m, SENTINEL);
	}
	/* money_period far beyond int64 */
	CHECK(money_period(MONEY_CPU, dflt, 0, (__int128)INT64_MAX * INT64_MAX, &m) ==
	      METER_ERANGE);
	CHECK(money_period(MONEY_CPU, &huge, 0, ((__int128)1 << 126), &m) == METER_ERANGE);
	CHECK_I64(m, SENTINEL);

	/* Checked helpers. */
	CHECK(money_add(INT64_MAX, 1, &v) == METER_ERANGE);
	CHECK(money_add(INT64_MIN, -1, &v) == METER_ERANGE);
	CHECK(money_mul(INT64_MIN, -1, &v) == METER_ERANGE);
	CHECK(money_mul(INT64_C(3037000500), INT64_C(3037000500), &v) == METER_ERANGE);
	CHECK(money_mul(INT64_MAX, 2, &v) == METER_ERANGE);
	CHECK_I64(v, SENTINEL);
	CHECK(money_add(INT64_MAX - 1, 1, &v) == METER_OK);
	CHECK_I64(v, INT64_MAX);
	CHECK(money_add(INT64_MIN, 0, &v) == METER_OK);
	CHECK_I64(v, INT64_MIN);
	CHECK(money_mul(INT64_C(3037000499), INT64_C(3037000499), &v) == METER_OK);
	CHECK_I64(v, INT64_C(9223372030926249001));
	CHECK(money_mul(INT64_MIN, 1, &v) == METER_OK);
	CHECK_I64(v, INT64_MIN);
	CHECK(money_mul(-1, INT64_MAX, &v) == METER_OK);
	CHECK_I64(v, -INT64_MAX);
	CHECK(money_add(1, 2, NULL) == METER_EINVAL);
}

/* 3.6e9 one-µs intervals of 50 millicores must come to 1,250 µ$: accrue a
 * few 1-µs steps, then the rest of the hour in one go. */
static void test_accrue_small_steps(void)
{
	struct money_carry c = {0};
	int64_t m = SENTINEL, sum = 0;

	for (int i = 0; i < 1000; i++) {
		CHECK(money_accrue(MONEY_CPU, dflt, &c, 50, &m) == METER_OK);
		sum += m;
	}
	CHECK_I64(sum, 0);
	CHECK_I64(c.rem, 1000 * 50 * INT64_C(25000));
	CHECK(money_accrue(MONEY_CPU, dflt, &c, 50 * (HOUR_USEC - 1000), &m) == METER_OK);
	sum += m;
	CHECK_I64(sum, 1250);
	CHECK_I64(c.rem, 0);

	/* Memory: a 1-µs interval of 4096 MiB, then the rest of the hour. */
	c.rem = 0;
	CHECK(money_accrue(MONEY_MEMORY, dflt, &c, 4096, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK(money_accrue(MONEY_MEMORY, dflt, &c, 4096 * (HOUR_USEC - 1), &m) == METER_OK);
	CHECK_I64(m, 30000);
	CHECK_I64(c.rem, 0);
	/* Accruing nothing changes nothing. */
	c.rem = 42;
	CHECK(money_accrue(MONEY_MEMORY, dflt, &c, 0, &m) == METER_OK);
	CHECK_I64(m, 0);
	CHECK_I64(c.rem, 42);
}

/* money_period(Q_start, Q_end) is what money_accrue charges for q = Q_end − Q_start
 * after having accrued Q_start, including across the int64 range. */
static void test_period_matches_accrue(void)
{
	struct price_rates r = {31337, 7777, 1, 50};
	static const int64_t steps[] = {
	    1,	       143999999, 144000000, INT64_C(3600000000000), INT64_MAX, INT64_MAX - 1,
	    123456789, INT64_MAX, 0,	     INT64_C(3686399999999)};
	const enum money_resource res[] = {MONEY_CPU, MONEY_MEMORY, MONEY_STORAGE};

	for (size_t k = 0; k < 3; k++) {
		struct money_carry c = {0};
		__int128 cum = 0;
		__int128 total = 0;
		int64_t m = SENTINEL, p = SENTINEL, whole = SENTINEL;

		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			CHECK(money_accrue(res[k], &r, &c, steps[i], &m) == METER_OK);
			CHECK(money_period(res[k], &r, cum, cum + steps[i], &p) == METER_OK);
			CHECK_I64(m, p);
			cum += steps[i];
			total += m;
		}
		/* The sum fits: compare with the price of the whole. */
		CHECK(money_period(res[k], &r, 0, cum, &whole) == METER_OK);
		CHECK(total == whole);
		CHECK(money_period(res[k], &r, cum, cum, &p) == METER_OK);
		CHECK_I64(p, 0);
	}
	/* And with money_price on a single int64 quantity. */
	{
		int64_t a = SENTINEL, b = SENTINEL;

		CHECK(money_price(MONEY_CPU, dflt, INT64_C(987654321987), &a) == METER_OK);
		CHECK(money_period(MONEY_CPU, dflt, 0, INT64_C(987654321987), &b) == METER_OK);
		CHECK_I64(a, b);
	}
	/* Near the top of the 128-bit range the difference is still exact. */
	{
		const __int128 base = ((__int128)1 << 120) + 17;
		int64_t p = SENTINEL;

		CHECK(money_period(MONEY_CPU, dflt, base, base + CPU_DIV, &p) == METER_OK);
		CHECK_I64(p, 25000);
		CHECK(money_period(MONEY_MEMORY, dflt, base, base + 4096 * HOUR_USEC, &p) ==
		      METER_OK);
		CHECK_I64(p, 30000);
	}
}

int main(void)
{
	test_defaults();
	test_validate();
	test_worked_figures();
	test_rounding();
	test_bad_input();
	test_overflow();
	test_accrue_small_steps();
	test_period_matches_accrue();
	return check_done();
}
