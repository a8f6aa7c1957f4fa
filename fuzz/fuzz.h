/* meter fuzzers: what every target shares.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput and is linked either with
 * libFuzzer (the METER_FUZZ build, clang) or with driver.c, which replays a
 * corpus (the normal build, under ctest). FUZZ_CHECK states an invariant: a
 * failure prints where and aborts, which both libFuzzer and the driver
 * report as a crash. It is never compiled out (unlike assert with NDEBUG). */
#ifndef METER_FUZZ_H
#define METER_FUZZ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http.h"

#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fuzz_fail(__FILE__, __LINE__, #cond);                                      \
	} while (0)

__attribute__((noreturn)) void fuzz_fail(const char *file, int line, const char *expr);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A copy of data (size bytes) with a NUL after it; new, the caller frees. */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* Sets up *req as the server hands a request with body data (size bytes) to
 * a handler, and parses the body with http_json_body. Returns its result (a
 * new reference or NULL); NULL must come with a 400 reply, which is
 * checked. Release *req with fuzz_req_release. */
json_t *fuzz_req_body(struct http_req *req, const uint8_t *data, size_t size);

/* Checks a body parser's verdict against the reply it left: ok with no
 * reply, or not ok with a 400 reply. */
void fuzz_req_verdict(const struct http_req *req, bool ok);

/* Frees what fuzz_req_body and the parsers left on req; req is empty. */
void fuzz_req_release(struct http_req *req);

/* body serialised and parsed again as a fresh request: for the round trips
 * (a parsed body written back must parse to the same values). Returns a new
 * reference or NULL (then a reply was set on req). Steals body. */
json_t *fuzz_req_reparse(struct http_req *req, json_t *body);

/* Checks that every member of the object body is named in known
 * (NULL-terminated): an accepted body has no member the parser ignored. */
void fuzz_only_members(json_t *body, const char *const *known);
#endif
