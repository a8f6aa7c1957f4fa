/* meter fuzzers: the key bodies' shared checks (see fuzz_keys.h). */
#include "fuzz_keys.h"

#include <string.h>

#include "fuzz.h"
#include "keys.h"

void fuzz_key_fields_check(json_t *body, const struct h_key_fields *f)
{
	json_t *limit = json_object_get(body, "daily_limit_micros");
	json_t *tz = json_object_get(body, "time_zone");

	FUZZ_CHECK(f->limit_given == (limit != NULL));
	FUZZ_CHECK(f->has_limit == (limit && !json_is_null(limit)));
	if (f->has_limit) {
		FUZZ_CHECK(f->daily_limit_micros >= 0 && f->daily_limit_micros <= H_KEYS_LIMIT_MAX);
		FUZZ_CHECK(f->daily_limit_micros == json_integer_value(limit));
	}
	FUZZ_CHECK((f->time_zone != NULL) == (tz != NULL));
	if (f->time_zone) {
		FUZZ_CHECK(keys_tz_shape_ok(f->time_zone));
		FUZZ_CHECK(strlen(f->time_zone) <= DB_KEY_TZ_MAX);
		FUZZ_CHECK(strcmp(f->time_zone, json_string_value(tz)) == 0);
	}
}

json_t *fuzz_key_fields_json(const struct h_key_fields *f)
{
	json_t *o = json_object();

	FUZZ_CHECK(o != NULL);
	if (f->role)
		json_object_set_new(o, "role", json_string(f->role));
	if (f->limit_given)
		json_object_set_new(o, "daily_limit_micros",
				    f->has_limit ? json_integer(f->daily_limit_micros)
						 : json_null());
	if (f->time_zone)
		json_object_set_new(o, "time_zone", json_string(f->time_zone));
	return o;
}

void fuzz_key_fields_same(const struct h_key_fields *a, const struct h_key_fields *b)
{
	FUZZ_CHECK((a->role == NULL) == (b->role == NULL));
	FUZZ_CHECK(!a->role || strcmp(a->role, b->role) == 0);
	FUZZ_CHECK(a->limit_given == b->limit_given && a->has_limit == b->has_limit);
	FUZZ_CHECK(a->daily_limit_micros == b->daily_limit_micros);
	FUZZ_CHECK((a->time_zone == NULL) == (b->time_zone == NULL));
	FUZZ_CHECK(!a->time_zone || strcmp(a->time_zone, b->time_zone) == 0);
}
