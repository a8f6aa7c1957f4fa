/* The API test harness itself: two meterd on one database, requests with
 * and without bodies and tokens, a clean stop. */
#include <string.h>

#include "apitest.h"
#include "check.h"

int main(void)
{
	struct apitest t;
	struct apitest_resp r;
	static const char nul_body[] = "{\"a\":\"x\0y\"}";
	struct apitest_req rq = {
	    .method = "POST",
	    .path = "/healthz",
	    .body = nul_body,
	    .body_len = sizeof(nul_body) - 1,
	};

	if (apitest_start(&t, "apitest", 2, NULL, NULL) < 0)
		return 1;
	for (int i = 0; i < 2; i++) {
		CHECK(apitest_call(&t, i, "GET", "/healthz", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		CHECK_STR(apitest_json_str(&r, "status"), "ok");
		CHECK(strstr(r.headers, "X-Request-Id:") != NULL);
		apitest_resp_release(&r);
	}
	CHECK(t.servers[0].port != t.servers[1].port);
	CHECK(apitest_call(&t, 1, "GET", "/nope", t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 404);
	CHECK_STR(apitest_error_code(&r), "not_found");
	apitest_resp_release(&r);
	/* A body with a NUL byte is sent whole; the route has no POST. */
	CHECK(apitest_do(&t, 0, &rq, &r) == 0);
	CHECK_I64(r.status, 405);
	CHECK_STR(apitest_error_code(&r), "method_not_allowed");
	apitest_resp_release(&r);
	CHECK(apitest_stop(&t) == 0);
	CHECK(apitest_call(&t, 0, "GET", "/healthz", NULL, NULL, &r) < 0);
	CHECK_I64(r.status, 0);
	apitest_resp_release(&r);
	apitest_drop(&t);
	return check_done();
}
