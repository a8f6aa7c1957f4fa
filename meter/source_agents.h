/* meter: polling host agents over HTTP (DESIGN.md §3), libcurl multi.
 *
 * One round sends GET {url}/v1/usage to every agent that is due, all in
 * parallel (at most max_parallel transfers at once), each with its own
 * timeout; a slow or dead host never delays the others beyond its timeout.
 * A host that failed is retried in later rounds after an exponential backoff
 * with jitter (base doubling up to max); its sandboxes' usage is caught up
 * from the cumulative counters when it answers again. Each good document
 * becomes one sample batch; a bad one is rejected with a logged reason and
 * counted as an error of that host, without affecting the others.
 *
 * The process calls curl_global_init(CURL_GLOBAL_DEFAULT) once at start,
 * before any thread and any poller (meterd and meterctl do). */
#ifndef METER_SOURCE_AGENTS_H
#define METER_SOURCE_AGENTS_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"
#include "sample.h"

struct agent_poller_opts {
	int64_t timeout_ms;	 /* per request, connect included; default 2000 */
	int64_t backoff_base_ms; /* first retry delay after a failure; default 1000 */
	int64_t backoff_max_ms;	 /* default 60000 */
	int64_t max_parallel;	 /* transfers in flight at once; default 256 */
};

/* Defaults as above. */
void agent_poller_opts_init(struct agent_poller_opts *o);

struct agent_poller;

/* A poller for urls (n of them, copied; each the agent's base URL, e.g.
 * "http://127.0.0.1:9000/hosts/h1"). NULL when out of memory. */
struct agent_poller *agent_poller_new(const char *const *urls, size_t n,
				      const struct agent_poller_opts *o);
void agent_poller_free(struct agent_poller *p);

/* Reads a list of URLs, one per line ('#' comments, blank lines skipped),
 * from path, or splits a comma-separated list. Returns a new NULL-terminated
 * array of new strings (free with agent_urls_free) and its length in *n. */
METER_MUSTCHECK enum meter_rc agent_urls_load_file(const char *path, char ***urls, size_t *n,
						   char *err, size_t errlen);
METER_MUSTCHECK enum meter_rc agent_urls_split(const char *list, char ***urls, size_t *n, char *err,
					       size_t errlen);
void agent_urls_free(char **urls);

struct agent_round_stats {
	uint64_t polled;  /* requests sent this round */
	uint64_t ok;	  /* good documents */
	uint64_t failed;  /* timeouts, connection errors, HTTP errors, bad documents */
	uint64_t skipped; /* hosts still in backoff */
};

/* Runs one round (returns within about timeout_ms plus processing). New
 * batches are appended to *batches (a growing array the caller owns: release
 * each batch, then free the array); *n is updated. */
METER_MUSTCHECK enum meter_rc agent_poller_round(struct agent_poller *p,
						 struct sample_batch **batches, size_t *n,
						 struct agent_round_stats *stats);

/* Per-host counters for /metrics: number of hosts, and for host i its URL
 * (borrowed; without userinfo: "http://user:secret@h/x" is "http://h/x")
 * and cumulative error count. */
size_t agent_poller_hosts(const struct agent_poller *p);
const char *agent_poller_host_url(const struct agent_poller *p, size_t i);
uint64_t agent_poller_host_errors(const struct agent_poller *p, size_t i);

#endif
