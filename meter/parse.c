/* meter: strict parsing of numbers and identifiers from untrusted text, and
 * the calendar and time format that parsing and printing share. */
#include "parse.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The grammar is checked on the whole string before any value is formed, so
 * a malformed string is METER_EINVAL however many digits it has, and only a
 * well-formed one can be METER_ERANGE. The magnitude is accumulated in
 * uint64_t, saturating just above 2^63, so INT64_MIN ("-9223372036854775808")
 * is reached exactly and nothing wraps. "-0" is accepted as 0. NULL s or out,
 * or min > max, is METER_EINVAL. *out is only written on METER_OK. */
enum meter_rc parse_int64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	const uint64_t limit = (uint64_t)INT64_MAX + 1; /* magnitude of INT64_MIN */
	const char *p;
	const char *digits;
	uint64_t mag = 0;
	bool neg = false;
	int64_t v;

	if (!s || !out || min > max)
		return METER_EINVAL;
	p = s;
	if (*p == '-') {
		neg = true;
		p++;
	}
	digits = p;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == digits || *p != '\0')
		return METER_EINVAL;
	if (digits[0] == '0' && p - digits > 1)
		return METER_EINVAL;

	for (p = digits; *p; p++) {
		uint64_t d = (uint64_t)(*p - '0');

		if (mag > (limit - d) / 10) {
			mag = limit + 1; /* saturate: out of int64_t range */
			break;
		}
		mag = mag * 10 + d;
	}
	if (mag > limit || (!neg && mag == limit))
		return METER_ERANGE;
	if (neg)
		v = mag == limit ? INT64_MIN : -(int64_t)mag;
	else
		v = (int64_t)mag;
	if (v < min || v > max)
		return METER_ERANGE;
	*out = v;
	return METER_OK;
}

