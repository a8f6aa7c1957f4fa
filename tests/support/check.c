/* Test assertions. */
#include "check.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Atomic: a test's threads check too (its requests' answers, a racer's
 * outcome) beside its main thread. */
static atomic_long checks_passed;
static atomic_long checks_failed;

void check_record(int ok, const char *file, int line, const char *expr)
{
	if (ok) {
		checks_passed++;
		return;
	}
	checks_failed++;
	fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
}

void check_record_i64(int64_t got, int64_t want, const char *file, int line, const char *expr)
{
	if (got == want) {
		checks_passed++;
		return;
	}
	checks_failed++;
	fprintf(stderr, "%s:%d: %s is %" PRId64 ", want %" PRId64 "\n", file, line, expr, got,
		want);
}

void check_record_str(const char *got, const char *want, const char *file, int line,
		      const char *expr)
{
	if (got && want && strcmp(got, want) == 0) {
		checks_passed++;
		return;
	}
	checks_failed++;
	fprintf(stderr, "%s:%d: %s is \"%s\", want \"%s\"\n", file, line, expr,
		got ? got : "(null)", want ? want : "(null)");
}

int check_failures(void)
{
	return (int)atomic_load(&checks_failed);
}

int check_done(void)
{
	long passed = atomic_load(&checks_passed), failed = atomic_load(&checks_failed);

	printf("%ld checks passed, %ld failed\n", passed, failed);
	if (passed + failed == 0) {
		fprintf(stderr, "no check ran\n");
		return 1;
	}
	return failed ? 1 : 0;
}
