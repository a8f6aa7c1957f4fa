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
		if (bounds[i] < bounds[i - 1])
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

/* Spends money m of the stretch [a, b), in which no hold's lease starts
 * and no hold's cover ends, on the holds eligible for it (see ledger_consume):
 * oldest first, each up to what it has left, the rest to the newest. */
static enum meter_rc ledger_spend_part(int64_t a, int64_t b, int64_t m, struct ledger_hold *h,
				       size_t nh, int64_t *covered)
{
	int64_t left = m;
	size_t newest = nh;
	enum meter_rc rc;

	for (size_t j = 0; j < nh && left > 0; j++) {
		int64_t rem, take;

		if (!(h[j].lease_starts_usec < b && a < h[j].settles_usec))
			continue;
		newest = j;
		/* amount - consumed - add without overflow: add never takes a
		 * hold past its amount but as the newest. */
		rem = h[j].amount_micros > h[j].consumed_micros
			  ? h[j].amount_micros - h[j].consumed_micros
			  : 0;
		rem = rem > h[j].add_micros ? rem - h[j].add_micros : 0;
		take = rem < left ? rem : left;
		h[j].add_micros += take;
		left -= take;
		rc = money_add(*covered, take, covered);
		if (rc != METER_OK)
			return rc;
	}
	/* Money left: the loop saw every hold, newest is the newest eligible
	 * one (nh: none, the stretch consumes nothing). */
	if (left == 0 || newest == nh)
		return METER_OK;
	return money_add(h[newest].add_micros, left, &h[newest].add_micros);
}

/* The first instant after t and before end at which a hold's lease starts
 * or its cover ends; end when there is none. */
static int64_t ledger_next_cut(int64_t t, int64_t end, const struct ledger_hold *h, size_t nh)
{
	int64_t cut = end;

	for (size_t j = 0; j < nh; j++) {
		if (h[j].lease_starts_usec > t && h[j].lease_starts_usec < cut)
			cut = h[j].lease_starts_usec;
		if (h[j].settles_usec > t && h[j].settles_usec < cut)
			cut = h[j].settles_usec;
	}
	return cut;
}

/* Whether a hold's lease starts at t. */
static bool ledger_lease_starts(int64_t t, const struct ledger_hold *h, size_t nh)
{
	for (size_t j = 0; j < nh; j++)
		if (h[j].lease_starts_usec == t)
			return true;
	return false;
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
		int64_t a = p[i].start_usec, end = p[i].end_usec, left = p[i].micros;

		if (left < 0 || end < a)
			return METER_EINVAL;
		/* Cut where a hold's eligibility changes, each stretch's money
		 * floor(what is left × its time / the time left), as usage is
		 * cut at hours (usage_wide_split); but at a cut where a lease
		 * starts, the time after it takes the floor of its share and
		 * the stretch before it the rest: the hold, at its lease's
		 * worst case rounded up, then takes none of the cut's
		 * rounding. */
		for (;;) {
			int64_t b = ledger_next_cut(a, end, h, nh), part = left;

			if (b < end && ledger_lease_starts(b, h, nh))
				part = left - (int64_t)((__int128)left * (end - b) / (end - a));
			else if (b < end)
				part = (int64_t)((__int128)left * (b - a) / (end - a));

			rc = ledger_spend_part(a, b, part, h, nh, &covered);
			if (rc != METER_OK)
				return rc;
			left -= part;
			if (b >= end)
				break;
			a = b;
		}
	}
	*covered_micros = covered;
	return METER_OK;
}
