/* Unit tests for meter/agent_doc.c: the host-agent document.
 *
 * Fixture cases live in tests/fixtures/agent_doc/{valid,invalid}/NAME.json.
 * An invalid case must be rejected with one line; when NAME.expect exists
 * its first line must appear in that line (it names the field). A valid case
 * must have NAME.expect describing the parsed batch:
 *   host_id ID
 *   sampled_at RFC3339 (as agent_doc_format_time writes it)
 *   n COUNT
 *   item INDEX SANDBOX_ID KEY_ID|- STATE VCPUS MEMORY_MIB STORAGE_MIB CPU_USEC
 * Generated cases (huge bodies, SAMPLE_BATCH_MAX sandboxes) and the time
 * functions are checked in code. */
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "check.h"

#ifndef METER_FIXTURES_DIR
#error "METER_FIXTURES_DIR must name tests/fixtures"
#endif

#define NOW_USEC INT64_C(1796040000000000) /* 2026-11-30T12:00:00Z */

/* Reads a whole file into a new buffer (NUL added, not counted in *len). */
static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		goto out;
	buf = malloc((size_t)n + 1);
	if (!buf)
		goto out;
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
		goto out;
	}
	buf[n] = '\0';
	*len = (size_t)n;
out:
	fclose(f);
	return buf;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted NAME.json files of dir (names without ".json"); *n set. */
static char **list_cases(const char *dir, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t cap = 0;

	*n = 0;
	if (!d)
		return NULL;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (len <= 5 || strcmp(e->d_name + len - 5, ".json") != 0)
			continue;
		if (*n == cap) {
			char **grown;

			cap = cap ? cap * 2 : 64;
			grown = realloc(names, cap * sizeof(*names));
			if (!grown)
				break;
			names = grown;
		}
		names[*n] = strndup(e->d_name, len - 5);
		if (!names[*n])
			break;
		(*n)++;
	}
	closedir(d);
	if (names)
		qsort(names, *n, sizeof(*names), cmp_names);
	return names;
}

