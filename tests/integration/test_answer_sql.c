/* Integration: a create's stored answer written back by the database. A
 * sandbox row keeps its create's answer as numbers (sql/0025) and
 * meter_create_answer() writes the answer's text from them for a replay;
 * the engine writes the first answer with check_answer_allowed(). Over
 * random answers (every number of parts, limits and none, the ends of
 * int64, times from 1970 to the 2200s), the two must be the same bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_doc.h"
#include "check.h"
#include "check_answer.h"
#include "migrate.h"
#include "testdb.h"
#include "testrand.h"

#define ROUNDS 3000

static uint64_t state = 0x2545f4914f6cdd1du;

/* The database's text for a's numbers, or NULL (printed) on error. */
static char *from_database(PGconn *conn, const struct check_answer *a, const char *numbers)
{
	const char *params[3] = {a->sandbox_id, a->key_id, numbers};
	PGresult *res = PQexecParams(conn, "SELECT meter_create_answer($1, $2, $3::bigint[])", 3,
				     NULL, params, NULL, NULL, 0);
	char *text = NULL;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	    !PQgetisnull(res, 0, 0))
		text = strdup(PQgetvalue(res, 0, 0));
	else
		fprintf(stderr, "meter_create_answer(%s): %s\n", numbers,
			PQresultErrorMessage(res));
	PQclear(res);
	return text;
}

int main(void)
{
	static const char *const ids[] = {
	    "s", "sb-1", "A.b_c-9",
	    "0123456789012345678901234567890123456789012345678901234567890123"};
	struct testdb db;
	char err[512] = "";
	int applied = 0, same = 0;

	if (testdb_create(&db, "answer_sql") != 0) {
		CHECK(0);
		return check_done();
	}
	CHECK_I64(migrate_apply(db.conn, &applied, err, sizeof(err)), METER_OK);
	if (err[0])
		fprintf(stderr, "migrate_apply: %s\n", err);

	for (int i = 0; i < ROUNDS; i++) {
		char days[LEDGER_PARTS_MAX][11], start[40], end[40];
		char numbers[CHECK_ANSWER_NUMBERS_MAX];
		/* Up to 2^53 microseconds: the 2250s. The first round: the
		 * ends of a day and of the epoch. */
		int64_t t0 = i == 0 ? 0 : (int64_t)(testrand_next(&state) % (UINT64_C(1) << 53));
		int64_t t1 = i == 0 ? 86399999999
				    : t0 + 1 + (int64_t)(testrand_next(&state) % 400000000000u);
		struct check_answer a = {.sandbox_id = ids[testrand_next(&state) % 4],
					 .key_id = ids[testrand_next(&state) % 4],
					 .lease_max_cost_micros = testrand_figure(&state),
					 .nparts =
					     1 + (int)(testrand_next(&state) % LEDGER_PARTS_MAX)};
		char *mine, *theirs;

		agent_doc_format_time(t0, start, sizeof(start));
		agent_doc_format_time(t1, end, sizeof(end));
		a.lease_starts_at = start;
		a.lease_ends_at = end;
		for (int p = 0; p < a.nparts; p++) {
			snprintf(days[p], sizeof(days[p]), "%04d-%02d-%02d",
				 1970 + (int)(testrand_next(&state) % 8030),
				 1 + (int)(testrand_next(&state) % 12),
				 1 + (int)(testrand_next(&state) % 31));
			a.parts[p].day = days[p];
			/* Parts that sum without overflow, as a lease's do. */
			a.parts[p].hold_micros = (int64_t)(testrand_next(&state) % 1000000000000u);
			a.parts[p].figures =
			    (struct ledger_day){.spent_micros = testrand_figure(&state),
						.held_micros = testrand_figure(&state),
						.has_limit = testrand_next(&state) % 3 != 0,
						.limit_micros = testrand_figure(&state)};
		}
		mine = check_answer_allowed(&a);
		CHECK(mine != NULL);
		CHECK(check_answer_numbers(&a, t0, t1, numbers));
		theirs = from_database(db.conn, &a, numbers);
		CHECK(theirs != NULL);
		if (mine && theirs) {
			CHECK_STR(theirs, mine);
			same += strcmp(theirs, mine) == 0;
		}
		free(mine);
		free(theirs);
	}
	CHECK_I64(same, ROUNDS);
	testdb_drop(&db);
	return check_done();
}
