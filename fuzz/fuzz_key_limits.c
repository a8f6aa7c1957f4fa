/* Fuzzer: the body of PUT /v1/keys/{id}/limits (h_key_limits_parse, after
 * http_json_body as the handler calls it).
 *
 * Invariants: accepted exactly when no reply was set, refused with a 400;
 * an accepted body has only known members and at least one of them, a
 * limit in range (or null) and a time zone of a valid shape, the body's
 * own; written back as JSON it parses to the same fields. */
#include <string.h>

#include "fuzz.h"
#include "fuzz_keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const known[] = {"daily_limit_micros", "time_zone", NULL};
	struct http_req req, req2;
	struct h_key_fields f, f2;
	json_t *body = fuzz_req_body(&req, data, size), *again;
	bool ok;

	if (!body)
		goto out;
	ok = h_key_limits_parse(&req, body, &f);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	fuzz_only_members(body, known);
	FUZZ_CHECK(f.role == NULL);
	FUZZ_CHECK(f.limit_given || f.time_zone);
	fuzz_key_fields_check(body, &f);
	again = fuzz_req_reparse(&req2, fuzz_key_fields_json(&f));
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_key_limits_parse(&req2, again, &f2));
	fuzz_key_fields_same(&f, &f2);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
