/* meter: the host-agent usage document (see agent_doc.h).
 *
 * The document is parsed by jansson with duplicate keys rejected (a NUL
 * inside a string and invalid UTF-8 are always rejected by jansson without
 * JSON_ALLOW_NUL), after a size check and a nesting pre-scan: the root
 * without its sandboxes, then each sandbox on its own (doc_parse_split), or
 * the whole text at once when that fails, for jansson's error. Numbers must be
 * JSON integers (jansson's json_int_t is long long, and an integer that does
 * not fit is a parse error); reals, booleans and strings are rejected for
 * numeric fields. Times are parsed and formatted with integer arithmetic
 * only. */
#include "agent_doc.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "usage.h"

#define DOC_DEPTH_MAX	    8 /* the document needs 3: object, array, object */
#define DOC_VCPUS_MAX	    INT64_C(1024)
#define DOC_MIB_MAX	    INT64_C(16777216) /* 16 TiB in MiB */
#define DOC_CPU_USEC_MAX    (INT64_C(1) << 62)
#define DOC_USEC_PER_SEC    INT64_C(1000000)
#define DOC_USEC_PER_DAY    INT64_C(86400000000)
#define DOC_FUTURE_MAX_USEC (INT64_C(600) * DOC_USEC_PER_SEC) /* 10 minutes */
#define DOC_EPOCH_2000_USEC INT64_C(946684800000000)	      /* 2000-01-01T00:00:00Z */

/* Writes "field: message" into err (one line). */
__attribute__((format(printf, 4, 5))) static void doc_err(char *err, size_t errlen,
							  const char *field, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)snprintf(err, errlen, "%s: %s", field, msg);
}

/* Copies untrusted text (an unknown field's name, jansson's excerpt) into
 * out for an error line: at most 40 characters, anything but printable
 * ASCII replaced by '?', "..." when cut. */
static void doc_safe_name(const char *s, char *out, size_t outlen)
{
	size_t n = 0, i;

	for (i = 0; s[i] && n + 4 < outlen && i < 40; i++) {
		unsigned char c = (unsigned char)s[i];

		out[n++] = (char)((c >= 0x20 && c < 0x7f) ? c : '?');
	}
	if (s[i] && n + 4 <= outlen) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

/* v's JSON type for an error message; NULL (nothing there) is safe too. */
static const char *doc_type_name(const json_t *v)
{
	if (!v)
		return "nothing";
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "real number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	case JSON_NULL:
		return "null";
	}
	return "unknown";
}

/* Where errors go: the item index (-1 for the document's root) names the
 * field, built only when something is wrong. */
struct doc_ctx {
	long idx;
	char *err;
	size_t errlen;
};

/* Writes "key: message" or "sandboxes[idx].key: message" into the error
 * (key NULL: the item itself). */
__attribute__((format(printf, 3, 4))) static void doc_fail(const struct doc_ctx *c, const char *key,
							   const char *fmt, ...)
{
	char field[128], msg[256];
	va_list ap;

	if (!c->err || c->errlen == 0)
		return;
	if (c->idx < 0)
		(void)snprintf(field, sizeof(field), "%s", key ? key : "document");
	else
		(void)snprintf(field, sizeof(field), "sandboxes[%ld]%s%s", c->idx, key ? "." : "",
			       key ? key : "");
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)snprintf(c->err, c->errlen, "%s: %s", field, msg);
}

/* Every key of obj must be one of names (NULL-terminated); otherwise the
 * error names the first unknown one. */
static enum meter_rc doc_known_fields(json_t *obj, const char *const *names,
				      const struct doc_ctx *c)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v)
	{
		bool known = false;
		char safe[48];

		for (size_t i = 0; names[i]; i++)
			if (strcmp(key, names[i]) == 0)
				known = true;
		if (known)
			continue;
		doc_safe_name(key, safe, sizeof(safe));
		doc_fail(c, safe, "unknown field");
		return METER_EINVAL;
	}
	return METER_OK;
}

