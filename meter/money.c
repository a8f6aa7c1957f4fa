/* meter: exact integer pricing (DESIGN.md §2).
 *
 * Every product is formed in unsigned __int128: a quantity and a rate are
 * both non-negative int64_t values (< 2^63), so q × rate < 2^126 and
 * carry + q × rate < 2^127 never wrap. Only the final quotient has to be
 * checked against INT64_MAX. */
#include "money.h"

#include <stdbool.h>
#include <stddef.h>

const struct price_rates price_rates_default = {
    .cpu_micros_per_vcpu_hour = 25000,
    .memory_micros_per_gib_hour = 7500,
    .storage_micros_per_gib_hour = 100,
    .floor_millicores = 50,
};

#define MONEY_RATE_MAX	INT64_C(1000000000000) /* 10^12 µ$ per unit-hour */
#define MONEY_FLOOR_MAX INT64_C(1000000)       /* 10^6 millicores */

/* Rate (µ$ per unit-hour) and divisor (unit × µs per hour) of resource r.
 * METER_EINVAL for an unknown resource, NULL rates or a negative rate. */
static enum meter_rc money_terms(enum money_resource r, const struct price_rates *rates,
				 unsigned __int128 *rate, unsigned __int128 *divisor)
{
	int64_t rt;
	int64_t unit;

	if (!rates)
		return METER_EINVAL;
	switch (r) {
	case MONEY_CPU:
		rt = rates->cpu_micros_per_vcpu_hour;
		unit = MONEY_MILLICORES_PER_VCPU;
		break;
	case MONEY_MEMORY:
		rt = rates->memory_micros_per_gib_hour;
		unit = MONEY_MIB_PER_GIB;
		break;
	case MONEY_STORAGE:
		rt = rates->storage_micros_per_gib_hour;
		unit = MONEY_MIB_PER_GIB;
		break;
	default:
		return METER_EINVAL;
	}
	if (rt < 0)
		return METER_EINVAL;
	*rate = (unsigned __int128)rt;
	*divisor = (unsigned __int128)unit * (unsigned __int128)MONEY_USEC_PER_HOUR;
	return METER_OK;
}

static bool money_fits(unsigned __int128 v)
{
	return v <= (unsigned __int128)INT64_MAX;
}

enum meter_rc price_rates_validate(const struct price_rates *rates)
{
	if (!rates)
		return METER_EINVAL;
	if (rates->cpu_micros_per_vcpu_hour < 0 || rates->cpu_micros_per_vcpu_hour > MONEY_RATE_MAX)
		return METER_ERANGE;
	if (rates->memory_micros_per_gib_hour < 0 ||
	    rates->memory_micros_per_gib_hour > MONEY_RATE_MAX)
		return METER_ERANGE;
	if (rates->storage_micros_per_gib_hour < 0 ||
	    rates->storage_micros_per_gib_hour > MONEY_RATE_MAX)
		return METER_ERANGE;
	if (rates->floor_millicores < 0 || rates->floor_millicores > MONEY_FLOOR_MAX)
		return METER_ERANGE;
	return METER_OK;
}

/* floor or ceil of q × rate / divisor, depending on up. */
static enum meter_rc money_price_round(enum money_resource r, const struct price_rates *rates,
				       int64_t q, bool up, int64_t *micros)
{
	unsigned __int128 rate, divisor, p, v;
	enum meter_rc rc;

	rc = money_terms(r, rates, &rate, &divisor);
	if (rc != METER_OK)
		return rc;
	if (q < 0 || !micros)
		return METER_EINVAL;
	p = (unsigned __int128)q * rate;
	v = p / divisor;
	if (up && p % divisor != 0)
		v++;
	if (!money_fits(v))
		return METER_ERANGE;
	*micros = (int64_t)v;
	return METER_OK;
}

enum meter_rc money_price(enum money_resource r, const struct price_rates *rates, int64_t q,
			  int64_t *micros)
{
	return money_price_round(r, rates, q, false, micros);
}

enum meter_rc money_price_up(enum money_resource r, const struct price_rates *rates, int64_t q,
			     int64_t *micros)
{
	return money_price_round(r, rates, q, true, micros);
}

/* A carry outside [0, divisor) was not produced by this function: METER_EINVAL. */
enum meter_rc money_accrue(enum money_resource r, const struct price_rates *rates,
			   struct money_carry *carry, int64_t q, int64_t *micros)
{
	unsigned __int128 rate, divisor, total, v;
	enum meter_rc rc;

	rc = money_terms(r, rates, &rate, &divisor);
	if (rc != METER_OK)
		return rc;
	if (!carry || !micros || q < 0 || carry->rem < 0 ||
	    (unsigned __int128)carry->rem >= divisor)
		return METER_EINVAL;
	total = (unsigned __int128)carry->rem + (unsigned __int128)q * rate;
	v = total / divisor;
	if (!money_fits(v))
		return METER_ERANGE;
	*micros = (int64_t)v;
	carry->rem = (int64_t)(total % divisor);
	return METER_OK;
}

/* With Q = a × divisor + b (0 <= b < divisor),
 *   floor(Q × rate / divisor) = a × rate + floor(b × rate / divisor),
 * so the difference of two prices needs only (a_end − a_start) × rate and
 * two products b × rate < 2^42 × 2^63, none of which can wrap unnoticed even
 * for cumulative quantities near 2^127. */
enum meter_rc money_period(enum money_resource r, const struct price_rates *rates, __int128 q_start,
			   __int128 q_end, int64_t *micros)
{
	unsigned __int128 rate, divisor, qs, qe, da, whole, frac_s, frac_e, v;
	enum meter_rc rc;

	rc = money_terms(r, rates, &rate, &divisor);
	if (rc != METER_OK)
		return rc;
	if (!micros || q_start < 0 || q_end < q_start)
		return METER_EINVAL;
	qs = (unsigned __int128)q_start;
	qe = (unsigned __int128)q_end;
	da = qe / divisor - qs / divisor;
	frac_s = (qs % divisor) * rate / divisor;
	frac_e = (qe % divisor) * rate / divisor;
	/* Overflow of da × rate means da > 2^65 (rate < 2^63) and rate >= 1,
	 * so the result, at least (da − 1) × rate, is beyond INT64_MAX anyway. */
	if (__builtin_mul_overflow(da, rate, &whole))
		return METER_ERANGE;
	/* frac_s < rate, and da >= 1 whenever frac_e < frac_s, so this is >= 0. */
	if (__builtin_add_overflow(whole, frac_e, &v))
		return METER_ERANGE;
	v -= frac_s;
	if (!money_fits(v))
		return METER_ERANGE;
	*micros = (int64_t)v;
	return METER_OK;
}

enum meter_rc money_add(int64_t a, int64_t b, int64_t *out)
{
	int64_t v;

	if (!out)
		return METER_EINVAL;
	if (__builtin_add_overflow(a, b, &v))
		return METER_ERANGE;
	*out = v;
	return METER_OK;
}

enum meter_rc money_mul(int64_t a, int64_t b, int64_t *out)
{
	int64_t v;

	if (!out)
		return METER_EINVAL;
	if (__builtin_mul_overflow(a, b, &v))
		return METER_ERANGE;
	*out = v;
	return METER_OK;
}
