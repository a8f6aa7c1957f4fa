/* meter: what the check engine knows of keys, ledger rows and prices from
 * the batches it ran, so that a batch of creates can be decided before the
 * database is asked (meter/checks.c, sql/0017_checks_fast.sql).
 *
 * Nothing here is trusted: the database holds every fast batch to the
 * figures it was decided on, under the ledger rows' locks, and refuses it
 * when they differ. These facts only make it likely that they do not.
 *
 * A key-day row is known as last seen (read under lock, or written by a
 * committed batch) plus what the batches still in flight will add to its
 * held figure: a batch sent while another is in flight is decided on the
 * figures the first one will leave. A row whose fast batches keep meeting
 * other figures (another meterd process deciding on the same key) is left
 * to the classic path for a while. In-memory only, no I/O; thread-safe:
 * every function takes the facts' lock, except the *_locked ones, which
 * the caller calls between check_facts_lock() and check_facts_unlock().
 * Money is µ$, times UTC µs (prices) or CLOCK_MONOTONIC ms (contention). */
#ifndef METER_CHECK_FACTS_H
#define METER_CHECK_FACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "db_checks.h"
#include "ledger.h"
#include "parse.h"
#include "rc.h"

#define CHECK_FACTS_KEYS	 4096  /* keys remembered (a cache: older ones make room) */
#define CHECK_FACTS_ROWS	 16384 /* key-days remembered */
#define CHECK_FACTS_MISSES	 2     /* fast batches in a row that met other figures ... */
#define CHECK_FACTS_CONTENDED_MS 1000  /* ... leave the row to the classic path this long */

struct check_facts;

/* A key as last read: unrevoked, its account, time zone and daily limit. */
struct check_key_fact {
	char account_id[PARSE_ID_MAX + 1];
	char time_zone[PARSE_ID_MAX + 1];
	bool has_limit;
	int64_t limit_micros;
};

/* New, empty facts (*out owned: check_facts_free()). */
METER_MUSTCHECK enum meter_rc check_facts_new(struct check_facts **out);
void check_facts_free(struct check_facts *f);

/* Keys ----------------------------------------------------------------------- */

/* Remembers key_id as k (copied), replacing what was known. */
void check_facts_key_put(struct check_facts *f, const char *key_id, const struct check_key_fact *k);
/* Forgets key_id (revoked, or not found). */
void check_facts_key_forget(struct check_facts *f, const char *key_id);
/* True with *out filled when key_id is known. */
bool check_facts_key_get(struct check_facts *f, const char *key_id, struct check_key_fact *out);

/* Prices ----------------------------------------------------------------------- */

/* Remembers the price-book versions in force from read_usec to until_usec
 * (prices[0..n), oldest first, prices[0] in force at read_usec) and the
 * newest version of the whole book. */
void check_facts_prices_put(struct check_facts *f, const struct db_price_version *prices, int n,
			    int64_t version, int64_t read_usec, int64_t until_usec);
/* The known versions in force at some time in [at_usec, end_usec], oldest
 * first with out[0] in force at at_usec, and the newest version: false
 * when that span is not wholly known. out has room for
 * DB_CHECKS_PRICES_MAX. */
bool check_facts_prices_get(struct check_facts *f, int64_t at_usec, int64_t end_usec,
			    struct db_price_version *out, int *n, int64_t *version);

/* Ledger rows ----------------------------------------------------------------- */

void check_facts_lock(struct check_facts *f);
void check_facts_unlock(struct check_facts *f);

enum check_facts_predict {
	CHECK_FACTS_KNOWN,   /* *out is what to expect */
	CHECK_FACTS_UNKNOWN, /* not known, or contended: the classic path */
	CHECK_FACTS_BUSY,    /* a classic batch is deciding on it: wait for it */
};

/* The figures a batch decided now should expect of a row: as last seen
 * plus the held figure of the fast batches in flight. */
enum check_facts_predict check_facts_row_predict_locked(struct check_facts *f,
							const char *account_id, const char *key_id,
							const char *day, int64_t now_ms,
							struct ledger_day *out);
/* Waits (the lock released meanwhile) until a classic batch ends or
 * until deadline_ms (CLOCK_MONOTONIC): false at the deadline. */
bool check_facts_wait_locked(struct check_facts *f, int64_t deadline_ms);
/* A batch sent with held_delta_micros more on the row (after a known
 * predict under the same lock), under ticket (not 0). The ticket of the
 * batch in flight on the row before it, if any, is added to
 * after[0..*nafter) (once; room for DB_FAST_AFTER_MAX). */
void check_facts_row_reserve_locked(struct check_facts *f, const char *account_id,
				    const char *key_id, const char *day, int64_t held_delta_micros,
				    int32_t ticket, int32_t *after, int *nafter);

/* The batch (ticket) that reserved held_delta_micros on the row is over:
 * committed (the row as seen moves by it; it met the figures it expected)
 * or not. */
void check_facts_row_release(struct check_facts *f, const char *account_id, const char *key_id,
			     const char *day, int64_t held_delta_micros, int32_t ticket,
			     bool committed);
/* A classic batch (decided under the rows' locks, on what it reads) is in
 * flight on the row: fast batches wait for it rather than guess. */
void check_facts_row_classic_begin(struct check_facts *f, const char *account_id,
				   const char *key_id, const char *day);
/* That batch is over; seen (NULL: it did not commit) is the row as it
 * wrote it. */
void check_facts_row_classic_end(struct check_facts *f, const char *account_id, const char *key_id,
				 const char *day, const struct ledger_day *seen);

/* The row as the database has it now (read under its lock, or written by
 * a classic batch that committed). differed: a fast batch expected other
 * figures (counted towards contention, at now_ms). */
void check_facts_row_put(struct check_facts *f, const char *account_id, const char *key_id,
			 const char *day, const struct ledger_day *seen, bool differed,
			 int64_t now_ms);
/* Forgets the row (no such row in the database). */
void check_facts_row_forget(struct check_facts *f, const char *account_id, const char *key_id,
			    const char *day);

#endif
