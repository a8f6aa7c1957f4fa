/* Fuzzer: the body of POST /v1/sandboxes/{id}/events (h_sandbox_event_parse,
 * after http_json_body as the handler calls it).
 *
 * Invariants: accepted exactly when no reply was set, refused with a 400;
 * an accepted body has only type and at, the type one of the three states
 * and the body's own, the time from 1970 to 10 minutes after "now"; the
 * event written back (the time formatted as the API prints times) parses to
 * the same event. */
#include <string.h>

#include "fuzz.h"
#include "h_checks.h"
#include "h_util.h"

#define FUZZ_NOW_USEC INT64_C(1796083200000000) /* "now": 2026-12-01T00:00:00Z */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req, req2;
	json_t *body = fuzz_req_body(&req, data, size), *again;
	const char *type = NULL, *type2 = NULL, *key;
	int64_t at = -1, at2 = -1;
	char text[HUTIL_TIME_MAX];
	json_t *v;
	bool ok;

	if (!body)
		goto out;
	ok = h_sandbox_event_parse(&req, body, FUZZ_NOW_USEC, &type, &at);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	json_object_foreach(body, key, v)
	    FUZZ_CHECK(strcmp(key, "type") == 0 || strcmp(key, "at") == 0);
	FUZZ_CHECK(strcmp(type, "running") == 0 || strcmp(type, "paused") == 0 ||
		   strcmp(type, "stopped") == 0);
	FUZZ_CHECK(strcmp(type, json_string_value(json_object_get(body, "type"))) == 0);
	FUZZ_CHECK(at >= 0 && at <= FUZZ_NOW_USEC + INT64_C(600000000));
	hutil_time_format(at, text, sizeof(text));
	again = fuzz_req_reparse(&req2, json_pack("{s:s, s:s}", "type", type, "at", text));
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_sandbox_event_parse(&req2, again, FUZZ_NOW_USEC, &type2, &at2));
	FUZZ_CHECK(type2 == type && at2 == at);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
