/* Unit tests for meter/parse.c: strict integers and ids, times printed. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "parse.h"

#define SENTINEL INT64_C(-777)

/* parse_int64 over the whole int64 range; *out must be untouched on error. */
static enum meter_rc p64(const char *s, int64_t *out)
{
	return parse_int64(s, INT64_MIN, INT64_MAX, out);
}

static void test_good_ints(void)
{
	int64_t v = SENTINEL;

	CHECK(p64("0", &v) == METER_OK);
	CHECK_I64(v, 0);
	CHECK(p64("-0", &v) == METER_OK);
	CHECK_I64(v, 0);
	CHECK(p64("1", &v) == METER_OK);
	CHECK_I64(v, 1);
	CHECK(p64("-1", &v) == METER_OK);
	CHECK_I64(v, -1);
	CHECK(p64("10", &v) == METER_OK);
	CHECK_I64(v, 10);
	CHECK(p64("31622400", &v) == METER_OK);
	CHECK_I64(v, 31622400);
	CHECK(p64("9223372036854775807", &v) == METER_OK);
	CHECK_I64(v, INT64_MAX);
	CHECK(p64("-9223372036854775808", &v) == METER_OK);
	CHECK_I64(v, INT64_MIN);
	CHECK(p64("-9223372036854775807", &v) == METER_OK);
	CHECK_I64(v, -INT64_MAX);
	CHECK(p64("9223372036854775806", &v) == METER_OK);
	CHECK_I64(v, INT64_MAX - 1);
}

static void test_bad_ints(void)
{
	static const char *const bad[] = {
	    "",
	    "-",
	    "+1",
	    " 1",
	    "1 ",
	    "01",
	    "00",
	    "-01",
	    "--1",
	    "1-",
	    "0x10",
	    "0X1F",
	    "x1",
	    "1e3",
	    "1.0",
	    "1,000",
	    "1_000",
	    "\t1",
	    "1\n",
	    "١",
	    "abc",
	    "- 1",
	    "0-",
	    "+",
	    "+0",
	    "-00",
	    "1a",
	    "9223372036854775807x",
	    "-9223372036854775808 ",
	    "0000000000000000000000000000000000000000009",
	};
	int64_t v = SENTINEL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* Named by the input itself when it fails. */
		check_record(p64(bad[i], &v) == METER_EINVAL, __FILE__, __LINE__, bad[i]);
		CHECK_I64(v, SENTINEL);
	}
	CHECK(p64(NULL, &v) == METER_EINVAL);
	CHECK(p64("1", NULL) == METER_EINVAL);
	CHECK(parse_int64("1", 5, 4, &v) == METER_EINVAL); /* min > max */
	/* Malformed wins over too large, however long. */
	CHECK(p64("99999999999999999999999999999x", &v) == METER_EINVAL);
	/* An embedded NUL ends the string: "12\0x" is "12". */
	{
		const char buf[] = {'1', '2', '\0', 'x', '\0'};

		CHECK(p64(buf, &v) == METER_OK);
		CHECK_I64(v, 12);
	}
}

static void test_ranges(void)
{
	int64_t v = SENTINEL;

	CHECK(p64("9223372036854775808", &v) == METER_ERANGE);
	CHECK(p64("-9223372036854775809", &v) == METER_ERANGE);
	CHECK(p64("18446744073709551616", &v) == METER_ERANGE);
	CHECK(p64("18446744073709551615", &v) == METER_ERANGE);
	CHECK(p64("-18446744073709551616", &v) == METER_ERANGE);
	CHECK(p64("99999999999999999999999999999999999999999999999999", &v) == METER_ERANGE);
	CHECK(p64("92233720368547758070", &v) == METER_ERANGE);
	CHECK_I64(v, SENTINEL);
	/* Bounds are inclusive. */
	CHECK(parse_int64("1", 1, 1024, &v) == METER_OK);
	CHECK_I64(v, 1);
	CHECK(parse_int64("1024", 1, 1024, &v) == METER_OK);
	CHECK_I64(v, 1024);
	v = SENTINEL;
	CHECK(parse_int64("0", 1, 1024, &v) == METER_ERANGE);
	CHECK(parse_int64("1025", 1, 1024, &v) == METER_ERANGE);
	CHECK(parse_int64("-1", 0, INT64_MAX, &v) == METER_ERANGE);
	CHECK(parse_int64("-9223372036854775808", INT64_MIN + 1, 0, &v) == METER_ERANGE);
	CHECK(parse_int64("9223372036854775807", 0, INT64_MAX - 1, &v) == METER_ERANGE);
	CHECK_I64(v, SENTINEL);
	CHECK(parse_int64("-9223372036854775808", INT64_MIN, INT64_MIN, &v) == METER_OK);
	CHECK_I64(v, INT64_MIN);
	CHECK(parse_int64("7", 7, 7, &v) == METER_OK);
	CHECK_I64(v, 7);
}

