/* meter: counters and gauges for /metrics (see metrics.h).
 *
 * Series sit in an open-addressing hash table keyed by name and labels,
 * guarded by one mutex for lookup and creation; once found, a value is
 * updated with an atomic operation. Series are never freed before
 * metrics_reset(), so a pointer found under the lock stays valid. */
#include "metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"

#define METRICS_NAME_MAX     100
#define METRICS_FAMILIES_MAX 512

struct metrics_series {
	char *name;   /* owned */
	char *labels; /* owned, "" when none */
	enum metrics_kind kind;
	atomic_int decimals;
	atomic_int_fast64_t value;
};

struct metrics_family {
	char name[METRICS_NAME_MAX + 1];
	enum metrics_kind kind;
	const char *help; /* borrowed */
};

static pthread_mutex_t metrics_mu = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_series **metrics_table; /* capacity metrics_cap, power of two */
static size_t metrics_cap;
static size_t metrics_count;
static struct metrics_family metrics_families[METRICS_FAMILIES_MAX];
static size_t metrics_nfamilies;
static bool metrics_warned;

static bool metrics_name_ok(const char *name)
{
	size_t n = 0;

	if (!name || (name[0] >= '0' && name[0] <= '9'))
		return false;
	for (const char *p = name; *p; p++, n++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == ':'))
			return false;
	}
	return n >= 1 && n <= METRICS_NAME_MAX;
}

/* FNV-1a over name, a separator and labels. */
static uint64_t metrics_hash(const char *name, const char *labels)
{
	return hash_str(hash_byte(hash_str(HASH_START, name), 0xff), labels);
}

/* Inserts s into a table of capacity cap (no duplicates, room guaranteed). */
static void metrics_place(struct metrics_series **table, size_t cap, struct metrics_series *s)
{
	size_t i = (size_t)metrics_hash(s->name, s->labels) & (cap - 1);

	while (table[i])
		i = (i + 1) & (cap - 1);
	table[i] = s;
}

/* Doubles the table (lock held). false when out of memory. */
static bool metrics_grow(void)
{
	size_t cap = metrics_cap ? metrics_cap * 2 : 256;
	struct metrics_series **t = calloc(cap, sizeof(struct metrics_series *));

	if (!t)
		return false;
	for (size_t i = 0; i < metrics_cap; i++)
		if (metrics_table[i])
			metrics_place(t, cap, metrics_table[i]);
	free(metrics_table);
	metrics_table = t;
	metrics_cap = cap;
	return true;
}

/* Logs one warning for the first dropped update (lock held). */
static void metrics_drop(const char *why, const char *name)
{
	if (metrics_warned)
		return;
	metrics_warned = true;
	log_warn("metrics: update dropped (%s): %.100s", why, name ? name : "(null)");
}

/* Finds or creates the series (name, labels) of kind. NULL when the update
 * must be dropped (bad name, bounds, out of memory). */
static struct metrics_series *metrics_get(const char *name, const char *labels,
					  enum metrics_kind kind)
{
	struct metrics_series *s = NULL;
	size_t i;

	if (!labels)
		labels = "";
	pthread_mutex_lock(&metrics_mu);
	if (!metrics_name_ok(name)) {
		metrics_drop("bad name", name);
		goto out;
	}
	if (strlen(labels) > METRICS_LABELS_MAX) {
		metrics_drop("labels too long", name);
		goto out;
	}
	if (metrics_cap) {
		i = (size_t)metrics_hash(name, labels) & (metrics_cap - 1);
		for (; metrics_table[i]; i = (i + 1) & (metrics_cap - 1)) {
			struct metrics_series *t = metrics_table[i];
			if (strcmp(t->name, name) == 0 && strcmp(t->labels, labels) == 0) {
				s = t;
				goto out;
			}
		}
	}
	if (metrics_count >= METRICS_SERIES_MAX) {
		metrics_drop("too many series", name);
		goto out;
	}
	if ((metrics_count + 1) * 2 > metrics_cap && !metrics_grow()) {
		metrics_drop("out of memory", name);
		goto out;
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->name = strdup(name);
		s->labels = strdup(labels);
	}
	if (!s || !s->name || !s->labels) {
		if (s) {
			free(s->name);
			free(s->labels);
			free(s);
			s = NULL;
		}
		metrics_drop("out of memory", name);
		goto out;
	}
	s->kind = kind;
	atomic_init(&s->value, 0);
	atomic_init(&s->decimals, 0);
	metrics_place(metrics_table, metrics_cap, s);
	metrics_count++;
out:
	pthread_mutex_unlock(&metrics_mu);
	return s;
}

