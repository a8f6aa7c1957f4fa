/* API: bad input of every kind, table-driven. Each row is one request and
 * the 4xx status, error code and (for 400) offending field it must get.
 * After the table the server still answers /healthz and is alive.
 *
 * Adding a row: method, path ({acc}, {key}, {sbx} are replaced by ids of a
 * real account, full key and sandbox), who calls (TOK_*), the body (len 0:
 * strlen; give len for bodies with NUL bytes), then what must come back
 * (want_field NULL: not checked). */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "rawhttp.h"

enum tok { TOK_NONE, TOK_OPERATOR, TOK_CONTROL_PLANE, TOK_FULL, TOK_READ_ONLY };

struct bad_case {
	const char *name;
	const char *method;
	const char *path;
	enum tok tok;
	const char *body;
	size_t len;
	const char *header; /* one extra raw header line, or NULL */
	long want_status;
	const char *want_code;
	const char *want_field;
};

#define ID65 "a1234567890123456789012345678901234567890123456789012345678901234"
/* 200 characters of two bytes each (U+00E9). */
#define E10  "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
#define E50  E10 E10 E10 E10 E10
#define E200 E50 E50 E50 E50

static const struct bad_case cases[] = {
    /* POST /v1/accounts: JSON itself (the error names the body). */
    {"malformed JSON", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":", 0, NULL, 400,
     "invalid_request", "body"},
    {"trailing garbage", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\"} x", 0, NULL, 400,
     "invalid_request", "body"},
    {"array body", "POST", "/v1/accounts", TOK_OPERATOR, "[]", 0, NULL, 400, "invalid_request",
     "body"},
    {"null body", "POST", "/v1/accounts", TOK_OPERATOR, "null", 0, NULL, 400, "invalid_request",
     "body"},
    {"empty body", "POST", "/v1/accounts", TOK_OPERATOR, "", 0, NULL, 400, "invalid_request",
     "body"},
    {"no body", "POST", "/v1/accounts", TOK_OPERATOR, NULL, 0, NULL, 400, "invalid_request",
     "body"},
    {"duplicate field", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\",\"name\":\"b\"}", 0,
     NULL, 400, "invalid_request", "body"},
    {"nested too deep", "POST", "/v1/accounts", TOK_OPERATOR,
     "{\"name\":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}", 0, NULL, 400, "invalid_request",
     "body"},
    {"escaped NUL", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\\u0000b\"}", 0, NULL, 400,
     "invalid_request", "name"},
    {"escaped NUL in a member's name", "POST", "/v1/accounts", TOK_OPERATOR,
     "{\"na\\u0000me\":\"a\"}", 0, NULL, 400, "invalid_request", "body"},
    {"raw NUL byte", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\0b\"}", 14, NULL, 400,
     "invalid_request", "body"},
    /* jansson alone took a NUL after a number or a literal for the end of
     * the text, and the bracket after it: these made a key. */
    {"raw NUL after a number", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":1\0}", 39, NULL, 400, "invalid_request", "body"},
    {"raw NUL after a literal", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":null\0}", 42, NULL, 400, "invalid_request", "body"},
    {"trailing raw NUL", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\"}\0", 13, NULL, 400,
     "invalid_request", "body"},
    {"invalid UTF-8", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"\xff\xfe\"}", 0, NULL, 400,
     "invalid_request", "body"},
    {"overlong UTF-8", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"\xc0\xaf\"}", 0, NULL,
     400, "invalid_request", "body"},
    {"lone surrogate", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"\\ud800\"}", 0, NULL, 400,
     "invalid_request", "body"},
    /* POST /v1/accounts: fields. */
    {"missing name", "POST", "/v1/accounts", TOK_OPERATOR, "{}", 0, NULL, 400, "invalid_request",
     "name"},
    {"unknown field", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\",\"admin\":true}", 0,
     NULL, 400, "invalid_request", "admin"},
    {"name a number", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":5}", 0, NULL, 400,
     "invalid_request", "name"},
    {"name null", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":null}", 0, NULL, 400,
     "invalid_request", "name"},
    {"name empty", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"\"}", 0, NULL, 400,
     "invalid_request", "name"},
    {"name control character", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\\u0007\"}", 0,
     NULL, 400, "invalid_request", "name"},
    {"name DEL", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\\u007f\"}", 0, NULL, 400,
     "invalid_request", "name"},
    {"name C1 control (NEL)", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\\u0085b\"}", 0,
     NULL, 400, "invalid_request", "name"},
    {"name C1 control, raw UTF-8", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"a\xc2\x9f\"}",
     0, NULL, 400, "invalid_request", "name"},
    {"name 201 characters", "POST", "/v1/accounts", TOK_OPERATOR, "{\"name\":\"" E200 "\u00e9\"}",
     0, NULL, 400, "invalid_request", "name"},
    /* POST /v1/accounts/{id}/keys. */
    {"role unknown", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR, "{\"role\":\"admin\"}", 0,
     NULL, 400, "invalid_request", "role"},
    {"role missing", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR, "{}", 0, NULL, 400,
     "invalid_request", "role"},
    {"role array", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR, "{\"role\":[\"full\"]}", 0,
     NULL, 400, "invalid_request", "role"},
    {"limit negative", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":-1}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limit INT64_MAX", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":9223372036854775807}", 0, NULL, 400,
     "invalid_request", "daily_limit_micros"},
    /* Past 64 bits the parser refuses the number: the error names the
     * member it stopped in. */
    {"limit overflows int64", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":9223372036854775808}", 0, NULL, 400,
     "invalid_request", "daily_limit_micros"},
    {"limit huge", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":1000000000000000000000000000000}", 0, NULL, 400,
     "invalid_request", "daily_limit_micros"},
    {"limit overflows int64, negative", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"daily_limit_micros\": -9223372036854775809 ,\"role\":\"full\"}", 0, NULL, 400,
     "invalid_request", "daily_limit_micros"},
    {"overflow in an unknown member", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"x\":{\"y\":[99999999999999999999]}}", 0, NULL, 400, "invalid_request",
     "x"},
    {"overflow outside any member", "POST", "/v1/accounts", TOK_OPERATOR, "[99999999999999999999]",
     0, NULL, 400, "invalid_request", "body"},
    {"limit real", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":1.5}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limit exponent", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":1e3}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limit string", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":\"100\"}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limit boolean", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"daily_limit_micros\":true}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"time zone empty", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"time_zone\":\"\"}", 0, NULL, 400, "invalid_request", "time_zone"},
    {"time zone path", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"time_zone\":\"../../etc/passwd\"}", 0, NULL, 400, "invalid_request",
     "time_zone"},
    {"time zone unknown", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"time_zone\":\"Europe/Atlantis\"}", 0, NULL, 400, "invalid_request",
     "time_zone"},
    {"time zone too long", "POST", "/v1/accounts/{acc}/keys", TOK_OPERATOR,
     "{\"role\":\"full\",\"time_zone\":\"" ID65 "\"}", 0, NULL, 400, "invalid_request",
     "time_zone"},
    {"account id 65 chars", "POST", "/v1/accounts/" ID65 "/keys", TOK_OPERATOR,
     "{\"role\":\"full\"}", 0, NULL, 400, "invalid_request", "account_id"},
    {"account id bad chars", "POST", "/v1/accounts/a%20b/keys", TOK_OPERATOR, "{\"role\":\"full\"}",
     0, NULL, 400, "invalid_request", "account_id"},
    /* libmicrohttpd decodes the path: an escaped NUL would end it there,
     * an escaped slash would add a segment. */
    {"account id NUL", "POST", "/v1/accounts/a%00b/keys", TOK_OPERATOR, "{\"role\":\"full\"}", 0,
     NULL, 400, "invalid_request", "path"},
    {"key id, NUL, more", "GET", "/v1/keys/{key}%00x", TOK_FULL, NULL, 0, NULL, 400,
     "invalid_request", "path"},
    {"sandbox id, escaped slash", "GET", "/v1/sandboxes/{sbx}%2Fusage", TOK_READ_ONLY, NULL, 0,
     NULL, 400, "invalid_request", "path"},
    {"sandbox id, escaped slash (lower case)", "GET", "/v1/sandboxes/{sbx}%2fusage", TOK_READ_ONLY,
     NULL, 0, NULL, 400, "invalid_request", "path"},
    {"escaped NUL, no auth", "GET", "/v1/keys/k%00", TOK_NONE, NULL, 0, NULL, 400,
     "invalid_request", "path"},
    {"account unknown", "POST", "/v1/accounts/acc_unknown/keys", TOK_OPERATOR,
     "{\"role\":\"full\"}", 0, NULL, 404, "not_found", NULL},
    /* DELETE /v1/accounts/{id}/keys/{key_id}: every row is refused before
     * the key is revoked (later rows still use it). */
    {"revoke: key id 65 chars", "DELETE", "/v1/accounts/{acc}/keys/" ID65, TOK_OPERATOR, NULL, 0,
     NULL, 400, "invalid_request", "key_id"},
    {"revoke: key id bad chars", "DELETE", "/v1/accounts/{acc}/keys/k%20y", TOK_OPERATOR, NULL, 0,
     NULL, 400, "invalid_request", "key_id"},
    {"revoke: a body", "DELETE", "/v1/accounts/{acc}/keys/{key}", TOK_OPERATOR, "{}", 0, NULL, 413,
     "payload_too_large", NULL},
    {"revoke: a query", "DELETE", "/v1/accounts/{acc}/keys/{key}?force=true", TOK_OPERATOR, NULL, 0,
     NULL, 400, "invalid_request", "force"},
    {"revoke: by the key itself", "DELETE", "/v1/accounts/{acc}/keys/{key}", TOK_FULL, NULL, 0,
     NULL, 403, "forbidden", NULL},
    {"revoke: unknown key", "DELETE", "/v1/accounts/{acc}/keys/key_unknown", TOK_OPERATOR, NULL, 0,
     NULL, 404, "not_found", NULL},
    {"revoke: PUT", "PUT", "/v1/accounts/{acc}/keys/{key}", TOK_OPERATOR, "{}", 0, NULL, 405,
     "method_not_allowed", NULL},
    /* PUT /v1/keys/{id}/limits. */
    {"limits empty", "PUT", "/v1/keys/{key}/limits", TOK_FULL, "{}", 0, NULL, 400,
     "invalid_request", "daily_limit_micros"},
    {"limits above cap", "PUT", "/v1/keys/{key}/limits", TOK_FULL,
     "{\"daily_limit_micros\":1000000000000001}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limits INT64_MIN", "PUT", "/v1/keys/{key}/limits", TOK_FULL,
     "{\"daily_limit_micros\":-9223372036854775808}", 0, NULL, 400, "invalid_request",
     "daily_limit_micros"},
    {"limits unknown field", "PUT", "/v1/keys/{key}/limits", TOK_FULL,
     "{\"daily_limit_micros\":1,\"role\":\"full\"}", 0, NULL, 400, "invalid_request", "role"},
    {"limits time zone type", "PUT", "/v1/keys/{key}/limits", TOK_FULL, "{\"time_zone\":5}", 0,
     NULL, 400, "invalid_request", "time_zone"},
    {"limits key 65 chars", "PUT", "/v1/keys/" ID65 "/limits", TOK_FULL,
     "{\"daily_limit_micros\":1}", 0, NULL, 400, "invalid_request", "key_id"},
    {"limits key unknown", "PUT", "/v1/keys/key_unknown/limits", TOK_FULL,
     "{\"daily_limit_micros\":1}", 0, NULL, 404, "not_found", NULL},
    {"limits query", "PUT", "/v1/keys/{key}/limits?x=1", TOK_FULL, "{\"daily_limit_micros\":1}", 0,
     NULL, 400, "invalid_request", "x"},
    /* PUT /v1/prices. */
    {"prices no effective_from", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"cpu_micros_per_vcpu_hour\":1}", 0, NULL, 400, "invalid_request", "effective_from"},
    {"prices bad time", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"tomorrow\",\"cpu_micros_per_vcpu_hour\":25000,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":50,\"free_sandbox_hours\":50}",
     0, NULL, 400, "invalid_request", "effective_from"},
    {"prices February 30", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"2999-02-30T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":25000,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":50,\"free_sandbox_hours\":50}",
     0, NULL, 400, "invalid_request", "effective_from"},
    {"prices in the past", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"2001-01-01T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":25000,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":50,\"free_sandbox_hours\":50}",
     0, NULL, 400, "invalid_request", "effective_from"},
    {"prices negative rate", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"2999-01-01T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":-1,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":50,\"free_sandbox_hours\":50}",
     0, NULL, 400, "invalid_request", "cpu_micros_per_vcpu_hour"},
    {"prices floor too big", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"2999-01-01T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":1,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":1000001,\"free_sandbox_hours\":50}",
     0, NULL, 400, "invalid_request", "floor_millicores"},
    {"prices assumed not boolean", "PUT", "/v1/prices", TOK_OPERATOR,
     "{\"effective_from\":\"2999-01-01T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":1,"
     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
     "\"floor_millicores\":1,\"free_sandbox_hours\":50,\"storage_price_assumed\":\"yes\"}",
     0, NULL, 400, "invalid_request", "storage_price_assumed"},
    /* Read routes: query parameters and path ids. */
    {"sandbox id 65 chars", "GET", "/v1/sandboxes/" ID65, TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "sandbox_id"},
    {"sandbox unknown", "GET", "/v1/sandboxes/sbx_unknown", TOK_READ_ONLY, NULL, 0, NULL, 404,
     "not_found", NULL},
    {"key_id filter 65 chars", "GET", "/v1/sandboxes?key_id=" ID65, TOK_READ_ONLY, NULL, 0, NULL,
     400, "invalid_request", "key_id"},
    {"limit overflow", "GET", "/v1/sandboxes?limit=9223372036854775808", TOK_READ_ONLY, NULL, 0,
     NULL, 400, "invalid_request", "limit"},
    {"limit negative", "GET", "/v1/sandboxes?limit=-1", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "limit"},
    {"from with NUL", "GET", "/v1/usage?from=2026-01-01T00:00:00Z%00&to=2026-01-02T00:00:00Z",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "from"},
    {"from invalid UTF-8", "GET", "/v1/usage?from=%ff%fe&to=2026-01-02T00:00:00Z", TOK_READ_ONLY,
     NULL, 0, NULL, 400, "invalid_request", "from"},
    {"from year 99999", "GET", "/v1/usage?from=99999-01-01T00:00:00Z&to=2026-01-02T00:00:00Z",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "from"},
    {"to in year 10000 by its offset", "GET",
     "/v1/usage?from=9999-12-31T23:00:00Z&to=9999-12-31T23:59:59-23:59", TOK_READ_ONLY, NULL, 0,
     NULL, 400, "invalid_request", "to"},
    {"from leap second", "GET", "/v1/usage?from=2016-12-31T23:59:60Z&to=2017-01-02T00:00:00Z",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "from"},
    {"window minute", "GET", "/v1/sandboxes/{sbx}/usage?window=minute", TOK_READ_ONLY, NULL, 0,
     NULL, 400, "invalid_request", "window"},
    {"usage unknown parameter", "GET", "/v1/usage?acount_id=x", TOK_OPERATOR, NULL, 0, NULL, 400,
     "invalid_request", "acount_id"},
    {"keys account missing", "GET", "/v1/keys", TOK_OPERATOR, NULL, 0, NULL, 400, "invalid_request",
     "account_id"},
    {"query: a value without a name", "GET", "/v1/keys?=x", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "query"},
    {"query: an empty parameter", "GET", "/v1/keys?&&", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "query"},
    {"keys account 65 chars", "GET", "/v1/keys?account_id=" ID65, TOK_OPERATOR, NULL, 0, NULL, 400,
     "invalid_request", "account_id"},
    /* Bodies over 64 KiB. */
    {"oversized body", "POST", "/v1/accounts", TOK_OPERATOR, "BIG", 0, NULL, 413,
     "payload_too_large", NULL},
    {"oversized chunked body", "POST", "/v1/accounts", TOK_OPERATOR, "BIG", 0,
     "Transfer-Encoding: chunked", 413, "payload_too_large", NULL},
    {"body on a GET", "GET", "/v1/keys", TOK_READ_ONLY, "{\"x\":1}", 0, NULL, 413,
     "payload_too_large", NULL},
    /* Wrong methods. */
    {"DELETE keys", "DELETE", "/v1/keys", TOK_OPERATOR, NULL, 0, NULL, 405, "method_not_allowed",
     NULL},
    {"PATCH prices", "PATCH", "/v1/prices", TOK_OPERATOR, "{}", 0, NULL, 405, "method_not_allowed",
     NULL},
    {"GET accounts", "GET", "/v1/accounts", TOK_OPERATOR, NULL, 0, NULL, 405, "method_not_allowed",
     NULL},
    {"POST a key", "POST", "/v1/keys/{key}", TOK_FULL, "{}", 0, NULL, 405, "method_not_allowed",
     NULL},
    {"PUT healthz", "PUT", "/healthz", TOK_NONE, NULL, 0, NULL, 405, "method_not_allowed", NULL},
    {"unknown path", "GET", "/v1/nothing", TOK_OPERATOR, NULL, 0, NULL, 404, "not_found", NULL},
    /* Authorization headers. */
    {"no auth", "GET", "/v1/keys", TOK_NONE, NULL, 0, NULL, 401, "unauthorized", NULL},
    {"two Authorization lines, a valid one first", "GET", "/v1/keys", TOK_READ_ONLY, NULL, 0,
     "Authorization: Bearer other", 401, "unauthorized", NULL},
    {"empty bearer", "GET", "/v1/keys", TOK_NONE, NULL, 0, "Authorization: Bearer", 401,
     "unauthorized", NULL},
    {"basic auth", "GET", "/v1/keys", TOK_NONE, NULL, 0, "Authorization: Basic YTpi", 401,
     "unauthorized", NULL},
    {"lower-case scheme", "GET", "/v1/keys", TOK_NONE, NULL, 0, "Authorization: bearer abc", 401,
     "unauthorized", NULL},
    {"token with spaces", "GET", "/v1/keys", TOK_NONE, NULL, 0,
     "Authorization: Bearer key_1 .abc def", 401, "unauthorized", NULL},
    {"token of dots", "GET", "/v1/keys", TOK_NONE, NULL, 0, "Authorization: Bearer ....", 401,
     "unauthorized", NULL},
    {"token id 65 chars", "GET", "/v1/keys", TOK_NONE, NULL, 0,
     "Authorization: Bearer " ID65 ".AAAA", 401, "unauthorized", NULL},
    {"long token", "GET", "/v1/keys", TOK_NONE, NULL, 0, "LONGAUTH", 401, "unauthorized", NULL},
    {"token with high bytes", "GET", "/v1/keys", TOK_NONE, NULL, 0,
     "Authorization: Bearer \xff\xfe.\xff", 401, "unauthorized", NULL},
    /* Over-long ids in bodies of the control plane's routes. */
    {"check key_id 65 chars", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"" ID65 "\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "key_id"},
    {"check sandbox_id bad", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"a/b\",\"vcpus\":1,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "sandbox_id"},
    {"check sandbox_id dot", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\".\",\"vcpus\":1,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "sandbox_id"},
    {"check sandbox_id dot dot", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"..\",\"vcpus\":1,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "sandbox_id"},
    /* Only a new sandbox's name: elsewhere "." and ".." are ids. */
    {"check idempotency key dot dot", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,"
     "\"lease_seconds\":60,\"idempotency_key\":\"..\"}",
     0, NULL, 404, "key_not_found", NULL},
    {"wake sandbox_id dot dot", "POST", "/v1/checks/wake", TOK_CONTROL_PLANE,
     "{\"sandbox_id\":\"..\",\"lease_seconds\":60}", 0, NULL, 404, "sandbox_not_found", NULL},
    {"check vcpus zero", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":0,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "vcpus"},
    {"check vcpus overflow", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":99999999999999999999,\"memory_mib\":512,"
     "\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", NULL},
    {"check vcpus 1025", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1025,\"memory_mib\":512,\"lease_seconds\":"
     "60}",
     0, NULL, 400, "invalid_request", "vcpus"},
    {"check vcpus string", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":\"2\",\"memory_mib\":512,\"lease_seconds\":"
     "60}",
     0, NULL, 400, "invalid_request", "vcpus"},
    {"check vcpus real", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":2.0,\"memory_mib\":512,\"lease_seconds\":"
     "60}",
     0, NULL, 400, "invalid_request", "vcpus"},
    {"check memory too big", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":16777217,\"lease_"
     "seconds\":60}",
     0, NULL, 400, "invalid_request", "memory_mib"},
    {"check memory negative", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":-1,\"lease_seconds\":60}",
     0, NULL, 400, "invalid_request", "memory_mib"},
    {"check lease zero", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":0}",
     0, NULL, 400, "invalid_request", "lease_seconds"},
    {"check lease over a day", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":"
     "86401}",
     0, NULL, 400, "invalid_request", "lease_seconds"},
    {"check lease missing", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512}", 0, NULL, 400,
     "invalid_request", "lease_seconds"},
    {"check max cost negative", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":60,"
     "\"max_cost_micros\":-1}",
     0, NULL, 400, "invalid_request", "max_cost_micros"},
    {"check max cost string", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":60,"
     "\"max_cost_micros\":\"5\"}",
     0, NULL, 400, "invalid_request", "max_cost_micros"},
    {"check max cost past 64 bits", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":60,"
     "\"max_cost_micros\":9223372036854775808}",
     0, NULL, 400, "invalid_request", "max_cost_micros"},
    {"check idempotency key bad", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":60,"
     "\"idempotency_key\":\"a b\"}",
     0, NULL, 400, "invalid_request", "idempotency_key"},
    {"check unknown field", "POST", "/v1/checks/create", TOK_CONTROL_PLANE,
     "{\"key_id\":\"k\",\"sandbox_id\":\"s1\",\"vcpus\":1,\"memory_mib\":512,\"lease_seconds\":60,"
     "\"color\":1}",
     0, NULL, 400, "invalid_request", "color"},
    {"wake sandbox_id missing", "POST", "/v1/checks/wake", TOK_CONTROL_PLANE,
     "{\"lease_seconds\":60}", 0, NULL, 400, "invalid_request", "sandbox_id"},
    {"wake sandbox_id NUL", "POST", "/v1/checks/wake", TOK_CONTROL_PLANE,
     "{\"sandbox_id\":\"a\\u0000b\",\"lease_seconds\":60}", 0, NULL, 400, "invalid_request", NULL},
    {"wake lease negative", "POST", "/v1/checks/wake", TOK_CONTROL_PLANE,
     "{\"sandbox_id\":\"s1\",\"lease_seconds\":-5}", 0, NULL, 400, "invalid_request",
     "lease_seconds"},
    {"wake unknown field", "POST", "/v1/checks/wake", TOK_CONTROL_PLANE,
     "{\"sandbox_id\":\"s1\",\"lease_seconds\":5,\"vcpus\":1}", 0, NULL, 400, "invalid_request",
     "vcpus"},
    {"event type bad", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"exploded\",\"at\":\"2026-01-01T00:00:00Z\"}", 0, NULL, 400, "invalid_request",
     "type"},
    {"event at bad", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":\"2026-02-30T00:00:00Z\"}", 0, NULL, 400, "invalid_request",
     "at"},
    {"event at next century", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":\"2126-01-01T00:00:00Z\"}", 0, NULL, 400, "invalid_request",
     "at"},
    {"event at 1969", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":\"1969-12-31T23:59:59Z\"}", 0, NULL, 400, "invalid_request",
     "at"},
    {"event at number", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":17}", 0, NULL, 400, "invalid_request", "at"},
    {"event unknown field", "POST", "/v1/sandboxes/{sbx}/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":\"2026-01-01T00:00:00Z\",\"x\":1}", 0, NULL, 400,
     "invalid_request", "x"},
    {"event sandbox 65 chars", "POST", "/v1/sandboxes/" ID65 "/events", TOK_CONTROL_PLANE,
     "{\"type\":\"paused\",\"at\":\"2026-01-01T00:00:00Z\"}", 0, NULL, 400, "invalid_request",
     "sandbox_id"},
    {"check by a full key", "POST", "/v1/checks/create", TOK_FULL, "{}", 0, NULL, 403, "forbidden",
     NULL},
    {"event by the operator", "POST", "/v1/sandboxes/{sbx}/events", TOK_OPERATOR, "{}", 0, NULL,
     403, "forbidden", NULL},
    {"GET checks", "GET", "/v1/checks/create", TOK_CONTROL_PLANE, NULL, 0, NULL, 405,
     "method_not_allowed", NULL},

/* Exports and statements: query parameters. */
#define RANGE "from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z"
    {"export: no range", "GET", "/v1/reports/usage.csv", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "from"},
    {"export: from not a time", "GET",
     "/v1/reports/usage.csv?from=yesterday&to=2026-11-02T00:00:00Z", TOK_READ_ONLY, NULL, 0, NULL,
     400, "invalid_request", "from"},
    {"export: from off the hour", "GET",
     "/v1/reports/usage.csv?from=2026-11-01T00:30:00Z&to=2026-11-02T00:00:00Z", TOK_READ_ONLY, NULL,
     0, NULL, 400, "invalid_request", "from"},
    {"export: to before from", "GET",
     "/v1/reports/usage.ndjson?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z", TOK_READ_ONLY,
     NULL, 0, NULL, 400, "invalid_request", "to"},
    {"export: range over 400 days", "GET",
     "/v1/reports/usage.csv?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", TOK_READ_ONLY, NULL,
     0, NULL, 400, "invalid_request", "to"},
    {"export: bad granularity", "GET", "/v1/reports/usage.csv?" RANGE "&granularity=week",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "granularity"},
    {"export: key id 65 chars", "GET", "/v1/reports/usage.csv?" RANGE "&key_id=" ID65,
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "key_id"},
    {"export: sandbox id with '<'", "GET", "/v1/reports/usage.csv?" RANGE "&sandbox_id=%3Cx%3E",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "sandbox_id"},
    {"export: account id with a space, key", "GET",
     "/v1/reports/usage.csv?" RANGE "&account_id=a%20b", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "account_id"},
    {"statement: account id 65 chars, key", "GET",
     "/v1/reports/statement.csv?month=2026-11&account_id=" ID65, TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "account_id"},
    /* A filter named without '=' is an empty one, never no filter: a
     * script whose variable was unset would otherwise export the whole
     * account. */
    {"export: key_id without a value", "GET", "/v1/reports/usage.csv?" RANGE "&key_id",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "key_id"},
    {"export: sandbox_id without a value", "GET", "/v1/reports/usage.ndjson?" RANGE "&sandbox_id",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "sandbox_id"},
    {"export: granularity without a value", "GET", "/v1/reports/usage.csv?" RANGE "&granularity",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "granularity"},
    {"export: account_id without a value", "GET", "/v1/reports/usage.csv?" RANGE "&account_id",
     TOK_OPERATOR, NULL, 0, NULL, 400, "invalid_request", "account_id"},
    {"statement: month without a value", "GET", "/v1/reports/statement.csv?month", TOK_READ_ONLY,
     NULL, 0, NULL, 400, "invalid_request", "month"},
    {"sandboxes: cursor without a value", "GET", "/v1/sandboxes?cursor", TOK_READ_ONLY, NULL, 0,
     NULL, 400, "invalid_request", "cursor"},
    {"export: unknown parameter", "GET", "/v1/reports/usage.csv?" RANGE "&format=xlsx",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "format"},
    {"export: from given twice", "GET", "/v1/reports/usage.csv?" RANGE "&from=2026-10-01T00:00:00Z",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "from"},
    {"statement: month given twice", "GET", "/v1/reports/statement.csv?month=2026-11&month=2026-10",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "month"},
    /* A key or sandbox filter that names none of the account's: 404,
     * never an empty answer that looks like an idle key or sandbox. */
    {"sandboxes: no such key", "GET", "/v1/sandboxes?key_id=key_none", TOK_READ_ONLY, NULL, 0, NULL,
     404, "not_found", NULL},
    {"sandboxes: no such key (operator)", "GET", "/v1/sandboxes?key_id=key_none", TOK_OPERATOR,
     NULL, 0, NULL, 404, "not_found", NULL},
    {"export: no such key", "GET", "/v1/reports/usage.csv?" RANGE "&key_id=key_none", TOK_READ_ONLY,
     NULL, 0, NULL, 404, "not_found", NULL},
    {"export: no such sandbox", "GET", "/v1/reports/usage.ndjson?" RANGE "&sandbox_id=sbx_none",
     TOK_READ_ONLY, NULL, 0, NULL, 404, "not_found", NULL},
    {"export: operator without account", "GET", "/v1/reports/usage.csv?" RANGE, TOK_OPERATOR, NULL,
     0, NULL, 400, "invalid_request", "account_id"},
    {"export: wrong method", "POST", "/v1/reports/usage.csv?" RANGE, TOK_READ_ONLY, "{}", 0, NULL,
     405, "method_not_allowed", NULL},
    {"statement: no month", "GET", "/v1/reports/statement.csv", TOK_READ_ONLY, NULL, 0, NULL, 400,
     "invalid_request", "month"},
    {"statement: month 13", "GET", "/v1/reports/statement.html?month=2026-13", TOK_READ_ONLY, NULL,
     0, NULL, 400, "invalid_request", "month"},
    {"statement: unknown parameter", "GET", "/v1/reports/statement.csv?month=2026-11&x=1",
     TOK_READ_ONLY, NULL, 0, NULL, 400, "invalid_request", "x"},
};

static struct apitest t;
static char acc[65], key[65], ro_key[65];
static char tok_full[APITEST_TOKEN_MAX], tok_ro[APITEST_TOKEN_MAX];

/* Replaces {acc}, {key}, {sbx} in in. */
static void fill(const char *in, char *out, size_t len)
{
	size_t n = 0;

	while (*in && n + 1 < len) {
		const char *v = NULL;
		size_t skip = 0;

		if (strncmp(in, "{acc}", 5) == 0)
			v = acc, skip = 5;
		else if (strncmp(in, "{key}", 5) == 0)
			v = key, skip = 5;
		else if (strncmp(in, "{sbx}", 5) == 0)
			v = "sbx_bad", skip = 5;
		if (v) {
			int w = snprintf(out + n, len - n, "%s", v);

			if (w < 0 || (size_t)w >= len - n)
				break;
			n += (size_t)w;
			in += skip;
		} else {
			out[n++] = *in++;
		}
	}
	out[n] = '\0';
}

static const char *token_of(enum tok tok)
{
	switch (tok) {
	case TOK_OPERATOR:
		return t.operator_token;
	case TOK_CONTROL_PLANE:
		return t.control_plane_token;
	case TOK_FULL:
		return tok_full;
	case TOK_READ_ONLY:
		return tok_ro;
	case TOK_NONE:
	default:
		return NULL;
	}
}

/* PUT /v1/keys/{key}/limits (the test's key) as raw bytes, its body framed by the header
 * line framing: answered 200, with want in the key it answers. */
static void put_limits_raw(const char *framing, const char *body, const char *want)
{
	struct rawhttp_resp rr;
	char req[512];
	int n;

	n = snprintf(req, sizeof(req),
		     "PUT /v1/keys/%s/limits HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
		     "Content-Type: application/json\r\n%sConnection: close\r\n\r\n%s",
		     key, tok_full, framing, body);
	CHECK(n > 0 && (size_t)n < sizeof(req));
	CHECK(rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, &rr) == 0);
	CHECK_I64(rr.status, 200);
	CHECK(rr.body && strstr(rr.body, want) != NULL);
	rawhttp_resp_release(&rr);
}

static void run_case(const struct bad_case *c, char *big, size_t big_len, char *longauth)
{
	char path[512];
	const char *hdrs[2] = {NULL, NULL};
	struct apitest_req rq = {.method = c->method, .token = token_of(c->tok), .headers = hdrs};
	struct apitest_resp r;
	const char *field;

	fill(c->path, path, sizeof(path));
	rq.path = path;
	if (c->header)
		hdrs[0] = strcmp(c->header, "LONGAUTH") == 0 ? longauth : c->header;
	if (c->body && strcmp(c->body, "BIG") == 0) {
		rq.body = big;
		rq.body_len = big_len;
	} else if (c->body) {
		rq.body = c->body;
		rq.body_len = c->len ? c->len : strlen(c->body);
	}
	apitest_do(&t, 0, &rq, &r);
	field = json_string_value(json_object_get(json_object_get(r.json, "error"), "field"));
	if (r.status != c->want_status || strcmp(apitest_error_code(&r), c->want_code) != 0 ||
	    (c->want_field && (!field || strcmp(field, c->want_field) != 0)))
		fprintf(stderr, "case \"%s\": got %ld %.300s %s\n", c->name, r.status, r.body,
			r.error);
	CHECK_I64(r.status, c->want_status);
	CHECK_STR(apitest_error_code(&r), c->want_code);
	CHECK(json_is_string(json_object_get(json_object_get(r.json, "error"), "message")));
	/* The parser's own words name its flags, not what the client did. */
	CHECK(!r.body || !strstr(r.body, "JSON_ALLOW"));
	if (c->want_field)
		CHECK_STR(field ? field : "", c->want_field);
	apitest_resp_release(&r);
}

/* A made-up account key on the samples route (16 MiB cap, no account key
 * allowed): its look-up decides only how it is refused, so its body is not
 * kept while it arrives. Connections that each sent 8 MiB and wait for the
 * rest leave meterd's memory about where it was; each is then answered
 * 401 as soon as its body is in, and a read_only key's request with a body
 * still gets read_only_key. */
static void test_unknown_key_body(void)
{
	enum { CONNS = 6, SENT = 8 * 1024 * 1024 };
	char head[512], *chunk = malloc(SENT), fresh[65], tok_fresh[APITEST_TOKEN_MAX];
	int fds[CONNS], n;
	long long before, after;
	struct rawhttp_resp rr;

	CHECK(chunk != NULL);
	if (!chunk)
		return;
	memset(chunk, ' ', SENT);
	n = snprintf(head, sizeof(head),
		     "POST /v1/samples HTTP/1.1\r\nHost: x\r\n"
		     "Authorization: Bearer key_0123456789abcdef.%064d\r\n"
		     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		     7, SENT + 2);
	before = apitest_proc_kib(t.servers[0].pid, "VmRSS");
	for (int i = 0; i < CONNS; i++) {
		fds[i] = rawhttp_connect(t.servers[0].port);
		CHECK(fds[i] >= 0);
		CHECK(fds[i] < 0 || rawhttp_send(fds[i], head, (size_t)n, 5000) == 0);
		CHECK(fds[i] < 0 || rawhttp_send(fds[i], chunk, SENT, 20000) == 0);
	}
	usleep(300 * 1000);
	after = apitest_proc_kib(t.servers[0].pid, "VmRSS");
	fprintf(stderr,
		"meterd's memory: %lld KiB before, %lld KiB with %d bodies of 8 MiB"
		" in flight\n",
		before, after, CONNS);
	CHECK(before > 0 && after > 0);
	CHECK(after - before < 16 * 1024); /* kept, they would be 48 MiB and more */
	for (int i = 0; i < CONNS; i++) {
		if (fds[i] < 0)
			continue;
		CHECK(rawhttp_send(fds[i], "{}", 2, 5000) == 0);
		CHECK(rawhttp_read(fds[i], 10000, 4096, &rr) == 0);
		CHECK_I64(rr.status, 401);
		CHECK(rr.body && strstr(rr.body, "\"unauthorized\"") != NULL);
		rawhttp_resp_release(&rr);
		close(fds[i]);
	}
	/* A read_only key never used yet, so not in the key cache: looked
	 * up, with its body dropped. */
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, fresh, tok_fresh) == 0);
	n = snprintf(head, sizeof(head),
		     "POST /v1/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
		     "Content-Type: application/json\r\nContent-Length: 2\r\n"
		     "Connection: close\r\n\r\n{}",
		     tok_fresh);
	CHECK(rawhttp_request(t.servers[0].port, head, (size_t)n, 10000, &rr) == 0);
	CHECK_I64(rr.status, 403);
	CHECK(rr.body && strstr(rr.body, "\"read_only_key\"") != NULL);
	rawhttp_resp_release(&rr);
	free(chunk);
}

/* A body declared over the cap (length bytes) with Expect: 100-continue, by
 * a caller whose key is looked up (not in the key cache, or unknown): the
 * final answer comes at once, never a 100 Continue that would have the
 * client send it all (10 MB here) to be dropped. */
static void expect_early(const char *method, const char *path, const char *token,
			 const char *length, int want, const char *code)
{
	char head[512], first[16] = "";
	struct rawhttp_resp rr;
	struct pollfd pfd;
	int n, fd = rawhttp_connect(t.servers[0].port);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	n = snprintf(head, sizeof(head),
		     "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
		     "Content-Type: application/json\r\nContent-Length: %s\r\n"
		     "Expect: 100-continue\r\n\r\n",
		     method, path, token, length);
	CHECK(rawhttp_send(fd, head, (size_t)n, 5000) == 0);
	pfd = (struct pollfd){.fd = fd, .events = POLLIN};
	if (poll(&pfd, 1, 5000) == 1)
		(void)recv(fd, first, sizeof(first) - 1, MSG_PEEK);
	if (strncmp(first, "HTTP/1.1 100", 12) == 0)
		fprintf(stderr, "%s %s: 100 Continue for a body over the cap\n", method, path);
	CHECK(strncmp(first, "HTTP/1.1 100", 12) != 0);
	CHECK(rawhttp_read(fd, 5000, 4096, &rr) == 0);
	CHECK_I64(rr.status, want);
	CHECK(rr.body && strstr(rr.body, code) != NULL);
	rawhttp_resp_release(&rr);
	close(fd);
}

/* GET /v1/keys with the Authorization header's value given as is, read
 * into rr (released by the caller). */
static void keys_with_authorization(const char *value, struct rawhttp_resp *rr)
{
	char req[512];
	int n = snprintf(req, sizeof(req),
			 "GET /v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n"
			 "Connection: close\r\n\r\n",
			 value);

	CHECK(rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, rr) == 0);
}