/* An integer field in [min, max] into *out. An optional field that is absent
 * or null leaves *out untouched; a required absent field is an error. */
static enum meter_rc doc_int(json_t *obj, const char *key, bool required, int64_t min, int64_t max,
			     int64_t *out, const struct doc_ctx *c)
{
	json_t *v = json_object_get(obj, key);
	json_int_t x;

	if (!v || (!required && json_is_null(v))) {
		if (!required)
			return METER_OK;
		doc_fail(c, key, "missing");
		return METER_EINVAL;
	}
	if (!json_is_integer(v)) {
		doc_fail(c, key, "must be an integer from %" PRId64 " to %" PRId64 " (got %s)", min,
			 max, doc_type_name(v));
		return METER_EINVAL;
	}
	x = json_integer_value(v);
	if (x < min || x > max) {
		doc_fail(c, key, "must be an integer from %" PRId64 " to %" PRId64 " (got %lld)",
			 min, max, (long long)x);
		return METER_ERANGE;
	}
	*out = (int64_t)x;
	return METER_OK;
}

/* A string field; *out borrowed from obj. Optional absent or null: *out NULL. */
static enum meter_rc doc_str(json_t *obj, const char *key, bool required, const char **out,
			     const struct doc_ctx *c)
{
	json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || (!required && json_is_null(v))) {
		if (!required)
			return METER_OK;
		doc_fail(c, key, "missing");
		return METER_EINVAL;
	}
	if (!json_is_string(v)) {
		doc_fail(c, key, "must be a string (got %s)", doc_type_name(v));
		return METER_EINVAL;
	}
	*out = json_string_value(v);
	return METER_OK;
}

/* An id field (parse_is_id), copied into out (PARSE_ID_MAX + 1 bytes);
 * optional absent or null: out = "". */
static enum meter_rc doc_id(json_t *obj, const char *key, bool required, char *out,
			    const struct doc_ctx *c)
{
	const char *s;
	enum meter_rc rc = doc_str(obj, key, required, &s, c);

	out[0] = '\0';
	if (rc != METER_OK || !s)
		return rc;
	if (!parse_is_id(s)) {
		doc_fail(c, key, "must be 1 to %d characters of A-Z a-z 0-9 _ . -", PARSE_ID_MAX);
		return METER_EINVAL;
	}
	memcpy(out, s, strlen(s) + 1);
	return METER_OK;
}

/* FNV-1a over an id: the duplicate check's hash. */
static uint32_t doc_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	return h;
}

/* Index of an item of b with the same sandbox id as item i, among the ones
 * already in the open-addressing table slots (size mask + 1, entries are
 * index + 1, 0 = empty), else inserts i and returns -1. */
static long doc_dup_insert(const struct sample_batch *b, uint32_t *slots, size_t mask, size_t i)
{
	size_t h = doc_hash(b->items[i].sandbox_id) & mask;

	for (;;) {
		uint32_t e = slots[h];

		if (e == 0) {
			slots[h] = (uint32_t)i + 1;
			return -1;
		}
		if (strcmp(b->items[e - 1].sandbox_id, b->items[i].sandbox_id) == 0)
			return (long)(e - 1);
		h = (h + 1) & mask;
	}
}

