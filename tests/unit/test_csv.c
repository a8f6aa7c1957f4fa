/* Unit tests of CSV fields: RFC 4180 quoting and splitting, round trips. */
#include <string.h>

#include "check.h"
#include "csv.h"

/* Puts one field and returns the text written (static buffer). */
static const char *put(const char *field)
{
	static char buf[256];
	size_t used = 0;

	if (csv_put_field(buf, sizeof(buf) - 1, &used, field, strlen(field)) != METER_OK)
		return "(error)";
	buf[used] = '\0';
	return buf;
}

static void test_put(void)
{
	char small[4];
	size_t used = 0;

	CHECK_STR(put("plain"), "plain");
	CHECK_STR(put(""), "");
	CHECK_STR(put("a,b"), "\"a,b\"");
	CHECK_STR(put("say \"hi\""), "\"say \"\"hi\"\"\"");
	CHECK_STR(put("two\r\nlines"), "\"two\r\nlines\"");
	CHECK_STR(put("<script>"), "<script>");
	CHECK(csv_put_field(small, sizeof(small), &used, "a,b", 3) == METER_ERANGE);
	CHECK_I64(used, 0);
	CHECK(csv_put_field(small, sizeof(small), &used, "abcd", 4) == METER_OK);
	CHECK_I64(used, 4);
}

static void test_split(void)
{
	char rec[128];
	char *f[8];
	size_t n;
	const char *fields[] = {"x", "a,b", "", "q\"uote", "line\nbreak", "end"};
	size_t used = 0;

	/* Round trip of awkward fields. */
	for (size_t i = 0; i < 6; i++) {
		if (i)
			rec[used++] = ',';
		CHECK(csv_put_field(rec, sizeof(rec) - 1, &used, fields[i], strlen(fields[i])) ==
		      METER_OK);
	}
	CHECK(csv_split(rec, used, f, 8, &n) == METER_OK);
	CHECK_I64(n, 6);
	for (size_t i = 0; i < n && i < 6; i++)
		CHECK_STR(f[i], fields[i]);

	memcpy(rec, "a,,b,", 6);
	CHECK(csv_split(rec, 5, f, 8, &n) == METER_OK);
	CHECK_I64(n, 4);
	CHECK_STR(f[1], "");
	CHECK_STR(f[3], "");

	memcpy(rec, "\"open", 6);
	CHECK(csv_split(rec, 5, f, 8, &n) == METER_EINVAL);
	memcpy(rec, "\"a\"b", 5);
	CHECK(csv_split(rec, 4, f, 8, &n) == METER_EINVAL);
	memcpy(rec, "a\"b", 4);
	CHECK(csv_split(rec, 3, f, 8, &n) == METER_EINVAL);
	memcpy(rec, "1,2,3", 6);
	CHECK(csv_split(rec, 5, f, 2, &n) == METER_ERANGE);
	CHECK(csv_split(rec, 0, f, 2, &n) == METER_OK);
	CHECK_I64(n, 1);
}

int main(void)
{
	test_put();
	test_split();
	return check_done();
}
