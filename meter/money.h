/* meter: exact integer pricing (DESIGN.md §2). Pure arithmetic, no I/O.
 *
 * Quantities are exact integers:
 *   CPU               millicore-microseconds  (1 vCPU busy for 1 s = 1000 × 1,000,000)
 *   memory, storage   MiB-microseconds
 * A rate is integer microdollars per unit-hour (vCPU-hour, GiB-hour), so
 *   micros(q) = floor(q × rate / (unit × 3,600,000,000))
 * with unit = 1000 millicores per vCPU or 1024 MiB per GiB. Products are
 * formed in __int128 and any result that does not fit int64_t is reported as
 * METER_ERANGE, never wrapped. Rounding is down, in the customer's favour,
 * except for worst-case (hold) figures, which round up. */
#ifndef METER_MONEY_H
#define METER_MONEY_H

#include <stdint.h>

#include "rc.h"

#define MONEY_USEC_PER_HOUR	  INT64_C(3600000000)
#define MONEY_MILLICORES_PER_VCPU INT64_C(1000)
#define MONEY_MIB_PER_GIB	  INT64_C(1024)

/* One version of the price book. All fields non-negative. */
struct price_rates {
	int64_t cpu_micros_per_vcpu_hour;    /* default 25,000 */
	int64_t memory_micros_per_gib_hour;  /* default 7,500 */
	int64_t storage_micros_per_gib_hour; /* default 100 (an assumption) */
	int64_t floor_millicores;	     /* default 50, billed while running */
};

/* The default price book: the figures the product documents promise. */
extern const struct price_rates price_rates_default;

enum money_resource {
	MONEY_CPU,     /* quantity in millicore-µs, rate per vCPU-hour */
	MONEY_MEMORY,  /* quantity in MiB-µs, rate per GiB-hour */
	MONEY_STORAGE, /* quantity in MiB-µs, rate per GiB-hour */
};

/* METER_OK when every rate is in [0, 10^12] and the floor in [0, 10^6]. */
METER_MUSTCHECK enum meter_rc price_rates_validate(const struct price_rates *rates);

/* *micros = floor(q × rate / divisor) for resource r. q must be >= 0.
 * METER_EINVAL for a negative q, METER_ERANGE when the result overflows. */
METER_MUSTCHECK enum meter_rc money_price(enum money_resource r, const struct price_rates *rates,
					  int64_t q, int64_t *micros);

/* As money_price, rounded up: ceil(q × rate / divisor). For worst cases. */
METER_MUSTCHECK enum meter_rc money_price_up(enum money_resource r, const struct price_rates *rates,
					     int64_t q, int64_t *micros);

/* Exact accrual over a stream of quantities.
 *
 * The carry holds rem = (Q × rate) mod divisor, where Q is everything
 * accrued so far (0 <= rem < divisor). Accruing q yields
 *   micros = floor((rem + q × rate) / divisor)
 * which equals micros(Q + q) − micros(Q): the money of a period is the
 * difference of the prices of the cumulative quantities, without having to
 * store a cumulative quantity that could outgrow 64 bits. Any split of a
 * stream into periods therefore sums to exactly the price of the whole; the
 * sub-microdollar remainder is carried, never lost and never charged twice.
 * A fresh carry is {0}. The carry is only advanced when METER_OK is returned. */
struct money_carry {
	int64_t rem;
};

METER_MUSTCHECK enum meter_rc money_accrue(enum money_resource r, const struct price_rates *rates,
					   struct money_carry *carry, int64_t q, int64_t *micros);

/* Money of a period from cumulative quantities: micros(q_end) − micros(q_start),
 * with 0 <= q_start <= q_end given as 128-bit cumulative quantities. */
METER_MUSTCHECK enum meter_rc money_period(enum money_resource r, const struct price_rates *rates,
					   __int128 q_start, __int128 q_end, int64_t *micros);

/* Checked int64 helpers: METER_ERANGE on overflow, *out untouched then. */
METER_MUSTCHECK enum meter_rc money_add(int64_t a, int64_t b, int64_t *out);
METER_MUSTCHECK enum meter_rc money_mul(int64_t a, int64_t b, int64_t *out);

#endif
