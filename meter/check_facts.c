/* meter: the check engine's facts (see check_facts.h). */
#include "check_facts.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hash.h"

#define ROW_WAYS 4 /* a row lives in one of this many slots of its set */

struct key_slot {
	char key_id[PARSE_ID_MAX + 1]; /* "" = empty */
	struct check_key_fact fact;
};

struct row_slot {
	char account_id[PARSE_ID_MAX + 1]; /* "" = empty */
	char key_id[PARSE_ID_MAX + 1];
	char day[11];
	bool seen_valid;	 /* false: only in-flight batches keep the slot */
	struct ledger_day seen;	 /* as the database last had it */
	int64_t pending_held;	 /* the in-flight batches' held, µ$ */
	int inflight;		 /* fast batches in flight on the row */
	int classic;		 /* classic batches in flight on it */
	int32_t last_ticket;	 /* the fast batch sent last on it, while in flight */
	int misses;		 /* fast batches in a row that met other figures */
	int64_t contended_until; /* CLOCK_MONOTONIC ms */
	uint64_t used;		 /* last use, for eviction */
};

struct check_facts {
	pthread_mutex_t mu;
	pthread_cond_t classic_done; /* a classic batch ended */
	uint64_t tick;
	struct key_slot keys[CHECK_FACTS_KEYS];
	struct row_slot rows[CHECK_FACTS_ROWS];
	bool prices_valid;
	struct db_price_version prices[DB_CHECKS_PRICES_MAX];
	int nprices;
	int64_t price_version;
	int64_t prices_read_usec, prices_until_usec;
};

/* FNV-1a over the strings, each with its terminator (which parts it from
 * the next). */
static uint64_t hash_of(const char *a, const char *b, const char *c)
{
	const char *parts[3] = {a, b, c};
	uint64_t h = HASH_START;

	for (int i = 0; i < 3; i++)
		if (parts[i])
			h = hash_byte(hash_str(h, parts[i]), 0);
	return h;
}

enum meter_rc check_facts_new(struct check_facts **out)
{
	struct check_facts *f = calloc(1, sizeof(*f));

	if (!f)
		return METER_ENOMEM;
	if (pthread_mutex_init(&f->mu, NULL) != 0) {
		free(f);
		return METER_ENOMEM;
	}
	if (clock_mono_cond_init(&f->classic_done) != 0) {
		pthread_mutex_destroy(&f->mu);
		free(f);
		return METER_ENOMEM;
	}
	*out = f;
	return METER_OK;
}