static void free_cases(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Both ways of reading a document (its sandboxes one at a time, or one
 * tree of the whole text) give the same answer, error and batch. */
static void check_same_as_whole(const char *name, const char *text, size_t len)
{
	struct sample_batch a, w;
	char ea[512], ew[512];
	enum meter_rc ra, rw;

	ra = agent_doc_parse(text, len, NOW_USEC, &a, ea, sizeof(ea));
	rw = agent_doc_parse_whole(text, len, NOW_USEC, &w, ew, sizeof(ew));
	if (ra != rw || strcmp(ea, ew) != 0)
		fprintf(stderr, "%s: %d \"%s\", read whole %d \"%s\"\n", name, (int)ra, ea, (int)rw,
			ew);
	CHECK(ra == rw);
	CHECK_STR(ea, ew);
	CHECK_STR(a.host_id, w.host_id);
	CHECK_I64(a.sampled_at_usec, w.sampled_at_usec);
	CHECK_I64(a.n, w.n);
	for (size_t i = 0; i < a.n && i < w.n; i++) {
		const struct meter_sample *x = &a.items[i], *y = &w.items[i];

		CHECK_STR(x->sandbox_id, y->sandbox_id);
		CHECK_STR(x->key_id, y->key_id);
		CHECK(x->u.state == y->u.state && x->u.vcpus == y->u.vcpus);
		CHECK(x->u.at_usec == y->u.at_usec && x->u.cpu_usec == y->u.cpu_usec);
		CHECK(x->u.memory_mib == y->u.memory_mib && x->u.storage_mib == y->u.storage_mib);
		CHECK(x->state_from_events == y->state_from_events);
	}
	sample_batch_release(&a);
	sample_batch_release(&w);
}

static void run_invalid(const char *dir, const char *name)
{
	char path[1024], err[512];
	struct sample_batch b;
	size_t len = 0, elen = 0;
	char *text, *expect;
	enum meter_rc rc;

	snprintf(path, sizeof(path), "%s/%s.json", dir, name);
	text = read_file(path, &len);
	CHECK(text != NULL);
	if (!text)
		return;
	sample_batch_init(&b);
	rc = agent_doc_parse(text, len, NOW_USEC, &b, err, sizeof(err));
	if (rc == METER_OK)
		fprintf(stderr, "invalid/%s: accepted\n", name);
	CHECK(rc != METER_OK);
	CHECK(b.n == 0 && b.items == NULL);
	CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
	if (getenv("METER_TEST_VERBOSE"))
		printf("invalid/%s: %s\n", name, err);
	snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
	expect = read_file(path, &elen);
	if (expect) {
		char *nl = strchr(expect, '\n');

		if (nl)
			*nl = '\0';
		if (!strstr(err, expect))
			fprintf(stderr, "invalid/%s: error \"%s\" does not contain \"%s\"\n", name,
				err, expect);
		CHECK(strstr(err, expect) != NULL);
	}
	free(expect);
	sample_batch_release(&b);
	check_same_as_whole(name, text, len);
	free(text);
}

/* Compares b with the lines of an expect file. */
static void check_expect(const char *name, const struct sample_batch *b, char *expect)
{
	char *line, *next;
	char at[40];
	size_t items = 0;
	int saw_n = 0;

	for (line = expect; *line; line = next) {
		char a[128], k[128], state[16];
		unsigned long long idx, n;
		long long vcpus, mem, sto, cpu;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if (sscanf(line, "host_id %127s", a) == 1) {
			CHECK_STR(b->host_id, a);
		} else if (sscanf(line, "sampled_at %127s", a) == 1) {
			agent_doc_format_time(b->sampled_at_usec, at, sizeof(at));
			CHECK_STR(at, a);
		} else if (sscanf(line, "n %llu", &n) == 1) {
			CHECK_I64(b->n, n);
			saw_n = 1;
		} else if (sscanf(line, "item %llu %127s %127s %15s %lld %lld %lld %lld", &idx, a,
				  k, state, &vcpus, &mem, &sto, &cpu) == 8) {
			const struct meter_sample *s;

			items++;
			CHECK(idx < b->n);
			if (idx >= b->n)
				continue;
			s = &b->items[idx];
			CHECK_STR(s->sandbox_id, a);
			CHECK_STR(s->key_id, strcmp(k, "-") == 0 ? "" : k);
			CHECK_STR(sandbox_state_name(s->u.state), state);
			CHECK_I64(s->u.vcpus, vcpus);
			CHECK_I64(s->u.memory_mib, mem);
			CHECK_I64(s->u.storage_mib, sto);
			CHECK_I64(s->u.cpu_usec, cpu);
			CHECK_I64(s->u.at_usec, b->sampled_at_usec);
		} else {
			fprintf(stderr, "valid/%s.expect: bad line \"%s\"\n", name, line);
			CHECK(0);
		}
	}
	CHECK(saw_n);
	CHECK_I64(items, b->n);
}

static void run_valid(const char *dir, const char *name)
{
	char path[1024], err[512];
	struct sample_batch b;
	size_t len = 0, elen = 0;
	char *text, *expect;
	enum meter_rc rc;

	snprintf(path, sizeof(path), "%s/%s.json", dir, name);
	text = read_file(path, &len);
	snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
	expect = read_file(path, &elen);
	CHECK(text != NULL && expect != NULL);
	if (!text || !expect)
		goto out;
	sample_batch_init(&b);
	rc = agent_doc_parse(text, len, NOW_USEC, &b, err, sizeof(err));
	if (rc != METER_OK)
		fprintf(stderr, "valid/%s: rejected: %s\n", name, err);
	CHECK(rc == METER_OK);
	if (rc == METER_OK)
		check_expect(name, &b, expect);
	sample_batch_release(&b);
	check_same_as_whole(name, text, len);
out:
	free(text);
	free(expect);
}

static void test_fixtures(void)
{
	static const struct {
		const char *sub;
		void (*run)(const char *dir, const char *name);
		size_t min;
	} kinds[] = {{"invalid", run_invalid, 100}, {"valid", run_valid, 25}};

	for (size_t k = 0; k < 2; k++) {
		char dir[512];
		size_t n;
		char **names;

		snprintf(dir, sizeof(dir), "%s/agent_doc/%s", METER_FIXTURES_DIR, kinds[k].sub);
		names = list_cases(dir, &n);
		if (n < kinds[k].min)
			fprintf(stderr, "%s: only %zu cases\n", dir, n);
		CHECK(n >= kinds[k].min);
		for (size_t i = 0; i < n; i++)
			kinds[k].run(dir, names[i]);
		free_cases(names, n);
	}
}

/* A valid one-sandbox document followed by spaces up to total bytes. */
static char *padded_doc(size_t total)
{
	static const char doc[] = "{\"host_id\":\"h1\",\"sampled_at\":\"2026-11-30T01:02:03Z\","
				  "\"sandboxes\":[{\"sandbox_id\":\"s\",\"state\":\"running\","
				  "\"vcpus\":1,\"memory_mib\":1,\"cpu_usec\":1}]}";
	char *buf = malloc(total);

	if (!buf)
		return NULL;
	memcpy(buf, doc, sizeof(doc) - 1);
	memset(buf + sizeof(doc) - 1, ' ', total - (sizeof(doc) - 1));
	return buf;
}

static void test_size_cap(void)
{
	struct sample_batch b;
	char err[256];
	char *buf = padded_doc((size_t)AGENT_DOC_MAX_BYTES + 1);

	CHECK(buf != NULL);
	if (!buf)
		return;
	/* One byte over: refused by size, whatever the content. */
	sample_batch_init(&b);
	CHECK(agent_doc_parse(buf, (size_t)AGENT_DOC_MAX_BYTES + 1, NOW_USEC, &b, err,
			      sizeof(err)) == METER_ERANGE);
	CHECK(strstr(err, "document: larger than") != NULL);
	CHECK(b.n == 0 && b.items == NULL);
	/* Exactly the cap: parsed. */
	CHECK(agent_doc_parse(buf, AGENT_DOC_MAX_BYTES, NOW_USEC, &b, err, sizeof(err)) ==
	      METER_OK);
	CHECK_I64(b.n, 1);
	sample_batch_release(&b);
	/* The cap is checked before the text is looked at: a huge length of
	 * garbage is refused by size too. */
	memset(buf, 0xff, (size_t)AGENT_DOC_MAX_BYTES + 1);
	sample_batch_init(&b);
	CHECK(agent_doc_parse(buf, (size_t)AGENT_DOC_MAX_BYTES + 1, NOW_USEC, &b, err,
			      sizeof(err)) == METER_ERANGE);
	CHECK(strstr(err, "larger than") != NULL);
	free(buf);
}

/* A document of n sandboxes s0..s(n-1); the last one's id is dup_last when
 * given. Returns a new string. */
static char *many_doc(size_t n, const char *dup_last, size_t *len)
{
	size_t cap = 128 + n * 128, off = 0;
	char *buf = malloc(cap);

	if (!buf)
		return NULL;
	off += (size_t)snprintf(buf + off, cap - off,
				"{\"host_id\":\"h1\",\"sampled_at\":\"2026-11-30T01:02:03Z\","
				"\"sandboxes\":[");
	for (size_t i = 0; i < n; i++) {
		char id[32];

		if (dup_last && i == n - 1)
			snprintf(id, sizeof(id), "%s", dup_last);
		else
			snprintf(id, sizeof(id), "s%zu", i);
		off +=
		    (size_t)snprintf(buf + off, cap - off,
				     "%s{\"sandbox_id\":\"%s\",\"state\":\"running\",\"vcpus\":2,"
				     "\"memory_mib\":%zu,\"cpu_usec\":%zu}",
				     i ? "," : "", id, i % 4096, i * 1000);
	}
	off += (size_t)snprintf(buf + off, cap - off, "]}");
	*len = off;
	return buf;
}

static void test_many_sandboxes(void)
{
	struct sample_batch b;
	char err[256];
	size_t len = 0;
	char *doc;

	doc = many_doc(SAMPLE_BATCH_MAX, NULL, &len);
	CHECK(doc != NULL);
	sample_batch_init(&b);
	CHECK(doc && agent_doc_parse(doc, len, NOW_USEC, &b, err, sizeof(err)) == METER_OK);
	CHECK_I64(b.n, SAMPLE_BATCH_MAX);
	if (b.n == SAMPLE_BATCH_MAX) {
		CHECK_STR(b.items[SAMPLE_BATCH_MAX - 1].sandbox_id, "s99999");
		CHECK_I64(b.items[SAMPLE_BATCH_MAX - 1].u.cpu_usec, INT64_C(99999000));
		CHECK_I64(b.items[4097].u.memory_mib, 1);
	}
	sample_batch_release(&b);
	free(doc);

	doc = many_doc(SAMPLE_BATCH_MAX + 1, NULL, &len);
	sample_batch_init(&b);
	CHECK(doc && agent_doc_parse(doc, len, NOW_USEC, &b, err, sizeof(err)) == METER_ERANGE);
	CHECK(strstr(err, "sandboxes: more than 100000 sandboxes") != NULL);
	CHECK(b.n == 0 && b.items == NULL);
	check_same_as_whole("one too many", doc, len);
	/* Its last sandbox not JSON: the JSON error comes first, as it does
	 * from the whole text's tree. */
	if (doc) {
		doc[len - 3] = ',';
		sample_batch_init(&b);
		CHECK(agent_doc_parse(doc, len, NOW_USEC, &b, err, sizeof(err)) == METER_EINVAL);
		CHECK(strstr(err, "document: malformed JSON at line 1") != NULL);
		check_same_as_whole("one too many, the last not JSON", doc, len);
	}
	free(doc);

	/* A duplicate far apart is found at scale. */
	doc = many_doc(SAMPLE_BATCH_MAX, "s0", &len);
	sample_batch_init(&b);
	CHECK(doc && agent_doc_parse(doc, len, NOW_USEC, &b, err, sizeof(err)) == METER_EINVAL);
	CHECK_STR(err, "sandboxes[99999].sandbox_id: s0 is also sandboxes[0]");
	CHECK(b.n == 0 && b.items == NULL);
	check_same_as_whole("a duplicate far apart", doc, len);
	free(doc);
}

/* Where a document's text could mislead the reading of its sandboxes one
 * at a time: brackets, commas, quotes and backslashes inside strings,
 * white space, elements that are not JSON on their own, arrays elsewhere,
 * JSON errors after a wrong meaning. Each must read as the whole text's
 * tree reads. */
static void test_split_edges(void)
{
#define H "\"host_id\":\"h1\",\"sampled_at\":\"2026-11-30T01:02:03Z\""
#define S(id)                                                                                      \
	"{\"sandbox_id\":\"" id                                                                    \
	"\",\"state\":\"running\",\"vcpus\":1,\"memory_mib\":1,\"cpu_usec\":1}"
	static const char *const docs[] = {
	    "{" H ",\"sandboxes\":[" S("a") "," S("b") "]}",
	    "{\"sandboxes\":[" S("a") "]," H "}",
	    " \n\t{ " H " , \"sandboxes\" :\n[ \t" S("a") " ,\r\n" S("b") " \n] } \n",
	    "{" H ",\"sandboxes\":[]}",
	    "{" H ",\"sandboxes\":[ \n ]}",
	    "{" H ",\"sandboxes\":[,]}",
	    "{" H ",\"sandboxes\":[" S("a") ",]}",
	    "{" H ",\"sandboxes\":[," S("a") "]}",
	    "{" H ",\"sandboxes\":[" S("a") S("b") "]}",
	    "{" H ",\"sandboxes\":[" S("a") " " S("b") "]}",
	    "{" H ",\"sandboxes\":[1]}",
	    "{" H ",\"sandboxes\":[null,true]}",
	    "{" H ",\"sandboxes\":[\"x,]\"]}",
	    "{" H ",\"sandboxes\":[[]]}",
	    "{" H ",\"sandboxes\":[[1,2],{}]}",
	    "{" H ",\"sandboxes\":[" S("a,]}\\\"\\\\") "," S("b") "]}",
	    "{" H ",\"sandboxes\":[" S("\\u005d,") "]}",
	    "{" H ",\"sandboxes\":[{\"sandbox_id\":\"a\",\"x\":[1,[2,3]],\"y\":\"]\"}]}",
	    "{\"host_id\":\"h,[1\",\"sampled_at\":\"2026-11-30T01:02:03Z\",\"sandboxes\":[" S(
		"a") "]}",
	    "{" H ",\"sandboxes\":[" S("a") "],\"x\":\"[,]\\\"\"}",
	    "{\"host_id\":[\"h1\"],\"sampled_at\":\"2026-11-30T01:02:03Z\",\"sandboxes\":[" S(
		"a") "]}",
	    "{\"host_id\":[\"h1\"],\"sampled_at\":\"2026-11-30T01:02:03Z\",\"sandboxes\":{}}",
	    "{" H ",\"x\":[1],\"sandboxes\":[]}",
	    "{" H ",\"x\":[1]}",
	    "[" S("a") "]",
	    "{" H ",\"sandboxes\":[" S("a") "]}x",
	    "{" H ",\"sandboxes\":[" S("a") "]}{\"sandboxes\":[1]}",
	    "{" H ",\"sandboxes\":[" S("a") "],\"host_id\":\"h2\"}",
	    "{" H ",\"sandboxes\":[" S("a") "],\"sandboxes\":[]}",
	    "{" H ",\"sandboxes\":[{\"sandbox_id\":\"a\",\"sandbox_id\":\"b\"}]}",
	    "{" H ",\"sandboxes\":[" S("a") "],}",
	    "{\"host_id\":\"h 1\",\"sampled_at\":\"2026-11-30T01:02:03Z\",\"sandboxes\":[" S(
		"a") ",{]}",
	    "{" H ",\"sandboxes\":[" S("a b") "," S("c") ",{]}",
	    "{" H ",\"sandboxes\":[" S("a b") "," S("c") ",1.5e]}",
	    "{" H ",\"y\":1,\"sandboxes\":[" S("a") ",[}]}",
	    "{" H ",\"sandboxes\":[" S("a") "," S("a") "," S("b") "]}",
	    "{" H ",\"sandboxes\":[",
	    "{" H ",\"sandboxes\":[" S("a") "",
	    "{" H ",\"sandboxes\":[{\"sandbox_id\":\"a\"]}",
	    "{" H ",\"sandboxes\":[" S("a") "}}",
	    "{" H ",\"sandboxes\":[\"\\]}",
	    "{" H ",\"sandboxes\":[\"\xff\"]}",
	    "{" H ",\"sandboxes\":[{\"sandbox_id\":\"a\",\"state\":\"running\",\"vcpus\":1,"
	    "\"memory_mib\":1,\"cpu_usec\":99999999999999999999}]}",
	    "{" H ",\"sandboxes\":[{\"sandbox_id\":\"a\",\"state\":\"running\",\"vcpus\":1e0,"
	    "\"memory_mib\":-0,\"cpu_usec\":1}]}",
	    "{" H ",\"sandboxes\":[" S("a") "]]}",
	    "{" H ",\"sandboxes\":[" S("a") "]}]",
	};
#undef S
#undef H

	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		char name[32];

		snprintf(name, sizeof(name), "split edge %zu", i);
		check_same_as_whole(name, docs[i], strlen(docs[i]));
	}
}

