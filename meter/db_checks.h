/* meter: the SQL of the check engine (meter/checks.c), of lifecycle events
 * and of the lease-end sweeper. The SQL text is in db_checks.c; the
 * functions it calls are in sql/0005_checks.sql (meter_checks_apply as
 * sql/0011_checks_races.sql made it again).
 *
 * The engine's connection is its own (not the pool's): db_checks_session()
 * sets it up and prepares the statements once. A batch is:
 *   db_checks_read()    BEGIN, then what the batch needs to know, in one
 *                       round trip (pipeline): keys, sandboxes, stored
 *                       idempotency answers, price-book versions;
 *   db_checks_days()    (rarely) the day starts of a time zone;
 *   db_checks_lock()    create and lock the key_day_ledger rows;
 *   db_checks_apply()   every write and COMMIT, in one round trip.
 * Any failure leaves the transaction to db_checks_rollback(). Times are UTC
 * µs since the epoch; money is µ$. */
#ifndef METER_DB_CHECKS_H
#define METER_DB_CHECKS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db_util.h"
#include "ledger.h"
#include "money.h"
#include "parse.h"
#include "rc.h"
#include "sample.h"

#define DB_CHECKS_SQLSTATE_CONFLICT "MTR01" /* a row claimed concurrently: redo */
#define DB_CHECKS_PRICES_MAX	    64	    /* versions a check reads (db_checks.c) */

/* One check as the batch asks about it. */
struct db_check_in {
	bool wake;	    /* false: create */
	const char *key_id; /* create: the key asked for; wake: ignored */
	const char *sandbox_id;
	const char *idem; /* idempotency key (the default already applied) */
};

/* What the database knows about one check. */
struct db_check_read {
	/* The sandbox named by the check, if it exists. */
	bool sb_exists;
	char sb_account[PARSE_ID_MAX + 1];
	bool sb_has_key;
	int64_t sb_vcpus;
	int64_t sb_memory_mib;
	char sb_state[8];
	/* The key: create's key_id, or the sandbox's key for a wake. */
	bool key_exists;
	bool key_revoked;
	bool key_read_only; /* role read_only: it creates and wakes nothing */
	char account_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1];
	bool has_limit;
	int64_t limit_micros;
	char time_zone[PARSE_ID_MAX + 1];
	/* The stored first answer under (account, operation, idempotency key). */
	bool idem_exists;
	bool idem_stale;    /* a default wake key whose lease is over */
	char idem_xmin[16]; /* the row version read (its xmin) */
	char idem_sha_hex[65];
	int idem_status;
	char *idem_response; /* owned (free()), NULL when none */
};

/* Frees what rows[0..n) own. */
void db_check_read_release(struct db_check_read *rows, size_t n);

/* A price-book version in effect at some time during the batch's leases. */
struct db_price_version {
	int64_t from_usec; /* effective from */
	struct price_rates rates;
};

/* Sets up a fresh engine connection: synchronous_commit on, statement
 * timeout, prepared statements. */
METER_MUSTCHECK enum meter_rc db_checks_session(PGconn *conn, int64_t statement_timeout_ms);

/* BEGIN and the reads of a batch of n checks. rows[0..n) are filled (release
 * them with db_check_read_release even on failure). prices gets the
 * versions effective from the one in force at now_usec to max_end_usec,
 * oldest first (*nprices >= 1 on METER_OK), and *price_version the newest
 * version of the whole price book. deadline_ms: CLOCK_MONOTONIC
 * ms after which the server is given up on (METER_EIO, connection bad). */
METER_MUSTCHECK enum meter_rc
db_checks_read(PGconn *conn, const struct db_check_in *in, size_t n, int64_t now_usec,
	       int64_t max_end_usec, struct db_check_read *rows, struct db_price_version *prices,
	       int *nprices, int64_t *price_version, int64_t deadline_ms, char *sqlstate);

/* The key's day of time zone tz at at_usec and the next LEDGER_BOUNDS - 1
 * days: days[i] ("YYYY-MM-DD") and their starts bounds[i] (UTC µs). */
METER_MUSTCHECK enum meter_rc db_checks_days(PGconn *conn, const char *tz, int64_t at_usec,
					     char days[][11], int64_t *bounds, int64_t deadline_ms,
					     char *sqlstate);

