/* Fuzzer: the body of POST /v1/checks/create (h_checks_create_parse, after
 * http_json_body as the handler calls it).
 *
 * Invariants: a body is accepted exactly when no reply was set, refused
 * with a 400; an accepted body has only known members, valid ids, every
 * number in its documented range and the same values as the JSON; the
 * request written back as JSON parses to the same request. */
#include <string.h>

#include "fuzz.h"
#include "h_checks.h"

static const char *const known[] = {
    "key_id",	     "sandbox_id",	"vcpus",	   "memory_mib",
    "lease_seconds", "max_cost_micros", "idempotency_key", NULL};

static void check_valid(json_t *body, const struct checks_request *rq)
{
	json_t *v;

	fuzz_only_members(body, known);
	FUZZ_CHECK(rq->op == CHECKS_CREATE);
	FUZZ_CHECK(parse_is_id(rq->key_id) && parse_is_id(rq->sandbox_id));
	FUZZ_CHECK(strcmp(rq->sandbox_id, ".") != 0 && strcmp(rq->sandbox_id, "..") != 0);
	FUZZ_CHECK(rq->idempotency_key[0] == '\0' || parse_is_id(rq->idempotency_key));
	FUZZ_CHECK(strcmp(rq->key_id, json_string_value(json_object_get(body, "key_id"))) == 0);
	FUZZ_CHECK(strcmp(rq->sandbox_id, json_string_value(json_object_get(body, "sandbox_id"))) ==
		   0);
	FUZZ_CHECK(rq->vcpus >= 1 && rq->vcpus <= CHECKS_VCPUS_MAX);
	FUZZ_CHECK(rq->vcpus == json_integer_value(json_object_get(body, "vcpus")));
	FUZZ_CHECK(rq->memory_mib >= 1 && rq->memory_mib <= CHECKS_MEMORY_MIB_MAX);
	FUZZ_CHECK(rq->lease_seconds >= 1 && rq->lease_seconds <= CHECKS_LEASE_SECONDS_MAX);
	v = json_object_get(body, "max_cost_micros");
	FUZZ_CHECK(rq->has_max_cost == (v && !json_is_null(v)));
	FUZZ_CHECK(!rq->has_max_cost || rq->max_cost_micros >= 0);
	FUZZ_CHECK(!rq->has_max_cost || rq->max_cost_micros == json_integer_value(v));
}

/* The request as a client would send it. */
static json_t *to_json(const struct checks_request *rq)
{
	json_t *o =
	    json_pack("{s:s, s:s, s:I, s:I, s:I}", "key_id", rq->key_id, "sandbox_id",
		      rq->sandbox_id, "vcpus", (json_int_t)rq->vcpus, "memory_mib",
		      (json_int_t)rq->memory_mib, "lease_seconds", (json_int_t)rq->lease_seconds);

	FUZZ_CHECK(o != NULL);
	if (rq->has_max_cost)
		json_object_set_new(o, "max_cost_micros", json_integer(rq->max_cost_micros));
	if (rq->idempotency_key[0])
		json_object_set_new(o, "idempotency_key", json_string(rq->idempotency_key));
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req, req2;
	struct checks_request rq, rq2;
	json_t *body = fuzz_req_body(&req, data, size), *again;
	bool ok;

	if (!body)
		goto out;
	ok = h_checks_create_parse(&req, body, &rq);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	check_valid(body, &rq);
	again = fuzz_req_reparse(&req2, to_json(&rq));
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_checks_create_parse(&req2, again, &rq2));
	FUZZ_CHECK(rq.op == rq2.op && strcmp(rq.key_id, rq2.key_id) == 0);
	FUZZ_CHECK(strcmp(rq.sandbox_id, rq2.sandbox_id) == 0);
	FUZZ_CHECK(strcmp(rq.idempotency_key, rq2.idempotency_key) == 0);
	FUZZ_CHECK(rq.vcpus == rq2.vcpus && rq.memory_mib == rq2.memory_mib);
	FUZZ_CHECK(rq.lease_seconds == rq2.lease_seconds && rq.has_max_cost == rq2.has_max_cost);
	FUZZ_CHECK(rq.max_cost_micros == rq2.max_cost_micros);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
