/* meterctl price, meterctl lease-cost: the pricing core on the command line.
 *
 * Both commands run the real core (usage_interval, usage_price,
 * usage_lease_max_cost) under the default price book, so their figures are
 * the figures the service bills. */
#include "ctl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "money.h"
#include "parse.h"
#include "usage.h"

#define CTL_VCPUS_MAX	    INT64_C(1024)
#define CTL_MEMORY_MIB_MAX  INT64_C(16777216)	   /* 16 TiB */
#define CTL_SECONDS_MAX	    INT64_C(31622400)	   /* 366 days */
#define CTL_STORAGE_MIB_MAX INT64_C(1099511627776) /* 2^40 MiB */
#define CTL_USEC_PER_SEC    INT64_C(1000000)

/* One long option. A flag takes no value; any other option takes a whole
 * decimal number in [min, max]. */
struct ctl_opt {
	const char *name; /* without the leading "--" */
	bool flag;
	bool required;
	int64_t min;
	int64_t max;
	int64_t value; /* the default until seen; 1 for a flag that was given */
	bool seen;
};

enum ctl_parse_result {
	CTL_PARSED,
	CTL_HELP,
	CTL_BAD,    /* exit status 2 */
	CTL_FAILED, /* exit status 1 */
};

/* Prints "meterctl <cmd>: <message>\n" on stderr. A failed write to stderr
 * has nowhere left to be reported, so its result is deliberately ignored. */
__attribute__((format(printf, 2, 3))) static void ctl_fail(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)fprintf(stderr, "meterctl %s: %s\n", cmd, msg);
}

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

static struct ctl_opt *ctl_find(struct ctl_opt *opts, size_t nopts, const char *name, size_t len)
{
	for (size_t i = 0; i < nopts; i++)
		if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
			return &opts[i];
	return NULL;
}

/* Parses argv[1..argc) against opts ("--name value" or "--name=value").
 * CTL_HELP after printing usage on stdout for "--help" (CTL_FAILED if that
 * write failed); CTL_BAD after one line on stderr for anything wrong; a value
 * starting with "--" counts as missing. CTL_PARSED with every option's value filled
 * in otherwise. argv is borrowed and not modified. */
static enum ctl_parse_result ctl_parse(const char *cmd, const char *usage, int argc, char **argv,
				       struct ctl_opt *opts, size_t nopts)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *name, *eq, *val;
		struct ctl_opt *o;
		size_t len;
		enum meter_rc rc;

		if (strcmp(arg, "--help") == 0)
			return ctl_out(cmd, usage) == 0 ? CTL_HELP : CTL_FAILED;
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
			ctl_fail(cmd, "unexpected argument '%.64s' (try --help)", arg);
			return CTL_BAD;
		}
		name = arg + 2;
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		o = ctl_find(opts, nopts, name, len);
		if (!o) {
			ctl_fail(cmd, "unknown option '--%.*s' (try --help)",
				 (int)(len > 64 ? 64 : len), name);
			return CTL_BAD;
		}
		if (o->seen) {
			ctl_fail(cmd, "--%s given more than once", o->name);
			return CTL_BAD;
		}
		o->seen = true;
		if (o->flag) {
			if (eq) {
				ctl_fail(cmd, "--%s takes no value", o->name);
				return CTL_BAD;
			}
			o->value = 1;
			continue;
		}
		if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
			val = argv[++i];
		} else {
			ctl_fail(cmd, "--%s needs a value", o->name);
			return CTL_BAD;
		}
		rc = parse_int64(val, o->min, o->max, &o->value);
		if (rc == METER_ERANGE) {
			ctl_fail(cmd, "--%s %.64s is out of range (%" PRId64 "..%" PRId64 ")",
				 o->name, val, o->min, o->max);
			return CTL_BAD;
		}
		if (rc != METER_OK) {
			ctl_fail(cmd, "--%s needs a whole number, not '%.64s'", o->name, val);
			return CTL_BAD;
		}
	}
	for (size_t i = 0; i < nopts; i++) {
		if (opts[i].required && !opts[i].seen) {
			ctl_fail(cmd, "missing --%s (try --help)", opts[i].name);
			return CTL_BAD;
		}
	}
	return CTL_PARSED;
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
    "  --storage-mib N     snapshot size in MiB, billed while paused (default 0)\n"
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
    "  --lease-seconds N   length of the lease (0..31622400)\n";

enum { P_VCPUS, P_MEMORY, P_SECONDS, P_CPU_MC, P_STORAGE, P_PAUSED, P_NOPTS };

/* The period is two synthetic samples seconds apart in one state. An average
 * of m millicores over s seconds is m / 1000 vCPU-seconds per second, i.e.
 *   Δcpu_usec = m × (s × 10^6) / 1000 = m × s × 1000
 * exactly, with no division; usage_interval then turns it back into
 * 1000 × Δcpu_usec = m × Δwall_usec millicore-µs. */
