/* meter: sample batches (see sample.h). */
#include "sample.h"

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