/* jansson's memory, counted: live bytes and their most. */
static size_t jansson_live, jansson_most;

static void *counted_malloc(size_t n)
{
	max_align_t *p = malloc(sizeof(max_align_t) + n);

	if (!p)
		return NULL;
	*(size_t *)p = n;
	jansson_live += n;
	if (jansson_live > jansson_most)
		jansson_most = jansson_live;
	return p + 1;
}

static void counted_free(void *q)
{
	max_align_t *p = q;

	if (!q)
		return;
	jansson_live -= *(size_t *)(p - 1);
	free(p - 1);
}

/* The most memory jansson held while doc was read one way. */
static size_t jansson_most_reading(const char *doc, size_t len, bool whole)
{
	struct sample_batch b;
	char err[256];
	enum meter_rc rc;

	sample_batch_init(&b);
	json_set_alloc_funcs(counted_malloc, counted_free);
	jansson_live = jansson_most = 0;
	rc = (whole ? agent_doc_parse_whole : agent_doc_parse)(doc, len, NOW_USEC, &b, err,
							       sizeof(err));
	CHECK(rc == METER_OK);
	CHECK_I64(jansson_live, 0);
	json_set_alloc_funcs(malloc, free);
	sample_batch_release(&b);
	return jansson_most;
}

/* A document's sandboxes are read one at a time: jansson holds about one
 * sandbox's tree, whatever their number. A tree of the whole document
 * takes several times its text. */
