/* Fuzzer: RFC 3339 times, as query parameters, event and price bodies
 * (hutil_time_parse) and agent documents (agent_doc_parse_time) read them,
 * and as the API prints them (hutil_time_format, agent_doc_format_time).
 *
 * Input: the text of a time. Invariants: a time hutil_time_parse accepts
 * is within 1970..9999, agent_doc_parse_time accepts it with the same
 * value, and it prints and parses back to itself; a time only
 * agent_doc_parse_time accepts prints and parses back too. The first 8
 * bytes, read as a number of µs within 1970..9999, print and parse back to
 * the same number through both pairs. */
#include <stdlib.h>
#include <string.h>

#include "agent_doc.h"
#include "fuzz.h"
#include "h_util.h"

#define YEAR_10000_USEC INT64_C(253402300800000000) /* 10000-01-01T00:00:00Z */
#define DAY_USEC	INT64_C(86400000000)
#define YEAR_0_USEC	(-INT64_C(62167219200000000)) /* 0000-01-01T00:00:00Z */

/* usec printed both ways parses back to usec both ways. */
static void print_parse(int64_t usec)
{
	char a[HUTIL_TIME_MAX], b[64];
	int64_t back = -1;

	hutil_time_format(usec, a, sizeof(a));
	FUZZ_CHECK(hutil_time_parse(a, &back) == METER_OK && back == usec);
	back = -1;
	FUZZ_CHECK(agent_doc_parse_time(a, &back) == METER_OK && back == usec);
	agent_doc_format_time(usec, b, sizeof(b));
	back = -1;
	FUZZ_CHECK(agent_doc_parse_time(b, &back) == METER_OK && back == usec);
	back = -1;
	FUZZ_CHECK(hutil_time_parse(b, &back) == METER_OK && back == usec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;
	int64_t h = -1, a = -1, back = -1;
	bool h_ok, a_ok;

	if (size > 256)
		return 0;
	s = fuzz_strndup(data, size);
	h_ok = hutil_time_parse(s, &h) == METER_OK;
	a_ok = agent_doc_parse_time(s, &a) == METER_OK;
	if (h_ok) {
		FUZZ_CHECK(h >= 0 && h < YEAR_10000_USEC);
		FUZZ_CHECK(a_ok && a == h);
		print_parse(h);
	}
	if (a_ok) {
		char b[64];

		FUZZ_CHECK(a > YEAR_0_USEC - DAY_USEC && a < YEAR_10000_USEC + DAY_USEC);
		agent_doc_format_time(a, b, sizeof(b));
		if (a >= YEAR_0_USEC && a < YEAR_10000_USEC) {
			FUZZ_CHECK(agent_doc_parse_time(b, &back) == METER_OK && back == a);
		}
	}
	if (size >= 8) {
		uint64_t u;

		memcpy(&u, data, sizeof(u));
		print_parse((int64_t)(u % (uint64_t)YEAR_10000_USEC));
	}
	free(s);
	return 0;
}
