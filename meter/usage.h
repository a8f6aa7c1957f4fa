/* meter: usage arithmetic for sandboxes (DESIGN.md §2-§3). Pure, no I/O.
 *
 * Two consecutive samples of one sandbox make an interval. The interval is
 * billed by the state of its first sample (a lifecycle event, applied by the
 * caller, is what moves a state change to its exact time):
 *   running  CPU:    used   = 1000 × Δcpu_usec              (millicore-µs)
 *                    billed = max(used, floor_millicores × Δwall_usec)
 *            memory: memory_mib × Δwall_usec                 (MiB-µs)
 *   paused   storage: storage_mib × Δwall_usec               (MiB-µs)
 *   stopped  nothing.
 * The CPU counter is cumulative: a counter that went down was reset (the VM
 * restarted or moved) and its new value is the usage since the reset. A CPU
 * increase larger than vcpus × Δwall is impossible; it is capped there and
 * flagged as an anomaly. */
#ifndef METER_USAGE_H
#define METER_USAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "money.h"
#include "rc.h"

enum sandbox_state {
	SANDBOX_RUNNING,
	SANDBOX_PAUSED,
	SANDBOX_STOPPED,
};

/* "running", "paused", "stopped": static strings (borrowed). */
const char *sandbox_state_name(enum sandbox_state s);
/* METER_EINVAL for anything but the three names above (NULL included). */
METER_MUSTCHECK enum meter_rc sandbox_state_parse(const char *s, enum sandbox_state *out);

/* One sample of one sandbox. */
struct usage_sample {
	int64_t at_usec; /* UTC, microseconds since the Unix epoch */
	enum sandbox_state state;
	int64_t cpu_usec;    /* cumulative CPU time since boot, >= 0 */
	int64_t memory_mib;  /* reserved memory, >= 0 */
	int64_t storage_mib; /* snapshot size, used while paused, >= 0 */
	int32_t vcpus;	     /* >= 1 */
};

/* Exact quantities of an interval or of a sum of intervals. */
struct usage_qty {
	int64_t running_usec;
	int64_t paused_usec;
	int64_t cpu_used_mcus;	 /* millicore-µs actually used */
	int64_t cpu_billed_mcus; /* millicore-µs billed: used, raised to the floor */
	int64_t memory_mibus;	 /* MiB-µs of reserved memory while running */
	int64_t storage_mibus;	 /* MiB-µs of snapshot while paused */
};

#define USAGE_COUNTER_RESET 0x1u /* the CPU counter went down */
#define USAGE_CPU_CAPPED    0x2u /* CPU exceeded vcpus × Δwall and was capped */

/* Quantities of the interval prev → cur (same sandbox).
 * cur->at_usec == prev->at_usec gives all zeros; cur earlier than prev, or a
 * sample with negative fields or vcpus < 1, is METER_EINVAL (callers drop
 * out-of-order samples before this). *flags gets USAGE_* bits.
 * METER_ERANGE when a quantity would overflow int64_t. */
METER_MUSTCHECK enum meter_rc usage_interval(const struct usage_sample *prev,
					     const struct usage_sample *cur,
					     int64_t floor_millicores, struct usage_qty *out,
					     unsigned *flags);

/* An interval's quantities in 128 bits: what usage_interval computes,
 * before it is narrowed to int64_t. */
struct usage_wide {
	__int128 running_usec;
	__int128 paused_usec;
	__int128 cpu_used_mcus;
	__int128 cpu_billed_mcus;
	__int128 memory_mibus;
	__int128 storage_mibus;
};

/* As usage_interval, in 128 bits: never METER_ERANGE (every quantity is a
 * product of two int64_t values >= 0). For an interval too long to fit
 * int64_t as a whole, cut with usage_wide_split. */
METER_MUSTCHECK enum meter_rc usage_interval_wide(const struct usage_sample *prev,
						  const struct usage_sample *cur,
						  int64_t floor_millicores, struct usage_wide *out,
						  unsigned *flags);

