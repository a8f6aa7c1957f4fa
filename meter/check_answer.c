/* meter: the allowed answer of a check, written straight to text (see
 * check_answer.h). */
#include "check_answer.h"

#include <stdlib.h>
#include <string.h>

/* Room for the answer's fixed text, numbers and strings: the keys and
 * punctuation take under 300 bytes a part and 250 around them, a number
 * at most 20, and each string is measured before it is written. */
#define FIXED_MAX 1600

struct out {
	char *p;
};

static void put(struct out *o, const char *s)
{
	size_t n = strlen(s);

	memcpy(o->p, s, n);
	o->p += n;
}

/* As "%lld" would. */
static void put_i64(struct out *o, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*o->p++ = '-';
	while (n)
		*o->p++ = tmp[--n];
}

static void put_str(struct out *o, const char *s)
{
	*o->p++ = '"';
	put(o, s);
	*o->p++ = '"';
}

static void put_limit(struct out *o, const struct ledger_day *d)
{
	if (d->has_limit)
		put_i64(o, d->limit_micros);
	else
		put(o, "null");
}

/* True when s is written as is in a JSON string: printable ASCII other
 * than '"' and '\\'. Adds its length to *len. */
static bool plain(const char *s, size_t *len)
{
	size_t n = 0;

	if (!s)
		return false;
	for (; s[n]; n++)
		if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || s[n] == '"' ||
		    s[n] == '\\')
			return false;
	*len += n;
	return true;
}

char *check_answer_allowed(const struct check_answer *a)
{
	size_t len = FIXED_MAX;
	int64_t hold = 0;
	struct out o;
	char *buf;

	if (a->nparts < 1 || a->nparts > LEDGER_PARTS_MAX || !plain(a->sandbox_id, &len) ||
	    !plain(a->key_id, &len) || !plain(a->lease_starts_at, &len) ||
	    !plain(a->lease_ends_at, &len))
		return NULL;
	for (int p = 0; p < a->nparts; p++) {
		/* The first part's day is written twice. */
		if (!plain(a->parts[p].day, &len) || (p == 0 && !plain(a->parts[p].day, &len)))
			return NULL;
		hold += a->parts[p].hold_micros;
	}
	buf = malloc(len);
	if (!buf)
		return NULL;
	o.p = buf;
	put(&o, "{\"allowed\":true,\"sandbox_id\":");
	put_str(&o, a->sandbox_id);
	put(&o, ",\"key_id\":");
	put_str(&o, a->key_id);
	put(&o, ",\"hold_micros\":");
	put_i64(&o, hold);
	put(&o, ",\"lease_max_cost_micros\":");
	put_i64(&o, a->lease_max_cost_micros);
	put(&o, ",\"day\":");
	put_str(&o, a->parts[0].day);
	put(&o, ",\"day_spent_micros\":");
	put_i64(&o, a->parts[0].figures.spent_micros);
	put(&o, ",\"day_held_micros\":");
	put_i64(&o, a->parts[0].figures.held_micros);
	put(&o, ",\"daily_limit_micros\":");
	put_limit(&o, &a->parts[0].figures);
	put(&o, ",\"lease_starts_at\":");
	put_str(&o, a->lease_starts_at);
	put(&o, ",\"lease_ends_at\":");
	put_str(&o, a->lease_ends_at);
	put(&o, ",\"parts\":[");
	for (int p = 0; p < a->nparts; p++) {
		const struct check_answer_part *pt = &a->parts[p];

		put(&o, p ? ",{\"day\":" : "{\"day\":");
		put_str(&o, pt->day);
		put(&o, ",\"hold_micros\":");
		put_i64(&o, pt->hold_micros);
		put(&o, ",\"day_spent_micros\":");
		put_i64(&o, pt->figures.spent_micros);
		put(&o, ",\"day_held_micros\":");
		put_i64(&o, pt->figures.held_micros);
		put(&o, ",\"daily_limit_micros\":");
		put_limit(&o, &pt->figures);
		put(&o, "}");
	}
	put(&o, "]}");
	*o.p = '\0';
	return buf;
}

/* A YYYY-MM-DD day as yyyymmdd; -1 when it is not one. */
static int64_t day_number(const char *day)
{
	int64_t n = 0;

	if (!day || strlen(day) != 10 || day[4] != '-' || day[7] != '-')
		return -1;
	for (int i = 0; i < 10; i++) {
		if (i == 4 || i == 7)
			continue;
		if (day[i] < '0' || day[i] > '9')
			return -1;
		n = n * 10 + (day[i] - '0');
	}
	return n;
}

bool check_answer_numbers(const struct check_answer *a, int64_t starts_usec, int64_t ends_usec,
			  char out[CHECK_ANSWER_NUMBERS_MAX])
{
	int64_t days[LEDGER_PARTS_MAX];
	struct out o;

	if (a->nparts < 1 || a->nparts > LEDGER_PARTS_MAX)
		return false;
	for (int p = 0; p < a->nparts; p++)
		if ((days[p] = day_number(a->parts[p].day)) < 0)
			return false;
	/* At most 23 numbers of 20 characters and 24 more: within the room. */
	o.p = out;
	*o.p++ = '{';
	put_i64(&o, starts_usec);
	*o.p++ = ',';
	put_i64(&o, ends_usec);
	*o.p++ = ',';
	put_i64(&o, a->lease_max_cost_micros);
	for (int p = 0; p < a->nparts; p++) {
		const struct check_answer_part *pt = &a->parts[p];

		*o.p++ = ',';
		put_i64(&o, days[p]);
		*o.p++ = ',';
		put_i64(&o, pt->hold_micros);
		*o.p++ = ',';
		put_i64(&o, pt->figures.spent_micros);
		*o.p++ = ',';
		put_i64(&o, pt->figures.held_micros);
		*o.p++ = ',';
		if (pt->figures.has_limit)
			put_i64(&o, pt->figures.limit_micros);
		else
			put(&o, "NULL");
	}
	*o.p++ = '}';
	*o.p = '\0';
	return true;
}
