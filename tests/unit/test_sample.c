/* sample_batches_drop_stale: a host's reading not newer than one it sent
 * before is dropped, per sandbox, when rounds are ingested together. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "sample.h"

#define SEC INT64_C(1000000)

/* Appends a batch of host at second t with the given sandboxes. */
static void batch(struct sample_batch *v, size_t *n, const char *host, int64_t t,
		  const char *const *sandboxes)
{
	struct sample_batch *b = &v[(*n)++];

	sample_batch_init(b);
	snprintf(b->host_id, sizeof(b->host_id), "%s", host);
	b->sampled_at_usec = t * SEC;
	for (size_t i = 0; sandboxes[i]; i++) {
		struct meter_sample s;

		memset(&s, 0, sizeof(s));
		snprintf(s.sandbox_id, sizeof(s.sandbox_id), "%s", sandboxes[i]);
		s.u.at_usec = t * SEC;
		s.u.cpu_usec = t * SEC;
		s.u.vcpus = 1;
		CHECK(sample_batch_push(b, &s) == METER_OK);
	}
}

static bool has(const struct sample_batch *b, const char *sandbox)
{
	for (size_t i = 0; i < b->n; i++)
		if (strcmp(b->items[i].sandbox_id, sandbox) == 0)
			return true;
	return false;
}

int main(void)
{
	static const char *const ab[] = {"a", "b", NULL}, *const abc[] = {"a", "b", "c", NULL},
				 *const a[] = {"a", NULL}, *const ac[] = {"a", "c", NULL};
	struct sample_batch v[8];
	size_t n = 0;

	/* Rising readings of each host, two hosts interleaved, one sandbox
	 * moving between them: nothing dropped. */
	batch(v, &n, "h1", 10, ab);
	batch(v, &n, "h2", 5, ac);
	batch(v, &n, "h1", 20, ab);
	batch(v, &n, "h2", 25, ac);
	CHECK_I64((long long)sample_batches_drop_stale(v, n), 0);
	for (size_t i = 0; i < n; i++) {
		CHECK_I64((long long)v[i].n, 2);
		sample_batch_release(&v[i]);
	}

	/* h1's clock steps back 5 s after its reading at 20: its reading at
	 * 15 loses a and b (read at 20 already) and keeps c (new: read at 15
	 * first); the reading at 25 keeps all. h2's reading at 15 of a is
	 * another host's: kept, for the order by time. */
	n = 0;
	batch(v, &n, "h1", 10, ab);
	batch(v, &n, "h1", 20, ab);
	batch(v, &n, "h1", 15, abc);
	batch(v, &n, "h2", 15, a);
	batch(v, &n, "h1", 25, abc);
	batch(v, &n, "h1", 25, a); /* the same reading again */
	CHECK_I64((long long)sample_batches_drop_stale(v, n), 3);
	CHECK_I64((long long)v[0].n, 2);
	CHECK_I64((long long)v[1].n, 2);
	CHECK_I64((long long)v[2].n, 1);
	CHECK(has(&v[2], "c") && !has(&v[2], "a") && !has(&v[2], "b"));
	CHECK_I64((long long)v[3].n, 1);
	CHECK_I64((long long)v[4].n, 3);
	CHECK_I64((long long)v[5].n, 0);
	for (size_t i = 0; i < n; i++)
		sample_batch_release(&v[i]);
	CHECK_I64((long long)sample_batches_drop_stale(v, 0), 0);
	return check_done();
}
