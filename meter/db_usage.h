/* meter: usage and cost read from the hourly rollups (usage_hourly).
 *
 * Every figure is a SUM over whole usage_hourly rows, computed in SQL
 * numeric from the exact quantities: usage in whole units (seconds)
 * rounded down for display, money as the sum of the rows' money, so any
 * figure reconciles with any other over the same rows to the microdollar.
 * A row belongs to a range or period when it begins inside it
 * (meter_row_start, sql/0004_keys.sql). */
#ifndef METER_DB_USAGE_H
#define METER_DB_USAGE_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"

#define DB_TZ_MAX 64

/* The usage and cost objects of the API, plus averages while running. */
struct db_usage {
	int64_t running_seconds;
	int64_t paused_seconds;
	int64_t cpu_used_millicore_seconds;
	int64_t cpu_billed_millicore_seconds;
	int64_t memory_mib_seconds;
	int64_t storage_mib_seconds;
	int64_t cpu_micros;
	int64_t memory_micros;
	int64_t storage_micros;
	int64_t total_micros;
	int64_t cpu_used_millicores;   /* average while running, rounded down */
	int64_t cpu_billed_millicores; /* idem, with the floor */
	int64_t memory_mib;	       /* idem, reserved */
};

#define DB_USAGE_COLUMNS 13 /* columns DB_USAGE_SUMS yields */

/* SQL: the instant usage row u (hour, day) of a key in time zone TZ (an SQL
 * expression) begins, equal to meter_row_start(TZ, u.hour, u.day). The
 * planner inlines that function (sql/0043; before, about 50 µs a call),
 * but its expression still reads times in TZ a dozen times, and a query
 * places a row more than once; so it is evaluated only for a row whose
 * hour begins before its day's midnight as PostgreSQL reads it:
 * the hour a key's midnight cuts, or one where midnight comes twice. The
 * day's start is never later than that reading (sql/0012_day_start.sql),
 * so every other row begins at its hour. */
#define DB_ROW_START(TZ)                                                                           \
	"CASE WHEN u.day::timestamp AT TIME ZONE " TZ " <= u.hour THEN u.hour"                     \
	" ELSE meter_row_start(" TZ ", u.hour, u.day) END"

/* The DB_USAGE_COLUMNS aggregate columns of struct db_usage over the rows
 * of alias x, each restricted by F (a literal: "" or " FILTER (WHERE ...)"),
 * named as DB_USAGE_NAMES says. */
#define DB_USAGE_SUMS(F)                                                                           \
	"div(COALESCE(sum(x.running_usec)" F ", 0), 1000000)::bigint AS u_running,"                \
	" div(COALESCE(sum(x.paused_usec)" F ", 0), 1000000)::bigint AS u_paused,"                 \
	" div(COALESCE(sum(x.cpu_used_mcus)" F ", 0), 1000000)::bigint AS u_cpu_used,"             \
	" div(COALESCE(sum(x.cpu_billed_mcus)" F ", 0), 1000000)::bigint AS u_cpu_billed,"         \
	" div(COALESCE(sum(x.memory_mibus)" F ", 0), 1000000)::bigint AS u_memory,"                \
	" div(COALESCE(sum(x.storage_mibus)" F ", 0), 1000000)::bigint AS u_storage,"              \
	" COALESCE(sum(x.cpu_micros)" F ", 0)::bigint AS c_cpu,"                                   \
	" COALESCE(sum(x.memory_micros)" F ", 0)::bigint AS c_memory,"                             \
	" COALESCE(sum(x.storage_micros)" F ", 0)::bigint AS c_storage,"                           \
	" COALESCE(sum(x.total_micros)" F ", 0)::bigint AS c_total,"                               \
	" COALESCE(div(sum(x.cpu_used_mcus)" F ", NULLIF(sum(x.running_usec)" F                    \
	", 0)), 0)::bigint AS a_cpu_used,"                                                         \
	" COALESCE(div(sum(x.cpu_billed_mcus)" F ", NULLIF(sum(x.running_usec)" F                  \
	", 0)), 0)::bigint AS a_cpu_billed,"                                                       \
	" COALESCE(div(sum(x.memory_mibus)" F ", NULLIF(sum(x.running_usec)" F                     \
	", 0)), 0)::bigint AS a_memory"

/* The names DB_USAGE_SUMS gives its columns, each prefixed with P (a
 * literal such as "a."), in the same order. */
/* clang-format off */
#define DB_USAGE_NAMES(P) \
	P "u_running, " P "u_paused, " P "u_cpu_used, " P "u_cpu_billed, " \
	P "u_memory, " P "u_storage, " P "c_cpu, " P "c_memory, " P "c_storage, " \
	P "c_total, " P "a_cpu_used, " P "a_cpu_billed, " P "a_memory"
/* clang-format on */

/* Reads the DB_USAGE_COLUMNS columns from col on of row into *out. */
METER_MUSTCHECK enum meter_rc db_usage_read(const PGresult *res, int row, int col,
					    struct db_usage *out);

enum db_usage_window {
	DB_WINDOW_NONE, /* one period: the whole range */
	DB_WINDOW_HOUR, /* UTC hours */
	DB_WINDOW_DAY,	/* calendar days in the query's time zone */
};

enum db_usage_group {
	DB_GROUP_NONE,
	DB_GROUP_SANDBOX, /* per sandbox (and its key) */
	DB_GROUP_KEY,	  /* per key */
};

struct db_usage_query {
	const char *account_id; /* NULL: every account */
	const char *sandbox_id; /* NULL: every sandbox */
	const char *time_zone;	/* of DB_WINDOW_DAY periods */
	int64_t from_usec;	/* UTC µs, inclusive */
	int64_t to_usec;	/* UTC µs, exclusive, > from_usec */
	enum db_usage_window window;
	enum db_usage_group group;
	size_t max_items;
};

struct db_usage_item {
	int64_t period_start_usec; /* the period, clipped to the range */
	int64_t period_end_usec;
	char account_id[PARSE_ID_MAX + 1]; /* "" unless grouped */
	char sandbox_id[PARSE_ID_MAX + 1]; /* "" unless grouped by sandbox */
	char key_id[PARSE_ID_MAX + 1];	   /* "" unless grouped (or no key) */
	struct db_usage u;
};

/* Sums the rows of q's range into *total and, per (period, group) that has
 * rows, into *items (a new array, caller frees; NULL when none), in order of
 * period then group. METER_ERANGE when there would be more than
 * q->max_items items. */
METER_MUSTCHECK enum meter_rc db_usage_query(PGconn *conn, const struct db_usage_query *q,
					     struct db_usage *total, struct db_usage_item **items,
					     size_t *n);

/* The current calendar day of key_id (of account_id) in its time zone, or
 * of UTC when key_id is NULL: [*from_usec, *to_usec), and the time zone
 * into tz (DB_TZ_MAX + 1 bytes). METER_ENOTFOUND when there is no such key. */
METER_MUSTCHECK enum meter_rc db_usage_today(PGconn *conn, const char *account_id,
					     const char *key_id, int64_t *from_usec,
					     int64_t *to_usec, char *tz);

#endif
