/* Unit tests for meter/usage.c: intervals, floor, reset, cap, states,
 * splitting, pricing and the lease worst case. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "usage.h"

#define HOUR_USEC   INT64_C(3600000000)
#define T0	    INT64_C(1790000000000000) /* some time in 2026, µs */
#define SENTINEL    INT64_C(-777)
#define CPU_REM_MAX (INT64_C(1000) * HOUR_USEC - 1) /* largest CPU carry */
#define MEM_REM_MAX (INT64_C(1024) * HOUR_USEC - 1) /* largest memory carry */

static const struct price_rates *dflt = &price_rates_default;

/* A running 2 vCPU / 4096 MiB sandbox with a 5 GiB snapshot at T0. */
static struct usage_sample sample(enum sandbox_state state, int64_t at_usec, int64_t cpu_usec)
{
	struct usage_sample s = {
	    .at_usec = at_usec,
	    .state = state,
	    .cpu_usec = cpu_usec,
	    .memory_mib = 4096,
	    .storage_mib = 5120,
	    .vcpus = 2,
	};
	return s;
}

static void fill_sentinel(struct usage_qty *q)
{
	q->running_usec = SENTINEL;
	q->paused_usec = SENTINEL;
	q->cpu_used_mcus = SENTINEL;
	q->cpu_billed_mcus = SENTINEL;
	q->memory_mibus = SENTINEL;
	q->storage_mibus = SENTINEL;
}

static bool qty_is_sentinel(const struct usage_qty *q)
{
	return q->running_usec == SENTINEL && q->paused_usec == SENTINEL &&
	       q->cpu_used_mcus == SENTINEL && q->cpu_billed_mcus == SENTINEL &&
	       q->memory_mibus == SENTINEL && q->storage_mibus == SENTINEL;
}

