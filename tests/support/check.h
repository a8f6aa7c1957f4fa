/* Test assertions. A failed CHECK prints file:line and the expression and
 * counts; the test goes on. check_done() prints the tally and returns the
 * exit status (non-zero when any check failed, or when none ran). */
#ifndef METER_TEST_CHECK_H
#define METER_TEST_CHECK_H

#include <inttypes.h>
#include <stdint.h>

void check_record(int ok, const char *file, int line, const char *expr);
void check_record_i64(int64_t got, int64_t want, const char *file, int line, const char *expr);
void check_record_str(const char *got, const char *want, const char *file, int line,
		      const char *expr);
int check_done(void);
int check_failures(void);

#define CHECK(cond) check_record(!!(cond), __FILE__, __LINE__, #cond)
#define CHECK_I64(got, want)                                                                       \
	check_record_i64((int64_t)(got), (int64_t)(want), __FILE__, __LINE__, #got)
#define CHECK_STR(got, want) check_record_str((got), (want), __FILE__, __LINE__, #got)

#endif
