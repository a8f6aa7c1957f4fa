/* meter: usage arithmetic for sandboxes (DESIGN.md §2-§3).
 *
 * Products of two int64_t values are formed in __int128 (|a × b| < 2^126)
 * and checked against INT64_MAX before they are stored. */
#include "usage.h"

#include <stddef.h>
#include <string.h>

static const char *const usage_state_names[] = {
    [SANDBOX_RUNNING] = "running",
    [SANDBOX_PAUSED] = "paused",
    [SANDBOX_STOPPED] = "stopped",
};

#define USAGE_NSTATES (sizeof(usage_state_names) / sizeof(usage_state_names[0]))

/* An out-of-range value (never produced by sandbox_state_parse) is "unknown". */
const char *sandbox_state_name(enum sandbox_state s)
{
	if ((unsigned)s >= USAGE_NSTATES)
		return "unknown";
	return usage_state_names[s];
}

enum meter_rc sandbox_state_parse(const char *s, enum sandbox_state *out)
{
	if (!s || !out)
		return METER_EINVAL;
	for (size_t i = 0; i < USAGE_NSTATES; i++) {
		if (strcmp(s, usage_state_names[i]) == 0) {
			*out = (enum sandbox_state)i;
			return METER_OK;
		}
	}
	return METER_EINVAL;
}

/* *out = a × b for a, b >= 0; METER_ERANGE when it does not fit int64_t. */
static enum meter_rc usage_mul(int64_t a, int64_t b, int64_t *out)
{
	__int128 v = (__int128)a * (__int128)b;

	if (v > INT64_MAX)
		return METER_ERANGE;
	*out = (int64_t)v;
	return METER_OK;
}

static bool usage_sample_ok(const struct usage_sample *s)
{
	return s->at_usec >= 0 && (unsigned)s->state < USAGE_NSTATES && s->cpu_usec >= 0 &&
	       s->memory_mib >= 0 && s->storage_mib >= 0 && s->vcpus >= 1;
}

/* CPU µs of prev → cur (cur not before prev, both valid): the counter's
 * rise, or its value after a reset, capped at vcpus × Δwall. In µs, not
 * millicore-µs, so it never overflows. */
static int64_t usage_cpu_step(const struct usage_sample *prev, const struct usage_sample *cur,
			      unsigned *fl)
{
	int64_t dwall = cur->at_usec - prev->at_usec, dcpu;
	__int128 cap;

	if (cur->cpu_usec >= prev->cpu_usec) {
		dcpu = cur->cpu_usec - prev->cpu_usec;
	} else {
		dcpu = cur->cpu_usec;
		*fl |= USAGE_COUNTER_RESET;
	}
	cap = (__int128)prev->vcpus * (__int128)dwall;
	if ((__int128)dcpu > cap) {
		dcpu = (int64_t)cap; /* cap < dcpu <= INT64_MAX */
		*fl |= USAGE_CPU_CAPPED;
	}
	return dcpu;
}

enum meter_rc usage_cpu_delta(const struct usage_sample *prev, const struct usage_sample *cur,
			      int64_t *cpu_usec, unsigned *flags)
{
	unsigned fl = 0;
	int64_t dcpu;

	if (!prev || !cur || !cpu_usec)
		return METER_EINVAL;
	if (!usage_sample_ok(prev) || !usage_sample_ok(cur) || cur->at_usec < prev->at_usec)
		return METER_EINVAL;
	dcpu = usage_cpu_step(prev, cur, &fl);
	*cpu_usec = dcpu;
	if (flags)
		*flags = fl;
	return METER_OK;
}

void usage_wide_cpu(struct usage_wide *q, __int128 used_mcus, int32_t vcpus,
		    int64_t floor_millicores, unsigned *flags)
{
	/* Products of values below 2^63 and a constant: below 2^126. */
	__int128 cap = (__int128)vcpus * q->running_usec * MONEY_MILLICORES_PER_VCPU;
	__int128 floor_q = (__int128)floor_millicores * q->running_usec;

	if (used_mcus > cap) {
		used_mcus = cap;
		if (flags)
			*flags |= USAGE_CPU_CAPPED;
	}
	q->cpu_used_mcus = used_mcus;
	q->cpu_billed_mcus = used_mcus > floor_q ? used_mcus : floor_q;
}