/* One key-day of the ledger. */
struct db_ledger_row {
	const char *account_id; /* in: borrowed */
	const char *key_id;	/* in: borrowed */
	const char *day;	/* in: "YYYY-MM-DD", borrowed */
	bool has_limit;		/* in: the key's limit as read; out: the current one */
	int64_t limit_micros;
	const char *time_zone;	 /* in: the key's zone as read, borrowed */
	bool found;		 /* out: locked and read */
	struct ledger_day state; /* out: spent and held as stored, the key's limit */
};

/* Creates the missing rows[0..n) and locks them all in (account, key, day)
 * order, filling the out fields, then reads the keys again (a statement
 * after the locks, in the same round trip): the current limit applies,
 * and a key whose time zone is not the one read (a change committed while
 * the lock was awaited: PUT .../limits holds the old zone's rows until it
 * commits) fails the batch with DB_CHECKS_SQLSTATE_CONFLICT, so it is read
 * and decided again on the new zone's days. rows must be distinct. */
METER_MUSTCHECK enum meter_rc db_checks_lock(PGconn *conn, struct db_ledger_row *rows, size_t n,
					     int64_t deadline_ms, char *sqlstate);

/* The element types of the engine's array parameters. */
enum db_arr_type { DB_ARR_TEXT = 0, DB_ARR_INT8, DB_ARR_INT4, DB_ARR_DATE, DB_ARR_TIMESTAMPTZ };

/* An array parameter of the engine's statements (meter_checks_apply's and
 * the others'), sent in PostgreSQL's binary form (db_barr), which the
 * server reads without parsing text: the caller appends elements with
 * db_arr_* and hands it over. An element of a form its type cannot take
 * (a bug) fails it as oom does, with an error logged. */
struct db_arr {
	struct db_barr a;
	enum db_arr_type type;
	size_t n; /* elements */
	bool started;
	bool closed;
	bool oom; /* out of memory, or an element its type cannot take */
};

/* An empty array of type's elements. */
void db_arr_init(struct db_arr *a, enum db_arr_type type);
/* Frees a's memory and empties it; its type stays. */
void db_arr_release(struct db_arr *a);
/* Appends s (NULL appends SQL NULL): a text element, or a date one from
 * "YYYY-MM-DD". */
void db_arr_str(struct db_arr *a, const char *s);
/* Ends the array; nothing may be appended after. */
void db_arr_close(struct db_arr *a);
/* An int8 element, or an int4 one (a value beyond int4 fails the array). */
void db_arr_i64(struct db_arr *a, int64_t v);
void db_arr_null(struct db_arr *a);
/* A timestamptz element from UTC µs. */
void db_arr_time(struct db_arr *a, int64_t usec);

/* The arguments of meter_checks_apply, in its order (see 0011). */
enum db_apply_arr {
	DB_L_ACCOUNT,
	DB_L_KEY,
	DB_L_DAY,
	DB_L_HELD,
	DB_L_LIMIT,
	DB_X_ACCOUNT,
	DB_X_OP,
	DB_X_KEY,
	DB_X_XMIN,
	DB_I_ACCOUNT,
	DB_I_OP,
	DB_I_KEY,
	DB_I_SHA,
	DB_I_STATUS,
	DB_I_RESPONSE,
	DB_C_ACCOUNT,
	DB_C_SANDBOX,
	DB_C_KEY,
	DB_C_VCPUS,
	DB_C_MEMORY,
	DB_C_MAX_COST,
	DB_C_LEASE_END,
	DB_C_SHA,    /* the create's answer under the default key, */
	DB_C_ANSWER, /* its numbers, on its sandbox row (else NULL: in DB_I_*) */
	DB_W_ACCOUNT,
	DB_W_SANDBOX,
	DB_W_LEASE_END,
	DB_H_ACCOUNT,
	DB_H_KEY,
	DB_H_SANDBOX,
	DB_H_DAY,
	DB_H_AMOUNT,
	DB_H_LEASE_END,
	DB_APPLY_NARR,
	/* Not arguments of meter_checks_apply: the checks of the batch refused
	 * for the limit, whose stored answers db_checks_apply looks for first
	 * (the row version read, or NULL when none was). */
	DB_R_ACCOUNT = DB_APPLY_NARR,
	DB_R_OP,
	DB_R_KEY,
	DB_R_XMIN,
	DB_BATCH_NARR
};