void check_facts_free(struct check_facts *f)
{
	if (!f)
		return;
	pthread_cond_destroy(&f->classic_done);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

void check_facts_lock(struct check_facts *f)
{
	pthread_mutex_lock(&f->mu);
}

void check_facts_unlock(struct check_facts *f)
{
	pthread_mutex_unlock(&f->mu);
}

/* Keys ----------------------------------------------------------------------- */

static struct key_slot *key_slot(struct check_facts *f, const char *key_id)
{
	return &f->keys[hash_of(key_id, NULL, NULL) % CHECK_FACTS_KEYS];
}

void check_facts_key_put(struct check_facts *f, const char *key_id, const struct check_key_fact *k)
{
	struct key_slot *s;

	if (strlen(key_id) > PARSE_ID_MAX)
		return;
	pthread_mutex_lock(&f->mu);
	s = key_slot(f, key_id);
	memcpy(s->key_id, key_id, strlen(key_id) + 1);
	s->fact = *k;
	pthread_mutex_unlock(&f->mu);
}

void check_facts_key_forget(struct check_facts *f, const char *key_id)
{
	struct key_slot *s;

	pthread_mutex_lock(&f->mu);
	s = key_slot(f, key_id);
	if (strcmp(s->key_id, key_id) == 0)
		s->key_id[0] = '\0';
	pthread_mutex_unlock(&f->mu);
}

bool check_facts_key_get(struct check_facts *f, const char *key_id, struct check_key_fact *out)
{
	struct key_slot *s;
	bool found;

	pthread_mutex_lock(&f->mu);
	s = key_slot(f, key_id);
	found = s->key_id[0] && strcmp(s->key_id, key_id) == 0;
	if (found)
		*out = s->fact;
	pthread_mutex_unlock(&f->mu);
	return found;
}

/* Prices ----------------------------------------------------------------------- */

void check_facts_prices_put(struct check_facts *f, const struct db_price_version *prices, int n,
			    int64_t version, int64_t read_usec, int64_t until_usec)
{
	if (n < 1 || n > DB_CHECKS_PRICES_MAX)
		return;
	pthread_mutex_lock(&f->mu);
	memcpy(f->prices, prices, (size_t)n * sizeof(*prices));
	f->nprices = n;
	f->price_version = version;
	f->prices_read_usec = read_usec;
	f->prices_until_usec = until_usec;
	f->prices_valid = true;
	pthread_mutex_unlock(&f->mu);
}

bool check_facts_prices_get(struct check_facts *f, int64_t at_usec, int64_t end_usec,
			    struct db_price_version *out, int *n, int64_t *version)
{
	bool ok = false;
	int first = 0;

	pthread_mutex_lock(&f->mu);
	if (!f->prices_valid || at_usec < f->prices_read_usec || end_usec > f->prices_until_usec)
		goto out;
	/* The version in force at at_usec: the last one from at or before it. */
	for (int i = 1; i < f->nprices; i++)
		if (f->prices[i].from_usec <= at_usec)
			first = i;
	*n = 0;
	for (int i = first; i < f->nprices && (i == first || f->prices[i].from_usec <= end_usec);
	     i++)
		out[(*n)++] = f->prices[i];
	*version = f->price_version;
	ok = true;
out:
	pthread_mutex_unlock(&f->mu);
	return ok;
}

/* Ledger rows ----------------------------------------------------------------- */

static bool row_is(const struct row_slot *s, const char *account_id, const char *key_id,
		   const char *day)
{
	return s->account_id[0] && strcmp(s->day, day) == 0 && strcmp(s->key_id, key_id) == 0 &&
	       strcmp(s->account_id, account_id) == 0;
}

/* The row's slot, or NULL. With make, a slot is taken for it when missing:
 * an empty one of its set, else the least recently used one that no batch
 * is in flight on (NULL when every one is). */
static struct row_slot *row_slot(struct check_facts *f, const char *account_id, const char *key_id,
				 const char *day, bool make)
{
	size_t set =
	    (size_t)(hash_of(account_id, key_id, day) % (CHECK_FACTS_ROWS / ROW_WAYS)) * ROW_WAYS;
	struct row_slot *victim = NULL;

	if (strlen(account_id) > PARSE_ID_MAX || strlen(key_id) > PARSE_ID_MAX || strlen(day) != 10)
		return NULL;
	for (size_t i = set; i < set + ROW_WAYS; i++) {
		struct row_slot *s = &f->rows[i];

		if (row_is(s, account_id, key_id, day)) {
			s->used = ++f->tick;
			return s;
		}
		if (!make || s->inflight > 0 || s->classic > 0)
			continue;
		if (!victim || !s->account_id[0] ||
		    (victim->account_id[0] && s->used < victim->used))
			victim = s;
	}
	if (!victim)
		return NULL;
	memset(victim, 0, sizeof(*victim));
	memcpy(victim->account_id, account_id, strlen(account_id) + 1);
	memcpy(victim->key_id, key_id, strlen(key_id) + 1);
	memcpy(victim->day, day, 11);
	victim->used = ++f->tick;
	return victim;
}

enum check_facts_predict check_facts_row_predict_locked(struct check_facts *f,
							const char *account_id, const char *key_id,
							const char *day, int64_t now_ms,
							struct ledger_day *out)
{
	struct row_slot *s = row_slot(f, account_id, key_id, day, false);

	if (s && s->classic > 0)
		return CHECK_FACTS_BUSY;
	if (!s || !s->seen_valid || now_ms < s->contended_until)
		return CHECK_FACTS_UNKNOWN;
	*out = s->seen;
	out->held_micros += s->pending_held;
	return CHECK_FACTS_KNOWN;
}

bool check_facts_wait_locked(struct check_facts *f, int64_t deadline_ms)
{
	struct timespec until = {.tv_sec = deadline_ms / 1000,
				 .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};

	return pthread_cond_timedwait(&f->classic_done, &f->mu, &until) == 0;
}

void check_facts_row_classic_begin(struct check_facts *f, const char *account_id,
				   const char *key_id, const char *day)
{
	struct row_slot *s;

	pthread_mutex_lock(&f->mu);
	s = row_slot(f, account_id, key_id, day, true);
	if (s)
		s->classic++;
	pthread_mutex_unlock(&f->mu);
}

void check_facts_row_classic_end(struct check_facts *f, const char *account_id, const char *key_id,
				 const char *day, const struct ledger_day *seen)
{
	struct row_slot *s;

	pthread_mutex_lock(&f->mu);
	s = row_slot(f, account_id, key_id, day, false);
	if (s && s->classic > 0) {
		s->classic--;
		if (seen) {
			s->seen = *seen;
			s->seen_valid = true;
		}
	}
	pthread_cond_broadcast(&f->classic_done);
	pthread_mutex_unlock(&f->mu);
}

void check_facts_row_reserve_locked(struct check_facts *f, const char *account_id,
				    const char *key_id, const char *day, int64_t held_delta_micros,
				    int32_t ticket, int32_t *after, int *nafter)
{
	struct row_slot *s = row_slot(f, account_id, key_id, day, false);
	bool listed = false;

	if (!s)
		return;
	s->pending_held += held_delta_micros;
	s->inflight++;
	if (s->last_ticket != 0 && s->last_ticket != ticket) {
		for (int i = 0; i < *nafter && !listed; i++)
			listed = after[i] == s->last_ticket;
		if (!listed && *nafter < DB_FAST_AFTER_MAX)
			after[(*nafter)++] = s->last_ticket;
	}
	s->last_ticket = ticket;
}

void check_facts_row_release(struct check_facts *f, const char *account_id, const char *key_id,
			     const char *day, int64_t held_delta_micros, int32_t ticket,
			     bool committed)
{
	struct row_slot *s;

	pthread_mutex_lock(&f->mu);
	s = row_slot(f, account_id, key_id, day, false);
	if (s && s->inflight > 0) {
		s->pending_held -= held_delta_micros;
		s->inflight--;
		if (s->last_ticket == ticket)
			s->last_ticket = 0;
		if (committed) {
			s->seen.held_micros += held_delta_micros;
			s->misses = 0;
		}
	}
	pthread_mutex_unlock(&f->mu);
}

void check_facts_row_put(struct check_facts *f, const char *account_id, const char *key_id,
			 const char *day, const struct ledger_day *seen, bool differed,
			 int64_t now_ms)
{
	struct row_slot *s;

	pthread_mutex_lock(&f->mu);
	s = row_slot(f, account_id, key_id, day, true);
	if (s) {
		/* The row as already seen, while batches are in flight on it:
		 * a later batch's lock was granted before an earlier one's.
		 * Nobody else wrote the row. */
		bool raced = differed && s->seen_valid && s->inflight > 0 &&
			     s->seen.spent_micros == seen->spent_micros &&
			     s->seen.held_micros == seen->held_micros &&
			     s->seen.has_limit == seen->has_limit &&
			     s->seen.limit_micros == seen->limit_micros;

		s->seen = *seen;
		s->seen_valid = true;
		if (differed && !raced && ++s->misses >= CHECK_FACTS_MISSES) {
			s->contended_until = now_ms + CHECK_FACTS_CONTENDED_MS;
			s->misses = 0;
		}
	}
	pthread_mutex_unlock(&f->mu);
}

void check_facts_row_forget(struct check_facts *f, const char *account_id, const char *key_id,
			    const char *day)
{
	struct row_slot *s;

	pthread_mutex_lock(&f->mu);
	s = row_slot(f, account_id, key_id, day, false);
	if (s)
		s->seen_valid = false;
	pthread_mutex_unlock(&f->mu);
}
