/* meter: the check engine (DESIGN.md §4): create and wake checks decided in
 * batches, each batch one durable transaction ("group commit"), and the
 * sweeper that releases holds at lease end.
 *
 * A caller (the HTTP handler) submits a check with a completion callback and
 * parks its connection; a batcher thread with its own PostgreSQL connection
 * takes everything queued (up to batch_max), and in ONE transaction:
 *   1. reads the keys, sandboxes, stored idempotency answers and prices;
 *   2. creates and locks the key_day_ledger rows of every key-day involved,
 *      in (account_id, key_id, day) order (the lock order of sql/0002);
 *   3. decides each check in arrival order with the pure rules of ledger.h;
 *   4. writes holds, ledger, sandboxes and idempotency rows in one statement
 *      and COMMITs with synchronous_commit on;
 * and only then calls every callback. Row locks make this exact with any
 * number of meterd processes on one database. When the database cannot be
 * reached, every check is answered 503 metering_unavailable (fail closed)
 * and the engine reconnects with backoff by itself.
 *
 * Answers are JSON texts with the status the API sends:
 *   200 {allowed:true, hold_micros, lease_max_cost_micros, day,
 *        day_spent_micros, day_held_micros, daily_limit_micros, parts, ...}
 *   402 spending_limit_reached, 402 max_cost_exceeded (nothing written)
 *   404 key_not_found, 404 sandbox_not_found, 403 key_revoked,
 *   403 read_only_key (the key, or the woken sandbox's, is read_only),
 *   409 idempotency_conflict, 409 sandbox_exists, 409 sandbox_stopped,
 *   503 metering_unavailable.
 * Only allowed answers are stored under the idempotency key (default: the
 * sandbox id, per operation) and replayed; a refusal changed nothing and a
 * retry is decided afresh. A stored answer to a wake under the default key
 * is replayed only while the sandbox still runs under the lease it granted. */
#ifndef METER_CHECKS_H
#define METER_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"

#define CHECKS_VCPUS_MAX	 1024
#define CHECKS_MEMORY_MIB_MAX	 16777216 /* 16 TiB */
#define CHECKS_LEASE_SECONDS_MAX 86400	  /* one day */
#define CHECKS_BATCH_MAX_DEFAULT 256
#define CHECKS_BATCHERS_DEFAULT	 1

enum checks_op {
	CHECKS_CREATE,
	CHECKS_WAKE,
};

/* A validated check (the HTTP layer validates; the engine trusts these
 * ranges: ids per parse_is_id, vcpus 1..CHECKS_VCPUS_MAX, memory_mib
 * 1..CHECKS_MEMORY_MIB_MAX, lease_seconds 1..CHECKS_LEASE_SECONDS_MAX). */
struct checks_request {
	enum checks_op op;
	char key_id[PARSE_ID_MAX + 1]; /* create only */
	char sandbox_id[PARSE_ID_MAX + 1];
	char idempotency_key[PARSE_ID_MAX + 1]; /* "" = the default (the sandbox id) */
	int64_t vcpus;				/* create only */
	int64_t memory_mib;			/* create only */
	int64_t lease_seconds;
	bool has_max_cost;	 /* create only */
	int64_t max_cost_micros; /* >= 0 when has_max_cost */
};

/* An answer; body is JSON text, borrowed for the duration of the callback. */
struct checks_answer {
	unsigned status;
	const char *body;
	bool replayed; /* the stored first answer to the same idempotency key */
};

/* Called exactly once per submitted check, from the batcher thread (or from
 * the submitting thread when the check is refused at once). */
typedef void (*checks_done_fn)(void *arg, const struct checks_answer *answer);

struct checks_options {
	const char *database_url; /* borrowed for the engine's life */
	int64_t statement_timeout_ms;
	int batch_max;		       /* checks decided in one transaction */
	int batchers;		       /* batches in flight at once, each on its own connection */
	int64_t clock_offset_s;	       /* TEST ONLY: shifts the engine's clock */
	bool sweeper;		       /* run the lease-end sweeper thread */
	int64_t lease_grace_s;	       /* run past lease end this long: hold_outrun; and
					* a tail's hold kept this long with no sample coming */
	int64_t sample_retention_days; /* the sweeper drops older samples; 0: never */
};

struct checks_engine;

/* Starts the batcher (and sweeper) threads. Nothing is connected yet: the
 * first batch connects. On METER_OK *out is new; stop it with
 * checks_engine_stop(). */
METER_MUSTCHECK enum meter_rc checks_engine_start(const struct checks_options *opt,
						  struct checks_engine **out);

/* Queues rq (copied) for the next batch; done(arg, answer) follows. After
 * checks_engine_stop() began, or while the database is known down and not
 * due for another attempt, done is called at once with a 503. */
void checks_submit(struct checks_engine *e, const struct checks_request *rq, checks_done_fn done,
		   void *arg);

/* Stops taking checks, finishes the batch in flight, answers every queued
 * check 503 metering_unavailable and joins the threads. Every callback has
 * returned when this returns; later submits are answered 503 at once, so
 * the HTTP server may go on running until it is stopped. NULL is fine. */
void checks_engine_stop(struct checks_engine *e);

/* Frees a stopped engine (NULL is fine). */
void checks_engine_free(struct checks_engine *e);

/* Another connection of the process has reached the database (GET
 * /readyz): an engine waiting out its backoff connects now (an idle
 * batcher) or at the next check instead of refusing it, so a process that
 * says it is ready decides checks. Without it, an idle batcher tries again
 * when the backoff ends, checks or none. NULL is fine. */
void checks_engine_db_back(struct checks_engine *e);

/* The engine's last attempt to reach the database failed, and checks
 * fail closed until one works (its own connection: the request pool may
 * reach the database meanwhile). NULL: false. */
bool checks_engine_db_down(struct checks_engine *e);

/* When (clock_mono_ms) the engine last connected to the database, or 0
 * when it has not yet or has lost the database since. NULL: 0. */
int64_t checks_engine_connected_ms(struct checks_engine *e);

/* The lease_grace_s in force on the database (sql/0063): the largest of
 * the running processes', as the sweeper last read it, and the engine's
 * own until it has. NULL: own. */
int64_t checks_engine_grace_s(struct checks_engine *e, int64_t own);

/* The engine's clock: UTC µs since the epoch, shifted by clock_offset_s. */
int64_t checks_now_usec(const struct checks_engine *e);

/* The same clock without an engine: UTC µs shifted by clock_offset_s. */
int64_t checks_clock_usec(int64_t clock_offset_s);

#endif