/* Sends "method target version" as the test's full key, the connection
 * closed after it, into rr (released by the caller); returns as
 * rawhttp_request. */
static int raw_as_full(const char *method, const char *target, const char *version,
		       struct rawhttp_resp *rr)
{
	char req[512];
	int n = snprintf(req, sizeof(req),
			 "%s %s %s\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			 "Connection: close\r\n\r\n",
			 method, target, version, tok_full);

	CHECK(n > 0 && (size_t)n < sizeof(req));
	return rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, rr);
}

/* Whitespace around a bearer token is not part of it: more than one space
 * after the scheme, and spaces or a tab after the token (which a proxy may
 * leave), name the same key. Only spaces is no token at all. */
static void test_bearer_whitespace(void)
{
	static const char *const forms[][2] = {
	    {"Bearer  ", ""}, {"Bearer ", " "}, {"Bearer ", "\t"}, {"bearer   ", " \t"}};
	struct rawhttp_resp rr;
	char value[256];

	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(value, sizeof(value), "%s%s%s", forms[i][0], tok_ro, forms[i][1]);
		keys_with_authorization(value, &rr);
		if (rr.status != 200)
			fprintf(stderr, "Authorization form %zu: %d %s\n", i, rr.status,
				rr.body ? rr.body : "");
		CHECK_I64(rr.status, 200);
		rawhttp_resp_release(&rr);
	}
	keys_with_authorization("Bearer  \t ", &rr);
	CHECK_I64(rr.status, 401);
	CHECK(rr.body && strstr(rr.body, "malformed bearer token") != NULL);
	rawhttp_resp_release(&rr);
}