/* One entry of "sandboxes" into s (at_usec set by the caller). */
static enum meter_rc doc_item(json_t *item, size_t idx, struct meter_sample *s, char *err,
			      size_t errlen)
{
	static const char *const names[] = {"sandbox_id", "key_id",	 "state",    "vcpus",
					    "memory_mib", "storage_mib", "cpu_usec", NULL};
	const struct doc_ctx c = {.idx = (long)idx, .err = err, .errlen = errlen};
	const char *state;
	int64_t vcpus = 0, memory = 0, storage = SAMPLE_UNKNOWN, cpu = 0;
	enum meter_rc rc;

	if (!json_is_object(item)) {
		doc_fail(&c, NULL, "must be an object (got %s)", doc_type_name(item));
		return METER_EINVAL;
	}
	rc = doc_known_fields(item, names, &c);
	if (rc == METER_OK)
		rc = doc_id(item, "sandbox_id", true, s->sandbox_id, &c);
	if (rc == METER_OK)
		rc = doc_id(item, "key_id", false, s->key_id, &c);
	if (rc == METER_OK)
		rc = doc_str(item, "state", true, &state, &c);
	if (rc == METER_OK && sandbox_state_parse(state, &s->u.state) != METER_OK) {
		doc_fail(&c, "state", "must be running, paused or stopped");
		rc = METER_EINVAL;
	}
	if (rc == METER_OK)
		rc = doc_int(item, "vcpus", true, 1, DOC_VCPUS_MAX, &vcpus, &c);
	if (rc == METER_OK)
		rc = doc_int(item, "memory_mib", true, 0, DOC_MIB_MAX, &memory, &c);
	if (rc == METER_OK)
		rc = doc_int(item, "storage_mib", false, 0, DOC_MIB_MAX, &storage, &c);
	if (rc == METER_OK)
		rc = doc_int(item, "cpu_usec", true, 0, DOC_CPU_USEC_MAX, &cpu, &c);
	if (rc != METER_OK)
		return rc;
	s->u.vcpus = (int32_t)vcpus;
	s->u.memory_mib = memory;
	s->u.storage_mib = storage;
	s->u.cpu_usec = cpu;
	return METER_OK;
}

/* Where doc_root takes the sandboxes from: the array of the document's
 * tree, or the text's elements, each loaded on its own when asked for
 * (doc_parse_split). */
struct doc_items {
	bool split;   /* the text's elements, not the tree's */
	json_t *list; /* the tree's "sandboxes" */
	const char *text;
	size_t next;   /* the text's next element starts here */
	size_t close;  /* the offset of the array's ']' */
	size_t n;      /* the text's elements */
	size_t loaded; /* of them, loaded so far */
	bool broken;   /* an element is not JSON on its own */
};

/* A new reference to the next item, in order from the first; NULL when
 * the text's next element is not a JSON value (items->broken). */
