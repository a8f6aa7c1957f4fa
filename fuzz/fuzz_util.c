/* meter fuzzers: shared helpers (see fuzz.h). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

void fuzz_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "%s:%d: invariant failed: %s\n", file, line, expr);
	abort();
}

/* Both libFuzzer and driver.c call this once before the first input. The
 * parsers log refusals at warn level; one line per input is only noise. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_level(LOG_ERROR);
	return 0;
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	if (size)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

json_t *fuzz_req_body(struct http_req *req, const uint8_t *data, size_t size)
{
	json_t *body;

	memset(req, 0, sizeof(*req));
	req->method = "POST";
	req->path = "/fuzz";
	req->body = fuzz_strndup(data, size);
	req->body_len = size;
	req->body_max = HTTP_BODY_MAX;
	body = http_json_body(req);
	if (body) {
		FUZZ_CHECK(json_is_object(body));
		FUZZ_CHECK(req->resp == NULL && req->status == 0);
	} else {
		FUZZ_CHECK(req->status == 400);
	}
	return body;
}

void fuzz_req_verdict(const struct http_req *req, bool ok)
{
	if (ok)
		FUZZ_CHECK(req->resp == NULL && req->status == 0);
	else
		FUZZ_CHECK(req->resp != NULL && req->status == 400);
}

void fuzz_req_release(struct http_req *req)
{
	if (req->resp)
		MHD_destroy_response(req->resp);
	free(req->body);
	memset(req, 0, sizeof(*req));
}

json_t *fuzz_req_reparse(struct http_req *req, json_t *body)
{
	char *text = json_dumps(body, JSON_COMPACT);
	json_t *again;

	json_decref(body);
	FUZZ_CHECK(text != NULL);
	again = fuzz_req_body(req, (const uint8_t *)text, strlen(text));
	free(text);
	return again;
}

void fuzz_only_members(json_t *body, const char *const *known)
{
	const char *key;
	json_t *v;

	json_object_foreach(body, key, v)
	{
		bool found = false;

		for (size_t i = 0; known[i]; i++)
			found = found || strcmp(known[i], key) == 0;
		FUZZ_CHECK(found);
	}
}
