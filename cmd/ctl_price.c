/* meterctl price, meterctl lease-cost: the pricing core on the command line.
 *
 * Both commands run the real core (usage_interval, usage_price,
 * usage_lease_max_cost) under the default price book, so their figures are
 * the figures the service bills. */
#include "ctl.h"
#include "ctl_args.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checks.h"
#include "money.h"
#include "parse.h"
#include "usage.h"

#define CTL_VCPUS_MAX	    INT64_C(1024)
#define CTL_MEMORY_MIB_MAX  INT64_C(16777216) /* 16 TiB */
#define CTL_SECONDS_MAX	    INT64_C(31622400) /* 366 days */
#define CTL_STORAGE_MIB_MAX INT64_C(16777216) /* 16 TiB, as a sample's */
#define CTL_USEC_PER_SEC    INT64_C(1000000)

/* Writes text to stdout and flushes it; 0 on success, 1 (after a message on
 * stderr) when stdout cannot be written. */
static int ctl_out(const char *cmd, const char *text)
{
	if (fputs(text, stdout) == EOF || fflush(stdout) == EOF) {
		ctl_fail(cmd, "cannot write to standard output");
		return 1;
	}
	return 0;
}

static const char ctl_price_usage[] =
    "usage: meterctl price --vcpus N --memory-mib N --seconds N\n"
    "                      [--cpu-millicores N] [--paused [--storage-mib N]]\n"
    "\n"
    "Prints the cost in microdollars of one sandbox over one period under the\n"
    "default price book, as JSON:\n"
    "  {\"cpu_micros\":..,\"memory_micros\":..,\"storage_micros\":..,\"total_micros\":..}\n"
    "\n"
    "  --vcpus N           vCPUs of the sandbox (1..1024)\n"
    "  --memory-mib N      reserved memory in MiB (0..16777216)\n"
    "  --seconds N         length of the period (0..31622400)\n"
    "  --cpu-millicores N  average CPU used over the period, at most vcpus x 1000\n"
    "                      (default 0: idle, billed at the floor)\n"
    "  --paused            the sandbox is paused: only storage is billed\n"
    "  --storage-mib N     snapshot size in MiB, billed while paused\n"
    "                      (0..16777216, default 0)\n"
    "\n"
    "Each component is rounded down to the microdollar on its own.\n";

static const char ctl_lease_usage[] =
    "usage: meterctl lease-cost --vcpus N --memory-mib N --lease-seconds N\n"
    "\n"
    "Prints the worst-case cost in microdollars of one lease (all vCPUs busy\n"
    "plus reserved memory for the whole lease, each rounded up) under the\n"
    "default price book, as JSON: {\"lease_max_cost_micros\":..}\n"
    "\n"
    "  --vcpus N           vCPUs of the sandbox (1..1024)\n"
    "  --memory-mib N      reserved memory in MiB (0..16777216)\n"
    "  --lease-seconds N   length of the lease (0..86400, as a check's)\n";

enum { P_VCPUS, P_MEMORY, P_SECONDS, P_CPU_MC, P_STORAGE, P_PAUSED, P_NOPTS };

/* Prices the quantities *w of a period of whole_usec an hour at a time, as
 * the service prices a long interval: each hour's share fits int64_t within
 * the caps (16,777,216 MiB × 3.6e9 µs = 6.0e16), and the carry makes the
 * sum of the hours' money each component's whole quantity rounded down
 * once, the figure money_price gives for a quantity that fits. */
static enum meter_rc ctl_price_hours(const struct price_rates *rates, struct usage_wide *w,
				     int64_t whole_usec, struct usage_carry *carry,
				     struct usage_cost *sum)
{
	int64_t done = 0;

	do {
		int64_t part = whole_usec - done;
		struct usage_qty q;
		struct usage_cost c;
		enum meter_rc rc;

		if (part > MONEY_USEC_PER_HOUR)
			part = MONEY_USEC_PER_HOUR;
		rc = usage_wide_split(w, part, whole_usec - done, &q);
		if (rc == METER_OK)
			rc = usage_price(rates, carry, &q, &c);
		if (rc == METER_OK)
			rc = money_add(sum->cpu_micros, c.cpu_micros, &sum->cpu_micros);
		if (rc == METER_OK)
			rc = money_add(sum->memory_micros, c.memory_micros, &sum->memory_micros);
		if (rc == METER_OK)
			rc = money_add(sum->storage_micros, c.storage_micros, &sum->storage_micros);
		if (rc == METER_OK)
			rc = money_add(sum->total_micros, c.total_micros, &sum->total_micros);
		if (rc != METER_OK)
			return rc;
		done += part;
	} while (done < whole_usec);
	return METER_OK;
}

/* The period is two synthetic samples seconds apart in one state. An average
 * of m millicores over s seconds is m / 1000 vCPU-seconds per second, i.e.
 *   Δcpu_usec = m × (s × 10^6) / 1000 = m × s × 1000
 * exactly, with no division; usage_interval then turns it back into
 * 1000 × Δcpu_usec = m × Δwall_usec millicore-µs. */