static void test_split_memory(void)
{
	size_t len = 0, one, many, whole;
	char *doc;

	doc = many_doc(1, NULL, &len);
	CHECK(doc != NULL);
	one = doc ? jansson_most_reading(doc, len, false) : 0;
	free(doc);
	doc = many_doc(10000, NULL, &len);
	CHECK(doc != NULL);
	if (!doc)
		return;
	many = jansson_most_reading(doc, len, false);
	whole = jansson_most_reading(doc, len, true);
	if (getenv("METER_TEST_VERBOSE"))
		printf("jansson's most: 1 sandbox %zu, 10,000 %zu, read whole %zu (text %zu)\n",
		       one, many, whole, len);
	CHECK(one > 0 && many < 2 * one);
	CHECK(whole > len);
	free(doc);
}

/* Errors never overflow a small buffer and a NULL one is allowed; the text
 * need not be NUL-terminated. */
static void test_api_edges(void)
{
	static const char doc[] = "{\"host_id\":\"h1\",\"sampled_at\":\"2026-11-30T01:02:03Z\","
				  "\"sandboxes\":[]}GARBAGE";
	struct sample_batch b;
	char small[8];

	sample_batch_init(&b);
	CHECK(agent_doc_parse(doc, sizeof(doc) - 1 - 7, NOW_USEC, &b, small, sizeof(small)) ==
	      METER_OK);
	CHECK_STR(b.host_id, "h1");
	CHECK_I64(b.n, 0);
	sample_batch_release(&b);
	sample_batch_init(&b);
	CHECK(agent_doc_parse(doc, sizeof(doc) - 1, NOW_USEC, &b, small, sizeof(small)) ==
	      METER_EINVAL);
	CHECK_I64(strlen(small), sizeof(small) - 1);
	CHECK(agent_doc_parse(doc, sizeof(doc) - 1, NOW_USEC, &b, NULL, 0) == METER_EINVAL);
	CHECK(agent_doc_parse(NULL, 0, NOW_USEC, &b, small, sizeof(small)) == METER_EINVAL);
	CHECK(b.n == 0 && b.items == NULL);
}