/* Initialises arrs[0..DB_BATCH_NARR), each of its parameter's type. */
void db_checks_arrs_init(struct db_arr *arrs);

/* Runs meter_checks_apply with arrs[0..DB_APPLY_NARR) and COMMITs, in one
 * round trip. On METER_OK the batch is durable (synchronous_commit on).
 * First, when arrs[DB_R_*] name refused checks: if another transaction
 * stored an answer under one of their idempotency keys since the batch read
 * it (the first attempt of a retried check, committed while this batch
 * waited for the ledger rows), nothing is written and the sqlstate is
 * DB_CHECKS_SQLSTATE_CONFLICT, so the batch is decided again and replays
 * it. A
 * sqlstate of DB_CHECKS_SQLSTATE_CONFLICT (or a deadlock / serialization
 * failure) means: roll back and decide again. METER_ENOMEM when an array
 * ran out of memory. */
METER_MUSTCHECK enum meter_rc db_checks_apply(PGconn *conn, int64_t now_usec, struct db_arr *arrs,
					      int64_t deadline_ms, char *sqlstate);

/* A key as a fast batch assumed it (unrevoked, with this limit and zone). */
struct db_fast_key {
	const char *account_id; /* borrowed */
	const char *key_id;	/* borrowed */
	bool has_limit;
	int64_t limit_micros;
	const char *time_zone; /* borrowed */
};

/* The order of a fast batch among the engine's: its ticket (an advisory
 * lock it holds to its end, (engine, ticket)) and those of the batches in
 * flight before it on its rows, whose ends it waits for before it locks
 * the rows. */
#define DB_FAST_AFTER_MAX 8
struct db_fast_ticket {
	int32_t engine;
	int32_t ticket;
	int32_t after[DB_FAST_AFTER_MAX];
	int nafter;
};

/* Sends a batch decided on the engine's own figures, one round trip in
 * all, on conn's pipeline (entered if it is not): meter_checks_fast
 * (sql/0018) and a sync, its own implicit transaction. Several may be in
 * flight; each is answered by db_checks_fast_executed and then
 * db_checks_fast_synced, in the order sent.
 * expect[0..nexpect) are the figures the batch expected of the ledger rows
 * named by arrs[DB_L_ACCOUNT..DB_L_DAY] (same order); keys the keys it
 * assumed; price_version the newest price-book version it knew; ticket its
 * order among the engine's batches. arrs are the batch's arrays as for
 * db_checks_apply (the refused checks' DB_R_* ones without their row
 * versions); they are consumed. METER_EDB when it could not be sent (the
 * connection is then to be dropped). */
METER_MUSTCHECK enum meter_rc db_checks_fast_send(PGconn *conn, int64_t now_usec,
						  int64_t price_version,
						  const struct db_fast_ticket *ticket,
						  const struct ledger_day *expect, size_t nexpect,
						  const struct db_fast_key *keys, size_t nkeys,
						  struct db_arr *arrs);

/* The oldest batch in flight, in two steps. First its statement's result,
 * which the server sends before it commits: on METER_OK with
 * *ndiffer == 0 the batch is written, to be committed at its sync. With
 * *ndiffer > 0 nothing was written: differ[0..*ndiffer) are the rows that
 * differ, as they are (found false: no such row), with their ids in
 * differ_ids and differ_day (room for nexpect each). METER_EDB with a
 * SQLSTATE: nothing was written (DB_CHECKS_SQLSTATE_CONFLICT: a key, the
 * price book, a sandbox or a stored answer was not as assumed: read and
 * decide again). METER_EIO at the deadline or when the connection failed:
 * whether it committed is not known. */
METER_MUSTCHECK enum meter_rc db_checks_fast_executed(PGconn *conn, size_t nexpect,
						      struct db_ledger_row *differ, size_t *ndiffer,
						      char (*differ_day)[11],
						      char (*differ_ids)[2][PARSE_ID_MAX + 1],
						      int64_t deadline_ms, char *sqlstate);

/* Then, whatever the first step said, its sync: METER_OK once the batch's
 * transaction has ended (committed, durably, when the first step was
 * METER_OK; rolled back otherwise); METER_EDB with the SQLSTATE when the
 * commit failed (nothing written); METER_EIO as above. */
