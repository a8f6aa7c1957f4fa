/* Meters one real cgroup for the real-cgroup test (test_cgroup_real.sh).
 *
 *   cgroup_meter ROOT SANDBOX_ID SECONDS VCPUS MEMORY_MIB
 *
 * Reads ROOT with cgroup_read_all, sleeps SECONDS, reads it again, turns the
 * two samples of SANDBOX_ID into an interval with usage_interval and prices
 * it with usage_price under the default price book. Checks that the average
 * CPU is 1000 millicores ±5% (a process burning one CPU) and that the money
 * equals DESIGN.md §2's formula computed here independently with __int128:
 *   q_cpu = max(1000 × Δcpu_usec, 50 × Δwall_usec)
 *   q_mem = memory_mib × Δwall_usec
 *   micros(q) = floor(q × rate / (unit × 3,600,000,000))
 * VCPUS is used when the cgroup does not say (v1, or no cpu.max). MEMORY_MIB
 * >= 0 must be what the cgroup reports (its limit); -1 means the cgroup has
 * no limit, and 512 MiB (what the sandbox record would say) is priced. Exit
 * 0 when every check passed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "money.h"
#include "parse.h"
#include "source_cgroup.h"
#include "usage.h"

static int64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Reads root and copies sandbox id's sample into *s. */
static int read_one(const char *root, const char *id, struct meter_sample *s)
{
	struct sample_batch b;
	char err[256];
	int found = 0;

	if (cgroup_read_all(root, "host-test", now_usec(), &b, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "cgroup_read_all: %s\n", err);
		return 0;
	}
	for (size_t i = 0; i < b.n; i++) {
		if (strcmp(b.items[i].sandbox_id, id) == 0) {
			*s = b.items[i];
			found = 1;
		}
	}
	sample_batch_release(&b);
	if (!found)
		fprintf(stderr, "sandbox %s not found under %s\n", id, root);
	return found;
}

/* floor(q × rate / (unit × 3.6e9)), independently of meter/money.c. */
static int64_t formula_micros(__int128 q, int64_t rate, int64_t unit)
{
	return (int64_t)(q * rate / ((__int128)unit * INT64_C(3600000000)));
}

int main(int argc, char **argv)
{
	struct meter_sample a, b;
	struct usage_qty q;
	struct usage_cost cost;
	struct timespec pause;
	int64_t seconds, vcpus, mem, dwall, dcpu, millicores, want_cpu, want_mem;
	unsigned flags = 0;
	__int128 q_cpu, q_mem;

	if (argc != 6 || parse_int64(argv[3], 1, 60, &seconds) != METER_OK ||
	    parse_int64(argv[4], 1, 1024, &vcpus) != METER_OK ||
	    parse_int64(argv[5], -1, INT64_C(16777216), &mem) != METER_OK) {
		fprintf(stderr, "usage: cgroup_meter ROOT SANDBOX_ID SECONDS VCPUS MEMORY_MIB\n");
		return 2;
	}
	if (!read_one(argv[1], argv[2], &a))
		return 1;
	pause.tv_sec = (time_t)seconds;
	pause.tv_nsec = 0;
	while (nanosleep(&pause, &pause) != 0)
		;
	if (!read_one(argv[1], argv[2], &b))
		return 1;

	/* What the cgroup says about the sandbox's size. */
	CHECK_I64(a.u.memory_mib, mem >= 0 ? mem : SAMPLE_UNKNOWN);
	CHECK_I64(b.u.memory_mib, a.u.memory_mib);
	CHECK(a.state_from_events);
	/* Unknowns are filled as ingestion fills them from the sandbox record. */
	if (a.u.vcpus == 0)
		a.u.vcpus = b.u.vcpus = (int32_t)vcpus;
	if (a.u.memory_mib == SAMPLE_UNKNOWN)
		a.u.memory_mib = b.u.memory_mib = 512;
	a.u.storage_mib = b.u.storage_mib = 0;

	CHECK(usage_interval(&a.u, &b.u, price_rates_default.floor_millicores, &q, &flags) ==
	      METER_OK);
	CHECK_I64(flags, 0);
	dwall = b.u.at_usec - a.u.at_usec;
	dcpu = b.u.cpu_usec - a.u.cpu_usec;
	CHECK(dwall > 0);
	if (dwall <= 0)
		return check_done();
	millicores = q.cpu_used_mcus / dwall;
	printf("interval %" PRId64 " µs, cpu %" PRId64 " µs: %" PRId64 " millicores on average\n",
	       dwall, dcpu, millicores);
	CHECK(millicores >= 950 && millicores <= 1050);
	CHECK_I64(q.running_usec, dwall);
	CHECK_I64(q.cpu_used_mcus, 1000 * dcpu);

	CHECK(usage_price(&price_rates_default, NULL, &q, &cost) == METER_OK);
	q_cpu = (__int128)1000 * dcpu;
	if (q_cpu < (__int128)50 * dwall)
		q_cpu = (__int128)50 * dwall;
	q_mem = (__int128)a.u.memory_mib * dwall;
	want_cpu = formula_micros(q_cpu, 25000, 1000);
	want_mem = formula_micros(q_mem, 7500, 1024);
	printf("billed %" PRId64 " millicore-µs and %" PRId64 " MiB-µs (%" PRId64
	       " MiB): cpu %" PRId64 " µ$, memory %" PRId64 " µ$, total %" PRId64 " µ$\n",
	       q.cpu_billed_mcus, q.memory_mibus, (int64_t)a.u.memory_mib, cost.cpu_micros,
	       cost.memory_micros, cost.total_micros);
	CHECK(q.cpu_billed_mcus == (int64_t)q_cpu);
	CHECK(q.memory_mibus == (int64_t)q_mem);
	CHECK_I64(cost.cpu_micros, want_cpu);
	CHECK_I64(cost.memory_micros, want_mem);
	CHECK_I64(cost.storage_micros, 0);
	CHECK_I64(cost.total_micros, want_cpu + want_mem);
	return check_done();
}