static void test_ids(void)
{
	char id[PARSE_ID_MAX + 2];

	CHECK(parse_is_id("a"));
	CHECK(parse_is_id("sbx_1"));
	CHECK(parse_is_id("key-2026.11.30_ABCxyz09"));
	CHECK(parse_is_id("."));
	CHECK(parse_is_id("-"));
	CHECK(parse_is_id("_"));
	CHECK(parse_is_id(".."));
	CHECK(!parse_is_id(NULL));
	CHECK(!parse_is_id(""));
	CHECK(!parse_is_id(" "));
	CHECK(!parse_is_id("a b"));
	CHECK(!parse_is_id("a/b"));
	CHECK(!parse_is_id("a\\b"));
	CHECK(!parse_is_id("a\nb"));
	CHECK(!parse_is_id("sbx_1\n"));
	CHECK(!parse_is_id("a:b"));
	CHECK(!parse_is_id("a%2F"));
	CHECK(!parse_is_id("a'b"));
	CHECK(!parse_is_id("a\"b"));
	CHECK(!parse_is_id("a;b"));
	CHECK(!parse_is_id("a+b"));
	CHECK(!parse_is_id("a@b"));
	CHECK(!parse_is_id("é"));
	CHECK(!parse_is_id("\x7f"));
	CHECK(!parse_is_id("\xff"));

	memset(id, 'z', sizeof(id));
	id[PARSE_ID_MAX] = '\0';
	CHECK(strlen(id) == 64);
	CHECK(parse_is_id(id));
	id[PARSE_ID_MAX - 1] = '/';
	CHECK(!parse_is_id(id));
	id[PARSE_ID_MAX - 1] = 'z';
	id[PARSE_ID_MAX] = 'z';
	id[PARSE_ID_MAX + 1] = '\0';
	CHECK(strlen(id) == 65);
	CHECK(!parse_is_id(id));
	/* Every single byte: exactly the 65 allowed characters pass. */
	{
		int allowed = 0;

		for (int c = 1; c < 256; c++) {
			char one[2] = {(char)c, '\0'};

			if (parse_is_id(one))
				allowed++;
		}
		CHECK_I64(allowed, 26 + 26 + 10 + 3);
	}
}

/* Text for people: valid UTF-8, no control character, counted in
 * characters. */
static void test_plain_text(void)
{
	static const struct {
		const char *s;
		enum meter_rc want;
		size_t chars;
	} cases[] = {
	    {"Acme", METER_OK, 4},
	    {"", METER_OK, 0},
	    {"caf\xc3\xa9", METER_OK, 4},      /* é: two bytes, one character */
	    {"\xe2\x82\xac 5", METER_OK, 3},   /* € */
	    {"\xf0\x9f\x98\x80", METER_OK, 1}, /* U+1F600 */
	    {"\xc2\xa0", METER_OK, 1},	       /* U+00A0, just past C1 */
	    {"\xe2\x80\xa8", METER_OK, 1},     /* U+2028: a separator, not a control */
	    {"a\tb", METER_ERANGE, 0},	       /* C0 */
	    {"a\x1f", METER_ERANGE, 0},
	    {"a\x7f", METER_ERANGE, 0},	    /* DEL */
	    {"a\xc2\x80", METER_ERANGE, 0}, /* U+0080, C1's first */
	    {"a\xc2\x85"
	     "b",
	     METER_ERANGE, 0},		    /* NEL */
	    {"a\xc2\x9f", METER_ERANGE, 0}, /* C1's last */
	    {"\xc3", METER_EINVAL, 0},	    /* cut short */
	    {"\xe2\x82", METER_EINVAL, 0},
	    {"\x80", METER_EINVAL, 0},		   /* a continuation first */
	    {"\xc0\xaf", METER_EINVAL, 0},	   /* overlong '/' */
	    {"\xe0\x80\xaf", METER_EINVAL, 0},	   /* overlong */
	    {"\xf0\x80\x80\xaf", METER_EINVAL, 0}, /* overlong */
	    {"\xc1\x85", METER_EINVAL, 0},	   /* overlong NEL, not a way round */
	    {"\xed\xa0\x80", METER_EINVAL, 0},	   /* a surrogate */
	    {"\xf4\x90\x80\x80", METER_EINVAL, 0}, /* past U+10FFFF */
	    {"\xf8\x88\x80\x80\x80", METER_EINVAL, 0},
	    {"\xc3(", METER_EINVAL, 0},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t chars = 99;
		enum meter_rc rc = parse_plain_text(cases[i].s, strlen(cases[i].s), &chars);

		CHECK_I64(rc, cases[i].want);
		if (rc == METER_OK)
			CHECK_I64((long long)chars, (long long)cases[i].chars);
	}
	/* A NUL inside the length is a control character. */
	{
		size_t chars;

		CHECK_I64(parse_plain_text("a\0b", 3, &chars), METER_ERANGE);
	}
}

