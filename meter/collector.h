/* meter: the collector (DESIGN.md §3): a thread that, every period, reads the
 * configured sources and ingests what they returned (meter/ingest.h).
 *
 * Sources, each optional:
 * - a cgroup directory (cgroup_root): every sub-directory is a sandbox
 *   (meter/source_cgroup.h), stamped with host_id; sizes the cgroup does not
 *   give come from the sandbox record, else vcpus = this machine's CPU count
 *   and memory 0;
 * - host agents over HTTP (agents: comma-separated base URLs, and/or
 *   agents_file: one per line), polled in parallel (meter/source_agents.h).
 *
 * Two threads: one reads the sources every period (a round), the other
 * ingests everything read so far: one round normally, several at once when
 * ingestion fell behind (which also amortises the per-sandbox accounting).
 * The batches are split by host over `connections` transactions that run
 * at once (a host's batches always in the same one, in order), so
 * ingestion is not bound to one PostgreSQL backend. When a sandbox has
 * samples from two hosts that would fall in different transactions (it
 * moved), everything pending is ingested in one call instead, which orders
 * its samples by time across hosts: in two concurrent calls the later
 * sample could commit first and the earlier be ignored as out of order
 * (with the new host's counter started over, that CPU would be lost).
 *
 * When the database is down or fails, the batches are kept and retried a
 * second later together with whatever came since, up to backlog_max
 * samples; past that the oldest rounds are dropped and their usage is caught
 * up from the cumulative CPU counters by the next sample of each sandbox
 * (both ways are exact; a dropped round only loses the per-interval floor
 * granularity of the gap, which is then billed as one longer interval). A
 * batch the database refuses as data is isolated (the round is retried batch
 * by batch) and dropped with a logged reason; the others are ingested. Never
 * fatal: errors are logged and counted in /metrics. */
#ifndef METER_COLLECTOR_H
#define METER_COLLECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"

struct collector_opts {
	const char *database_url;     /* borrowed for the collector's life */
	int64_t statement_timeout_ms; /* on the collector's own connection */
	int64_t period_s;	      /* >= 1 */
	const char *cgroup_root;      /* "" or NULL: no cgroup source */
	const char *host_id;	      /* id of this machine for cgroup samples */
	const char *agents;	      /* "" or NULL: none */
	const char *agents_file;      /* "" or NULL: none */
	int64_t agent_timeout_ms;
	int64_t backlog_max; /* samples kept across a database outage */
	int64_t connections; /* 1-16 (< 1 is 1): ingestion transactions at once */
	/* Sandboxes whose meter row ingestion caches between calls: < 0 none,
	 * 0 INGEST_CACHE_DEFAULT. */
	int64_t cache_sandboxes;
};

struct collector;

/* Validates the options, loads the agents' URLs and starts the thread. With
 * no source configured *out is NULL and METER_OK is returned (nothing to
 * do). err gets a reason on failure (bad host_id, unreadable agents_file). */
METER_MUSTCHECK enum meter_rc collector_start(const struct collector_opts *o,
					      struct collector **out, char *err, size_t errlen);

/* The checks collector_start makes of the settings alone (host_id when
 * given, the agents' URLs, the agents file readable and well formed), for
 * a meterd whose collector is off: a bad value is found at start, not
 * when the collector is switched on. METER_EINVAL or METER_EIO with err
 * set, or METER_ENOMEM. */
METER_MUSTCHECK enum meter_rc collector_check(const struct collector_opts *o, char *err,
					      size_t errlen);

/* Stops the thread (after the round in progress) and frees everything.
 * NULL is fine. */
void collector_stop(struct collector *c);

/* Makes hostname-like text an id (1-64 of A-Z a-z 0-9 _ . -): other bytes
 * become '-', the rest is cut. "" becomes "localhost". */
void collector_host_id(const char *text, char *out, size_t outlen);

#endif