static void test_state_names(void)
{
	enum sandbox_state s = SANDBOX_STOPPED;

	CHECK_STR(sandbox_state_name(SANDBOX_RUNNING), "running");
	CHECK_STR(sandbox_state_name(SANDBOX_PAUSED), "paused");
	CHECK_STR(sandbox_state_name(SANDBOX_STOPPED), "stopped");
	CHECK(sandbox_state_parse("running", &s) == METER_OK);
	CHECK(s == SANDBOX_RUNNING);
	CHECK(sandbox_state_parse("paused", &s) == METER_OK);
	CHECK(s == SANDBOX_PAUSED);
	CHECK(sandbox_state_parse("stopped", &s) == METER_OK);
	CHECK(s == SANDBOX_STOPPED);
	s = SANDBOX_PAUSED;
	CHECK(sandbox_state_parse(NULL, &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("Running", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("running ", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse(" running", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("run", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("stoppedx", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("unknown", &s) == METER_EINVAL);
	CHECK(sandbox_state_parse("running", NULL) == METER_EINVAL);
	CHECK(s == SANDBOX_PAUSED);
}

/* Prices one interval on its own (NULL carry). */
static struct usage_cost price_of(const struct usage_qty *q)
{
	struct usage_cost c = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};

	CHECK(usage_price(dflt, NULL, q, &c) == METER_OK);
	return c;
}

static void test_worked_figures(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 1000);
	struct usage_sample b;
	struct usage_qty q;
	struct usage_cost c;
	unsigned flags = 99;

	/* Idle for an hour: 1,250 CPU floor + 30,000 memory. */
	b = sample(SANDBOX_RUNNING, T0 + HOUR_USEC, 1000);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.running_usec, HOUR_USEC);
	CHECK_I64(q.paused_usec, 0);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 50 * HOUR_USEC);
	CHECK_I64(q.memory_mibus, 4096 * HOUR_USEC);
	CHECK_I64(q.storage_mibus, 0);
	c = price_of(&q);
	CHECK_I64(c.cpu_micros, 1250);
	CHECK_I64(c.memory_micros, 30000);
	CHECK_I64(c.storage_micros, 0);
	CHECK_I64(c.total_micros, 31250);

	/* Both vCPUs busy: 50,000 + 30,000. */
	b.cpu_usec = 1000 + 2 * HOUR_USEC;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.cpu_used_mcus, 2000 * HOUR_USEC);
	CHECK_I64(q.cpu_billed_mcus, 2000 * HOUR_USEC);
	c = price_of(&q);
	CHECK_I64(c.cpu_micros, 50000);
	CHECK_I64(c.memory_micros, 30000);
	CHECK_I64(c.total_micros, 80000);

	/* The same hour as 360 intervals of 10 s with a carry: same money. */
	{
		struct usage_carry carry;
		int64_t cpu = 0, mem = 0, total = 0;

		memset(&carry, 0, sizeof(carry));
		for (int i = 0; i < 360; i++) {
			struct usage_sample p =
			    sample(SANDBOX_RUNNING, T0 + i * INT64_C(10000000), 0);
			struct usage_sample n =
			    sample(SANDBOX_RUNNING, T0 + (i + 1) * INT64_C(10000000), 0);

			CHECK(usage_interval(&p, &n, 50, &q, &flags) == METER_OK);
			CHECK(usage_price(dflt, &carry, &q, &c) == METER_OK);
			cpu += c.cpu_micros;
			mem += c.memory_micros;
			total += c.total_micros;
		}
		CHECK_I64(cpu, 1250);
		CHECK_I64(mem, 30000);
		CHECK_I64(total, 31250);
		CHECK_I64(carry.cpu.rem, 0);
		CHECK_I64(carry.memory.rem, 0);
	}
}

/* Average 49, 50 and 51 millicores over an hour: the floor is 50. */
static void test_floor_edges(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 0);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0 + HOUR_USEC, 0);
	struct usage_qty q;
	unsigned flags;

	/* m millicores for an hour = m × 3,600,000 µs of CPU. */
	b.cpu_usec = 49 * INT64_C(3600000);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, 49 * HOUR_USEC);
	CHECK_I64(q.cpu_billed_mcus, 50 * HOUR_USEC);
	CHECK_I64(price_of(&q).cpu_micros, 1250);

	b.cpu_usec = 50 * INT64_C(3600000);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, 50 * HOUR_USEC);
	CHECK_I64(q.cpu_billed_mcus, 50 * HOUR_USEC);
	CHECK_I64(price_of(&q).cpu_micros, 1250);

	b.cpu_usec = 51 * INT64_C(3600000);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, 51 * HOUR_USEC);
	CHECK_I64(q.cpu_billed_mcus, 51 * HOUR_USEC);
	CHECK_I64(price_of(&q).cpu_micros, 1275);

	/* One µs of CPU more than the floor, in a 1-second interval. */
	b = sample(SANDBOX_RUNNING, T0 + 1000000, 50001);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_billed_mcus, 50001000);
	b.cpu_usec = 49999;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, 49999000);
	CHECK_I64(q.cpu_billed_mcus, 50000000);

	/* A zero floor bills only what was used. */
	b.cpu_usec = 0;
	CHECK(usage_interval(&a, &b, 0, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_billed_mcus, 0);
	CHECK_I64(q.memory_mibus, 4096 * INT64_C(1000000));
}

static void test_tiny_intervals(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 500);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0, 500);
	struct usage_qty q;
	struct usage_cost c;
	unsigned flags = 99;

	/* Zero-length: all zeros. */
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.running_usec, 0);
	CHECK_I64(q.paused_usec, 0);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 0);
	CHECK_I64(q.memory_mibus, 0);
	CHECK_I64(q.storage_mibus, 0);
	c = price_of(&q);
	CHECK_I64(c.total_micros, 0);
	/* Zero-length with CPU that cannot have happened: still zeros, flagged. */
	b.cpu_usec = 501;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_CPU_CAPPED);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 0);

	/* One µs: 2 µs of CPU is the most 2 vCPUs can do. */
	b = sample(SANDBOX_RUNNING, T0 + 1, 502);
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.running_usec, 1);
	CHECK_I64(q.cpu_used_mcus, 2000);
	CHECK_I64(q.cpu_billed_mcus, 2000);
	CHECK_I64(q.memory_mibus, 4096);
	c = price_of(&q);
	CHECK_I64(c.total_micros, 0); /* rounded down on its own */
	b.cpu_usec = 500;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_billed_mcus, 50);
	b.cpu_usec = 503;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_CPU_CAPPED);
	CHECK_I64(q.cpu_used_mcus, 2000);

	/* A 1-µs interval, then the rest of the hour, with a carry: exact. */
	{
		struct usage_carry carry;
		struct usage_sample e = sample(SANDBOX_RUNNING, T0 + HOUR_USEC, 500);
		int64_t total = 0;

		memset(&carry, 0, sizeof(carry));
		b.cpu_usec = 500;
		CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
		CHECK(usage_price(dflt, &carry, &q, &c) == METER_OK);
		CHECK_I64(c.total_micros, 0);
		total += c.total_micros;
		CHECK(usage_interval(&b, &e, 50, &q, &flags) == METER_OK);
		CHECK(usage_price(dflt, &carry, &q, &c) == METER_OK);
		total += c.total_micros;
		CHECK_I64(total, 31250);
	}
}