/* Sets the CPU of *q, a running interval of q->running_usec (the rest of
 * *q as usage_interval_wide made it), to used_mcus millicore-µs: capped at
 * vcpus × its wall time (USAGE_CPU_CAPPED into *flags, which may be NULL),
 * billed at least floor_millicores × its wall time. For an interval's share
 * of a longer one's CPU, given in millicore-µs as hours are cut. */
void usage_wide_cpu(struct usage_wide *q, __int128 used_mcus, int32_t vcpus,
		    int64_t floor_millicores, unsigned *flags);

/* Takes the part_usec of *q's whole_usec (0 <= part_usec <= whole_usec)
 * into *first: floor(field × part / whole) of every field, as
 * usage_qty_split does, and leaves the rest in *q, so the parts taken add
 * up to the whole exactly. METER_ERANGE (nothing changed) when the part
 * does not fit int64_t; METER_EINVAL for bad arguments or a negative
 * field. */
METER_MUSTCHECK enum meter_rc usage_wide_split(struct usage_wide *q, int64_t part_usec,
					       int64_t whole_usec, struct usage_qty *first);

/* The CPU µs usage_interval counts for prev → cur (whatever the state):
 * the counter's rise or, after a reset, its new value, capped at
 * vcpus × Δwall; *flags gets USAGE_COUNTER_RESET and USAGE_CPU_CAPPED.
 * Never METER_ERANGE, however long the interval. The same arguments as
 * usage_interval are METER_EINVAL. */
METER_MUSTCHECK enum meter_rc usage_cpu_delta(const struct usage_sample *prev,
					      const struct usage_sample *cur, int64_t *cpu_usec,
					      unsigned *flags);

/* *acc += *q, field by field; METER_ERANGE (acc untouched) on overflow. */
METER_MUSTCHECK enum meter_rc usage_qty_add(struct usage_qty *acc, const struct usage_qty *q);

/* Splits q, which covers whole_usec of wall time, at part_usec
 * (0 <= part_usec <= whole_usec): *first gets floor(field × part / whole) of
 * every field and *rest the remainder, so first + rest == q exactly. Used to
 * cut an interval at an hour or day boundary. */
METER_MUSTCHECK enum meter_rc usage_qty_split(const struct usage_qty *q, int64_t part_usec,
					      int64_t whole_usec, struct usage_qty *first,
					      struct usage_qty *rest);

struct usage_cost {
	int64_t cpu_micros;
	int64_t memory_micros;
	int64_t storage_micros;
	int64_t total_micros;
};

/* The three carries of one sandbox under one price-book version. */
struct usage_carry {
	struct money_carry cpu;
	struct money_carry memory;
	struct money_carry storage;
};

/* Prices q (billed CPU, memory, storage) into *out. With carry non-NULL the
 * money accrues exactly across calls (see money_accrue); with NULL, q is
 * priced on its own (rounded down). */
METER_MUSTCHECK enum meter_rc usage_price(const struct price_rates *rates,
					  struct usage_carry *carry, const struct usage_qty *q,
					  struct usage_cost *out);

/* Worst case of a lease: all vCPUs busy plus reserved memory for the whole
 * lease, each component rounded up, summed. 2 vCPU / 4096 MiB / 900 s under
 * the default book = 12,500 + 7,500 = 20,000 µ$. vcpus >= 1, memory_mib >= 0,
 * lease_seconds >= 0, else METER_EINVAL; METER_ERANGE on overflow. */
METER_MUSTCHECK enum meter_rc usage_lease_max_cost(const struct price_rates *rates, int64_t vcpus,
						   int64_t memory_mib, int64_t lease_seconds,
						   int64_t *micros);

/* As usage_lease_max_cost for a lease of lease_usec microseconds (a part
 * of a lease cut at a day boundary need not be whole seconds). */
METER_MUSTCHECK enum meter_rc usage_lease_max_cost_usec(const struct price_rates *rates,
							int64_t vcpus, int64_t memory_mib,
							int64_t lease_usec, int64_t *micros);

#endif