/* A raw NUL byte is not JSON wherever it is: jansson alone took one after
 * a number or a literal for the end of the text (and the bracket after
 * it). */
static void test_raw_nul(void)
{
	static const char before_bracket[] =
	    "{\"host_id\":\"h1\",\"sampled_at\":\"2026-11-30T01:02:03Z\",\"sandboxes\":[{"
	    "\"sandbox_id\":\"s1\",\"state\":\"running\",\"vcpus\":1,\"memory_mib\":512,"
	    "\"cpu_usec\":5\0}]}";
	static const char trailing[] = "{\"host_id\":\"h1\",\"sampled_at\":"
				       "\"2026-11-30T01:02:03Z\",\"sandboxes\":[]}\0";
	static const char escaped[] = "{\"host_id\":\"h\\u00001\",\"sampled_at\":"
				      "\"2026-11-30T01:02:03Z\",\"sandboxes\":[]}";
	struct sample_batch b;
	char err[160];

	sample_batch_init(&b);
	CHECK(agent_doc_parse(before_bracket, sizeof(before_bracket) - 1, NOW_USEC, &b, err,
			      sizeof(err)) == METER_EINVAL);
	CHECK_STR(err, "document: malformed JSON: a NUL byte at byte 141");
	CHECK(agent_doc_parse(trailing, sizeof(trailing) - 1, NOW_USEC, &b, err, sizeof(err)) ==
	      METER_EINVAL);
	CHECK_STR(err, "document: malformed JSON: a NUL byte at byte 67");
	CHECK(b.n == 0 && b.items == NULL);
	/* An escaped one is the input's fault too, told as such (the
	 * parser's own text names a flag of its own). */
	CHECK(agent_doc_parse(escaped, sizeof(escaped) - 1, NOW_USEC, &b, err, sizeof(err)) ==
	      METER_EINVAL);
	CHECK(strstr(err, "a string holds \\u0000 (NUL), which no field takes") != NULL);
	CHECK(strstr(err, "JSON_ALLOW") == NULL);
	/* The same text without its NUL is taken. */
	CHECK(agent_doc_parse(trailing, sizeof(trailing) - 2, NOW_USEC, &b, err, sizeof(err)) ==
	      METER_OK);
	sample_batch_release(&b);
}

