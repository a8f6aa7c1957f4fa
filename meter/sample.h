/* meter: samples as the collector's sources produce them (DESIGN.md §3).
 *
 * A source (cgroup directory, host agent, push) turns what it read into one
 * struct sample_batch per host and reading; ingestion takes batches. Fields a
 * source cannot know are marked unknown and filled by ingestion from the
 * sandbox record (and, failing that, the documented defaults). */
#ifndef METER_SAMPLE_H
#define METER_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "parse.h"
#include "rc.h"
#include "usage.h"

#define SAMPLE_UNKNOWN (-1) /* memory_mib or storage_mib not known to the source */

/* The host_id of the readings the service makes itself at a stop no sample
 * will meter (the checks' sweeper: db_checks_stop_tails). No source may
 * take it: its watermark says that no reading of it is to come. */
#define SAMPLE_HOST_STOP "lifecycle.stop"

struct meter_sample {
	char sandbox_id[PARSE_ID_MAX + 1];
	char key_id[PARSE_ID_MAX + 1]; /* "" when the source does not know it */
	/* u.at_usec: when sampled (UTC µs); u.vcpus 0 and u.memory_mib or
	 * u.storage_mib SAMPLE_UNKNOWN when the source does not know them. */
	struct usage_sample u;
	/* The source does not know the sandbox's state (a cgroup exists
	 * whether its VM runs or is paused): ingestion takes the state the
	 * lifecycle events give at u.at_usec, running when there is none. */
	bool state_from_events;
};

struct sample_batch {
	char host_id[PARSE_ID_MAX + 1];
	int64_t sampled_at_usec;    /* the reading's time (UTC µs) */
	struct meter_sample *items; /* owned */
	size_t n;
	size_t cap;
};

#define SAMPLE_BATCH_MAX 100000 /* sandboxes in one batch */

/* Empty batch, nothing allocated. */
void sample_batch_init(struct sample_batch *b);
/* Frees the items; the batch is empty again. */
void sample_batch_release(struct sample_batch *b);
/* Appends a copy of s. METER_ERANGE past SAMPLE_BATCH_MAX, METER_ENOMEM. */
METER_MUSTCHECK enum meter_rc sample_batch_push(struct sample_batch *b,
						const struct meter_sample *s);

/* v[0..n) in the order they arrived, to be ingested together (ingestion
 * orders samples by time): drops each sample that is not newer than one of
 * the same sandbox from the same host that arrived before it, as ingesting
 * them one call at a time would ignore it. A host whose clock stepped back
 * otherwise had its later reading sorted before the earlier one, and a
 * counter that only rose read as reset. Samples of one sandbox from two
 * hosts (it moved) are left to the order by time. Returns the samples
 * dropped; on out of memory, drops nothing (returns 0). */
size_t sample_batches_drop_stale(struct sample_batch *v, size_t n);

#endif