/* Decisions the header leaves open:
 * - vcpus, memory_mib and storage_mib come from prev (the interval is billed
 *   by its first sample); cur only supplies its time and CPU counter.
 * - The CPU counter is examined in every state, so USAGE_COUNTER_RESET and
 *   USAGE_CPU_CAPPED are reported even for a paused or stopped interval (and
 *   a zero-length one, whose cap is 0), but CPU is only counted while running.
 * - flags may be NULL. On error *out and *flags are untouched. */
enum meter_rc usage_interval_wide(const struct usage_sample *prev, const struct usage_sample *cur,
				  int64_t floor_millicores, struct usage_wide *out, unsigned *flags)
{
	struct usage_wide q;
	unsigned fl = 0;
	__int128 dwall;

	if (!prev || !cur || !out || floor_millicores < 0)
		return METER_EINVAL;
	if (!usage_sample_ok(prev) || !usage_sample_ok(cur) || cur->at_usec < prev->at_usec)
		return METER_EINVAL;
	memset(&q, 0, sizeof(q));
	dwall = cur->at_usec - prev->at_usec; /* both >= 0: cannot overflow */
	q.cpu_used_mcus = (__int128)usage_cpu_step(prev, cur, &fl) * MONEY_MILLICORES_PER_VCPU;

	/* Every product is of two int64_t values >= 0: below 2^126. */
	switch (prev->state) {
	case SANDBOX_RUNNING:
		q.running_usec = dwall;
		q.memory_mibus = prev->memory_mib * dwall;
		usage_wide_cpu(&q, q.cpu_used_mcus, prev->vcpus, floor_millicores, &fl);
		break;
	case SANDBOX_PAUSED:
		q.cpu_used_mcus = 0;
		q.paused_usec = dwall;
		q.storage_mibus = prev->storage_mib * dwall;
		break;
	case SANDBOX_STOPPED:
		q.cpu_used_mcus = 0;
		break;
	}
	*out = q;
	if (flags)
		*flags = fl;
	return METER_OK;
}

/* *out = v narrowed to int64_t; false when it does not fit. */
static bool usage_narrow(__int128 v, int64_t *out)
{
	if (v > INT64_MAX || v < INT64_MIN)
		return false;
	*out = (int64_t)v;
	return true;
}

/* The wide quantities narrowed field by field; METER_ERANGE when one does
 * not fit (out untouched). */
static enum meter_rc usage_wide_narrow(const struct usage_wide *w, struct usage_qty *out)
{
	struct usage_qty q;

	if (!usage_narrow(w->running_usec, &q.running_usec) ||
	    !usage_narrow(w->paused_usec, &q.paused_usec) ||
	    !usage_narrow(w->cpu_used_mcus, &q.cpu_used_mcus) ||
	    !usage_narrow(w->cpu_billed_mcus, &q.cpu_billed_mcus) ||
	    !usage_narrow(w->memory_mibus, &q.memory_mibus) ||
	    !usage_narrow(w->storage_mibus, &q.storage_mibus))
		return METER_ERANGE;
	*out = q;
	return METER_OK;
}

enum meter_rc usage_interval(const struct usage_sample *prev, const struct usage_sample *cur,
			     int64_t floor_millicores, struct usage_qty *out, unsigned *flags)
{
	struct usage_wide w;
	struct usage_qty q;
	unsigned fl = 0;
	enum meter_rc rc;

	if (!out)
		return METER_EINVAL;
	rc = usage_interval_wide(prev, cur, floor_millicores, &w, &fl);
	if (rc == METER_OK)
		rc = usage_wide_narrow(&w, &q);
	if (rc != METER_OK)
		return rc;
	*out = q;
	if (flags)
		*flags = fl;
	return METER_OK;
}

