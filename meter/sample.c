/* meter: sample batches (see sample.h). */
#include "sample.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void sample_batch_init(struct sample_batch *b)
{
	memset(b, 0, sizeof(*b));
}

void sample_batch_release(struct sample_batch *b)
{
	free(b->items);
	b->items = NULL;
	b->n = 0;
	b->cap = 0;
}

enum meter_rc sample_batch_push(struct sample_batch *b, const struct meter_sample *s)
{
	if (b->n >= SAMPLE_BATCH_MAX)
		return METER_ERANGE;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		struct meter_sample *grown;

		if (cap > SAMPLE_BATCH_MAX)
			cap = SAMPLE_BATCH_MAX;
		grown = realloc(b->items, cap * sizeof(*grown));
		if (!grown)
			return METER_ENOMEM;
		b->items = grown;
		b->cap = cap;
	}
	b->items[b->n++] = *s;
	return METER_OK;
}

/* A sample's place, for sample_batches_drop_stale. */
struct stale_ref {
	const char *host, *sandbox;
	size_t batch, item;
	int64_t at;
};

/* By host, then sandbox, then arrival (batch, then item). */
static int stale_ref_cmp(const void *x, const void *y)
{
	const struct stale_ref *a = x, *b = y;
	int c = strcmp(a->host, b->host);

	if (c == 0)
		c = strcmp(a->sandbox, b->sandbox);
	if (c == 0)
		c = (a->batch > b->batch) - (a->batch < b->batch);
	if (c == 0)
		c = (a->item > b->item) - (a->item < b->item);
	return c;
}

/* By host, then arrival. */
static int stale_batch_cmp(const void *x, const void *y)
{
	const struct stale_ref *a = x, *b = y;
	int c = strcmp(a->host, b->host);

	return c ? c : (a->batch > b->batch) - (a->batch < b->batch);
}

/* True when some host's batches in v do not come in rising time. */
static bool stale_any(const struct sample_batch *v, size_t n, bool *ok)
{
	struct stale_ref *r = malloc(n * sizeof(*r));
	bool any = false;

	*ok = r != NULL;
	if (!r)
		return false;
	for (size_t i = 0; i < n; i++)
		r[i] = (struct stale_ref){v[i].host_id, "", i, 0, v[i].sampled_at_usec};
	qsort(r, n, sizeof(*r), stale_batch_cmp);
	for (size_t i = 1; i < n && !any; i++)
		any = strcmp(r[i - 1].host, r[i].host) == 0 && r[i].at <= r[i - 1].at;
	free(r);
	return any;
}

size_t sample_batches_drop_stale(struct sample_batch *v, size_t n)
{
	struct stale_ref *r;
	size_t total = 0, k = 0, dropped = 0, *first;
	bool *drop, ok;

	if (n < 2 || !stale_any(v, n, &ok) || !ok)
		return 0; /* the usual case: every host's readings in rising time */
	for (size_t i = 0; i < n; i++)
		total += v[i].n;
	r = malloc(total * sizeof(*r));
	drop = calloc(total, sizeof(*drop));
	first = malloc(n * sizeof(*first));
	if (!r || !drop || !first) {
		free(r);
		free(drop);
		free(first);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		first[i] = k;
		for (size_t j = 0; j < v[i].n; j++)
			r[k++] = (struct stale_ref){v[i].host_id, v[i].items[j].sandbox_id, i, j,
						    v[i].items[j].u.at_usec};
	}
	qsort(r, total, sizeof(*r), stale_ref_cmp);
	for (size_t i = 0; i < total; i++) {
		static const int64_t none = INT64_MIN;
		int64_t newest = none;
		size_t e = i;

		/* One host's one sandbox, in arrival order. */
		while (e < total && strcmp(r[e].host, r[i].host) == 0 &&
		       strcmp(r[e].sandbox, r[i].sandbox) == 0) {
			if (newest != none && r[e].at <= newest)
				drop[first[r[e].batch] + r[e].item] = true;
			else
				newest = r[e].at;
			e++;
		}
		i = e - 1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t w = 0;

		for (size_t j = 0; j < v[i].n; j++) {
			if (drop[first[i] + j]) {
				dropped++;
				continue;
			}
			v[i].items[w++] = v[i].items[j];
		}
		v[i].n = w;
	}
	free(r);
	free(drop);
	free(first);
	return dropped;
}