static void test_time_known(void)
{
	static const struct {
		const char *text;
		int64_t usec;
	} cases[] = {
	    {"1970-01-01T00:00:00Z", 0},
	    {"1970-01-01T00:00:00.000001Z", 1},
	    {"1969-12-31T23:59:59.999999Z", -1},
	    {"2000-01-01T00:00:00Z", INT64_C(946684800000000)},
	    {"2026-11-30T12:00:00Z", INT64_C(1796040000000000)},
	    {"2026-11-30T01:02:03.456789Z", INT64_C(1796000523456789)},
	    {"2026-11-30T14:32:03.456789+13:30", INT64_C(1796000523456789)},
	    {"0000-01-01T00:00:00Z", INT64_C(-62167219200000000)},
	    {"9999-12-31T23:59:59.999999Z", INT64_C(253402300799999999)},
	    {"0000-01-01T00:00:00+23:59", INT64_C(-62167219200000000) - INT64_C(86340000000)},
	};
	char buf[40];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t at = -7;

		CHECK(agent_doc_parse_time(cases[i].text, &at) == METER_OK);
		CHECK_I64(at, cases[i].usec);
	}
	agent_doc_format_time(0, buf, sizeof(buf));
	CHECK_STR(buf, "1970-01-01T00:00:00.000000Z");
	agent_doc_format_time(-1, buf, sizeof(buf));
	CHECK_STR(buf, "1969-12-31T23:59:59.999999Z");
	agent_doc_format_time(INT64_C(1796000523456789), buf, sizeof(buf));
	CHECK_STR(buf, "2026-11-30T01:02:03.456789Z");
	agent_doc_format_time(INT64_C(253402300799999999), buf, sizeof(buf));
	CHECK_STR(buf, "9999-12-31T23:59:59.999999Z");
	agent_doc_format_time(INT64_C(-62167219200000000), buf, sizeof(buf));
	CHECK_STR(buf, "0000-01-01T00:00:00.000000Z");
	CHECK(agent_doc_parse_time(NULL, &(int64_t){0}) == METER_EINVAL);
	CHECK(agent_doc_parse_time("2026-11-30T01:02:03Z", NULL) == METER_EINVAL);
}

