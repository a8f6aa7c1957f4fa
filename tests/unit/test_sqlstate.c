/* Unit tests of how the check engine reads a failed batch's SQLSTATE
 * (meter/db_checks.h): redo it, fail it as the database's timeout, or take
 * the connection for broken (the server ended the session) and decide the
 * batch again on a new one if nothing of it was sent to be written. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "check.h"
#include "db_checks.h"

struct state_case {
	const char *sqlstate;
	bool retryable, timed_out, session_ended;
};

static const struct state_case cases[] = {
    {"MTR01", true, false, false},  /* a row claimed concurrently */
    {"40P01", true, false, false},  /* deadlock */
    {"40001", true, false, false},  /* serialization failure */
    {"23505", true, false, false},  /* unique violation */
    {"57014", false, true, false},  /* statement timeout (query_canceled) */
    {"55P03", false, true, false},  /* lock timeout */
    {"57P01", false, false, true},  /* pg_terminate_backend, smart or fast shutdown */
    {"57P02", false, false, true},  /* crash of another backend */
    {"57P03", false, false, true},  /* the server cannot take connections now */
    {"57P05", false, false, true},  /* idle_session_timeout */
    {"25P03", false, false, true},  /* idle_in_transaction_session_timeout */
    {"08006", false, false, true},  /* connection failure */
    {"08000", false, false, true},  /* connection exception */
    {"25P02", false, false, false}, /* in failed transaction: not the session's end */
    {"23503", false, false, false}, /* a missing reference: the batch's own */
    {"22003", false, false, false}, /* numeric out of range */
    {"MTR02", false, false, false}, /* ledger rows differ: handled in the function */
    {"", false, false, false},
};

int main(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct state_case *c = &cases[i];
		bool r = db_checks_retryable(c->sqlstate), t = db_checks_timed_out(c->sqlstate),
		     s = db_checks_session_ended(c->sqlstate);

		if (r != c->retryable || t != c->timed_out || s != c->session_ended)
			fprintf(stderr, "SQLSTATE \"%s\": retryable %d timed_out %d ended %d\n",
				c->sqlstate, r, t, s);
		CHECK(r == c->retryable);
		CHECK(t == c->timed_out);
		CHECK(s == c->session_ended);
	}
	CHECK(!db_checks_retryable(NULL));
	CHECK(!db_checks_timed_out(NULL));
	CHECK(!db_checks_session_ended(NULL));
	return check_done();
}