static void test_counter_reset(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 5000000000);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0 + 10000000, 3000000);
	struct usage_qty q;
	unsigned flags = 0;

	/* Went down: the new value (3 s of CPU in 10 s) is the usage. */
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_COUNTER_RESET);
	CHECK_I64(q.cpu_used_mcus, INT64_C(3000000000));
	CHECK_I64(q.cpu_billed_mcus, INT64_C(3000000000));
	CHECK_I64(q.memory_mibus, 4096 * INT64_C(10000000));

	/* Reset to zero: nothing used, the floor is billed. */
	b.cpu_usec = 0;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_COUNTER_RESET);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 50 * INT64_C(10000000));

	/* Reset and a new value beyond the cap: both flags. */
	b.cpu_usec = 25000000;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_COUNTER_RESET | USAGE_CPU_CAPPED);
	CHECK_I64(q.cpu_used_mcus, 2000 * INT64_C(10000000));

	/* An unchanged counter is not a reset. */
	b.cpu_usec = a.cpu_usec;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
}

static void test_cpu_cap(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 0);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0 + 10000000, 20000000);
	struct usage_qty q;
	unsigned flags = 0;

	/* Exactly vcpus × Δwall is allowed. */
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.cpu_used_mcus, 2000 * INT64_C(10000000));
	/* One µs more is capped and flagged. */
	b.cpu_usec = 20000001;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_CPU_CAPPED);
	CHECK_I64(q.cpu_used_mcus, 2000 * INT64_C(10000000));
	CHECK_I64(q.cpu_billed_mcus, 2000 * INT64_C(10000000));
	/* Absurdly large: still capped, no overflow. */
	b.cpu_usec = INT64_MAX;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_CPU_CAPPED);
	CHECK_I64(q.cpu_used_mcus, 2000 * INT64_C(10000000));
	/* The cap uses the first sample's vcpus. */
	a.vcpus = 4;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, 4000 * INT64_C(10000000));
}

/* The CPU alone, in µs, in any state and over any length: the same rise,
 * reset and cap as usage_interval, never an overflow. */
