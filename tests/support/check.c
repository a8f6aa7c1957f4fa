/* Test assertions. */
#include "check.h"

#include <stdio.h>
#include <string.h>

static long checks_passed;
static long checks_failed;

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
	return (int)checks_failed;
}

int check_done(void)
{
	printf("%ld checks passed, %ld failed\n", checks_passed, checks_failed);
	if (checks_passed + checks_failed == 0) {
		fprintf(stderr, "no check ran\n");
		return 1;
	}
	return checks_failed ? 1 : 0;
}