static json_t *doc_items_next(struct doc_items *items)
{
	const char *t = items->text;
	size_t i = items->next, start = i;
	int depth = 0;
	json_t *v;

	if (!items->split)
		return json_incref(json_array_get(items->list, items->loaded++));
	for (; i < items->close; i++) {
		char c = t[i];

		if (c == '"')
			i = parse_json_string_end(t, items->close, i) - 1;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		else if (c == ',' && depth == 0)
			break;
	}
	items->next = i < items->close ? i + 1 : i;
	items->loaded++;
	v = json_loadb(t + start, i - start, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	if (!v)
		items->broken = true;
	return v;
}

/* The body of agent_doc_parse once the JSON is loaded, or its root with
 * the sandboxes' array empty and the elements in items' text. */
static enum meter_rc doc_root(json_t *root, struct doc_items *items, int64_t now_usec,
			      struct sample_batch *out, char *err, size_t errlen)
{
	static const char *const names[] = {"host_id", "sampled_at", "sandboxes", NULL};
	const struct doc_ctx c = {.idx = -1, .err = err, .errlen = errlen};
	const char *at_text;
	json_t *list;
	size_t n, mask, nslots;
	uint32_t *slots = NULL;
	int64_t at;
	enum meter_rc rc;

	if (!json_is_object(root)) {
		doc_err(err, errlen, "document", "must be a JSON object (got %s)",
			doc_type_name(root));
		return METER_EINVAL;
	}
	rc = doc_known_fields(root, names, &c);
	if (rc == METER_OK)
		rc = doc_id(root, "host_id", true, out->host_id, &c);
	if (rc == METER_OK && strcmp(out->host_id, SAMPLE_HOST_STOP) == 0) {
		doc_err(err, errlen, "host_id", "%s is the service's own (its readings at a stop)",
			SAMPLE_HOST_STOP);
		rc = METER_EINVAL;
	}
	if (rc == METER_OK)
		rc = doc_str(root, "sampled_at", true, &at_text, &c);
	if (rc != METER_OK)
		return rc;
	if (agent_doc_parse_time(at_text, &at) != METER_OK) {
		doc_err(err, errlen, "sampled_at", "must be an RFC 3339 time");
		return METER_EINVAL;
	}
	if (at < DOC_EPOCH_2000_USEC) {
		doc_err(err, errlen, "sampled_at", "before 2000-01-01T00:00:00Z");
		return METER_ERANGE;
	}
	if (now_usec <= INT64_MAX - DOC_FUTURE_MAX_USEC && at > now_usec + DOC_FUTURE_MAX_USEC) {
		doc_err(err, errlen, "sampled_at",
			"more than 10 minutes ahead of the current time");
		return METER_ERANGE;
	}
	out->sampled_at_usec = at;

	list = json_object_get(root, "sandboxes");
	items->list = list;
	if (!list) {
		doc_err(err, errlen, "sandboxes", "missing");
		return METER_EINVAL;
	}
	if (!json_is_array(list)) {
		doc_err(err, errlen, "sandboxes", "must be an array (got %s)", doc_type_name(list));
		return METER_EINVAL;
	}
	n = items->split ? items->n : json_array_size(list);
	if (n > SAMPLE_BATCH_MAX) {
		doc_err(err, errlen, "sandboxes", "more than %d sandboxes", SAMPLE_BATCH_MAX);
		return METER_ERANGE;
	}
	if (n == 0)
		return METER_OK;

	/* One allocation for the items, one for the duplicate table. */
	out->items = malloc(n * sizeof(*out->items));
	for (nslots = 16; nslots < 2 * n; nslots *= 2)
		;
	mask = nslots - 1;
	slots = calloc(nslots, sizeof(*slots));
	if (!out->items || !slots) {
		doc_err(err, errlen, "document", "out of memory");
		rc = METER_ENOMEM;
		goto out;
	}
	out->cap = n;
	for (size_t i = 0; i < n; i++) {
		struct meter_sample *s = &out->items[i];
		json_t *item = doc_items_next(items);
		long dup;

		if (!item) {
			/* Not JSON: the caller loads the text whole instead. */
			rc = METER_EINVAL;
			goto out;
		}
		memset(s, 0, sizeof(*s));
		rc = doc_item(item, i, s, err, errlen);
		json_decref(item);
		if (rc != METER_OK)
			goto out;
		s->u.at_usec = at;
		out->n = i + 1;
		dup = doc_dup_insert(out, slots, mask, i);
		if (dup >= 0) {
			char field[64];

			(void)snprintf(field, sizeof(field), "sandboxes[%zu].sandbox_id", i);
			doc_err(err, errlen, field, "%s is also sandboxes[%ld]", s->sandbox_id,
				dup);
			rc = METER_EINVAL;
			goto out;
		}
	}
	rc = METER_OK;
out:
	free(slots);
	return rc;
}

/* Finds the array that is the only array member of the text's root
 * object: the offsets just past its '[' (items->next) and of its ']'
 * (items->close), and its elements (the commas between them plus one; 0
 * when there is nothing but white space). False when the root is not an
 * object or has no such one array. The text need not be JSON: jansson
 * loads whatever this finds before anything of it is read. */
static bool doc_split_scan(const char *text, size_t len, struct doc_items *items)
{
	int depth = 0;
	bool in_array = false, found = false, filled = false;
	size_t i = 0, commas = 0;

	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
		i++;
	if (i == len || text[i] != '{')
		return false;
	for (; i < len; i++) {
		char c = text[i];

		if (c == '"') {
			i = parse_json_string_end(text, len, i) - 1;
			filled = filled || in_array;
		} else if (c == '{' || c == '[') {
			if (depth == 1 && c == '[') {
				if (found)
					return false;
				found = in_array = true;
				items->next = i + 1;
			} else if (in_array) {
				filled = true;
			}
			depth++;
		} else if (c == '}' || c == ']') {
			depth--;
			if (in_array && depth == 1) {
				if (c != ']')
					return false;
				in_array = false;
				items->close = i;
			}
		} else if (in_array && c == ',' && depth == 2) {
			commas++;
			filled = true;
		} else if (in_array && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			filled = true; /* a number, a literal */
		}
	}
	if (!found || in_array)
		return false;
	items->split = true;
	items->text = text;
	items->n = filled ? commas + 1 : 0;
	return true;
}

/* agent_doc_parse for a document whose root has one array, its
 * sandboxes: the root is loaded with the array's interior left out, then
 * the elements one at a time, each freed once read, so the whole
 * document's tree (about 115 MB for 100,000 sandboxes) is never built.
 * Every element is loaded before an error of the document's meaning is
 * given, as a whole load finds every JSON error first. False, with out
 * empty, when the root or an element is not JSON on its own: the caller
 * loads the text whole, for jansson's error at its place in the text. */
static bool doc_parse_split(const char *text, size_t len, int64_t now_usec,
			    struct sample_batch *out, char *err, size_t errlen, enum meter_rc *rc)
{
	struct doc_items items = {0};
	size_t copylen;
	char *copy;
	json_t *root;

	if (!doc_split_scan(text, len, &items))
		return false;
	copylen = items.next + (len - items.close);
	copy = malloc(copylen);
	if (!copy)
		return false;
	memcpy(copy, text, items.next);
	memcpy(copy + items.next, text + items.close, len - items.close);
	root = json_loadb(copy, copylen, JSON_REJECT_DUPLICATES, NULL);
	free(copy);
	if (!root)
		return false;
	/* The array is the root's "sandboxes" when that is an array (the
	 * root's only one); when it is another field's, doc_root refuses that
	 * field (unknown, or not a string) before it counts sandboxes. */
	*rc = doc_root(root, &items, now_usec, out, err, errlen);
	json_decref(root);
	while (*rc != METER_OK && !items.broken && items.loaded < items.n)
		json_decref(doc_items_next(&items));
	if (!items.broken)
		return true;
	sample_batch_release(out);
	sample_batch_init(out);
	return false;
}

/* agent_doc_parse from one jansson tree of the whole text. */
static enum meter_rc doc_parse_whole(const char *text, size_t len, int64_t now_usec,
				     struct sample_batch *out, char *err, size_t errlen)
{
	struct doc_items items = {0};
	json_error_t jerr;
	json_t *root;
	enum meter_rc rc;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char safe[96];

		doc_safe_name(jerr.text, safe, sizeof(safe));
		doc_err(err, errlen, "document", "malformed JSON at line %d column %d: %s",
			jerr.line, jerr.column,
			parse_json_error_is_nul(jerr.text) ? PARSE_JSON_NUL_TEXT : safe);
		return METER_EINVAL;
	}
	rc = doc_root(root, &items, now_usec, out, err, errlen);
	json_decref(root);
	return rc;
}