static void test_cpu_delta(void)
{
	struct usage_sample a = sample(SANDBOX_PAUSED, T0, 5000000000);
	struct usage_sample b = sample(SANDBOX_PAUSED, T0 + 10000000, 5000000123);
	int64_t cpu = SENTINEL;
	unsigned flags = 99;

	CHECK(usage_cpu_delta(&a, &b, &cpu, &flags) == METER_OK);
	CHECK_I64(cpu, 123);
	CHECK_I64(flags, 0);
	b.cpu_usec = 3000000; /* went down: a reset */
	CHECK(usage_cpu_delta(&a, &b, &cpu, &flags) == METER_OK);
	CHECK_I64(cpu, 3000000);
	CHECK_I64(flags, USAGE_COUNTER_RESET);
	b.cpu_usec = 25000000; /* above 2 vCPUs × 10 s */
	CHECK(usage_cpu_delta(&a, &b, &cpu, &flags) == METER_OK);
	CHECK_I64(cpu, 20000000);
	CHECK_I64(flags, USAGE_COUNTER_RESET | USAGE_CPU_CAPPED);
	/* Years at 16 TiB: usage_interval overflows, the CPU does not. */
	a.state = b.state = SANDBOX_RUNNING;
	a.memory_mib = INT64_C(16777216);
	a.cpu_usec = 0;
	b.at_usec = T0 + 20 * 365 * 24 * HOUR_USEC;
	b.cpu_usec = INT64_C(1) << 62;
	{
		struct usage_qty q;
		CHECK(usage_interval(&a, &b, 50, &q, NULL) == METER_ERANGE);
	}
	CHECK(usage_cpu_delta(&a, &b, &cpu, NULL) == METER_OK);
	CHECK_I64(cpu, 2 * 20 * 365 * 24 * HOUR_USEC);
	/* The same interval in 128 bits, cut into days: the parts add up to
	 * the whole, each fits, and an hour's memory is exact. */
	{
		struct usage_wide w;
		struct usage_qty part;
		__int128 mem = 0, billed = 0, whole_mem;
		int64_t left = b.at_usec - a.at_usec, day = 24 * HOUR_USEC;

		CHECK(usage_interval_wide(&a, &b, 50, &w, NULL) == METER_OK);
		whole_mem = w.memory_mibus;
		CHECK(whole_mem == (__int128)INT64_C(16777216) * left);
		CHECK(w.cpu_billed_mcus == (__int128)2 * left * 1000);
		CHECK(usage_wide_split(&w, HOUR_USEC, left, &part) == METER_OK);
		CHECK_I64(part.memory_mibus, INT64_C(16777216) * HOUR_USEC);
		mem += part.memory_mibus;
		billed += part.cpu_billed_mcus;
		left -= HOUR_USEC;
		while (left > 0) {
			int64_t take = left < day ? left : day;
			CHECK(usage_wide_split(&w, take, left, &part) == METER_OK);
			mem += part.memory_mibus;
			billed += part.cpu_billed_mcus;
			left -= take;
		}
		CHECK(mem == whole_mem);
		CHECK(billed == (__int128)2 * (b.at_usec - a.at_usec) * 1000);
		CHECK(w.memory_mibus == 0 && w.cpu_billed_mcus == 0);
		/* A part too large for int64_t is refused, nothing taken. */
		CHECK(usage_interval_wide(&a, &b, 50, &w, NULL) == METER_OK);
		CHECK(usage_wide_split(&w, b.at_usec - a.at_usec, b.at_usec - a.at_usec, &part) ==
		      METER_ERANGE);
		CHECK(w.memory_mibus == whole_mem);
	}
	/* What usage_interval refuses, so does this; cpu untouched. */
	cpu = SENTINEL;
	b.at_usec = T0 - 1;
	CHECK(usage_cpu_delta(&a, &b, &cpu, &flags) == METER_EINVAL);
	CHECK(usage_cpu_delta(NULL, &b, &cpu, &flags) == METER_EINVAL);
	CHECK_I64(cpu, SENTINEL);
}

/* A running share's CPU in millicore-µs: kept below the cap, capped (and
 * flagged) above it, billed at least the floor. */
static void test_wide_cpu(void)
{
	struct usage_wide w;
	unsigned flags = 0;

	memset(&w, 0, sizeof(w));
	w.running_usec = 1000000; /* 1 s: floor 50 → 5e7, cap (2 vCPUs) → 2e9 */
	usage_wide_cpu(&w, 2333, 2, 50, &flags);
	CHECK(w.cpu_used_mcus == 2333 && w.cpu_billed_mcus == 50000000 && flags == 0);
	usage_wide_cpu(&w, INT64_C(60000001), 2, 50, &flags);
	CHECK(w.cpu_used_mcus == 60000001 && w.cpu_billed_mcus == 60000001 && flags == 0);
	usage_wide_cpu(&w, INT64_C(2000000000), 2, 50, &flags);
	CHECK(w.cpu_used_mcus == 2000000000 && flags == 0);
	usage_wide_cpu(&w, INT64_C(2000000001), 2, 50, &flags);
	CHECK(w.cpu_used_mcus == 2000000000 && w.cpu_billed_mcus == 2000000000);
	CHECK(flags == USAGE_CPU_CAPPED);
	usage_wide_cpu(&w, INT64_C(2000000001), 2, 50, NULL);
	CHECK(w.cpu_used_mcus == 2000000000);
}

