/* Unit tests of the allowed answer's writer (meter/check_answer.h): byte
 * for byte what jansson makes of the same object, as the engine made it
 * before, over random figures, every number of parts, limits and no
 * limits, and the ends of int64; and a refusal (NULL) for any string that
 * would need escaping, so the caller's jansson path writes it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_answer.h"
#include "testrand.h"

/* The object as the engine built it with jansson (checks.c, allowed_json). */
static char *with_jansson(const struct check_answer *a)
{
	json_t *parts = json_array(), *obj;
	const struct ledger_day *d0 = &a->parts[0].figures;
	int64_t hold = 0;
	char *text;

	for (int p = 0; p < a->nparts; p++) {
		const struct ledger_day *d = &a->parts[p].figures;

		hold += a->parts[p].hold_micros;
		json_array_append_new(
		    parts, json_pack("{s:s,s:I,s:I,s:I,s:o}", "day", a->parts[p].day, "hold_micros",
				     (json_int_t)a->parts[p].hold_micros, "day_spent_micros",
				     (json_int_t)d->spent_micros, "day_held_micros",
				     (json_int_t)d->held_micros, "daily_limit_micros",
				     d->has_limit ? json_integer(d->limit_micros) : json_null()));
	}
	obj = json_pack(
	    "{s:b,s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:o,s:s,s:s,s:o}", "allowed", 1, "sandbox_id",
	    a->sandbox_id, "key_id", a->key_id, "hold_micros", (json_int_t)hold,
	    "lease_max_cost_micros", (json_int_t)a->lease_max_cost_micros, "day", a->parts[0].day,
	    "day_spent_micros", (json_int_t)d0->spent_micros, "day_held_micros",
	    (json_int_t)d0->held_micros, "daily_limit_micros",
	    d0->has_limit ? json_integer(d0->limit_micros) : json_null(), "lease_starts_at",
	    a->lease_starts_at, "lease_ends_at", a->lease_ends_at, "parts", parts);
	text = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(obj);
	return text;
}

static uint64_t state = 0x9e3779b97f4a7c15u;

static void same_as_jansson(const struct check_answer *a)
{
	char *mine = check_answer_allowed(a), *theirs = with_jansson(a);

	CHECK(mine != NULL && theirs != NULL);
	if (mine && theirs)
		CHECK_STR(mine, theirs);
	free(mine);
	free(theirs);
}