int ctl_price_main(int argc, char **argv)
{
	static const char cmd[] = "price";
	struct ctl_arg opts[P_NOPTS] = {
	    [P_VCPUS] = {.name = "vcpus",
			 .kind = CTL_ARG_INT,
			 .required = true,
			 .min = 1,
			 .max = CTL_VCPUS_MAX},
	    [P_MEMORY] = {.name = "memory-mib",
			  .kind = CTL_ARG_INT,
			  .required = true,
			  .max = CTL_MEMORY_MIB_MAX},
	    [P_SECONDS] = {.name = "seconds",
			   .kind = CTL_ARG_INT,
			   .required = true,
			   .max = CTL_SECONDS_MAX},
	    [P_CPU_MC] = {.name = "cpu-millicores",
			  .kind = CTL_ARG_INT,
			  .max = CTL_VCPUS_MAX * MONEY_MILLICORES_PER_VCPU},
	    [P_STORAGE] = {.name = "storage-mib", .kind = CTL_ARG_INT, .max = CTL_STORAGE_MIB_MAX},
	    [P_PAUSED] = {.name = "paused", .kind = CTL_ARG_FLAG},
	};
	const struct price_rates *rates = &price_rates_default;
	struct usage_sample prev, cur;
	struct usage_wide w;
	struct usage_carry carry = {0};
	struct usage_cost cost = {0};
	unsigned flags;
	int64_t vcpus, mc, wall_usec, cpu_usec;
	char line[256];
	int n;
	enum meter_rc rc;

	const int parsed =
	    ctl_args_exit(ctl_args_parse(cmd, ctl_price_usage, opts, P_NOPTS, argc, argv));

	if (parsed >= 0)
		return parsed;
	vcpus = opts[P_VCPUS].i;
	mc = opts[P_CPU_MC].i;
	if (mc > vcpus * MONEY_MILLICORES_PER_VCPU) {
		ctl_fail(cmd,
			 "--cpu-millicores %" PRId64 " is more than %" PRId64
			 " vCPUs can use (%" PRId64 ")",
			 mc, vcpus, vcpus * MONEY_MILLICORES_PER_VCPU);
		return 2;
	}
	if (opts[P_STORAGE].seen && !opts[P_PAUSED].i) {
		ctl_fail(cmd, "storage is billed only while paused: add --paused or drop "
			      "--storage-mib");
		return 2;
	}
	if (opts[P_PAUSED].i && mc != 0) {
		ctl_fail(cmd, "a paused sandbox uses no CPU: drop --cpu-millicores or --paused");
		return 2;
	}
	/* All three bounded by the option caps: at most 3.2e13 and 3.3e16. */
	rc = money_mul(opts[P_SECONDS].i, CTL_USEC_PER_SEC, &wall_usec);
	if (rc == METER_OK)
		rc = money_mul(mc, opts[P_SECONDS].i, &cpu_usec);
	if (rc == METER_OK)
		rc = money_mul(cpu_usec, INT64_C(1000), &cpu_usec);
	if (rc != METER_OK) {
		ctl_fail(cmd, "internal error: %s", meter_rc_str(rc));
		return 1;
	}

	memset(&prev, 0, sizeof(prev));
	prev.state = opts[P_PAUSED].i ? SANDBOX_PAUSED : SANDBOX_RUNNING;
	prev.memory_mib = opts[P_MEMORY].i;
	prev.storage_mib = opts[P_STORAGE].i;
	prev.vcpus = (int32_t)vcpus;
	cur = prev;
	cur.at_usec = wall_usec;
	cur.cpu_usec = cpu_usec;

	rc = usage_interval_wide(&prev, &cur, rates->floor_millicores, &w, &flags);
	if (rc == METER_OK)
		rc = ctl_price_hours(rates, &w, wall_usec, &carry, &cost);
	if (rc != METER_OK) {
		ctl_fail(cmd, "cannot price: %s", meter_rc_str(rc));
		return 1;
	}
	n = snprintf(line, sizeof(line),
		     "{\"cpu_micros\":%" PRId64 ",\"memory_micros\":%" PRId64
		     ",\"storage_micros\":%" PRId64 ",\"total_micros\":%" PRId64 "}\n",
		     cost.cpu_micros, cost.memory_micros, cost.storage_micros, cost.total_micros);
	if (n < 0 || (size_t)n >= sizeof(line)) {
		ctl_fail(cmd, "internal error: output too long");
		return 1;
	}
	return ctl_out(cmd, line);
}

enum { L_VCPUS, L_MEMORY, L_SECONDS, L_NOPTS };

int ctl_lease_cost_main(int argc, char **argv)
{
	static const char cmd[] = "lease-cost";
	struct ctl_arg opts[L_NOPTS] = {
	    [L_VCPUS] = {.name = "vcpus",
			 .kind = CTL_ARG_INT,
			 .required = true,
			 .min = 1,
			 .max = CTL_VCPUS_MAX},
	    [L_MEMORY] = {.name = "memory-mib",
			  .kind = CTL_ARG_INT,
			  .required = true,
			  .max = CTL_MEMORY_MIB_MAX},
	    [L_SECONDS] = {.name = "lease-seconds",
			   .kind = CTL_ARG_INT,
			   .required = true,
			   .max = CHECKS_LEASE_SECONDS_MAX},
	};
	int64_t micros;
	char line[64];
	int n;
	enum meter_rc rc;

	const int parsed =
	    ctl_args_exit(ctl_args_parse(cmd, ctl_lease_usage, opts, L_NOPTS, argc, argv));

	if (parsed >= 0)
		return parsed;
	/* Within the caps, as within a check's, every product fits: at most
	 * 16,777,216 MiB × 86,400 s × 10^6 = 1.4e18 MiB-µs. */
	rc = usage_lease_max_cost(&price_rates_default, opts[L_VCPUS].i, opts[L_MEMORY].i,
				  opts[L_SECONDS].i, &micros);
	if (rc != METER_OK) {
		ctl_fail(cmd, "cannot price: %s", meter_rc_str(rc));
		return 1;
	}
	n = snprintf(line, sizeof(line), "{\"lease_max_cost_micros\":%" PRId64 "}\n", micros);
	if (n < 0 || (size_t)n >= sizeof(line)) {
		ctl_fail(cmd, "internal error: output too long");
		return 1;
	}
	return ctl_out(cmd, line);
}
