/* meter: the day ledger's decision rules for checks (see ledger.h). */
#include "ledger.h"

#include <stddef.h>

enum meter_rc ledger_split(const struct price_rates *rates, int64_t vcpus, int64_t memory_mib,
			   int64_t start_usec, int64_t end_usec, const int64_t *bounds, int nbounds,
			   struct ledger_part *parts, int *nparts)
{
	int n = 0;
	enum meter_rc rc;

	if (!bounds || !parts || !nparts || nbounds < 2 || end_usec <= start_usec)
		return METER_EINVAL;
	for (int i = 1; i < nbounds; i++)
		if (bounds[i] <= bounds[i - 1])
			return METER_EINVAL;
	if (bounds[0] > start_usec || start_usec >= bounds[1])
		return METER_EINVAL;
	if (bounds[nbounds - 1] < end_usec)
		return METER_ERANGE;
	for (int i = 0; i + 1 < nbounds && bounds[i] < end_usec; i++) {
		int64_t lo = start_usec > bounds[i] ? start_usec : bounds[i];
		int64_t hi = end_usec < bounds[i + 1] ? end_usec : bounds[i + 1];

		if (hi <= lo)
			continue;
		if (n == LEDGER_PARTS_MAX)
			return METER_ERANGE;
		parts[n].day_index = i;
		parts[n].start_usec = lo;
		parts[n].end_usec = hi;
		rc = usage_lease_max_cost_usec(rates, vcpus, memory_mib, hi - lo, &parts[n].micros);
		if (rc != METER_OK)
			return rc;
		n++;
	}
	*nparts = n;
	return METER_OK;
}

bool ledger_fits(const struct ledger_day *day, int64_t amount_micros)
{
	__int128 committed;

	if (amount_micros < 0)
		return false;
	if (!day->has_limit)
		return true;
	committed = (__int128)day->spent_micros + day->held_micros;
	return committed + amount_micros <= (__int128)day->limit_micros;
}

bool ledger_place(struct ledger_day *const *days, const int64_t *amounts, int n, int *failed)
{
	for (int i = 0; i < n; i++) {
		bool fits = ledger_fits(days[i], amounts[i]);

		/* Without a limit, held must still stay representable. */
		if (fits && !days[i]->has_limit && days[i]->held_micros > INT64_MAX - amounts[i])
			fits = false;
		if (!fits) {
			if (failed)
				*failed = i;
			return false;
		}
	}
	for (int i = 0; i < n; i++)
		days[i]->held_micros += amounts[i];
	return true;
}

bool ledger_max_cost_ok(int64_t lease_max_cost_micros, int64_t max_cost_micros)
{
	return lease_max_cost_micros <= max_cost_micros;
}

/* Whether hold h may consume piece p (see ledger_consume). */
static bool ledger_eligible(const struct ledger_hold *h, const struct ledger_piece *p)
{
	return h->lease_starts_usec < p->end_usec && p->start_usec < h->settles_usec;
}

enum meter_rc ledger_consume(const struct ledger_piece *p, size_t np, struct ledger_hold *h,
			     size_t nh, int64_t *covered_micros)
{
	int64_t covered = 0;
	enum meter_rc rc;

	for (size_t j = 0; j < nh; j++) {
		if (h[j].amount_micros < 0 || h[j].consumed_micros < 0)
			return METER_EINVAL;
		h[j].add_micros = 0;
	}
	for (size_t i = 0; i < np; i++) {
		int64_t left = p[i].micros;
		size_t newest = nh;

		if (left < 0)
			return METER_EINVAL;
		for (size_t j = 0; j < nh && left > 0; j++) {
			int64_t rem, take;

			if (!ledger_eligible(&h[j], &p[i]))
				continue;
			newest = j;
			/* amount - consumed - add without overflow: add never
			 * takes a hold past its amount but as the newest. */
			rem = h[j].amount_micros > h[j].consumed_micros
				  ? h[j].amount_micros - h[j].consumed_micros
				  : 0;
			rem = rem > h[j].add_micros ? rem - h[j].add_micros : 0;
			take = rem < left ? rem : left;
			h[j].add_micros += take;
			left -= take;
			rc = money_add(covered, take, &covered);
			if (rc != METER_OK)
				return rc;
		}
		/* Money left: the loop saw every hold, newest is the newest
		 * eligible one (nh: none, the piece consumes nothing). */
		if (left == 0 || newest == nh)
			continue;
		rc = money_add(h[newest].add_micros, left, &h[newest].add_micros);
		if (rc != METER_OK)
			return rc;
	}
	*covered_micros = covered;
	return METER_OK;
}
