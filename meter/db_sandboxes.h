/* meter: sandboxes with their usage and cost over a range (tables
 * sandboxes, usage_hourly). Figures as in db_usage.h. */
#ifndef METER_DB_SANDBOXES_H
#define METER_DB_SANDBOXES_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db_usage.h"
#include "parse.h"
#include "rc.h"

#define DB_SANDBOXES_PAGE_MAX 500

enum db_sandbox_sort {
	DB_SORT_ID,	 /* sandbox_id ascending */
	DB_SORT_CREATED, /* newest first (created_at, then sandbox_id, descending) */
	DB_SORT_COST,	 /* dearest first (total over the range, then sandbox_id, descending) */
};

struct db_sandbox_query {
	const char *account_id; /* NULL: every account */
	const char *sandbox_id; /* NULL: every sandbox */
	const char *state;	/* NULL or running, paused, stopped */
	const char *key_id;	/* NULL: any key */
	/* The range; without it each sandbox's range is the current day of its
	 * key (in the key's time zone; UTC without a key). */
	bool has_range;
	int64_t from_usec, to_usec;
	enum db_sandbox_sort sort;
	/* Keyset pagination: rows after the one with this sort value and id. */
	bool has_cursor;
	int64_t cursor_value; /* created_at µs or total µ$; unused for DB_SORT_ID */
	const char *cursor_id;
	int limit; /* 1..DB_SANDBOXES_PAGE_MAX */
};

struct db_sandbox {
	char account_id[PARSE_ID_MAX + 1];
	char sandbox_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1]; /* "" for an unattributed sandbox */
	char state[16];
	int64_t vcpus;
	int64_t memory_mib;
	int64_t storage_mib;
	bool has_max_cost;
	int64_t max_cost_micros;
	int64_t created_at_usec;
	int64_t state_since_usec;
	int64_t lease_ends_at_usec;    /* INT64_MIN: none */
	char time_zone[DB_TZ_MAX + 1]; /* of the key's day */
	int64_t from_usec, to_usec;    /* the range of usage */
	struct db_usage usage;
	int64_t month_from_usec, month_to_usec; /* the key's current calendar month */
	struct db_usage month;			/* only the cost fields are filled */
};

/* One page of sandboxes per q: *out a new array of *n (caller frees).
 * Usage and cost are computed for the page's sandboxes only. DB_SORT_ID
 * reads the page off an index, and so does DB_SORT_CREATED within one
 * account (every account's sandboxes are sorted); DB_SORT_COST first ranks
 * every sandbox q matches by its range's total (an index look-up each). */
METER_MUSTCHECK enum meter_rc db_sandbox_list(PGconn *conn, const struct db_sandbox_query *q,
					      struct db_sandbox **out, size_t *n);

/* METER_OK when sandbox sandbox_id exists in account_id (NULL: any
 * account), METER_ENOTFOUND when not. */
METER_MUSTCHECK enum meter_rc db_sandbox_exists(PGconn *conn, const char *account_id,
						const char *sandbox_id);

/* One sandbox (q->sandbox_id, of q->account_id unless NULL) into *out.
 * METER_ENOTFOUND when there is none. */
METER_MUSTCHECK enum meter_rc db_sandbox_get(PGconn *conn, const struct db_sandbox_query *q,
					     struct db_sandbox *out);

/* CPU cost of sb's range split into what was used and the floor's top-up:
 * used = Σ over price versions of floor(Σ used millicore-µs × rate / (1000 ×
 * 3.6e9)), at most the CPU cost; top-up = CPU cost − used. Also the
 * top-up's quantity in millicore-seconds (rounded down). */
METER_MUSTCHECK enum meter_rc db_sandbox_cpu_split(PGconn *conn, const struct db_sandbox *sb,
						   int64_t *used_micros, int64_t *topup_micros,
						   int64_t *topup_millicore_seconds);

/* One of a sandbox's open holds: a part of a lease's worst case reserved
 * against a day of its key (DESIGN.md §4). remaining = max(amount −
 * consumed, 0) is what it adds to the day's held figure. settles_at_usec is
 * INT64_MIN for a hold of a running lease; a pause, a stop or the lease's
 * end sets it on a hold kept for the usage up to then not yet metered. */
struct db_sandbox_hold {
	char day[11]; /* YYYY-MM-DD */
	int64_t amount_micros;
	int64_t consumed_micros;
	int64_t remaining_micros;
	int64_t lease_starts_at_usec;
	int64_t lease_ends_at_usec;
	int64_t settles_at_usec;
};

#define DB_SANDBOX_HOLDS_MAX 100

/* The open holds of sandbox sandbox_id of account_id, oldest lease first:
 * *out a new array of *n (at most DB_SANDBOX_HOLDS_MAX; caller frees),
 * *total how many there are and *held_micros their remaining amounts'
 * sum, both over every open hold. */
METER_MUSTCHECK enum meter_rc db_sandbox_holds(PGconn *conn, const char *account_id,
					       const char *sandbox_id, struct db_sandbox_hold **out,
					       size_t *n, int64_t *total, int64_t *held_micros);

#endif