static void test_paused_stopped(void)
{
	struct usage_sample a = sample(SANDBOX_PAUSED, T0, 100);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0 + HOUR_USEC, 100);
	struct usage_qty q;
	struct usage_cost c;
	unsigned flags = 99;

	/* Paused: storage only, for the whole interval (the first sample rules). */
	a.storage_mib = 10240;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, 0);
	CHECK_I64(q.running_usec, 0);
	CHECK_I64(q.paused_usec, HOUR_USEC);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 0);
	CHECK_I64(q.memory_mibus, 0);
	CHECK_I64(q.storage_mibus, 10240 * HOUR_USEC);
	c = price_of(&q);
	CHECK_I64(c.cpu_micros, 0);
	CHECK_I64(c.memory_micros, 0);
	CHECK_I64(c.storage_micros, 1000); /* 10 GiB × 100 µ$ */
	CHECK_I64(c.total_micros, 1000);

	/* Running then paused: the running sample rules, storage not billed. */
	b = a;
	b.at_usec = T0 + HOUR_USEC;
	a.state = SANDBOX_RUNNING;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(q.storage_mibus, 0);
	CHECK_I64(q.running_usec, HOUR_USEC);
	CHECK_I64(q.paused_usec, 0);

	/* Stopped: nothing at all. */
	a.state = SANDBOX_STOPPED;
	b.cpu_usec = 50;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
	CHECK_I64(flags, USAGE_COUNTER_RESET);
	CHECK_I64(q.running_usec, 0);
	CHECK_I64(q.paused_usec, 0);
	CHECK_I64(q.cpu_used_mcus, 0);
	CHECK_I64(q.cpu_billed_mcus, 0);
	CHECK_I64(q.memory_mibus, 0);
	CHECK_I64(q.storage_mibus, 0);
	CHECK_I64(price_of(&q).total_micros, 0);
	/* A paused interval as long as int64 allows, with a huge snapshot: the
	 * floor and memory of a running one are not computed, so no overflow. */
	a = sample(SANDBOX_PAUSED, 0, 0);
	b = sample(SANDBOX_PAUSED, INT64_MAX, 0);
	a.memory_mib = INT64_MAX;
	a.storage_mib = 1;
	CHECK(usage_interval(&a, &b, 1000000, &q, &flags) == METER_OK);
	CHECK_I64(q.storage_mibus, INT64_MAX);
}

static void test_bad_samples(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, T0, 0);
	struct usage_sample b = sample(SANDBOX_RUNNING, T0 + 10, 0);
	struct usage_qty q;
	unsigned flags = 99;

	fill_sentinel(&q);
	/* Out of order. */
	CHECK(usage_interval(&b, &a, 50, &q, &flags) == METER_EINVAL);
	b.at_usec = T0 - 1;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	b.at_usec = T0 + 10;
	/* Negative fields, vcpus < 1, bad state, bad floor, NULLs. */
	a.cpu_usec = -1;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.cpu_usec = 0;
	b.cpu_usec = -1;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	b.cpu_usec = 0;
	a.memory_mib = -1;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.memory_mib = 4096;
	a.storage_mib = INT64_MIN;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.storage_mib = 0;
	a.vcpus = 0;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.vcpus = 2;
	b.vcpus = -3;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	b.vcpus = 2;
	a.at_usec = -5;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.at_usec = T0;
	a.state = (enum sandbox_state)17;
	CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_EINVAL);
	a.state = SANDBOX_RUNNING;
	CHECK(usage_interval(&a, &b, -1, &q, &flags) == METER_EINVAL);
	CHECK(usage_interval(NULL, &b, 50, &q, &flags) == METER_EINVAL);
	CHECK(usage_interval(&a, NULL, 50, &q, &flags) == METER_EINVAL);
	CHECK(usage_interval(&a, &b, 50, NULL, &flags) == METER_EINVAL);
	CHECK(qty_is_sentinel(&q));
	CHECK_I64(flags, 99);
	/* flags may be NULL. */
	CHECK(usage_interval(&a, &b, 50, &q, NULL) == METER_OK);
	CHECK_I64(q.running_usec, 10);
}