/* The member a byte of a JSON object's text lies in: pos is given as the
 * offset of the first '#' in the text (the '#' itself is part of the text,
 * where a parser would have stopped). */
/* Strings are skipped whole, escapes and all, by the nesting pre-scan. */
static void test_json_strings(void)
{
	static const struct {
		const char *s;
		size_t end; /* parse_json_string_end from the quote at 0 */
		int depth;  /* parse_json_depth */
	} cases[] = {
	    {"\"\"", 2, 0},	    {"\"ab\"[", 4, 1}, {"\"[{\"", 4, 0},
	    {"\"a\\\"[\"{", 6, 1},		     /* an escaped quote: the string goes on */
	    {"\"a\\\\\"[", 5, 1},		     /* an escaped backslash: the quote ends it */
	    {"\"\\u005b\"]", 8, 0}, {"\"abc", 4, 0}, /* not ended */
	    {"\"ab\\", 4, 0},			     /* a backslash last */
	    {"\"", 1, 0},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].s);

		CHECK_I64(parse_json_string_end(cases[i].s, len, 0), cases[i].end);
		CHECK_I64(parse_json_depth(cases[i].s, len), cases[i].depth);
	}
	CHECK_I64(
	    parse_json_depth("{\"a\":[{\"b]}\":[[1]]}]}", strlen("{\"a\":[{\"b]}\":[[1]]}]}")), 5);
	CHECK_I64(parse_json_depth("[\"[[[\",[\"]]]\"]]", strlen("[\"[[[\",[\"]]]\"]]")), 2);
	/* Bounded by len, not by a NUL. */
	CHECK_I64(parse_json_string_end("\"ab\"", 3, 0), 3);
}

