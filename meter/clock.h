/* meter: the clocks. The monotonic clock, for timeouts, backoff and
 * durations, never for a timestamp that is stored or billed: those come
 * from the wall clock (clock_real_usec) or the database. */
#ifndef METER_CLOCK_H
#define METER_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Microseconds of CLOCK_MONOTONIC. */
static inline int64_t clock_mono_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Microseconds since the epoch, of CLOCK_REALTIME (UTC): the instant a
 * sample is taken or received at, or a page is built at. */
static inline int64_t clock_real_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Milliseconds of CLOCK_MONOTONIC. */
static inline int64_t clock_mono_ms(void)
{
	return clock_mono_usec() / 1000;
}

/* Initialises cond to time its waits by CLOCK_MONOTONIC, so that a step of
 * the wall clock neither cuts a wait short nor stretches it. Returns
 * pthread_cond_init()'s code (or the attribute's). */
static inline int clock_mono_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t ca;
	int r = pthread_condattr_init(&ca);

	if (r != 0)
		return r;
	r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (r == 0)
		r = pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
	return r;
}

/* The CLOCK_MONOTONIC instant ms milliseconds from now, for a timed wait
 * on a cond of clock_mono_cond_init(). */
static inline struct timespec clock_mono_after_ms(int64_t ms)
{
	int64_t at = clock_mono_usec() + ms * 1000;

	return (struct timespec){.tv_sec = at / 1000000, .tv_nsec = (long)(at % 1000000) * 1000};
}

#endif
