/* meter: the day ledger's decision rules for checks (DESIGN.md §4). Pure
 * arithmetic, no I/O: the database supplies the figures, this decides.
 *
 * A key's day is a calendar day in the key's time zone. A lease
 * [start, end) that crosses the key's midnight is cut into parts, one per
 * day it touches; each part's worst case (all vCPUs busy plus the reserved
 * memory for the part's duration, rounded up) is held against its own day.
 * A check is allowed only if, for every day it touches,
 *
 *     committed(day) + part(day) <= limit(day),   committed = spent + held
 *
 * (a day without a limit always fits). All amounts are integer
 * microdollars (µ$); times are UTC microseconds since the Unix epoch. */
#ifndef METER_LEDGER_H
#define METER_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "money.h"
#include "rc.h"
#include "usage.h"

/* A lease of at most 86,400 s crosses at most 3 midnights even around a
 * 23-hour day; room for one more. */
#define LEDGER_PARTS_MAX 4
/* Day starts a caller supplies: the lease's first day and the next five. */
#define LEDGER_BOUNDS 6

/* One day's part of a lease. */
struct ledger_part {
	int day_index;	    /* index of the day: bounds[day_index] is its start */
	int64_t start_usec; /* UTC µs, inclusive */
	int64_t end_usec;   /* UTC µs, exclusive */
	int64_t micros;	    /* worst case of the part, rounded up */
};

/* The figures of one key-day as the ledger holds them. */
struct ledger_day {
	int64_t spent_micros;
	int64_t held_micros;
	bool has_limit;
	int64_t limit_micros; /* meaningful when has_limit */
};

/* Cuts the lease [start_usec, end_usec) at the day starts bounds[0..nbounds)
 * (strictly increasing; bounds[0] <= start_usec < bounds[1]: the lease
 * starts on day 0) into at most LEDGER_PARTS_MAX parts of non-zero length,
 * in time order, and prices each with usage_lease_max_cost_usec(). The last day
 * start must lie at or after end_usec, else METER_ERANGE (the caller
 * supplied too few days). METER_EINVAL for a bad order or end <= start. */
METER_MUSTCHECK enum meter_rc ledger_split(const struct price_rates *rates, int64_t vcpus,
					   int64_t memory_mib, int64_t start_usec, int64_t end_usec,
					   const int64_t *bounds, int nbounds,
					   struct ledger_part *parts, int *nparts);

/* True when committed(day) + amount_micros <= limit (always, without a
 * limit). Exact for every int64 input (no overflow). amount_micros >= 0. */
bool ledger_fits(const struct ledger_day *day, int64_t amount_micros);

/* Places a check's parts: days[i] is the day of amounts[i] (distinct days).
 * When every part fits, adds each amount to its day's held and returns
 * true. Otherwise changes nothing, sets *failed to the first index that
 * does not fit and returns false. METER_ERANGE cannot happen for amounts
 * that fit (held + amount <= limit <= INT64_MAX); without a limit a held
 * figure that would overflow is treated as not fitting. */
bool ledger_place(struct ledger_day *const *days, const int64_t *amounts, int n, int *failed);

/* maxCostMicros (create only): the first lease's worst case may equal the
 * cap, not exceed it. */
bool ledger_max_cost_ok(int64_t lease_max_cost_micros, int64_t max_cost_micros);

#endif