static void test_interval_overflow(void)
{
	struct usage_sample a = sample(SANDBOX_RUNNING, 0, 0);
	struct usage_sample b = sample(SANDBOX_RUNNING, INT64_C(10000000000000000), 0);
	struct usage_qty q;
	unsigned flags = 99;

	fill_sentinel(&q);
	/* Memory: 4096 MiB × 1e16 µs. */
	CHECK(usage_interval(&a, &b, 0, &q, &flags) == METER_ERANGE);
	/* CPU used: 1000 × 1e16 µs of CPU. */
	a.memory_mib = 0;
	a.vcpus = 1;
	b.cpu_usec = INT64_C(10000000000000000);
	CHECK(usage_interval(&a, &b, 0, &q, &flags) == METER_ERANGE);
	/* Floor: 1e6 millicores × 1e16 µs. */
	b.cpu_usec = 0;
	CHECK(usage_interval(&a, &b, 1000000, &q, &flags) == METER_ERANGE);
	/* Storage while paused. */
	a.state = SANDBOX_PAUSED;
	a.storage_mib = 1000;
	CHECK(usage_interval(&a, &b, 0, &q, &flags) == METER_ERANGE);
	CHECK(qty_is_sentinel(&q));
	CHECK_I64(flags, 99);
	/* Just below the limit: INT64_MAX / 1000 µs of CPU fits. */
	a = sample(SANDBOX_RUNNING, 0, 0);
	a.memory_mib = 0;
	a.vcpus = 1;
	b = a;
	b.at_usec = INT64_MAX / 1000;
	b.cpu_usec = INT64_MAX / 1000;
	CHECK(usage_interval(&a, &b, 1000, &q, &flags) == METER_OK);
	CHECK_I64(q.cpu_used_mcus, INT64_MAX / 1000 * 1000);
	b.at_usec++;
	b.cpu_usec++;
	CHECK(usage_interval(&a, &b, 0, &q, &flags) == METER_ERANGE);
}

static void test_qty_add(void)
{
	struct usage_qty acc = {1, 2, 3, 4, 5, 6};
	struct usage_qty q = {10, 20, 30, 40, 50, 60};
	struct usage_qty big = {0, 0, 0, 0, 0, INT64_MAX};

	CHECK(usage_qty_add(&acc, &q) == METER_OK);
	CHECK_I64(acc.running_usec, 11);
	CHECK_I64(acc.paused_usec, 22);
	CHECK_I64(acc.cpu_used_mcus, 33);
	CHECK_I64(acc.cpu_billed_mcus, 44);
	CHECK_I64(acc.memory_mibus, 55);
	CHECK_I64(acc.storage_mibus, 66);
	CHECK(usage_qty_add(&acc, &big) == METER_ERANGE);
	CHECK_I64(acc.running_usec, 11);
	CHECK_I64(acc.storage_mibus, 66);
	CHECK(usage_qty_add(NULL, &q) == METER_EINVAL);
}