/* NULL is not an id. */
bool parse_is_id(const char *s)
{
	size_t n = 0;

	if (!s)
		return false;
	for (; s[n]; n++) {
		char c = s[n];

		if (n >= PARSE_ID_MAX)
			return false;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return n >= 1;
}

const char *parse_arg_shown(const char *a, char *out, size_t len)
{
	if (strncmp(a, "--", 2) == 0) {
		/* The name's characters only: "--database-url postgresql://..."
		 * (a flag and its value given as one argument) has no '=' before
		 * its password. */
		size_t n = 2 + strspn(a + 2, "abcdefghijklmnopqrstuvwxyz"
					     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");

		if (a[n] == '\0' || a[n] == '=')
			snprintf(out, len, "\"%.*s\"", (int)(n > 64 ? 64 : n), a);
		else
			snprintf(out, len,
				 "\"%.*s\" with more after it (a flag and its value are two"
				 " arguments, or one as --name=value; the rest is not shown: it"
				 " may hold a secret)",
				 (int)(n > 64 ? 64 : n), a);
	} else if (strpbrk(a, "=:@")) {
		snprintf(out, len, "(not shown: it may hold a password)");
	} else if (strlen(a) >= PARSE_ARG_SHOWN_MAX) {
		snprintf(out, len, "(not shown: it may be a secret)");
	} else {
		snprintf(out, len, "\"%s\"", a);
	}
	return out;
}

enum meter_rc parse_plain_text(const char *s, size_t len, size_t *chars)
{
	/* By a sequence's continuation bytes: its lead byte's bits, and the
	 * least code point it may encode (shorter forms are refused). */
	static const uint32_t lead_bits[4] = {0x7f, 0x1f, 0x0f, 0x07};
	static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, n = 0;

	while (i < len) {
		uint32_t c = p[i];
		size_t more;

		if (c < 0x80)
			more = 0;
		else if ((c & 0xe0) == 0xc0)
			more = 1;
		else if ((c & 0xf0) == 0xe0)
			more = 2;
		else if ((c & 0xf8) == 0xf0)
			more = 3;
		else
			return METER_EINVAL; /* a continuation byte, or 0xf8 and above */
		if (more >= len - i)
			return METER_EINVAL; /* cut short */
		c &= lead_bits[more];
		for (size_t k = 1; k <= more; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return METER_EINVAL;
			c = (c << 6) | (p[i + k] & 0x3fu);
		}
		if (c < least[more] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return METER_EINVAL;
		if (c < 0x20 || (c >= 0x7f && c <= 0x9f))
			return METER_ERANGE;
		i += more + 1;
		n++;
	}
	*chars = n;
	return METER_OK;
}

size_t parse_json_string_end(const char *text, size_t len, size_t at)
{
	for (size_t i = at + 1; i < len; i++) {
		if (text[i] == '\\')
			i++;
		else if (text[i] == '"')
			return i + 1;
	}
	return len;
}

int parse_json_depth(const char *text, size_t len)
{
	int depth = 0, max = 0;

	for (size_t i = 0; i < len; i++) {
		char c = text[i];

		if (c == '"') {
			i = parse_json_string_end(text, len, i) - 1;
		} else if (c == '{' || c == '[') {
			if (++depth > max)
				max = depth;
		} else if (c == '}' || c == ']') {
			depth--;
		}
	}
	return max;
}

bool parse_json_member_at(const char *text, size_t len, size_t pos, char *name, size_t cap)
{
	int depth = 0;
	bool in_string = false, escaped = false, named = false;
	size_t start = 0, end = 0, at = 0, at_end = 0;

	if (pos > len)
		pos = len;
	for (size_t i = 0; i < pos; i++) {
		if (depth == 0 && text[i] == '[')
			return false; /* the top level is an array: no members */
		char c = text[i];

		if (in_string) {
			if (c == '\\') {
				escaped = true;
				i++;
			} else if (c == '"') {
				in_string = false;
				end = i;
			}
			continue;
		}
		if (c == '"') {
			in_string = true;
			escaped = false;
			start = i + 1;
			end = 0;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (depth == 1 && c == ':' && end > start && !escaped) {
			/* The string just closed is this member's name. */
			named = true;
			at = start;
			at_end = end;
		} else if (depth == 1 && c == ',') {
			named = false;
		}
	}
	if (depth < 1 || !named || at_end - at >= cap)
		return false;
	memcpy(name, text + at, at_end - at);
	name[at_end - at] = '\0';
	return true;
}

bool parse_json_error_is_nul(const char *text)
{
	return text && strstr(text, "\\u0000") != NULL;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil), integers only. */
int64_t parse_days_from_civil(int64_t y, int64_t m, int64_t d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* The inverse of parse_days_from_civil. */
void parse_civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = yoe + era * 400 + (*m <= 2);
}

/* Two digits of v (0-99) at p. */
static void put2(char *p, int64_t v)
{
	p[0] = (char)('0' + v / 10);
	p[1] = (char)('0' + v % 10);
}

void parse_format_time(int64_t usec, char *buf, size_t len)
{
	const int64_t day = INT64_C(86400000000), sec = INT64_C(1000000);
	int64_t days = usec / day, rem = usec % day, y, m, d, s, frac;

	if (!buf || len == 0)
		return;
	if (rem < 0) {
		rem += day;
		days--;
	}
	parse_civil_from_days(days, &y, &m, &d);
	s = rem / sec;
	frac = rem % sec;
	if (y < 0 || y > 9999 || len < PARSE_TIME_LEN + 1) {
		/* The rare shapes, by the general formatter. Every time took
		 * this way cost about 0.25 µs, and a check formats several:
		 * about 6% of meterd's CPU per check. */
		(void)snprintf(buf, len,
			       "%04" PRId64 "-%02" PRId64 "-%02" PRId64 "T%02" PRId64 ":%02" PRId64
			       ":%02" PRId64 ".%06" PRId64 "Z",
			       y, m, d, s / 3600, s / 60 % 60, s % 60, frac);
		return;
	}
	put2(buf, y / 100);
	put2(buf + 2, y % 100);
	buf[4] = '-';
	put2(buf + 5, m);
	buf[7] = '-';
	put2(buf + 8, d);
	buf[10] = 'T';
	put2(buf + 11, s / 3600);
	buf[13] = ':';
	put2(buf + 14, s / 60 % 60);
	buf[16] = ':';
	put2(buf + 17, s % 60);
	buf[19] = '.';
	put2(buf + 20, frac / 10000);
	put2(buf + 22, frac / 100 % 100);
	put2(buf + 24, frac % 100);
	buf[26] = 'Z';
	buf[27] = '\0';
}
