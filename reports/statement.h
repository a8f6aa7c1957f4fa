/* meter reports: the monthly statement of an account (DESIGN.md §7).
 *
 * One line per sandbox that had usage in the month (UTC), with its usage,
 * gross cost, the free-hours credit applied to it and the amount due, and
 * the account's totals. Figures are sums of the exact hourly money, so the
 * statement agrees with the exports, the API and the ledger.
 *
 * Free sandbox-hours: new accounts get price_book.free_sandbox_hours (of the
 * version in force when the account was created) hours of running time, of
 * any size, applied once to the account's earliest running usage: hourly
 * rows in order of (hour, sandbox_id) consume running time until the hours
 * are used up; a row wholly covered is credited its running money (CPU and
 * memory; storage while paused is not running time), a partly covered row
 * floor(running money × covered µs / running µs). A month's statement shows
 * the part of that credit that falls in the month. Daily key limits count
 * gross cost: the credit is applied on the statement only. */
#ifndef METER_STATEMENT_H
#define METER_STATEMENT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "db_accounts.h"
#include "parse.h"
#include "rc.h"

struct statement_usage {
	int64_t running_seconds;
	int64_t paused_seconds;
	int64_t cpu_used_millicore_seconds;
	int64_t cpu_billed_millicore_seconds;
	int64_t memory_mib_seconds;
	int64_t storage_mib_seconds;
};

struct statement_line {
	char sandbox_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1]; /* "" when unattributed */
	struct statement_usage usage;
	int64_t cpu_micros, memory_micros, storage_micros, total_micros;
	int64_t credit_micros;
	int64_t due_micros;
};

/* Asked before the memory of a statement's lines grows (delta > 0), and
 * told when it is given back (delta < 0, the answer ignored): a server
 * counts it against what its answers being built may take. */
struct statement_memory {
	bool (*charge)(void *ctx, int64_t delta);
	void *ctx;
};

struct statement {
	char account_id[PARSE_ID_MAX + 1];
	char account_name[DB_ACCOUNT_NAME_MAX * 4 + 1]; /* UTF-8 */
	int year, month;				/* the month, UTC */
	int64_t free_sandbox_hours;
	struct statement_line *lines; /* owned, ordered by sandbox_id */
	size_t n;
	size_t cap;		     /* lines allocated */
	struct statement_line total; /* sums; sandbox_id and key_id empty */
	/* Borrowed (NULL: nothing counted): told of the lines' memory,
	 * statement_release's included. */
	const struct statement_memory *memory;
};

/* Builds the statement of account_id for year-month on conn (borrowed),
 * in one read-only snapshot of its own when conn is idle, or under a
 * savepoint of the caller's open transaction; conn is left as it came.
 * METER_ENOTFOUND for an unknown account; METER_EINVAL for a bad account
 * id or month, or a conn busy or in a failed transaction. *out is released
 * with statement_release(). */
METER_MUSTCHECK enum meter_rc statement_build(PGconn *conn, const char *account_id, int year,
					      int month, struct statement *out, char *err,
					      size_t errlen);

/* As statement_build, with the lines' memory asked of memory (borrowed; it
 * must outlive *out) as it grows, read from the database a page at a time:
 * a refusal ends the build with METER_ENOMEM ("refused" in err). */
METER_MUSTCHECK enum meter_rc statement_build_counted(PGconn *conn, const char *account_id,
						      int year, int month,
						      const struct statement_memory *memory,
						      struct statement *out, char *err,
						      size_t errlen);

void statement_release(struct statement *s);

/* Writes the statement as CSV (RFC 4180, CRLF): a header, one record per
 * sandbox (line = "sandbox"), then one with line = "total". */
METER_MUSTCHECK enum meter_rc statement_write_csv(const struct statement *s, FILE *f);

/* Writes a printable HTML page of the statement; every value is escaped. */
METER_MUSTCHECK enum meter_rc statement_write_html(const struct statement *s, FILE *f);

/* Parses "YYYY-MM" (2000-01 .. 9999-12). */
METER_MUSTCHECK enum meter_rc statement_parse_month(const char *s, int *year, int *month);

#endif