void metrics_describe(const char *name, enum metrics_kind kind, const char *help)
{
	if (!metrics_name_ok(name))
		return;
	pthread_mutex_lock(&metrics_mu);
	for (size_t i = 0; i < metrics_nfamilies; i++) {
		if (strcmp(metrics_families[i].name, name) == 0) {
			metrics_families[i].kind = kind;
			metrics_families[i].help = help;
			goto out;
		}
	}
	if (metrics_nfamilies < METRICS_FAMILIES_MAX) {
		struct metrics_family *f = &metrics_families[metrics_nfamilies++];
		snprintf(f->name, sizeof(f->name), "%s", name);
		f->kind = kind;
		f->help = help;
	}
out:
	pthread_mutex_unlock(&metrics_mu);
}

void metrics_counter_add(const char *name, const char *labels, uint64_t n)
{
	struct metrics_series *s = metrics_get(name, labels, METRICS_COUNTER);

	if (s)
		atomic_fetch_add(&s->value, (int_fast64_t)n);
}

void metrics_gauge_set(const char *name, const char *labels, int64_t v)
{
	struct metrics_series *s = metrics_get(name, labels, METRICS_GAUGE);

	if (s)
		atomic_store(&s->value, v);
}

void metrics_gauge_set_fixed(const char *name, const char *labels, int64_t v, int decimals)
{
	struct metrics_series *s = metrics_get(name, labels, METRICS_GAUGE);

	if (!s || decimals < 0 || decimals > 9)
		return;
	atomic_store(&s->decimals, decimals);
	atomic_store(&s->value, v);
}

void metrics_gauge_add(const char *name, const char *labels, int64_t delta)
{
	struct metrics_series *s = metrics_get(name, labels, METRICS_GAUGE);

	if (s)
		atomic_fetch_add(&s->value, delta);
}

int64_t metrics_value(const char *name, const char *labels)
{
	int64_t v = 0;

	if (!labels)
		labels = "";
	pthread_mutex_lock(&metrics_mu);
	for (size_t i = 0; i < metrics_cap; i++) {
		struct metrics_series *t = metrics_table[i];
		if (t && strcmp(t->name, name) == 0 && strcmp(t->labels, labels) == 0) {
			v = atomic_load(&t->value);
			break;
		}
	}
	pthread_mutex_unlock(&metrics_mu);
	return v;
}

enum meter_rc metrics_label(char *buf, size_t len, const char *name, const char *value)
{
	size_t n = strlen(buf), start = n;

	if (n > 0) {
		if (n + 1 >= len)
			goto too_long;
		buf[n++] = ',';
	}
	for (const char *p = name; *p; p++) {
		if (n + 1 >= len)
			goto too_long;
		buf[n++] = *p;
	}
	if (n + 2 >= len)
		goto too_long;
	buf[n++] = '=';
	buf[n++] = '"';
	for (const char *p = value ? value : ""; *p; p++) {
		const char *esc = NULL;
		if (*p == '\\')
			esc = "\\\\";
		else if (*p == '"')
			esc = "\\\"";
		else if (*p == '\n')
			esc = "\\n";
		if (esc) {
			if (n + 2 >= len)
				goto too_long;
			buf[n++] = esc[0];
			buf[n++] = esc[1];
		} else {
			if (n + 1 >= len)
				goto too_long;
			buf[n++] = *p;
		}
	}
	if (n + 1 >= len)
		goto too_long;
	buf[n++] = '"';
	buf[n] = '\0';
	return METER_OK;
too_long:
	buf[start] = '\0';
	return METER_ERANGE;
}