static enum meter_rc doc_parse(const char *text, size_t len, int64_t now_usec,
			       struct sample_batch *out, char *err, size_t errlen, bool whole)
{
	const char *nul;
	enum meter_rc rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out || (!text && len)) {
		doc_err(err, errlen, "document", "missing");
		return METER_EINVAL;
	}
	sample_batch_init(out);
	if (len > AGENT_DOC_MAX_BYTES) {
		doc_err(err, errlen, "document", "larger than %d bytes", AGENT_DOC_MAX_BYTES);
		return METER_ERANGE;
	}
	if (len == 0) {
		doc_err(err, errlen, "document", "empty");
		return METER_EINVAL;
	}
	if (parse_json_depth(text, len) > DOC_DEPTH_MAX) {
		doc_err(err, errlen, "document", "nested deeper than %d levels", DOC_DEPTH_MAX);
		return METER_EINVAL;
	}
	/* A raw NUL byte is never JSON; jansson took one before a closing
	 * bracket for the end of the text. */
	nul = memchr(text, '\0', len);
	if (nul) {
		doc_err(err, errlen, "document", "malformed JSON: a NUL byte at byte %zu",
			(size_t)(nul - text));
		return METER_EINVAL;
	}
	if (whole || !doc_parse_split(text, len, now_usec, out, err, errlen, &rc)) {
		if (err && errlen)
			err[0] = '\0';
		rc = doc_parse_whole(text, len, now_usec, out, err, errlen);
	}
	if (rc != METER_OK) {
		sample_batch_release(out);
		sample_batch_init(out);
	}
	return rc;
}