static void test_qty_split(void)
{
	struct usage_qty q = {HOUR_USEC, 0, 7, 50 * HOUR_USEC, 4096 * HOUR_USEC, INT64_MAX};
	struct usage_qty f, r;

	/* Cut an hour at 15 minutes. */
	CHECK(usage_qty_split(&q, HOUR_USEC / 4, HOUR_USEC, &f, &r) == METER_OK);
	CHECK_I64(f.running_usec, HOUR_USEC / 4);
	CHECK_I64(r.running_usec, HOUR_USEC / 4 * 3);
	CHECK_I64(f.cpu_used_mcus, 1); /* floor(7 / 4) */
	CHECK_I64(r.cpu_used_mcus, 6);
	CHECK_I64(f.cpu_billed_mcus, 50 * HOUR_USEC / 4);
	CHECK_I64(f.memory_mibus, 1024 * HOUR_USEC);
	CHECK_I64(f.storage_mibus, INT64_MAX / 4);
	CHECK_I64(f.storage_mibus + r.storage_mibus, INT64_MAX);
	/* Ends. */
	CHECK(usage_qty_split(&q, 0, HOUR_USEC, &f, &r) == METER_OK);
	CHECK_I64(f.storage_mibus, 0);
	CHECK_I64(r.storage_mibus, INT64_MAX);
	CHECK(usage_qty_split(&q, HOUR_USEC, HOUR_USEC, &f, &r) == METER_OK);
	CHECK_I64(f.storage_mibus, INT64_MAX);
	CHECK_I64(r.storage_mibus, 0);
	CHECK_I64(r.running_usec, 0);
	/* Zero-length whole: everything stays in rest. */
	CHECK(usage_qty_split(&q, 0, 0, &f, &r) == METER_OK);
	CHECK_I64(f.cpu_used_mcus, 0);
	CHECK_I64(r.cpu_used_mcus, 7);
	/* Bad cuts. */
	CHECK(usage_qty_split(&q, 2, 1, &f, &r) == METER_EINVAL);
	CHECK(usage_qty_split(&q, -1, 1, &f, &r) == METER_EINVAL);
	CHECK(usage_qty_split(&q, 1, 0, &f, &r) == METER_EINVAL);
	q.paused_usec = -1;
	CHECK(usage_qty_split(&q, 1, 2, &f, &r) == METER_EINVAL);
	q.paused_usec = 0;
	/* In place: first aliases q. */
	f = q;
	CHECK(usage_qty_split(&f, 1, 2, &f, &r) == METER_OK);
	CHECK_I64(f.cpu_used_mcus, 3);
	CHECK_I64(r.cpu_used_mcus, 4);
}

static void test_price_errors(void)
{
	struct price_rates huge = {INT64_MAX, INT64_MAX, INT64_MAX, 0};
	struct usage_qty q = {0, 0, 0, INT64_MAX, 1, 1};
	struct usage_carry carry = {{5}, {6}, {7}};
	struct usage_cost c = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};

	/* CPU overflows: nothing written, no carry advanced (memory and
	 * storage would have succeeded). */
	CHECK(usage_price(&huge, &carry, &q, &c) == METER_ERANGE);
	CHECK(usage_price(&huge, NULL, &q, &c) == METER_ERANGE);
	CHECK_I64(c.total_micros, SENTINEL);
	CHECK_I64(c.cpu_micros, SENTINEL);
	CHECK_I64(carry.cpu.rem, 5);
	CHECK_I64(carry.memory.rem, 6);
	CHECK_I64(carry.storage.rem, 7);
	/* Storage overflows after CPU and memory succeeded. */
	q.cpu_billed_mcus = 1;
	q.storage_mibus = INT64_MAX;
	CHECK(usage_price(&huge, &carry, &q, &c) == METER_ERANGE);
	CHECK_I64(carry.cpu.rem, 5);
	CHECK_I64(carry.memory.rem, 6);
	/* Each component fits but the total does not. */
	{
		/* INT64_MAX / 2 + 1 µ$ each for CPU and memory. */
		const int64_t half = INT64_MAX / 2 + 1;
		struct price_rates r = {half, half, 0, 0};
		struct usage_qty q2 = {0,
				       0,
				       0,
				       INT64_C(1000) * INT64_C(3600000000),
				       INT64_C(1024) * INT64_C(3600000000),
				       0};

		CHECK(usage_price(&r, NULL, &q2, &c) == METER_ERANGE);
		CHECK_I64(c.total_micros, SENTINEL);
		q2.memory_mibus--;
		CHECK(usage_price(&r, NULL, &q2, &c) == METER_OK);
		CHECK_I64(c.cpu_micros, half);
		CHECK_I64(c.memory_micros, (int64_t)((__int128)q2.memory_mibus * half /
						     (INT64_C(1024) * HOUR_USEC)));
		CHECK_I64(c.total_micros, half + c.memory_micros);
	}
	CHECK(usage_price(NULL, NULL, &q, &c) == METER_EINVAL);
	CHECK(usage_price(dflt, NULL, NULL, &c) == METER_EINVAL);
	q.memory_mibus = -1;
	CHECK(usage_price(dflt, NULL, &q, &c) == METER_EINVAL);
}

