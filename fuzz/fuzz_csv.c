/* Fuzzer: CSV fields out and in (reports/csv.c).
 *
 * Input: one byte choosing the output buffer's size (below 0x80: that many
 * bytes, so that fields overflow it; otherwise room for everything), then
 * data used twice:
 *  - split at 0xff bytes into fields, each written with csv_put_field and
 *    joined with commas: the record must split back (csv_split) into
 *    exactly those fields, byte for byte (NUL, quotes, CR and LF included);
 *    a field that does not fit must leave the output untouched;
 *  - as a record given to csv_split: when it is accepted, its fields
 *    written out again and split again must be the same fields.
 * Buffers are allocated at their exact sizes so that AddressSanitizer sees
 * any write past them. */
#include <stdlib.h>
#include <string.h>

#include "csv.h"
#include "fuzz.h"

#define SEP 0xff

/* Writes n fields (ptr[i], len[i]) joined by commas into a new buffer of
 * cap bytes; returns it with *used, or NULL when they do not fit (then
 * the last try must have left *used as it was). */
static char *join(const char *const *ptr, const size_t *len, size_t n, size_t cap, size_t *used)
{
	char *buf = malloc(cap ? cap : 1);

	FUZZ_CHECK(buf != NULL);
	*used = 0;
	for (size_t i = 0; i < n; i++) {
		size_t before;

		if (i > 0) {
			if (*used == cap)
				goto full;
			buf[(*used)++] = ',';
		}
		before = *used;
		if (csv_put_field(buf, cap, used, ptr[i], len[i]) != METER_OK) {
			FUZZ_CHECK(*used == before);
			goto full;
		}
		FUZZ_CHECK(*used >= before + len[i] && *used <= cap);
	}
	return buf;
full:
	free(buf);
	return NULL;
}

/* Splits rec (used bytes, in a buffer of used + 1) and checks that it gives
 * the n fields (ptr, len) back. */
static void split_check(char *rec, size_t used, const char *const *ptr, const size_t *len, size_t n)
{
	char *fields[CSV_FIELDS_MAX];
	size_t got = 0;

	FUZZ_CHECK(csv_split(rec, used, fields, CSV_FIELDS_MAX, &got) == METER_OK);
	FUZZ_CHECK(got == n);
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(memcmp(fields[i], ptr[i], len[i]) == 0);
		FUZZ_CHECK(fields[i][len[i]] == '\0');
	}
}

static void round_trip(const uint8_t *data, size_t size, size_t cap)
{
	const char *ptr[CSV_FIELDS_MAX];
	size_t len[CSV_FIELDS_MAX], n = 0, start = 0, used;
	char *rec, *copy;

	for (size_t i = 0; i <= size && n < CSV_FIELDS_MAX; i++) {
		if (i == size || data[i] == SEP) {
			ptr[n] = (const char *)data + start;
			len[n] = i - start;
			n++;
			start = i + 1;
		}
	}
	rec = join(ptr, len, n, cap, &used);
	if (!rec)
		return;
	copy = malloc(used + 1);
	FUZZ_CHECK(copy != NULL);
	memcpy(copy, rec, used);
	split_check(copy, used, ptr, len, n);
	free(copy);
	free(rec);
}

static void normalise(const uint8_t *data, size_t size)
{
	char *rec = fuzz_strndup(data, size), *rec2, *again;
	char *fields[CSV_FIELDS_MAX];
	const char *ptr[CSV_FIELDS_MAX];
	size_t len[CSV_FIELDS_MAX], n = 0, used;
	enum meter_rc rc = csv_split(rec, size, fields, CSV_FIELDS_MAX, &n);

	/* A field holding a NUL would hide its length: nothing to compare. */
	if (rc != METER_OK || memchr(data, '\0', size)) {
		FUZZ_CHECK(rc == METER_OK || rc == METER_EINVAL || rc == METER_ERANGE);
		free(rec);
		return;
	}
	FUZZ_CHECK(n >= 1 && n <= CSV_FIELDS_MAX);
	for (size_t i = 0; i < n; i++) {
		ptr[i] = fields[i];
		len[i] = strlen(fields[i]);
		FUZZ_CHECK(fields[i] >= rec && fields[i] + len[i] <= rec + size);
	}
	rec2 = join(ptr, len, n, 3 * size + 2 * n + 2, &used);
	FUZZ_CHECK(rec2 != NULL);
	again = malloc(used + 1);
	FUZZ_CHECK(again != NULL);
	memcpy(again, rec2, used);
	split_check(again, used, ptr, len, n);
	free(again);
	free(rec2);
	free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t cap;

	if (size < 1 || size > 4096)
		return 0;
	cap = data[0] < 0x80 ? data[0] : 3 * size + 2 * CSV_FIELDS_MAX + 2;
	round_trip(data + 1, size - 1, cap);
	normalise(data + 1, size - 1);
	return 0;
}