enum meter_rc usage_qty_add(struct usage_qty *acc, const struct usage_qty *q)
{
	struct usage_qty s;

	if (!acc || !q)
		return METER_EINVAL;
	if (__builtin_add_overflow(acc->running_usec, q->running_usec, &s.running_usec) ||
	    __builtin_add_overflow(acc->paused_usec, q->paused_usec, &s.paused_usec) ||
	    __builtin_add_overflow(acc->cpu_used_mcus, q->cpu_used_mcus, &s.cpu_used_mcus) ||
	    __builtin_add_overflow(acc->cpu_billed_mcus, q->cpu_billed_mcus, &s.cpu_billed_mcus) ||
	    __builtin_add_overflow(acc->memory_mibus, q->memory_mibus, &s.memory_mibus) ||
	    __builtin_add_overflow(acc->storage_mibus, q->storage_mibus, &s.storage_mibus))
		return METER_ERANGE;
	*acc = s;
	return METER_OK;
}

/* first = floor(field × part / whole), rest = field − first, in 128 bits
 * (field >= 0, 0 <= part <= whole). Formed as q × part + r × part / whole
 * with field = q × whole + r: q × part <= field and r × part < 2^126, so
 * no step overflows, whatever the field. */
static __int128 usage_split_wide_field(__int128 *field, int64_t part, int64_t whole)
{
	__int128 f = 0;

	if (whole > 0)
		f = *field / whole * part + *field % whole * part / whole;
	*field -= f;
	return f;
}

enum meter_rc usage_wide_split(struct usage_wide *q, int64_t part_usec, int64_t whole_usec,
			       struct usage_qty *first)
{
	struct usage_wide f, r;

	if (!q || !first || part_usec < 0 || part_usec > whole_usec)
		return METER_EINVAL;
	if (q->running_usec < 0 || q->paused_usec < 0 || q->cpu_used_mcus < 0 ||
	    q->cpu_billed_mcus < 0 || q->memory_mibus < 0 || q->storage_mibus < 0)
		return METER_EINVAL;
	r = *q;
	f.running_usec = usage_split_wide_field(&r.running_usec, part_usec, whole_usec);
	f.paused_usec = usage_split_wide_field(&r.paused_usec, part_usec, whole_usec);
	f.cpu_used_mcus = usage_split_wide_field(&r.cpu_used_mcus, part_usec, whole_usec);
	f.cpu_billed_mcus = usage_split_wide_field(&r.cpu_billed_mcus, part_usec, whole_usec);
	f.memory_mibus = usage_split_wide_field(&r.memory_mibus, part_usec, whole_usec);
	f.storage_mibus = usage_split_wide_field(&r.storage_mibus, part_usec, whole_usec);
	if (usage_wide_narrow(&f, first) != METER_OK)
		return METER_ERANGE;
	*q = r;
	return METER_OK;
}

/* METER_EINVAL unless 0 <= part_usec <= whole_usec and every field of q is
 * >= 0. whole_usec == 0 (so part_usec == 0) puts everything in *rest.
 * first and rest may alias q; on error nothing is written. The split of
 * usage_wide_split: every int64_t part of an int64_t field fits. */
enum meter_rc usage_qty_split(const struct usage_qty *q, int64_t part_usec, int64_t whole_usec,
			      struct usage_qty *first, struct usage_qty *rest)
{
	struct usage_wide w;
	struct usage_qty f, r;
	enum meter_rc rc;

	if (!q || !first || !rest)
		return METER_EINVAL;
	w = (struct usage_wide){q->running_usec,    q->paused_usec,  q->cpu_used_mcus,
				q->cpu_billed_mcus, q->memory_mibus, q->storage_mibus};
	rc = usage_wide_split(&w, part_usec, whole_usec, &f);
	if (rc == METER_OK)
		rc = usage_wide_narrow(&w, &r);
	if (rc != METER_OK)
		return rc;
	*first = f;
	*rest = r;
	return METER_OK;
}

