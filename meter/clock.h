/* meter: the monotonic clock, for timeouts, backoff and durations (never a
 * timestamp that is stored or billed: those come from CLOCK_REALTIME or the
 * database). */
#ifndef METER_CLOCK_H
#define METER_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Microseconds of CLOCK_MONOTONIC. */
static inline int64_t clock_mono_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Milliseconds of CLOCK_MONOTONIC. */
static inline int64_t clock_mono_ms(void)
{
	return clock_mono_usec() / 1000;
}

#endif