static void test_expect_over_cap(void)
{
	char fresh[65], tok_fresh[APITEST_TOKEN_MAX], path[128];
	const char *unknown = "key_0123456789abcdef.0000000000000000000000000000000000000000000";

	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, fresh, tok_fresh) == 0);
	snprintf(path, sizeof(path), "/v1/keys/%s/limits", fresh);
	/* Allowed: 413 (the route takes 64 KiB). Unknown: 401. */
	expect_early("PUT", path, tok_fresh, "10000000", 413, "\"payload_too_large\"");
	expect_early("PUT", path, unknown, "10000000", 401, "\"unauthorized\"");
	expect_early("POST", "/v1/accounts", unknown, "10000000", 401, "\"unauthorized\"");
	/* A route the key may not call: its refusal. */
	expect_early("POST", "/v1/checks/create", tok_fresh, "10000000", 403, "\"forbidden\"");
	/* Lengths past 64 signed bits, which libmicrohttpd takes up to
	 * 2^64 - 1: over the cap as well. */
	expect_early("PUT", path, tok_fresh, "9223372036854775808", 413, "\"payload_too_large\"");
	expect_early("PUT", path, tok_fresh, "18446744073709551615", 413, "\"payload_too_large\"");
}

int main(void)
{
	enum { BIG = 70 * 1024 };
	char *big = malloc(BIG + 1), *longauth = malloc(8200);
	struct apitest_resp r;
	char sql[512];

	if (!big || !longauth) {
		free(big);
		free(longauth);
		return 1;
	}
	/* A syntactically fine body just over the cap. */
	memset(big, 'a', BIG);
	memcpy(big, "{\"name\":\"", 9);
	memcpy(big + BIG - 2, "\"}", 2);
	big[BIG] = '\0';
	memcpy(longauth, "Authorization: Bearer ", 22);
	memset(longauth + 22, 'k', 8100);
	longauth[8122] = '.';
	longauth[8123] = 'A';
	longauth[8124] = '\0';

	if (apitest_start(&t, "api_badinput", 1, NULL, NULL) < 0) {
		free(big);
		free(longauth);
		return 1;
	}
	CHECK(apitest_create_account(&t, "bad input", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, tok_full) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, ro_key, tok_ro) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', 'sbx_bad', '%s', 1, 512, 'running')",
		 acc, key);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i], big, BIG, longauth);

	/* A time with nanoseconds (RFC 3339 allows any number of fraction
	 * digits, and Go's RFC3339Nano writes nine): the digits past the
	 * microsecond are dropped, the event is taken. */
	{
		char body[128], stamp[32];
		time_t now = apitest_now();
		struct tm tm;

		gmtime_r(&now, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(body, sizeof(body), "{\"type\":\"paused\",\"at\":\"%s.123456789Z\"}",
			 stamp);
		CHECK(apitest_call(&t, 0, "POST", "/v1/sandboxes/sbx_bad/events",
				   t.control_plane_token, body, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
		snprintf(sql, sizeof(sql),
			 "SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
			 " FROM lifecycle_events WHERE sandbox_id = 'sbx_bad'");
		snprintf(body, sizeof(body), "%s.123456", stamp);
		{
			char got[64];

			testdb_query_text(t.db.conn, sql, got, sizeof(got));
			CHECK_STR(got, body);
		}
	}

	/* An offset's '+' sent unescaped in a query reads as a space: the
	 * refusal says to send %2B, and the time so sent is taken. */
	CHECK(apitest_call(&t, 0, "GET",
			   "/v1/usage?from=2026-01-01T00:00:00+01:00&to=2026-01-02T00:00:00Z",
			   tok_ro, NULL, &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK(r.body && strstr(r.body, "\"field\":\"from\"") && strstr(r.body, "%2B"));
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET",
			   "/v1/usage?from=2026-01-01T00:00:00%2B01:00&to=2026-01-02T00:00:00Z",
			   tok_ro, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET",
			   "/v1/usage?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00X", tok_ro,
			   NULL, &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK(r.body && strstr(r.body, "\"field\":\"to\"") && !strstr(r.body, "%2B"));
	apitest_resp_release(&r);

	/* HEAD is a GET without its body; a Content-Length with leading
	 * zeros (valid HTTP) is read as its number. */
	{
		struct rawhttp_resp rr;
		char req[512], id[80];
		int n;

		n = snprintf(req, sizeof(req),
			     "HEAD /v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			     "Connection: close\r\n\r\n",
			     tok_ro);
		/* The reader expects the body Content-Length announces: the
		 * connection closes before any comes. */
		rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, &rr);
		CHECK_I64(rr.status, 200);
		CHECK_I64((long long)rr.body_len, 0);
		CHECK(rr.head && rawhttp_header(&rr, "X-Request-Id", id, sizeof(id)) != NULL);
		rawhttp_resp_release(&rr);
		/* The scheme's name in any case (RFC 9110, 11.1). */
		{
			char value[256];

			snprintf(value, sizeof(value), "bEARER %s", tok_ro);
			keys_with_authorization(value, &rr);
		}
		CHECK_I64(rr.status, 200);
		rawhttp_resp_release(&rr);
		n = snprintf(req, sizeof(req),
			     "PUT /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
			     "Connection: close\r\n\r\n");
		CHECK(rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, &rr) == 0);
		CHECK_I64(rr.status, 405);
		CHECK_STR(rawhttp_header(&rr, "Allow", id, sizeof(id)), "GET, HEAD");
		rawhttp_resp_release(&rr);
		put_limits_raw("Content-Length: 0026\r\n", "{\"daily_limit_micros\":123}",
			       "\"daily_limit_micros\":123");
	}
	/* A query of many parameters: libmicrohttpd keeps each as a record in
	 * the connection's 64 KiB, and when they did not fit (about 900
	 * short ones) the connection hung unanswered until its timeout (30
	 * s). More than 64 are refused at once; 64 are served, and so is one
	 * parameter of 60,000 bytes. The refusal closes the connection (the
	 * request asks to keep it). */
	for (int way = 0; way < 4; way++) {
		static const int params[] = {64, 65, 1000, 1};
		struct rawhttp_resp rr;
		size_t cap = 70000, len;
		char *req = malloc(cap);
		long long t0 = rawhttp_now_ms();

		if (!req)
			break;
		len = (size_t)snprintf(req, cap, "GET /healthz?");
		for (int i = 0; i < params[way]; i++)
			len += (size_t)snprintf(req + len, cap - len, "%sa%d=1", i ? "&" : "", i);
		if (way == 3) {
			memset(req + len, 'x', 60000);
			len += 60000;
		}
		len += (size_t)snprintf(req + len, cap - len, " HTTP/1.1\r\nHost: x\r\n\r\n");
		CHECK(rawhttp_request(t.servers[0].port, req, len, 10000, &rr) == 0);
		CHECK(rawhttp_now_ms() - t0 < 5000);
		if (params[way] > 64) {
			char conn[32];

			CHECK_I64(rr.status, 400);
			CHECK(rr.body && strstr(rr.body, "\"field\":\"query\"") != NULL);
			CHECK_STR(rawhttp_header(&rr, "Connection", conn, sizeof(conn)), "close");
		} else {
			CHECK_I64(rr.status, 200);
		}
		rawhttp_resp_release(&rr);
		free(req);
	}
	/* A body whose length the headers do not tell one way, on a
	 * connection kept alive: two Content-Lengths that differ (in either
	 * order), a Content-Length beside chunks, a coding other than chunked
	 * alone. Read one way, what lies past the body would be a request of
	 * its own (here one that creates an account) where a proxy framing it
	 * the other way saw one request; for the last, libmicrohttpd waited
	 * for the connection's timeout. Refused at once by this service's code
	 * (its error names the field), and the connection closed, so nothing
	 * past the headers is read. Chunks alone are read as they are. */
	for (int way = 0; way < 8; way++) {
		static const char *const codings[] = {"gzip", "chunked, chunked", "chunked "};
		struct rawhttp_resp rr;
		char inner[256], body[320], framing[96], req[1024], id[80];
		int m, k, n;

		m = snprintf(inner, sizeof(inner),
			     "POST /v1/accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			     "Content-Type: application/json\r\nContent-Length: 19\r\n\r\n"
			     "{\"name\":\"Smuggle\"}",
			     t.operator_token);
		if (way < 2) {
			k = snprintf(body, sizeof(body), "{\"a\":%s", inner);
			snprintf(framing, sizeof(framing),
				 "Content-Length: %d\r\nContent-Length: %d\r\n", way ? k : 5,
				 way ? 5 : k);
		} else if (way == 2) {
			k = snprintf(body, sizeof(body), "5\r\n{\"a\":\r\n0\r\n\r\n%s", inner);
			snprintf(framing, sizeof(framing),
				 "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", k);
		} else if (way < 6) {
			k = snprintf(body, sizeof(body), "5\r\n{\"a\":\r\n0\r\n\r\n%s", inner);
			snprintf(framing, sizeof(framing), "Transfer-Encoding: %s\r\n",
				 codings[way - 3]);
		} else if (way == 6) {
			/* A blank before the colon: libmicrohttpd names the
			 * header "Content-Length " and frames no body by it. */
			k = snprintf(body, sizeof(body), "{\"a\":1}%s", inner);
			snprintf(framing, sizeof(framing), "Content-Length : 7\r\n");
		} else {
			k = snprintf(body, sizeof(body), "5\r\n{\"a\":\r\n0\r\n\r\n%s", inner);
			snprintf(framing, sizeof(framing), "Transfer-Encoding\t: chunked\r\n");
		}
		n = snprintf(req, sizeof(req),
			     "POST /v1/accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			     "Content-Type: application/json\r\n%s\r\n%s",
			     t.operator_token, framing, body);
		CHECK(m > 0 && k > 0 && n > 0 && (size_t)n < sizeof(req));
		CHECK(rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, &rr) == 0);
		CHECK_I64(rr.status, 400);
		CHECK(rr.body && strstr(rr.body, way < 3 || way == 6
						     ? "\"field\":\"Content-Length\""
						     : "\"field\":\"Transfer-Encoding\"") != NULL);
		CHECK(rr.head && rawhttp_header(&rr, "X-Request-Id", id, sizeof(id)) != NULL);
		CHECK(rr.closed);
		rawhttp_resp_release(&rr);
	}
	put_limits_raw("Transfer-Encoding: Chunked\r\n",
		       "1a\r\n{\"daily_limit_micros\":124}\r\n0\r\n\r\n",
		       "\"daily_limit_micros\":124");
	/* "." and ".." are ids in a path (a sandbox metering met may be so
	 * named), sent raw since a URL library would drop them; only a create
	 * check refuses them as a new sandbox's name (above). */
	{
		static const struct {
			const char *path;
			long status;
			const char *want;
		} dots[] = {
		    {"/v1/sandboxes/.", 404, "\"not_found\""},
		    {"/v1/sandboxes/..", 404, "\"not_found\""},
		    {"/v1/sandboxes/../usage", 404, "\"not_found\""},
		    {"/v1/sandboxes/...", 404, "\"not_found\""},
		    {"/v1/sandboxes/.%2F", 400, "\"field\":\"path\""},
		};
		struct rawhttp_resp rr;

		for (size_t i = 0; i < sizeof(dots) / sizeof(dots[0]); i++) {
			CHECK(raw_as_full("GET", dots[i].path, "HTTP/1.1", &rr) == 0);
			CHECK_I64(rr.status, dots[i].status);
			CHECK(rr.body && strstr(rr.body, dots[i].want) != NULL);
			rawhttp_resp_release(&rr);
		}
	}
	/* An export over HTTP/1.0, which has no chunks to show one cut short:
	 * 426 with Upgrade, GET and HEAD alike; over HTTP/1.1, chunked. */
	{
		static const struct {
			const char *method, *version;
			long status;
		} exp[] = {
		    {"GET", "HTTP/1.0", 426},
		    {"HEAD", "HTTP/1.0", 426},
		    {"GET", "HTTP/1.1", 200},
		};

		for (size_t i = 0; i < sizeof(exp) / sizeof(exp[0]); i++) {
			struct rawhttp_resp rr;
			char up[32] = "", te[32] = "";

			/* HEAD: its Content-Length announces a body it does not send,
			 * which the reader waits for until the close: its head is read. */
			CHECK(raw_as_full(
				  exp[i].method,
				  "/v1/reports/usage.csv?from=2026-11-01T00:00:00Z&to=2026-11-"
				  "02T00:00:00Z",
				  exp[i].version, &rr) == 0 ||
			      strcmp(exp[i].method, "HEAD") == 0);
			CHECK_I64(rr.status, exp[i].status);
			if (exp[i].status == 426) {
				CHECK_STR(rawhttp_header(&rr, "Upgrade", up, sizeof(up)),
					  "HTTP/1.1");
				CHECK(strcmp(exp[i].method, "HEAD") == 0 ||
				      (rr.body && strstr(rr.body, "\"upgrade_required\"") != NULL));
			} else {
				CHECK_STR(rawhttp_header(&rr, "Transfer-Encoding", te, sizeof(te)),
					  "chunked");
			}
			rawhttp_resp_release(&rr);
		}
	}
	/* A statement's CSV comes as a file named by its account and month. */
	{
		struct rawhttp_resp rr;
		char disp[128], want[128];

		CHECK(raw_as_full("GET", "/v1/reports/statement.csv?month=2026-11", "HTTP/1.1",
				  &rr) == 0);
		CHECK_I64(rr.status, 200);
		snprintf(want, sizeof(want), "attachment; filename=\"statement-%s-2026-11.csv\"",
			 acc);
		CHECK_STR(rawhttp_header(&rr, "Content-Disposition", disp, sizeof(disp)), want);
		rawhttp_resp_release(&rr);
	}
	/* HTTP/1.1 (and 1.2 to 1.9) needs exactly one Host line; HTTP/1.0 none. A target in
	 * absolute-form is served by its path. */
	{
		static const struct {
			const char *head;
			long status;
		} hosts[] = {
		    {"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400},
		    {"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
		     400},
		    {"GET /healthz HTTP/1.0\r\n\r\n", 200},
		    /* A later 1.x is served as 1.1: its Host too. */
		    {"GET /healthz HTTP/1.2\r\nConnection: close\r\n\r\n", 400},
		    {"GET /healthz HTTP/1.9\r\nConnection: close\r\n\r\n", 400},
		    {"GET /healthz HTTP/1.2\r\nHost: a\r\nConnection: close\r\n\r\n", 200},
		    {"GET http://127.0.0.1:1/healthz HTTP/1.1\r\nHost: a\r\nConnection: "
		     "close\r\n\r\n",
		     200},
		    {"GET HTTPS://a/v1/none?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		     404},
		};

		for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
			struct rawhttp_resp rr;

			CHECK(rawhttp_request(t.servers[0].port, hosts[i].head,
					      strlen(hosts[i].head), 5000, &rr) == 0);
			CHECK_I64(rr.status, hosts[i].status);
			if (hosts[i].status == 400)
				CHECK(rr.body && strstr(rr.body, "\"field\":\"Host\"") != NULL);
			CHECK(rr.closed);
			rawhttp_resp_release(&rr);
		}
	}

	/* A NUL byte in the request line or a header line. libmicrohttpd
	 * hands each part over as a C string, cut at the NUL: each of these
	 * would create an account (its path, method or framing read up to the
	 * NUL; the last one's headers end at a line that starts with one). (A
	 * Content-Length cut to nothing is libmicrohttpd's own 400.) A header
	 * line folded onto the next is refused the same way.
	 * Refused, naming the part, and the connection closed. Spaces, tabs,
	 * bare LFs and an empty value are no NUL: the head after them is
	 * served. */
	{
#define NUL_PART(s)                                                                                \
	{                                                                                          \
		s, sizeof(s) - 1                                                                   \
	}
		static const struct {
			struct {
				const char *s;
				size_t len;
			} line, framing;
			const char *field;
		} nuls[] = {
		    {NUL_PART("POST /v1/accounts\0x HTTP/1.1"), NUL_PART("Content-Length: 18\r\n"),
		     "path"},
		    {NUL_PART("POST\0X /v1/accounts HTTP/1.1"), NUL_PART("Content-Length: 18\r\n"),
		     "method"},
		    {NUL_PART("POST /v1/accounts HTTP/1.1"),
		     NUL_PART("Content-Length: 18\0 99\r\n"), "Content-Length"},
		    {NUL_PART("POST /v1/accounts HTTP/1.1"),
		     NUL_PART("Content-Length: 18\r\nX-Seen:\0 b\r\n"), "X-Seen"},
		    {NUL_PART("POST /v1/accounts HTTP/1.1"),
		     NUL_PART("Content-Length: 18\r\nX-Seen: a\0b\r\n"), "X-Seen"},
		    {NUL_PART("POST /v1/accounts HTTP/1.1"),
		     NUL_PART("Content-Length: 18\r\n\0X-After: 1\r\n"), "Content-Length"},
		    {NUL_PART("POST /v1/accounts HTTP/1.1"),
		     NUL_PART("Content-Length: 18\r\nX-Folded: a\r\n b\r\n"), "Content-Length"},
		};
#undef NUL_PART
		struct rawhttp_resp rr;
		char req[1024], want[64], id[80];
		int n;

		for (size_t i = 0; i < sizeof(nuls) / sizeof(nuls[0]); i++) {
			size_t len = 0;

			memcpy(req, nuls[i].line.s, nuls[i].line.len);
			len += nuls[i].line.len;
			n = snprintf(req + len, sizeof(req) - len,
				     "\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
				     "Content-Type: application/json\r\n",
				     t.operator_token);
			CHECK(n > 0 && len + (size_t)n + nuls[i].framing.len + 22 < sizeof(req));
			len += (size_t)n;
			memcpy(req + len, nuls[i].framing.s, nuls[i].framing.len);
			len += nuls[i].framing.len;
			memcpy(req + len, "\r\n{\"name\":\"Smuggle\"}", 21);
			len += 21;
			CHECK(rawhttp_request(t.servers[0].port, req, len, 5000, &rr) == 0);
			if (rr.status != 400 || !rr.body || !strstr(rr.body, "NUL byte"))
				fprintf(stderr, "NUL case %zu: %d %s\n", i, rr.status,
					rr.body ? rr.body : "");
			CHECK_I64(rr.status, 400);
			snprintf(want, sizeof(want), "\"field\":\"%s\"", nuls[i].field);
			CHECK(rr.body && strstr(rr.body, "a NUL byte") != NULL &&
			      strstr(rr.body, want) != NULL);
			CHECK(rr.head &&
			      rawhttp_header(&rr, "X-Request-Id", id, sizeof(id)) != NULL);
			CHECK(rr.closed);
			rawhttp_resp_release(&rr);
		}
		n = snprintf(req, sizeof(req),
			     "GET    /v1/keys HTTP/1.1\nHost:x\r\nAuthorization:\t Bearer %s\r\n"
			     "X-Empty:\r\nX-Tab: \t\nConnection: close\n\n",
			     tok_ro);
		CHECK(rawhttp_request(t.servers[0].port, req, (size_t)n, 5000, &rr) == 0);
		CHECK_I64(rr.status, 200);
		rawhttp_resp_release(&rr);
	}
	/* Still serving, still alive; and nothing was created by the table. */
	CHECK(apitest_call(&t, 0, "GET", "/healthz", NULL, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(kill(t.servers[0].pid, 0) == 0);
	CHECK_STR(testdb_exec_state(t.db.conn, "DO $$ BEGIN IF (SELECT count(*) FROM accounts) <> 2"
					       " OR (SELECT count(*) FROM api_keys) <> 2"
					       " OR (SELECT count(*) FROM price_book) <> 1"
					       " THEN RAISE 'created'; END IF; END $$"),
		  "00000");
	test_bearer_whitespace();
	test_unknown_key_body(); /* creates a key of its own */
	test_expect_over_cap();	 /* and so does this */
	/* (After the count above.) A name is up to 200 characters, as the schema's maxLength and
	 * the table's length() count them, not bytes: 200 two-byte characters are taken and kept
	 * whole. */
	CHECK(apitest_call(&t, 0, "POST", "/v1/accounts", t.operator_token,
			   "{\"name\":\"" E200 "\"}", &r) == 0);
	CHECK_I64(r.status, 201);
	{
		const char *id = json_string_value(json_object_get(r.json, "account_id"));
		const char *name = json_string_value(json_object_get(r.json, "name"));
		const char *params[1] = {id};
		PGresult *res;

		CHECK(name && strlen(name) == 400);
		res = PQexecParams(t.db.conn,
				   "SELECT char_length(name), octet_length(name) FROM accounts"
				   " WHERE account_id = $1",
				   1, NULL, params, NULL, NULL, 0);
		CHECK(id && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
			CHECK_STR(PQgetvalue(res, 0, 0), "200");
			CHECK_STR(PQgetvalue(res, 0, 1), "400");
		}
		PQclear(res);
	}
	apitest_resp_release(&r);
	/* Zero is a valid limit; null removes it. */
	snprintf(sql, sizeof(sql), "/v1/keys/%s/limits", key);
	CHECK(apitest_call(&t, 0, "PUT", sql, tok_full, "{\"daily_limit_micros\":0}", &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	free(big);
	free(longauth);
	return check_done();
}
