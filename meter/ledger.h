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
#include <stddef.h>
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
 * (increasing; two equal starts are a day the zone skipped, as Pacific/Apia
 * skipped 2011-12-30, which no part falls on; bounds[0] <= start_usec <
 * bounds[1]: the lease starts on day 0) into at most LEDGER_PARTS_MAX parts
 * of non-zero length,
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

/* A hold whose cover has no end (ledger_hold.settles_usec). */
#define LEDGER_SETTLES_NONE INT64_MAX

/* One priced piece of a sandbox-day's metered usage. */
struct ledger_piece {
	int64_t start_usec; /* UTC µs, inclusive */
	int64_t end_usec;   /* UTC µs, exclusive */
	int64_t micros;	    /* its money, >= 0 */
};

/* An open hold of a sandbox-day as metering reads it. */
struct ledger_hold {
	int64_t hold_id;
	int64_t amount_micros;	   /* >= 0 */
	int64_t consumed_micros;   /* >= 0; may exceed the amount */
	int64_t lease_starts_usec; /* UTC µs */
	int64_t settles_usec;	   /* UTC µs its cover ends: the event keeping its tail, or
				    * its lease's end while nothing has settled it */
	int64_t add_micros;	   /* out: consumption ledger_consume adds to it */
};

/* Consumes a sandbox-day's pieces p[0..np) (in time order) on its open holds
 * h[0..nh) (oldest first: ascending hold_id). A piece is first cut at
 * every instant strictly inside it where a hold's lease starts or its
 * cover ends (settles_usec), each stretch [t0, t1) taking floor(what is
 * left of the piece's money × its time / the piece's time left), the last
 * the rest; but where a lease starts at t1, the stretch takes what is left
 * less floor(what is left × the time after t1 / the time left), so a hold
 * rounded up to its lease's worst case takes none of the cut's rounding.
 * A stretch is for the holds eligible for it: lease started by t0 (before
 * t1), and cover not ended by t0 (settles_usec > t0). Those cover
 * it oldest first, each up to what it has left (amount - consumed - what
 * earlier stretches added, floor 0); what is left over (outrun) is added
 * to the newest eligible hold. A stretch with no eligible hold consumes
 * nothing. When every hold is eligible for every piece, this is the
 * pieces' sum spent by the old rule (oldest first, the rest to the
 * newest): a piece that outruns leaves every hold with nothing left, so
 * the next goes to the newest too. Sets every
 * h[j].add_micros and *covered_micros (what the holds had room for, at
 * most the pieces' sum). METER_EINVAL for a negative amount or a piece
 * that ends before it starts, METER_ERANGE when a consumption or the sum
 * overflows (h and *covered then unspecified). Pure: no I/O. */
METER_MUSTCHECK enum meter_rc ledger_consume(const struct ledger_piece *p, size_t np,
					     struct ledger_hold *h, size_t nh,
					     int64_t *covered_micros);

/* maxCostMicros (create only): the first lease's worst case may equal the
 * cap, not exceed it. */
bool ledger_max_cost_ok(int64_t lease_max_cost_micros, int64_t max_cost_micros);

#endif
