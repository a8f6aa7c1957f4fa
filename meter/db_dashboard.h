/* meter: the dashboard's queries (DESIGN.md §6). All figures are sums of
 * usage_hourly, the same rows the API, the exports and the ledger come from,
 * or of the rollups ingestion keeps beside them in the same transaction
 * (sql/0006_dashboard.sql), so the pages reconcile with them to the
 * microdollar. */
#ifndef METER_DB_DASHBOARD_H
#define METER_DB_DASHBOARD_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"

#define DB_DASH_HOURS_MAX (31 * 24)

/* µ$ spent in each of the n_hours hours from from_usec (a whole UTC hour):
 * out[i] for [from + i h, from + (i+1) h); zero where nothing was metered.
 * n_hours <= DB_DASH_HOURS_MAX. */
METER_MUSTCHECK enum meter_rc db_dash_hourly_spend(PGconn *conn, const char *account_id,
						   int64_t from_usec, int n_hours, int64_t *out);

struct db_dash_top {
	char sandbox_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1];
	char state[16];
	int64_t total_micros;
};

/* The max sandboxes of the account that cost the most today (each on its
 * key's day, as the ledger counts it), dearest first (then by id). *n gets
 * how many were found. */
METER_MUSTCHECK enum meter_rc db_dash_top_sandboxes(PGconn *conn, const char *account_id,
						    struct db_dash_top *out, size_t max, size_t *n);

/* One hour of a sandbox: average millicores used and billed over the hour's
 * running time (0 when it did not run), and its money. */
struct db_dash_point {
	int64_t used_millicores;
	int64_t billed_millicores;
	int64_t total_micros;
};

/* The n_hours hours of sandbox_id from from_usec. */
METER_MUSTCHECK enum meter_rc db_dash_sandbox_series(PGconn *conn, const char *account_id,
						     const char *sandbox_id, int64_t from_usec,
						     int n_hours, struct db_dash_point *out);

/* The CPU floor, in millicores, of the price-book version in force at
 * at_usec (the latest one effective by then): the line the sandbox page
 * draws under its CPU series. METER_ENOTFOUND when no version is. */
METER_MUSTCHECK enum meter_rc db_dash_floor(PGconn *conn, int64_t at_usec,
					    int64_t *floor_millicores);

/* A sandbox's cost in [from, to) split for people: the CPU money into the
 * part for CPU actually used, floor(cpu × used / billed), and the floor's
 * top-up (the rest), so the parts add up exactly to the CPU money. */
struct db_dash_breakdown {
	int64_t running_seconds;
	int64_t paused_seconds;
	int64_t cpu_used_micros;
	int64_t cpu_floor_micros;
	int64_t memory_micros;
	int64_t storage_micros;
	int64_t total_micros;
};

METER_MUSTCHECK enum meter_rc db_dash_breakdown(PGconn *conn, const char *account_id,
						const char *sandbox_id, int64_t from_usec,
						int64_t to_usec, struct db_dash_breakdown *out);

/* The sandbox's lifecycle events in [from, to), oldest first, at most max:
 * type ("running", "paused", "stopped") and time. */
struct db_dash_event {
	char type[16];
	int64_t at_usec;
};

METER_MUSTCHECK enum meter_rc db_dash_events(PGconn *conn, const char *account_id,
					     const char *sandbox_id, int64_t from_usec,
					     int64_t to_usec, struct db_dash_event *out, size_t max,
					     size_t *n);

/* One row of the sandboxes page. "Today" is the key's current calendar day
 * (in its time zone, as the ledger counts it; UTC without a key), "month"
 * the current UTC month. Millicores are averages over running time. */
struct db_dash_sandbox {
	char sandbox_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1];
	char state[16];
	int64_t vcpus;
	int64_t memory_mib;
	int64_t used_millicores_today;
	int64_t billed_millicores_today;
	int64_t cost_today_micros;
	int64_t cost_month_micros;
};

enum db_dash_sort { DB_DASH_SORT_COST_TODAY, DB_DASH_SORT_COST_MONTH, DB_DASH_SORT_ID };

#define DB_DASH_PAGE 50

/* A page (DB_DASH_PAGE rows from offset) of the account's sandboxes, with
 * state, key_id and sandbox_id filters ("" = any). *total gets the number of matching
 * sandboxes. month_start_usec: the start of the current UTC month. */
METER_MUSTCHECK enum meter_rc
db_dash_sandboxes(PGconn *conn, const char *account_id, const char *state, const char *key_id,
		  const char *sandbox_id, enum db_dash_sort sort, int64_t offset,
		  int64_t month_start_usec, struct db_dash_sandbox *out, size_t *n, int64_t *total);

#endif
