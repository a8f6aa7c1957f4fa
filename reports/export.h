/* meter reports: streamed usage exports (DESIGN.md §7).
 *
 * Per sandbox per period (an hour, or a key's day), the columns
 *   period_start, account_id, key_id, sandbox_id,
 *   running_seconds, paused_seconds, cpu_used_millicore_seconds,
 *   cpu_billed_millicore_seconds, memory_mib_seconds, storage_mib_seconds,
 *   cpu_micros, memory_micros, storage_micros, total_micros
 * as CSV (RFC 4180, CRLF, a header record) or NDJSON (one object a line,
 * with "usage" and "cost" objects as the API's). Quantities are whole units
 * rounded down from the exact internal ones; money is the sum of the exact
 * hourly money, so every total reconciles with the ledger and the API.
 *
 * Rows are streamed from PostgreSQL (COPY ... TO STDOUT) one at a time: the
 * memory used does not depend on the size of the export.
 *
 * Periods: from/to select whole UTC hours [from, to). With day granularity a
 * row sums the selected hours of one calendar day of the key (in the key's
 * time zone when the usage was metered, as the ledger and the daily limits
 * count it; UTC for unattributed sandboxes), and period_start is that date
 * (YYYY-MM-DD); with hour granularity it is the hour's start in UTC
 * (RFC 3339). Rows are ordered by period, key, sandbox. */
#ifndef METER_EXPORT_H
#define METER_EXPORT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"

enum export_format { EXPORT_CSV, EXPORT_NDJSON };
enum export_granularity { EXPORT_HOUR, EXPORT_DAY };

#define EXPORT_MAX_RANGE_USEC (INT64_C(400) * 24 * 3600 * 1000000) /* 400 days */

struct export_params {
	char account_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1];	   /* "" = every key */
	char sandbox_id[PARSE_ID_MAX + 1]; /* "" = every sandbox */
	int64_t from_usec;		   /* UTC µs, a whole hour */
	int64_t to_usec;		   /* UTC µs, a whole hour, > from */
	enum export_granularity granularity;
	enum export_format format;
	int64_t lock_timeout_ms; /* > 0: a lock wait longer than this fails export_open */
};

/* Totals of what an export wrote, in exact units: for reconciliation.
 * A total past INT64_MAX stops there, with overflow set: the export goes
 * on (its rows are each the database's, whatever their sum). */
struct export_totals {
	int64_t rows;
	int64_t cpu_micros;
	int64_t memory_micros;
	int64_t storage_micros;
	int64_t total_micros;
	bool overflow;
};

/* Checks p: ids valid, from < to, both whole hours, range at most
 * EXPORT_MAX_RANGE_USEC. On failure err names the parameter. */
METER_MUSTCHECK enum meter_rc export_params_check(const struct export_params *p, char *err,
						  size_t errlen);

struct export_cursor;

/* Starts an export on conn (borrowed; idle on entry, used by the cursor
 * until export_close). On METER_OK *out is new. */
METER_MUSTCHECK enum meter_rc export_open(PGconn *conn, const struct export_params *p,
					  struct export_cursor **out, char *err, size_t errlen);

/* Writes the next part of the output (the header first, then whole rows)
 * into buf (cap >= 4096 bytes); *len gets the bytes written, 0 at the end.
 * METER_EDB when the database failed mid-stream (the output is then
 * incomplete: callers must make that visible, e.g. by aborting the
 * transfer). */
METER_MUSTCHECK enum meter_rc export_next(struct export_cursor *c, char *buf, size_t cap,
					  size_t *len);

/* Totals so far (complete once export_next returned 0 bytes). */
void export_totals_get(const struct export_cursor *c, struct export_totals *out);

/* Rows written so far, for progress reporting. */
int64_t export_rows(const struct export_cursor *c);

/* The period_start of the last row written ("" before the first), borrowed
 * until the next export_next: for progress reporting. */
const char *export_last_period(const struct export_cursor *c);

/* Ends the export: cancels an unfinished query and drains the connection so
 * it is idle again (or broken: check PQstatus). Frees c. */
void export_close(struct export_cursor *c);

#endif
