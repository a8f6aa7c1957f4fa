/* Fuzzer: the body of POST /v1/checks/wake (h_checks_wake_parse, after
 * http_json_body as the handler calls it).
 *
 * Invariants: accepted exactly when no reply was set, refused with a 400;
 * an accepted body has only known members, valid ids, a lease in range and
 * the JSON's values; written back as JSON it parses to the same request. */
#include <string.h>

#include "fuzz.h"
#include "h_checks.h"

static const char *const known[] = {"sandbox_id", "lease_seconds", "idempotency_key", NULL};

static void check_valid(json_t *body, const struct checks_request *rq)
{
	fuzz_only_members(body, known);
	FUZZ_CHECK(rq->op == CHECKS_WAKE);
	FUZZ_CHECK(rq->key_id[0] == '\0' && !rq->has_max_cost);
	FUZZ_CHECK(parse_is_id(rq->sandbox_id));
	FUZZ_CHECK(strcmp(rq->sandbox_id, json_string_value(json_object_get(body, "sandbox_id"))) ==
		   0);
	FUZZ_CHECK(rq->idempotency_key[0] == '\0' || parse_is_id(rq->idempotency_key));
	FUZZ_CHECK((rq->idempotency_key[0] != '\0') ==
		   (json_object_get(body, "idempotency_key") != NULL));
	FUZZ_CHECK(rq->lease_seconds >= 1 && rq->lease_seconds <= CHECKS_LEASE_SECONDS_MAX);
	FUZZ_CHECK(rq->lease_seconds == json_integer_value(json_object_get(body, "lease_seconds")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req, req2;
	struct checks_request rq, rq2;
	json_t *body = fuzz_req_body(&req, data, size), *again, *o;
	bool ok;

	if (!body)
		goto out;
	ok = h_checks_wake_parse(&req, body, &rq);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	check_valid(body, &rq);
	o = json_pack("{s:s, s:I}", "sandbox_id", rq.sandbox_id, "lease_seconds",
		      (json_int_t)rq.lease_seconds);
	FUZZ_CHECK(o != NULL);
	if (rq.idempotency_key[0])
		json_object_set_new(o, "idempotency_key", json_string(rq.idempotency_key));
	again = fuzz_req_reparse(&req2, o);
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_checks_wake_parse(&req2, again, &rq2));
	FUZZ_CHECK(rq2.op == CHECKS_WAKE && strcmp(rq.sandbox_id, rq2.sandbox_id) == 0);
	FUZZ_CHECK(strcmp(rq.idempotency_key, rq2.idempotency_key) == 0);
	FUZZ_CHECK(rq.lease_seconds == rq2.lease_seconds);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
