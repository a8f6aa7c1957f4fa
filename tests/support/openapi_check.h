/* The API's answers held to its OpenAPI document (api/openapi.json).
 *
 * openapi_check_response finds the operation a request named (its path
 * against the document's path templates, its method; HEAD takes the GET
 * operation's answers without a body) and checks the answer against it:
 * the status is one the operation lists, the Content-Type one of that
 * response's media types (no body when it has none), every header it marks
 * required is there, and a JSON body is valid against the media type's
 * schema. The schema check covers the JSON Schema keywords the document
 * uses: $ref (local), type, enum, const, minimum, maximum, minLength,
 * maxLength (in characters), pattern, format (date-time, date, int64),
 * properties, required, additionalProperties, unevaluatedProperties,
 * minProperties, items, maxItems, allOf and oneOf; any other keyword in a
 * schema is a failure of the check itself, so that the document cannot
 * start relying on one this does not hold.
 *
 * A path that matches no template, or a method the path does not document
 * answered with anything but 405, is not checked (nothing in the document
 * describes it); a 405 there is held to the MethodNotAllowed response.
 *
 * apitest_do runs it on every answer (tests/support/apitest.h), so every
 * API test holds what it is answered to the document. */
#ifndef METER_TEST_OPENAPI_CHECK_H
#define METER_TEST_OPENAPI_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Loads the document from path (once per process; thread-safe). Returns
 * the document, borrowed, or NULL (and prints why). */
const json_t *openapi_check_doc(const char *path);

/* The node a local reference ("#/a/b", ~0 and ~1 escaped) names in doc,
 * or NULL. */
const json_t *openapi_check_resolve(const json_t *doc, const char *ref);

/* Validates instance against schema, resolving $ref in doc. Returns true
 * when valid; otherwise false with the first failure, and where, in err. */
bool openapi_check_schema(const json_t *doc, const json_t *schema, const json_t *instance,
			  char *err, size_t errlen);

/* Checks one answer against doc. method as sent ("GET", "HEAD", ...); path
 * with any query string; headers: the raw header lines of the answer (the
 * last block is the final answer's); body_len bytes of body (json: it
 * parsed, or NULL). Returns true when it conforms or is not described by
 * the document; otherwise false with the reason in err. */
bool openapi_check_response(const json_t *doc, const char *method, const char *path, long status,
			    const char *headers, const char *body, size_t body_len,
			    const json_t *json, char *err, size_t errlen);

/* Checks one webhook POST against doc's webhooks: the operation its body's
 * type names, every header parameter it marks required present in headers
 * (raw "Name: value" lines) and valid against its schema, and the body
 * valid against the request body's schema. Returns true when it conforms;
 * otherwise false with the reason in err. */
bool openapi_check_webhook(const json_t *doc, const char *headers, const json_t *body, char *err,
			   size_t errlen);

#endif