METER_MUSTCHECK enum meter_rc db_checks_fast_synced(PGconn *conn, int64_t deadline_ms,
						    char *sqlstate);

/* Leaves pipeline mode once no batch is in flight, so that the classic
 * path's statements can run: false when that failed. */
bool db_checks_fast_idle(PGconn *conn);

/* ROLLBACK of whatever is open (errors ignored: a broken connection is the
 * caller's to drop). */
void db_checks_rollback(PGconn *conn);

/* True for a SQLSTATE after which the same batch may simply be redone. */
bool db_checks_retryable(const char *sqlstate);

/* True for a SQLSTATE of a statement that ran out of time (statement or
 * lock timeout) rather than failed on what it was given. */
bool db_checks_timed_out(const char *sqlstate);

/* True for a SQLSTATE with which the server ends the session (a terminated
 * backend, a shutdown, the idle-in-transaction or idle-session limit, a
 * connection exception): the connection is as good as broken, though
 * libpq may not have read its end yet. */
bool db_checks_session_ended(const char *sqlstate);

/* The outcome of a lifecycle event (meter_sandbox_event). */
struct db_event_result {
	bool known;    /* the sandbox exists */
	bool recorded; /* false: the same event was recorded before */
	char state[8];
	int64_t state_since_usec;
	int64_t holds_settled;
	int64_t released_micros;  /* left held at once */
	int64_t tail_held_micros; /* kept for the unmetered tail (sql/0014) */
};

/* Records event type ("running", "paused", "stopped") of sandbox at at_usec
 * in its own transaction (pool connection). A pause or stop within grace_s
 * (lease_grace_s) after a hold's lease end settles it as at the lease end
 * (sql/0016). */
METER_MUSTCHECK enum meter_rc db_checks_event(PGconn *conn, const char *sandbox_id,
					      const char *type, int64_t at_usec, int64_t grace_s,
					      struct db_event_result *out);

/* Closes the open holds whose lease ended at or before now_usec (at most
 * about max of them); *closed gets how many. */
METER_MUSTCHECK enum meter_rc db_checks_expire(PGconn *conn, int64_t now_usec, int max,
					       int64_t *closed);

/* Closes the holds a pause or stop keeps for its unmetered tail once the
 * sandbox is metered past the event, or grace_s after it (sql/0014); at most
 * about max of them, *closed gets how many. */
METER_MUSTCHECK enum meter_rc db_checks_settle(PGconn *conn, int64_t now_usec, int64_t grace_s,
					       int max, int64_t *closed);

/* The stopped sandboxes whose stretch from their last sample to their stop
 * is to be metered now (sql/0048's meter_stop_tails: stopped within the
 * hour, grace_s past the stop, no sample to come), at most max: *out
 * (emptied first) gets, for each, a stopped reading at the stop with the
 * last sample's CPU counter and sizes, host SAMPLE_HOST_STOP, to ingest. */
METER_MUSTCHECK enum meter_rc db_checks_stop_tails(PGconn *conn, int64_t now_usec, int64_t grace_s,
						   int max, struct sample_batch *out);

/* Records the sweeper id's settings (lease_grace_s, sample_retention_days)
 * as seen now, forgets those of sweepers not seen within lapse_s, and gives
 * the settings in force on the database: the largest grace and the longest
 * retention (0, for ever, the longest) of those left (sql/0063). */
METER_MUSTCHECK enum meter_rc db_checks_sweeper_seen(PGconn *conn, const char *id, int64_t grace_s,
						     int64_t retention_days, int64_t lapse_s,
						     int64_t *grace_in_force,
						     int64_t *retention_in_force);

/* Deletes the sweeper id's settings: it stops, and they are no longer in
 * force. */
METER_MUSTCHECK enum meter_rc db_checks_sweeper_gone(PGconn *conn, const char *id);

/* Sends hold_outrun for the leases released at their end (db_checks_expire)
 * whose sandbox still runs on them grace_s seconds after the end; takes up
 * to max such leases, *taken gets how many (sent or not). */
METER_MUSTCHECK enum meter_rc db_checks_outrun(PGconn *conn, int64_t now_usec, int64_t grace_s,
					       int max, int64_t *taken);

#endif