int ctl_price_main(int argc, char **argv)
{
	static const char cmd[] = "price";
	struct ctl_opt opts[P_NOPTS] = {
	    [P_VCPUS] = {.name = "vcpus", .required = true, .min = 1, .max = CTL_VCPUS_MAX},
	    [P_MEMORY] = {.name = "memory-mib", .required = true, .max = CTL_MEMORY_MIB_MAX},
	    [P_SECONDS] = {.name = "seconds", .required = true, .max = CTL_SECONDS_MAX},
	    [P_CPU_MC] = {.name = "cpu-millicores",
			  .max = CTL_VCPUS_MAX * MONEY_MILLICORES_PER_VCPU},
	    [P_STORAGE] = {.name = "storage-mib", .max = CTL_STORAGE_MIB_MAX},
	    [P_PAUSED] = {.name = "paused", .flag = true},
	};
	const struct price_rates *rates = &price_rates_default;
	struct usage_sample prev, cur;
	struct usage_qty q;
	struct usage_cost cost;
	unsigned flags;
	int64_t vcpus, mc, wall_usec, cpu_usec;
	char line[256];
	int n;
	enum meter_rc rc;

	switch (ctl_parse(cmd, ctl_price_usage, argc, argv, opts, P_NOPTS)) {
	case CTL_PARSED:
		break;
	case CTL_HELP:
		return 0;
	case CTL_BAD:
		return 2;
	case CTL_FAILED:
		return 1;
	}
	vcpus = opts[P_VCPUS].value;
	mc = opts[P_CPU_MC].value;
	if (mc > vcpus * MONEY_MILLICORES_PER_VCPU) {
		ctl_fail(cmd,
			 "--cpu-millicores %" PRId64 " is more than %" PRId64
			 " vCPUs can use (%" PRId64 ")",
			 mc, vcpus, vcpus * MONEY_MILLICORES_PER_VCPU);
		return 2;
	}
	if (opts[P_PAUSED].value && mc != 0) {
		ctl_fail(cmd, "a paused sandbox uses no CPU: drop --cpu-millicores or --paused");
		return 2;
	}
	/* All three bounded by the option caps: at most 3.2e13 and 3.3e16. */
	rc = money_mul(opts[P_SECONDS].value, CTL_USEC_PER_SEC, &wall_usec);
	if (rc == METER_OK)
		rc = money_mul(mc, opts[P_SECONDS].value, &cpu_usec);
	if (rc == METER_OK)
		rc = money_mul(cpu_usec, INT64_C(1000), &cpu_usec);
	if (rc != METER_OK) {
		ctl_fail(cmd, "internal error: %s", meter_rc_str(rc));
		return 1;
	}

	memset(&prev, 0, sizeof(prev));
	prev.state = opts[P_PAUSED].value ? SANDBOX_PAUSED : SANDBOX_RUNNING;
	prev.memory_mib = opts[P_MEMORY].value;
	prev.storage_mib = opts[P_STORAGE].value;
	prev.vcpus = (int32_t)vcpus;
	cur = prev;
	cur.at_usec = wall_usec;
	cur.cpu_usec = cpu_usec;

	rc = usage_interval(&prev, &cur, rates->floor_millicores, &q, &flags);
	if (rc == METER_OK)
		rc = usage_price(rates, NULL, &q, &cost);
	if (rc == METER_ERANGE) {
		ctl_fail(cmd, "usage too large to price exactly in 64 bits; use fewer --seconds");
		return 2;
	}
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
	struct ctl_opt opts[L_NOPTS] = {
	    [L_VCPUS] = {.name = "vcpus", .required = true, .min = 1, .max = CTL_VCPUS_MAX},
	    [L_MEMORY] = {.name = "memory-mib", .required = true, .max = CTL_MEMORY_MIB_MAX},
	    [L_SECONDS] = {.name = "lease-seconds", .required = true, .max = CTL_SECONDS_MAX},
	};
	int64_t micros;
	char line[64];
	int n;
	enum meter_rc rc;

	switch (ctl_parse(cmd, ctl_lease_usage, argc, argv, opts, L_NOPTS)) {
	case CTL_PARSED:
		break;
	case CTL_HELP:
		return 0;
	case CTL_BAD:
		return 2;
	case CTL_FAILED:
		return 1;
	}
	rc = usage_lease_max_cost(&price_rates_default, opts[L_VCPUS].value, opts[L_MEMORY].value,
				  opts[L_SECONDS].value, &micros);
	if (rc == METER_ERANGE) {
		ctl_fail(cmd,
			 "lease too large to price exactly in 64 bits; use fewer --lease-seconds");
		return 2;
	}
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
