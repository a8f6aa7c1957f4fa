/* meter fuzzers: what the two key-body targets share (fuzz_key_create.c,
 * fuzz_key_limits.c). */
#ifndef METER_FUZZ_KEYS_H
#define METER_FUZZ_KEYS_H

#include <jansson.h>

#include "h_keys.h"

/* Checks the fields the key bodies share against body: the limit in range
 * and the JSON's (or null), the time zone of a valid shape and the body's. */
void fuzz_key_fields_check(json_t *body, const struct h_key_fields *f);

/* The fields as a client would send them (role when set); new reference. */
json_t *fuzz_key_fields_json(const struct h_key_fields *f);

/* Two parses of the same key body agree. */
void fuzz_key_fields_same(const struct h_key_fields *a, const struct h_key_fields *b);

#endif