/* The three components are computed first and committed together: on any
 * error neither *carry nor *out changes. */
enum meter_rc usage_price(const struct price_rates *rates, struct usage_carry *carry,
			  const struct usage_qty *q, struct usage_cost *out)
{
	struct usage_cost c;
	struct usage_carry next;
	enum meter_rc rc;

	if (!rates || !q || !out)
		return METER_EINVAL;
	if (carry) {
		next = *carry;
		rc = money_accrue(MONEY_CPU, rates, &next.cpu, q->cpu_billed_mcus, &c.cpu_micros);
		if (rc == METER_OK)
			rc = money_accrue(MONEY_MEMORY, rates, &next.memory, q->memory_mibus,
					  &c.memory_micros);
		if (rc == METER_OK)
			rc = money_accrue(MONEY_STORAGE, rates, &next.storage, q->storage_mibus,
					  &c.storage_micros);
	} else {
		rc = money_price(MONEY_CPU, rates, q->cpu_billed_mcus, &c.cpu_micros);
		if (rc == METER_OK)
			rc = money_price(MONEY_MEMORY, rates, q->memory_mibus, &c.memory_micros);
		if (rc == METER_OK)
			rc = money_price(MONEY_STORAGE, rates, q->storage_mibus, &c.storage_micros);
	}
	if (rc == METER_OK)
		rc = money_add(c.cpu_micros, c.memory_micros, &c.total_micros);
	if (rc == METER_OK)
		rc = money_add(c.total_micros, c.storage_micros, &c.total_micros);
	if (rc != METER_OK)
		return rc;
	if (carry)
		*carry = next;
	*out = c;
	return METER_OK;
}

/* The CPU term is max(vcpus × 1000, floor_millicores) × lease_usec: with any
 * sane book the floor is far below one vCPU, but if an operator set it higher
 * the floor is what would be billed, and a worst case must not be beaten.
 * Each component is rounded up, which also bounds what money_accrue can
 * charge for the same quantity from any carry. */
enum meter_rc usage_lease_max_cost_usec(const struct price_rates *rates, int64_t vcpus,
					int64_t memory_mib, int64_t lease_usec, int64_t *micros)
{
	int64_t mc, q_cpu, q_mem, cpu_micros, mem_micros, total;
	enum meter_rc rc;

	if (!rates || !micros || vcpus < 1 || memory_mib < 0 || lease_usec < 0 ||
	    rates->floor_millicores < 0)
		return METER_EINVAL;
	rc = usage_mul(vcpus, MONEY_MILLICORES_PER_VCPU, &mc);
	if (rc != METER_OK)
		return rc;
	/* An operator's floor above one vCPU still bounds the worst case. */
	if (rates->floor_millicores > mc)
		mc = rates->floor_millicores;
	rc = usage_mul(mc, lease_usec, &q_cpu);
	if (rc != METER_OK)
		return rc;
	rc = usage_mul(memory_mib, lease_usec, &q_mem);
	if (rc != METER_OK)
		return rc;
	rc = money_price_up(MONEY_CPU, rates, q_cpu, &cpu_micros);
	if (rc != METER_OK)
		return rc;
	rc = money_price_up(MONEY_MEMORY, rates, q_mem, &mem_micros);
	if (rc != METER_OK)
		return rc;
	rc = money_add(cpu_micros, mem_micros, &total);
	if (rc != METER_OK)
		return rc;
	*micros = total;
	return METER_OK;
}

enum meter_rc usage_lease_max_cost(const struct price_rates *rates, int64_t vcpus,
				   int64_t memory_mib, int64_t lease_seconds, int64_t *micros)
{
	int64_t lease_usec;
	enum meter_rc rc;

	if (lease_seconds < 0)
		return METER_EINVAL;
	rc = usage_mul(lease_seconds, INT64_C(1000000), &lease_usec);
	if (rc != METER_OK)
		return rc;
	return usage_lease_max_cost_usec(rates, vcpus, memory_mib, lease_usec, micros);
}
