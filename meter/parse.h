/* meter: strict parsing of numbers and identifiers from untrusted text.
 * No atoi/strtol shortcuts: every byte is accounted for. Also the calendar
 * (days from and to dates) and the time format the service prints. */
#ifndef METER_PARSE_H
#define METER_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rc.h"

/* Parses a whole decimal integer (optional leading '-', digits only, no
 * spaces, no '+', no leading zeros beyond a single "0") into *out.
 * METER_EINVAL when s is not such a number, METER_ERANGE when it is outside
 * [min, max]. */
METER_MUSTCHECK enum meter_rc parse_int64(const char *s, int64_t min, int64_t max, int64_t *out);

/* True when s is an id: 1 to 64 characters of A-Z a-z 0-9 _ . - */
bool parse_is_id(const char *s);

/* The offset just past the JSON string whose opening quote is text[at]:
 * past its closing quote, a backslash taking the byte after it; len when
 * the text ends first. */
size_t parse_json_string_end(const char *text, size_t len, size_t at);

/* The deepest nesting of { and [ in the JSON text (len bytes), outside
 * strings: a cheap bound checked before handing untrusted text to the
 * parser. Malformed text gives some number; the parser rejects it anyway. */
int parse_json_depth(const char *text, size_t len);

/* The name of the member of the JSON object text (len bytes) whose value
 * holds byte pos, at the object's top level (a member whose value is an
 * object or array names the one at pos within it), written to name (cap
 * bytes, NUL-terminated). A lexical walk of strings, brackets, colons and
 * commas up to pos, so the text may be malformed past pos: it names what
 * the parser refused there. False when pos is not inside a member's value,
 * or the name holds an escape or does not fit. */
bool parse_json_member_at(const char *text, size_t len, size_t pos, char *name, size_t cap);

/* True when the parser's (jansson's) error text is its refusal of an
 * escaped NUL in a string: that text names a flag of the parser, so a
 * client is told PARSE_JSON_NUL_TEXT instead. */
#define PARSE_JSON_NUL_TEXT "a string holds \\u0000 (NUL), which no field takes"
bool parse_json_error_is_nul(const char *text);

#define PARSE_ID_MAX 64

/* Arguments this long or longer are not shown: as long as a token or
 * secret may be (each is at least 32 bytes). */
#define PARSE_ARG_SHOWN_MAX 32

/* How a command line's argument a is named in an error message, written
 * to out (len bytes) and returned: an option ("--name=value") by its name
 * alone (at most 64 bytes of it; of "--name value" given as one argument,
 * the name and a note that the rest is not shown); any other argument holding '=', ':' or
 * '@' (a "key=value" connection string or a URL: how a password is given),
 * or of PARSE_ARG_SHOWN_MAX bytes or more (a token that came apart from its
 * flag: "--operator-token= TOKEN"), by a note that it is not shown;
 * anything else as it is. */
const char *parse_arg_shown(const char *a, char *out, size_t len);

/* Checks len bytes of text meant to be shown to people (an account's
 * name): valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF)
 * with no control character, C0 (below U+0020), DEL or C1 (U+0080 to
 * U+009F). METER_EINVAL when it is not UTF-8, METER_ERANGE when it holds
 * a control character (NUL included); else METER_OK with *chars set to
 * its characters (code points), as PostgreSQL's length() counts them. */
METER_MUSTCHECK enum meter_rc parse_plain_text(const char *s, size_t len, size_t *chars);

/* Days since 1970-01-01 of the proleptic Gregorian date y-m-d (m 1-12,
 * d 1-31), and back. Integers only. */
int64_t parse_days_from_civil(int64_t y, int64_t m, int64_t d);
void parse_civil_from_days(int64_t days, int64_t *y, int64_t *m, int64_t *d);

/* usec (µs since 1970-01-01 UTC) as RFC 3339 UTC with microseconds,
 * "2026-11-30T01:02:03.456789Z" (PARSE_TIME_LEN characters and a NUL), into
 * buf of len bytes, truncated to fit as snprintf would. A year outside
 * 0000-9999 is written in full ("10000-01-01T...", "-001-12-31T..."). */
#define PARSE_TIME_LEN 27
void parse_format_time(int64_t usec, char *buf, size_t len);

#endif