/* Every day from 1600 to 2500 against the C library's timegm, and random
 * instants over years 0-9999 through format and parse. */
static void test_time_sweep(void)
{
	uint64_t x = 0x9e3779b97f4a7c15u;
	long bad = 0;

	for (int64_t day = -135140; day <= 194800 && bad < 5; day++) {
		time_t t = (time_t)(day * 86400 + 3723);
		struct tm tm;
		char text[40];
		int64_t at;

		if (!gmtime_r(&t, &tm))
			continue;
		snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
		if (agent_doc_parse_time(text, &at) != METER_OK || at != (int64_t)t * 1000000) {
			fprintf(stderr, "day %" PRId64 ": %s\n", day, text);
			bad++;
		}
	}
	CHECK_I64(bad, 0);
	for (int i = 0; i < 200000 && bad < 5; i++) {
		const int64_t lo = INT64_C(-62167219200000000), hi = INT64_C(253402300799999999);
		int64_t at, back = 0;
		char text[40];

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		at = lo + (int64_t)(x % (uint64_t)(hi - lo + 1));
		agent_doc_format_time(at, text, sizeof(text));
		if (agent_doc_parse_time(text, &back) != METER_OK || back != at) {
			fprintf(stderr, "round trip of %" PRId64 ": %s\n", at, text);
			bad++;
		}
	}
	CHECK_I64(bad, 0);
}

int main(void)
{
	test_fixtures();
	test_size_cap();
	test_many_sandboxes();
	test_split_edges();
	test_split_memory();
	test_api_edges();
	test_raw_nul();
	test_time_known();
	test_time_sweep();
	return check_done();
}
