/* Deterministic random numbers for property tests: xorshift64 over the
 * caller's state (never 0), and ledger figures drawn to reach the edges. */
#ifndef METER_TEST_TESTRAND_H
#define METER_TEST_TESTRAND_H

#include <stdint.h>

static inline uint64_t testrand_next(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

/* A figure: small, large, zero, negative or an end of int64. */
static inline int64_t testrand_figure(uint64_t *state)
{
	switch (testrand_next(state) % 8) {
	case 0:
		return 0;
	case 1:
		return INT64_MAX;
	case 2:
		return INT64_MIN;
	case 3:
		return -(int64_t)(testrand_next(state) % 1000000);
	case 4:
		return (int64_t)(testrand_next(state) % 10);
	default:
		return (int64_t)(testrand_next(state) % 4000000000000000000u);
	}
}

#endif