static void test_json_member_at(void)
{
	static const struct {
		const char *s;
		const char *want; /* NULL: none */
	} cases[] = {
	    {"{\"a\":#}", "a"},
	    {"{\"max_cost_micros\":9#}", "max_cost_micros"},
	    {"{ \"a\" : 1 , \"bc\" :  #", "bc"},
	    {"{\"a\":1,\"b\":\"x\",\"c\":#", "c"},
	    {"{\"a\":\"x:y,\\\"z\",\"b\":#", "b"}, /* colon, comma, quote in a value */
	    {"{\"a\":{\"b\":{\"c\":#", "a"},	   /* nested: the top-level member */
	    {"{\"a\":[1,2,{\"b\":#", "a"},
	    {"{\"a\":{\"b\":1},\"c\":#", "c"},
	    {"{\"a\":[],\"b\":#", "b"},
	    {"{\"a\":1,#", NULL}, /* between members */
	    {"{\"a\"#", NULL},	  /* a name, no colon yet */
	    {"{#", NULL},
	    {"#", NULL},
	    {"[#", NULL},
	    {"[\"a\":#", NULL},	       /* a name in an array is no member */
	    {"{\"a\\u0062\":#", NULL}, /* an escaped name */
	    {"{\"\":#", NULL},
	    {"{\"a\":1}#", NULL}, /* after the object */
	    {"{\""
	     "a1234567890123456789012345678901234567890123456789012345678901234"
	     "\":#",
	     NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[PARSE_ID_MAX + 1] = "untouched";
		const char *hash = strchr(cases[i].s, '#');
		bool got = parse_json_member_at(cases[i].s, strlen(cases[i].s),
						(size_t)(hash - cases[i].s), name, sizeof(name));

		CHECK_I64(got, cases[i].want != NULL);
		if (got && cases[i].want)
			CHECK_STR(name, cases[i].want);
	}
	/* A position past the text is its end. */
	{
		char name[8];

		CHECK(parse_json_member_at("{\"a\":1", 6, 100, name, sizeof(name)));
		CHECK_STR(name, "a");
		CHECK(!parse_json_member_at("{\"abcdefgh\":1", 13, 13, name, sizeof(name)));
	}
}

/* Arguments named in errors: an option by its name, a connection string
 * or URL not at all. */
static void test_arg_shown(void)
{
	char out[80];

	CHECK_STR(parse_arg_shown("acc_1", out, sizeof(out)), "\"acc_1\"");
	CHECK_STR(parse_arg_shown("--databse-url=postgresql://m:PW@h/x", out, sizeof(out)),
		  "\"--databse-url\"");
	CHECK_STR(parse_arg_shown("--listen", out, sizeof(out)), "\"--listen\"");
	/* A flag and its value as one argument: the value is no name. */
	CHECK(strstr(parse_arg_shown("--database-url postgresql://m:PW@h/x?sslmode=disable", out,
				     sizeof(out)),
		     "PW") == NULL);
	CHECK(strstr(parse_arg_shown("--operator-token PWtoken", out, sizeof(out)), "PW") == NULL);
	CHECK(strstr(out, "\"--operator-token\"") != NULL);
	CHECK(strstr(parse_arg_shown("password=PW", out, sizeof(out)), "PW") == NULL);
	CHECK(strstr(parse_arg_shown("postgresql://m:PW@h/x", out, sizeof(out)), "PW") == NULL);
	CHECK(strstr(parse_arg_shown("m:PW", out, sizeof(out)), "PW") == NULL);
	CHECK(strstr(parse_arg_shown("PW@h", out, sizeof(out)), "PW") == NULL);
	/* A token apart from its flag ("--operator-token= TOKEN"): at 32
	 * bytes, as short as a token may be, not shown; at 31, shown. */
	CHECK(strstr(parse_arg_shown("0123456789abcdef0123456789ABCDEF", out, sizeof(out)),
		     "0123") == NULL);
	CHECK_STR(parse_arg_shown("0123456789abcdef0123456789ABCDE", out, sizeof(out)),
		  "\"0123456789abcdef0123456789ABCDE\"");
}

/* parse_format_time against the C library's calendar (gmtime_r and
 * snprintf) over random times of years 0000 to 9999, the edges of a day
 * and of the range, and the shapes it leaves to snprintf. */
static void test_format_time(void)
{
	const int64_t first = INT64_C(-62167219200000000); /* 0000-01-01T00:00:00Z */
	const int64_t end = INT64_C(253402300800000000);   /* 10000-01-01T00:00:00Z */
	const int64_t edges[] = {first,
				 first + 1,
				 -1,
				 0,
				 1,
				 INT64_C(86399999999),
				 INT64_C(86400000000),
				 INT64_C(951782400000000),
				 end - 1};
	uint64_t x = UINT64_C(88172645463325252);
	char got[64], want[64];

	for (int i = 0; i < 200000 + (int)(sizeof(edges) / sizeof(edges[0])); i++) {
		int64_t usec, frac;
		time_t secs;
		struct tm tm;

		if (i < (int)(sizeof(edges) / sizeof(edges[0]))) {
			usec = edges[i];
		} else {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			usec = first + (int64_t)(x % (uint64_t)(end - first));
		}
		frac = usec % 1000000;
		secs = (time_t)(usec / 1000000);
		if (frac < 0) {
			frac += 1000000;
			secs--;
		}
		CHECK(gmtime_r(&secs, &tm) != NULL);
		snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%06" PRId64 "Z",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, frac);
		parse_format_time(usec, got, sizeof(got));
		if (strcmp(got, want) != 0) {
			CHECK_STR(got, want);
			break;
		}
	}
	parse_format_time(end, got, sizeof(got));
	CHECK_STR(got, "10000-01-01T00:00:00.000000Z");
	parse_format_time(first - 1, got, sizeof(got));
	CHECK_STR(got, "-001-12-31T23:59:59.999999Z");
	parse_format_time(0, got, PARSE_TIME_LEN);
	CHECK_STR(got, "1970-01-01T00:00:00.000000");
	parse_format_time(0, got, 11);
	CHECK_STR(got, "1970-01-01");
}

int main(void)
{
	test_good_ints();
	test_bad_ints();
	test_ranges();
	test_ids();
	test_plain_text();
	test_json_strings();
	test_json_member_at();
	test_arg_shown();
	test_format_time();
	return check_done();
}
