/* meter: the allowed answer of a check, written straight to text.
 *
 * Every allowed create or wake answers the same object (README "Checks"):
 * the check engine used to build it with jansson and serialise it, which
 * was about a third of the engine's own CPU per check on a hot key. This
 * writes the same bytes as json_dumps(JSON_COMPACT | JSON_PRESERVE_ORDER)
 * of that object (tests/unit/test_check_answer.c holds it to that), for
 * strings of printable ASCII other than '"' and '\\': the engine's always
 * are (ids follow the meter_id rule, days and times are its own). Any
 * other string it declines, as it does when out of memory. */
#ifndef METER_CHECK_ANSWER_H
#define METER_CHECK_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger.h"

/* One day part of the lease: its day, its hold, and the day's figures
 * after the check's holds. */
struct check_answer_part {
	const char *day;
	int64_t hold_micros;
	struct ledger_day figures;
};

struct check_answer {
	const char *sandbox_id;
	const char *key_id;
	int64_t lease_max_cost_micros;
	const char *lease_starts_at;
	const char *lease_ends_at;
	int nparts; /* 1 .. LEDGER_PARTS_MAX */
	struct check_answer_part parts[LEDGER_PARTS_MAX];
};

/* {"allowed":true,"sandbox_id":...,"parts":[...]} as malloc'd text, or NULL
 * when out of memory or when a string needs escaping. */
char *check_answer_allowed(const struct check_answer *a);

/* Room for check_answer_numbers(): 23 numbers of at most 20 characters,
 * their commas and braces. */
#define CHECK_ANSWER_NUMBERS_MAX 512

/* The numbers of the answer, what a sandbox row keeps of its create's
 * answer (sql/0025, where meter_create_answer() writes the same text as
 * check_answer_allowed() back from them), as a PostgreSQL bigint[]
 * literal: {starts_usec,ends_usec,lease_max_cost_micros, then per part
 * its day as yyyymmdd, hold_micros, spent, held and limit (NULL: none)}.
 * The times are the answer's lease_starts_at and lease_ends_at, in
 * microseconds since 1970-01-01 UTC. False, with out untouched, when a
 * day is not YYYY-MM-DD or the number of parts is out of range. */
bool check_answer_numbers(const struct check_answer *a, int64_t starts_usec, int64_t ends_usec,
			  char out[CHECK_ANSWER_NUMBERS_MAX]);

#endif