static void test_lease(void)
{
	int64_t m = SENTINEL;

	CHECK(usage_lease_max_cost(dflt, 2, 4096, 900, &m) == METER_OK);
	CHECK_I64(m, 20000);
	CHECK(usage_lease_max_cost(dflt, 2, 4096, 3600, &m) == METER_OK);
	CHECK_I64(m, 80000);
	CHECK(usage_lease_max_cost(dflt, 1, 0, 0, &m) == METER_OK);
	CHECK_I64(m, 0);
	/* One second of one vCPU: 25000/3600 = 6.94 → 7; 1 MiB: 7500/3686400 → 1. */
	CHECK(usage_lease_max_cost(dflt, 1, 1, 1, &m) == METER_OK);
	CHECK_I64(m, 8);
	/* Rounded up per component, then summed. */
	CHECK(usage_lease_max_cost(dflt, 1, 0, 1, &m) == METER_OK);
	CHECK_I64(m, 7);
	CHECK(usage_lease_max_cost(dflt, 1, 1, 0, &m) == METER_OK);
	CHECK_I64(m, 0);
	/* A floor above all vCPUs busy is what would be billed. */
	{
		struct price_rates r = price_rates_default;

		r.floor_millicores = 4000;
		CHECK(usage_lease_max_cost(&r, 2, 0, 3600, &m) == METER_OK);
		CHECK_I64(m, 100000);
	}
	/* The worst case bounds the metered cost from any carry. */
	{
		struct usage_sample a = sample(SANDBOX_RUNNING, T0, 0);
		struct usage_sample b = sample(SANDBOX_RUNNING, T0 + 1000000, 2000000);
		struct usage_carry carry = {{CPU_REM_MAX}, {MEM_REM_MAX}, {0}};
		struct usage_qty q;
		struct usage_cost c;
		unsigned flags;

		CHECK(usage_interval(&a, &b, 50, &q, &flags) == METER_OK);
		CHECK(usage_price(dflt, &carry, &q, &c) == METER_OK);
		CHECK(usage_lease_max_cost(dflt, 2, 4096, 1, &m) == METER_OK);
		CHECK(c.total_micros <= m);
		CHECK_I64(m, 23);
		CHECK_I64(c.total_micros, 23);
	}
	m = SENTINEL;
	CHECK(usage_lease_max_cost(dflt, 0, 4096, 900, &m) == METER_EINVAL);
	CHECK(usage_lease_max_cost(dflt, 2, -1, 900, &m) == METER_EINVAL);
	CHECK(usage_lease_max_cost(dflt, 2, 4096, -1, &m) == METER_EINVAL);
	CHECK(usage_lease_max_cost(NULL, 2, 4096, 900, &m) == METER_EINVAL);
	/* Overflow: seconds → µs, vcpus → millicores, the quantities, the sum. */
	CHECK(usage_lease_max_cost(dflt, 1, 0, INT64_MAX, &m) == METER_ERANGE);
	CHECK(usage_lease_max_cost(dflt, INT64_MAX, 0, 1, &m) == METER_ERANGE);
	CHECK(usage_lease_max_cost(dflt, 1024, 0, 31622400, &m) == METER_ERANGE);
	CHECK(usage_lease_max_cost(dflt, 1, INT64_C(16777216), 31622400, &m) == METER_ERANGE);
	{
		struct price_rates huge = {INT64_MAX, INT64_MAX, 0, 0};

		CHECK(usage_lease_max_cost(&huge, 1, 0, 100000, &m) == METER_ERANGE);
		/* Each component is INT64_MAX / 2 + 1, the sum is not an int64. */
		huge.cpu_micros_per_vcpu_hour = INT64_MAX / 2 + 1;
		huge.memory_micros_per_gib_hour = INT64_MAX / 2 + 1;
		CHECK(usage_lease_max_cost(&huge, 1, 1024, 3600, &m) == METER_ERANGE);
		CHECK(usage_lease_max_cost(&huge, 1, 1023, 3600, &m) == METER_OK);
	}
}

int main(void)
{
	test_state_names();
	test_worked_figures();
	test_floor_edges();
	test_tiny_intervals();
	test_counter_reset();
	test_cpu_cap();
	test_cpu_delta();
	test_wide_cpu();
	test_paused_stopped();
	test_bad_samples();
	test_interval_overflow();
	test_qty_add();
	test_qty_split();
	test_price_errors();
	test_lease();
	return check_done();
}
