/* Fuzzer: the host-agent document (meter/agent_doc.c), as POST /v1/samples
 * and the collector's agent polling read it.
 *
 * Invariants: an accepted document gives a batch whose every field is in
 * the documented range (valid ids, no sandbox twice, vcpus 1..1024, memory
 * and storage within 16 TiB, cpu_usec within 2^62, sampled_at from 2000 to
 * ten minutes past now, on every item) and which, written back as a
 * document, parses to the same batch; a refused one leaves the batch empty
 * and one printable error line naming a field. Reading the sandboxes one at
 * a time gives the answer, error and batch of one tree of the whole text
 * (agent_doc_parse_whole). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "agent_doc.h"
#include "fuzz.h"

#define NOW_USEC	    INT64_C(1796083200000000) /* 2026-12-01T00:00:00Z */
#define FUTURE_USEC	    (INT64_C(600) * 1000000)
#define EPOCH_2000_USEC	    INT64_C(946684800000000)
#define MIB_MAX		    INT64_C(16777216)
#define CPU_USEC_MAX	    (INT64_C(1) << 62)
#define DUP_CHECK_ITEMS_MAX 2000

static void check_batch(const struct sample_batch *b)
{
	FUZZ_CHECK(parse_is_id(b->host_id));
	FUZZ_CHECK(b->sampled_at_usec >= EPOCH_2000_USEC);
	FUZZ_CHECK(b->sampled_at_usec <= NOW_USEC + FUTURE_USEC);
	FUZZ_CHECK(b->n <= SAMPLE_BATCH_MAX && b->n <= b->cap);
	for (size_t i = 0; i < b->n; i++) {
		const struct meter_sample *s = &b->items[i];

		FUZZ_CHECK(parse_is_id(s->sandbox_id));
		FUZZ_CHECK(s->key_id[0] == '\0' || parse_is_id(s->key_id));
		FUZZ_CHECK(s->u.state == SANDBOX_RUNNING || s->u.state == SANDBOX_PAUSED ||
			   s->u.state == SANDBOX_STOPPED);
		FUZZ_CHECK(s->u.vcpus >= 1 && s->u.vcpus <= 1024);
		FUZZ_CHECK(s->u.memory_mib >= 0 && s->u.memory_mib <= MIB_MAX);
		/* Left out or null: unknown (ingestion keeps the last size). */
		FUZZ_CHECK(s->u.storage_mib == SAMPLE_UNKNOWN ||
			   (s->u.storage_mib >= 0 && s->u.storage_mib <= MIB_MAX));
		FUZZ_CHECK(s->u.cpu_usec >= 0 && s->u.cpu_usec <= CPU_USEC_MAX);
		FUZZ_CHECK(s->u.at_usec == b->sampled_at_usec);
		if (b->n <= DUP_CHECK_ITEMS_MAX)
			for (size_t j = 0; j < i; j++)
				FUZZ_CHECK(strcmp(b->items[j].sandbox_id, s->sandbox_id) != 0);
	}
}

static bool same_sample(const struct meter_sample *x, const struct meter_sample *y)
{
	return strcmp(x->sandbox_id, y->sandbox_id) == 0 && strcmp(x->key_id, y->key_id) == 0 &&
	       x->u.at_usec == y->u.at_usec && x->u.state == y->u.state &&
	       x->u.cpu_usec == y->u.cpu_usec && x->u.vcpus == y->u.vcpus &&
	       x->u.memory_mib == y->u.memory_mib && x->u.storage_mib == y->u.storage_mib &&
	       x->state_from_events == y->state_from_events;
}

/* The batch written as an agent would; a new string. */
static char *to_doc(const struct sample_batch *b)
{
	char at[64];
	json_t *list = json_array(), *doc;
	char *text;

	FUZZ_CHECK(list != NULL);
	for (size_t i = 0; i < b->n; i++) {
		const struct meter_sample *s = &b->items[i];
		json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:I}", "sandbox_id", s->sandbox_id,
				      "state", sandbox_state_name(s->u.state), "vcpus",
				      (int)s->u.vcpus, "memory_mib", (json_int_t)s->u.memory_mib,
				      "cpu_usec", (json_int_t)s->u.cpu_usec);

		FUZZ_CHECK(o != NULL);
		if (s->u.storage_mib != SAMPLE_UNKNOWN)
			json_object_set_new(o, "storage_mib", json_integer(s->u.storage_mib));
		if (s->key_id[0])
			json_object_set_new(o, "key_id", json_string(s->key_id));
		json_array_append_new(list, o);
	}
	agent_doc_format_time(b->sampled_at_usec, at, sizeof(at));
	doc = json_pack("{s:s, s:s, s:o}", "host_id", b->host_id, "sampled_at", at, "sandboxes",
			list);
	FUZZ_CHECK(doc != NULL);
	text = json_dumps(doc, JSON_COMPACT);
	FUZZ_CHECK(text != NULL);
	json_decref(doc);
	return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sample_batch b, b2;
	char err[512], err2[512];
	char *text;
	enum meter_rc rc;

	rc = agent_doc_parse((const char *)data, size, NOW_USEC, &b, err, sizeof(err));
	FUZZ_CHECK(agent_doc_parse_whole((const char *)data, size, NOW_USEC, &b2, err2,
					 sizeof(err2)) == rc);
	FUZZ_CHECK(strcmp(err, err2) == 0 && b.n == b2.n);
	FUZZ_CHECK(strcmp(b.host_id, b2.host_id) == 0 && b.sampled_at_usec == b2.sampled_at_usec);
	for (size_t i = 0; i < b.n; i++)
		FUZZ_CHECK(same_sample(&b.items[i], &b2.items[i]));
	sample_batch_release(&b2);
	if (rc != METER_OK) {
		FUZZ_CHECK(b.n == 0 && b.items == NULL);
		FUZZ_CHECK(err[0] != '\0' && strstr(err, ": ") != NULL);
		for (const char *p = err; *p; p++)
			FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
		return 0;
	}
	FUZZ_CHECK(err[0] == '\0');
	check_batch(&b);
	text = to_doc(&b);
	rc = agent_doc_parse(text, strlen(text), NOW_USEC, &b2, err2, sizeof(err2));
	FUZZ_CHECK(rc == METER_OK);
	FUZZ_CHECK(strcmp(b.host_id, b2.host_id) == 0);
	FUZZ_CHECK(b.sampled_at_usec == b2.sampled_at_usec && b.n == b2.n);
	for (size_t i = 0; i < b.n; i++)
		FUZZ_CHECK(same_sample(&b.items[i], &b2.items[i]));
	free(text);
	sample_batch_release(&b2);
	sample_batch_release(&b);
	return 0;
}
