/* Unit tests of dashboard session cookies: round trip, tampering, expiry. */
#include <string.h>

#include "check.h"
#include "routes.h"
#include "session.h"

int main(void)
{
	struct auth a = {0}, b;
	char cookie[512], bad[512];

	CHECK(session_init("a configured secret") == METER_OK);
	a.kind = AUTH_KEY;
	a.role = ROLE_READ_ONLY;
	snprintf(a.account_id, sizeof(a.account_id), "acc_1");
	snprintf(a.key_id, sizeof(a.key_id), "key_1");
	CHECK(session_issue(&a, 1000, cookie, sizeof(cookie)) == METER_OK);
	CHECK(strchr(cookie, '|') == NULL && strchr(cookie, ';') == NULL);
	CHECK(session_verify(cookie, 1001, &b) == METER_OK);
	CHECK(b.kind == AUTH_KEY && b.role == ROLE_READ_ONLY);
	CHECK_STR(b.account_id, "acc_1");
	CHECK_STR(b.key_id, "key_1");

	/* Expired, tampered payload, tampered mac, garbage. */
	CHECK(session_verify(cookie, 1000 + SESSION_TTL_S, &b) == METER_EINVAL);
	memcpy(bad, cookie, sizeof(bad));
	bad[3] = bad[3] == 'A' ? 'B' : 'A';
	CHECK(session_verify(bad, 1001, &b) == METER_EINVAL);
	memcpy(bad, cookie, sizeof(bad));
	bad[strlen(bad) - 2] = bad[strlen(bad) - 2] == 'A' ? 'B' : 'A';
	CHECK(session_verify(bad, 1001, &b) == METER_EINVAL);
	CHECK(session_verify("", 1001, &b) == METER_EINVAL);
	CHECK(session_verify("no-dot", 1001, &b) == METER_EINVAL);
	CHECK(session_verify("a.b.c", 1001, &b) == METER_EINVAL);
	CHECK(session_verify(NULL, 1001, &b) == METER_EINVAL);

	/* Operator sessions carry the account they view and no key. */
	a.kind = AUTH_OPERATOR;
	a.role = ROLE_OPERATOR;
	session_operator_fingerprint("operator-token", a.key_id, sizeof(a.key_id));
	CHECK_I64(strlen(a.key_id), 16);
	CHECK(session_issue(&a, 1000, cookie, sizeof(cookie)) == METER_OK);
	CHECK(session_verify(cookie, 1001, &b) == METER_OK);
	CHECK(b.kind == AUTH_OPERATOR && b.role == ROLE_OPERATOR);
	CHECK_STR(b.key_id, a.key_id);
	/* Another token, another fingerprint: auth refuses the old session. */
	{
		char other[17];
		session_operator_fingerprint("rotated-token", other, sizeof(other));
		CHECK(strcmp(other, a.key_id) != 0);
	}

	/* Another secret (another deployment) does not accept it. */
	CHECK(session_init("another secret") == METER_OK);
	CHECK(session_verify(cookie, 1001, &b) == METER_EINVAL);
	/* Control-plane credentials never get a session. */
	a.kind = AUTH_CONTROL_PLANE;
	CHECK(session_issue(&a, 1000, cookie, sizeof(cookie)) == METER_EINVAL);
	return check_done();
}
