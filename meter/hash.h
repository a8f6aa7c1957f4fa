/* meter: the one string hash of the in-memory tables (FNV-1a, 64 bits).
 * Never stored: a table's layout may change with it. */
#ifndef METER_HASH_H
#define METER_HASH_H

#include <stdint.h>

#define HASH_START UINT64_C(14695981039346656037) /* FNV-1a offset basis */

/* h with the byte c mixed in. */
static inline uint64_t hash_byte(uint64_t h, unsigned char c)
{
	return (h ^ c) * UINT64_C(1099511628211);
}

/* h with the bytes of s (up to its NUL, not included) mixed in. */
static inline uint64_t hash_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = hash_byte(h, (unsigned char)*s);
	return h;
}

#endif
