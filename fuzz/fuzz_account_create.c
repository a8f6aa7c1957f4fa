/* Fuzzer: the body of POST /v1/accounts (h_account_create_parse, after
 * http_json_body as the handler calls it).
 *
 * Invariants: accepted exactly when no reply was set, refused with a 400;
 * an accepted name is the body's only member, 1 to DB_ACCOUNT_NAME_MAX
 * bytes without control characters or NUL; written back as JSON it parses
 * to the same name. */
#include <string.h>

#include "db_accounts.h"
#include "fuzz.h"
#include "h_accounts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req, req2;
	json_t *body = fuzz_req_body(&req, data, size), *again;
	const char *name = NULL, *name2 = NULL;
	size_t len, chars = 0;
	bool ok;

	if (!body)
		goto out;
	ok = h_account_create_parse(&req, body, &name);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	FUZZ_CHECK(json_object_size(body) == 1 && name != NULL);
	FUZZ_CHECK(name == json_string_value(json_object_get(body, "name")));
	len = strlen(name);
	FUZZ_CHECK(len == json_string_length(json_object_get(body, "name")));
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		FUZZ_CHECK(c >= 0x20 && c != 0x7f);
		/* No C1 control (U+0080 to U+009F: 0xc2 0x80 to 0xc2 0x9f). */
		FUZZ_CHECK(!(c == 0xc2 && i + 1 < len && (unsigned char)name[i + 1] <= 0x9f));
		chars += (c & 0xc0) != 0x80; /* jansson: valid UTF-8 */
	}
	FUZZ_CHECK(chars >= 1 && chars <= DB_ACCOUNT_NAME_MAX);
	again = fuzz_req_reparse(&req2, json_pack("{s:s}", "name", name));
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_account_create_parse(&req2, again, &name2));
	FUZZ_CHECK(strcmp(name, name2) == 0);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