int main(void)
{
	static const char *const days[] = {"2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04"};
	static const char *const ids[] = {
	    "s", "sb-1", "A.b_c-9",
	    "0123456789012345678901234567890123456789012345678901234567890123"};
	struct check_answer a = {.sandbox_id = "sb-1",
				 .key_id = "key_1",
				 .lease_max_cost_micros = 32500,
				 .lease_starts_at = "2026-12-02T06:32:54.620931Z",
				 .lease_ends_at = "2026-12-02T07:32:54.620931Z",
				 .nparts = 1,
				 .parts = {{.day = "2026-12-02",
					    .hold_micros = 32500,
					    .figures = {.spent_micros = 0,
							.held_micros = 32500,
							.has_limit = true,
							.limit_micros = 1000000000000000}}}};
	char *text;
	static const char *const bad[] = {"a\"b", "a\\b", "a\nb", "a\tb", "caf\xc3\xa9", "\x7f"};

	/* The engine's answer as stored in a sandbox row (README). */
	text = check_answer_allowed(&a);
	CHECK_STR(text ? text : "",
		  "{\"allowed\":true,\"sandbox_id\":\"sb-1\",\"key_id\":\"key_1\","
		  "\"hold_micros\":32500,\"lease_max_cost_micros\":32500,\"day\":\"2026-12-02\","
		  "\"day_spent_micros\":0,\"day_held_micros\":32500,"
		  "\"daily_limit_micros\":1000000000000000,"
		  "\"lease_starts_at\":\"2026-12-02T06:32:54.620931Z\","
		  "\"lease_ends_at\":\"2026-12-02T07:32:54.620931Z\",\"parts\":[{\"day\":"
		  "\"2026-12-02\",\"hold_micros\":32500,\"day_spent_micros\":0,"
		  "\"day_held_micros\":32500,\"daily_limit_micros\":1000000000000000}]}");
	free(text);
	same_as_jansson(&a);
	/* Its numbers, as the sandbox row keeps them (sql/0025). */
	{
		char numbers[CHECK_ANSWER_NUMBERS_MAX];

		CHECK(check_answer_numbers(&a, 1764657174620931, 1764660774620931, numbers));
		CHECK_STR(numbers,
			  "{1764657174620931,1764660774620931,32500,20261202,32500,0,32500,"
			  "1000000000000000}");
	}

	/* Random figures, one to four parts, with and without limits. */
	for (int i = 0; i < 20000; i++) {
		a.nparts = 1 + (int)(testrand_next(&state) % LEDGER_PARTS_MAX);
		a.sandbox_id = ids[testrand_next(&state) % 4];
		a.key_id = ids[testrand_next(&state) % 4];
		a.lease_max_cost_micros = testrand_figure(&state);
		for (int p = 0; p < a.nparts; p++) {
			a.parts[p].day = days[p];
			/* Parts that sum without overflow, as a lease's do. */
			a.parts[p].hold_micros = (int64_t)(testrand_next(&state) % 1000000000000u);
			a.parts[p].figures =
			    (struct ledger_day){.spent_micros = testrand_figure(&state),
						.held_micros = testrand_figure(&state),
						.has_limit = testrand_next(&state) % 3 != 0,
						.limit_micros = testrand_figure(&state)};
		}
		same_as_jansson(&a);
	}

	/* A string that would need escaping: declined, in every field. */
	a.nparts = 2;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct check_answer b = a;

		b.sandbox_id = bad[i];
		CHECK(check_answer_allowed(&b) == NULL);
		b = a;
		b.key_id = bad[i];
		CHECK(check_answer_allowed(&b) == NULL);
		b = a;
		b.lease_ends_at = bad[i];
		CHECK(check_answer_allowed(&b) == NULL);
		b = a;
		b.parts[1].day = bad[i];
		CHECK(check_answer_allowed(&b) == NULL);
	}
	/* The numbers: no limit is NULL; the longest numbers of the most parts
	 * fit the room; a day not YYYY-MM-DD is declined, out untouched. */
	{
		static const char *const bad_days[] = {"2026-1-02",  "2026-12-2",  "20261202",
						       "2026/12/02", "2026-12-0x", "",
						       "2026-12-021"};
		char numbers[CHECK_ANSWER_NUMBERS_MAX];
		struct check_answer b = a;

		b.nparts = 2;
		b.lease_max_cost_micros = 7;
		b.parts[0] = (struct check_answer_part){.day = "2026-12-01", .hold_micros = 5};
		b.parts[1] = (struct check_answer_part){
		    .day = "0999-01-31",
		    .hold_micros = 6,
		    .figures = {.spent_micros = -1, .held_micros = 2, .has_limit = true}};
		CHECK(check_answer_numbers(&b, 0, 1, numbers));
		CHECK_STR(numbers, "{0,1,7,20261201,5,0,0,NULL,9990131,6,-1,2,0}");
		b.nparts = LEDGER_PARTS_MAX;
		b.lease_max_cost_micros = INT64_MIN;
		for (int p = 0; p < b.nparts; p++)
			b.parts[p] =
			    (struct check_answer_part){.day = "9999-12-31",
						       .hold_micros = INT64_MIN,
						       .figures = {.spent_micros = INT64_MIN,
								   .held_micros = INT64_MIN,
								   .has_limit = true,
								   .limit_micros = INT64_MIN}};
		CHECK(check_answer_numbers(&b, INT64_MIN, INT64_MIN, numbers));
		CHECK_I64((long long)strlen(numbers), 2 + 23 * 20 + 22 - 4 * 12);
		for (size_t i = 0; i < sizeof(bad_days) / sizeof(bad_days[0]); i++) {
			b.nparts = 2;
			b.parts[1].day = bad_days[i];
			snprintf(numbers, sizeof(numbers), "untouched");
			CHECK(!check_answer_numbers(&b, 0, 1, numbers));
			CHECK_STR(numbers, "untouched");
		}
		b.parts[1].day = NULL;
		CHECK(!check_answer_numbers(&b, 0, 1, numbers));
		b.nparts = 0;
		CHECK(!check_answer_numbers(&b, 0, 1, numbers));
		b.nparts = LEDGER_PARTS_MAX + 1;
		CHECK(!check_answer_numbers(&b, 0, 1, numbers));
	}
	/* No part, or too many: declined. */
	a.nparts = 0;
	CHECK(check_answer_allowed(&a) == NULL);
	a.nparts = LEDGER_PARTS_MAX + 1;
	CHECK(check_answer_allowed(&a) == NULL);
	return check_done();
}