enum meter_rc agent_doc_parse(const char *text, size_t len, int64_t now_usec,
			      struct sample_batch *out, char *err, size_t errlen)
{
	return doc_parse(text, len, now_usec, out, err, errlen, false);
}

enum meter_rc agent_doc_parse_whole(const char *text, size_t len, int64_t now_usec,
				    struct sample_batch *out, char *err, size_t errlen)
{
	return doc_parse(text, len, now_usec, out, err, errlen, true);
}

static bool doc_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* n decimal digits at s into *v; false unless all are digits. */
static bool doc_digits(const char *s, int n, int64_t *v)
{
	int64_t x = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (s[i] - '0');
	}
	*v = x;
	return true;
}

/* YYYY-MM-DDTHH:MM:SS[.f+](Z|+HH:MM|-HH:MM); 'T' and 'Z' may be lower
 * case (RFC 3339 §5.6); fraction digits past the microsecond are dropped. A leap second (:60) is
 * refused: the service keeps POSIX time. */
enum meter_rc agent_doc_parse_time(const char *s, int64_t *at_usec)
{
	static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int64_t y, mo, d, h, mi, sec, frac = 0, oh = 0, om = 0, days, t;
	const char *p;
	int nfrac = 0, sign = 0;

	if (!s || !at_usec)
		return METER_EINVAL;
	if (strnlen(s, 20) < 20)
		return METER_EINVAL;
	if (!doc_digits(s, 4, &y) || s[4] != '-' || !doc_digits(s + 5, 2, &mo) || s[7] != '-' ||
	    !doc_digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') ||
	    !doc_digits(s + 11, 2, &h) || s[13] != ':' || !doc_digits(s + 14, 2, &mi) ||
	    s[16] != ':' || !doc_digits(s + 17, 2, &sec))
		return METER_EINVAL;
	if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59)
		return METER_EINVAL;
	if (d > mdays[mo - 1] + (mo == 2 && doc_leap(y)))
		return METER_EINVAL;
	p = s + 19;
	if (*p == '.') {
		p++;
		/* Any number of digits (RFC 3339's time-secfrac); those past
		 * the microsecond are dropped. */
		while (p[nfrac] >= '0' && p[nfrac] <= '9') {
			if (nfrac < 6)
				frac = frac * 10 + (p[nfrac] - '0');
			nfrac++;
		}
		if (nfrac == 0)
			return METER_EINVAL;
		p += nfrac;
		for (int i = nfrac; i < 6; i++)
			frac *= 10;
	}
	if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
		sign = 0;
	} else if ((*p == '+' || *p == '-') && strnlen(p, 7) == 6) {
		sign = *p == '+' ? 1 : -1;
		if (!doc_digits(p + 1, 2, &oh) || p[3] != ':' || !doc_digits(p + 4, 2, &om) ||
		    oh > 23 || om > 59)
			return METER_EINVAL;
	} else {
		return METER_EINVAL;
	}
	days = parse_days_from_civil(y, mo, d);
	/* |days| < 3e6 for years 0-9999: every product below fits easily. */
	t = ((days * 24 + h) * 60 + mi) * 60 + sec;
	t -= sign * (oh * 3600 + om * 60); /* local = UTC + offset */
	*at_usec = t * DOC_USEC_PER_SEC + frac;
	return METER_OK;
}

void agent_doc_format_time(int64_t at_usec, char *buf, size_t buflen)
{
	parse_format_time(at_usec, buf, buflen);
}