struct metrics_buf {
	char *p;
	size_t n, cap;
	bool failed;
};

static void metrics_put(struct metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends formatted text; sets b->failed when out of memory. */
static void metrics_put(struct metrics_buf *b, const char *fmt, ...)
{
	va_list ap;
	int w;

	if (b->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (w < 0) {
			b->failed = true;
			return;
		}
		if ((size_t)w < b->cap - b->n) {
			b->n += (size_t)w;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)w + 1;
		char *grown = realloc(b->p, cap);
		if (!grown) {
			b->failed = true;
			return;
		}
		b->p = grown;
		b->cap = cap;
	}
}

static int metrics_cmp(const void *a, const void *b)
{
	const struct metrics_series *x = *(const struct metrics_series *const *)a;
	const struct metrics_series *y = *(const struct metrics_series *const *)b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->labels, y->labels);
}

/* Writes v / 10^decimals exactly. */
static void metrics_put_value(struct metrics_buf *b, int64_t v, int decimals)
{
	uint64_t mag, scale = 1;

	if (decimals <= 0) {
		metrics_put(b, "%" PRId64, v);
		return;
	}
	for (int i = 0; i < decimals; i++)
		scale *= 10;
	mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	metrics_put(b, "%s%" PRIu64 ".%0*" PRIu64, v < 0 ? "-" : "", mag / scale, decimals,
		    mag % scale);
}

enum meter_rc metrics_render(char **out, size_t *len)
{
	struct metrics_buf b = {0};
	struct metrics_series **all = NULL;
	size_t n = 0;
	enum meter_rc rc = METER_ENOMEM;

	*out = NULL;
	*len = 0;
	b.cap = 4096;
	b.p = malloc(b.cap);
	if (!b.p)
		return METER_ENOMEM;
	b.p[0] = '\0';
	pthread_mutex_lock(&metrics_mu);
	all = malloc((metrics_count ? metrics_count : 1) * sizeof(struct metrics_series *));
	if (!all) {
		pthread_mutex_unlock(&metrics_mu);
		goto out;
	}
	for (size_t i = 0; i < metrics_cap; i++)
		if (metrics_table[i])
			all[n++] = metrics_table[i];
	qsort(all, n, sizeof(struct metrics_series *), metrics_cmp);
	for (size_t i = 0; i < n; i++) {
		const struct metrics_series *s = all[i];
		if (i == 0 || strcmp(all[i - 1]->name, s->name) != 0) {
			const struct metrics_family *f = NULL;
			for (size_t j = 0; j < metrics_nfamilies; j++)
				if (strcmp(metrics_families[j].name, s->name) == 0)
					f = &metrics_families[j];
			if (f && f->help)
				metrics_put(&b, "# HELP %s %s\n", s->name, f->help);
			metrics_put(&b, "# TYPE %s %s\n", s->name,
				    (f ? f->kind : s->kind) == METRICS_COUNTER ? "counter"
									       : "gauge");
		}
		if (s->labels[0])
			metrics_put(&b, "%s{%s} ", s->name, s->labels);
		else
			metrics_put(&b, "%s ", s->name);
		metrics_put_value(&b, atomic_load(&s->value), atomic_load(&s->decimals));
		metrics_put(&b, "\n");
	}
	pthread_mutex_unlock(&metrics_mu);
	if (b.failed)
		goto out;
	*out = b.p;
	*len = b.n;
	b.p = NULL;
	rc = METER_OK;
out:
	free(all);
	free(b.p);
	return rc;
}

void metrics_reset(void)
{
	pthread_mutex_lock(&metrics_mu);
	for (size_t i = 0; i < metrics_cap; i++) {
		if (metrics_table[i]) {
			free(metrics_table[i]->name);
			free(metrics_table[i]->labels);
			free(metrics_table[i]);
		}
	}
	free(metrics_table);
	metrics_table = NULL;
	metrics_cap = 0;
	metrics_count = 0;
	metrics_nfamilies = 0;
	metrics_warned = false;
	pthread_mutex_unlock(&metrics_mu);
}
