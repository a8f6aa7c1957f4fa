/* meter: the collector thread (see collector.h). */
#include "collector.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dbpool.h"
#include "hash.h"
#include "ingest.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"
#include "sample.h"
#include "schema_gate.h"
#include "source_agents.h"
#include "source_cgroup.h"

#define COLLECTOR_DB_WAIT_MS 2000
/* Samples in one ingestion transaction at most: a catch-up after an outage
 * goes in several transactions, each well within the statement timeout. */
#define COLLECTOR_TX_SAMPLES 250000
#define COLLECTOR_MAX_CONNS  16 /* collector_connections' upper bound */
/* After a call that ingested (or dropped) more samples than this, the
 * heaps' free pages go back to the system (malloc_trim). */
#define COLLECTOR_TRIM_SAMPLES 10000

/* Batches in order of reading; samples counts their samples. */
struct batch_list {
	struct sample_batch *v;
	size_t n, cap;
	size_t samples;
};

struct collector {
	struct collector_opts o;
	size_t conns;	    /* ingestion connections, 1 to COLLECTOR_MAX_CONNS */
	char *database_url; /* owned copies of the options' strings */
	char *cgroup_root;
	char host_id[PARSE_ID_MAX + 1];
	struct db_pool *pool; /* one connection of its own */
	struct ingest *ing;
	struct agent_poller *agents;
	char **host_labels;    /* per agent: host="url", escaped */
	uint64_t *host_errors; /* per agent: errors already counted */
	size_t nagents;
	bool cgroup_failing;
	atomic_bool db_down_logged; /* ingestion runs on several threads */
	bool schema_logged;	    /* the ingester thread's */

	/* Two threads: the poller reads the sources every period into
	 * pending; the ingester takes everything pending (several rounds at
	 * once when it lags behind) into work and ingests it, keeping work
	 * across database failures. */
	pthread_t poll_thread, ingest_thread;
	bool poll_started, ingest_started;
	pthread_mutex_t mu;   /* guards pending, work_samples, round_batches, stop flags */
	pthread_cond_t wake;  /* poller's sleep (monotonic clock) */
	pthread_cond_t ready; /* ingester's sleep (monotonic clock) */
	struct batch_list pending;
	size_t work_samples;  /* samples the ingester holds */
	size_t round_batches; /* batches of the newest round, at pending's end
			       * (or, once moved, at work's) */
	bool stop_poll, stop_ingest;
	struct batch_list work; /* the ingester's own */
};

void collector_host_id(const char *text, char *out, size_t outlen)
{
	size_t n = 0;

	if (outlen == 0)
		return;
	for (const char *p = text ? text : ""; *p && n + 1 < outlen && n < PARSE_ID_MAX; p++) {
		char ch = *p;
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
		out[n++] = (char)(ok ? ch : '-');
	}
	out[n] = '\0';
	if (n == 0)
		snprintf(out, outlen, "localhost");
}

enum meter_rc collector_check(const struct collector_opts *o, char *err, size_t errlen)
{
	char **urls = NULL, why[320];
	size_t n = 0;
	enum meter_rc rc;

	if (o->host_id && o->host_id[0] && !parse_is_id(o->host_id)) {
		snprintf(err, errlen, "host_id must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return METER_EINVAL;
	}
	if (o->host_id && strcmp(o->host_id, SAMPLE_HOST_STOP) == 0) {
		snprintf(err, errlen, "host_id %s is the service's own (its readings at a stop)",
			 SAMPLE_HOST_STOP);
		return METER_EINVAL;
	}
	if (o->agents && o->agents[0]) {
		rc = agent_urls_split(o->agents, &urls, &n, err, errlen);
		agent_urls_free(urls);
		if (rc != METER_OK)
			return rc;
	}
	if (o->agents_file && o->agents_file[0]) {
		urls = NULL;
		rc = agent_urls_load_file(o->agents_file, &urls, &n, why, sizeof(why));
		agent_urls_free(urls);
		if (rc != METER_OK) {
			snprintf(err, errlen, "agents_file: %s", why);
			return rc;
		}
	}
	return METER_OK;
}

static void collector_describe(void)
{
	metrics_describe("meter_collector_rounds_total", METRICS_COUNTER,
			 "Collector rounds run (sources read, batches ingested or kept).");
	metrics_describe("meter_collector_round_seconds", METRICS_GAUGE,
			 "Duration of the last collector round's reads of its sources, seconds "
			 "(ingestion runs apart from them).");
	metrics_describe("meter_collector_backlog_samples", METRICS_GAUGE,
			 "Samples read but not yet ingested (kept while the database is down).");
	metrics_describe("meter_collector_dropped_samples_total", METRICS_COUNTER,
			 "Samples dropped from the backlog or refused; caught up from the "
			 "cumulative counters by later samples.");
	metrics_describe("meter_collector_db_errors_total", METRICS_COUNTER,
			 "Collector ingestion attempts that failed for the database (while it "
			 "fails, the rounds kept are tried again every second).");
	metrics_describe("meter_collector_source_errors_total", METRICS_COUNTER,
			 "Source reads that failed, by source.");
	metrics_describe("meter_agent_scrape_errors_total", METRICS_COUNTER,
			 "Failed host agent reads (timeouts, connection and HTTP errors, bad "
			 "documents), by host.");
	metrics_describe("meter_agent_polls_total", METRICS_COUNTER,
			 "Host agents by the result of their turn in a round: ok and failed "
			 "were requested; skipped were not, waiting out a backoff.");
}

/* Moves batch *b (its items) to the end of l; b is left empty. */
static bool list_push(struct batch_list *l, struct sample_batch *b)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct sample_batch *grown = realloc(l->v, cap * sizeof(*grown));
		if (!grown)
			return false;
		l->v = grown;
		l->cap = cap;
	}
	l->v[l->n++] = *b;
	l->samples += b->n;
	sample_batch_init(b);
	return true;
}

/* Moves every batch of from to the end of to (from is left empty). Batches
 * that cannot be moved (out of memory) are released and counted. */
static size_t list_move(struct batch_list *to, struct batch_list *from)
{
	size_t lost = 0;

	for (size_t i = 0; i < from->n; i++) {
		if (!list_push(to, &from->v[i])) {
			lost += from->v[i].n;
			sample_batch_release(&from->v[i]);
		}
	}
	from->n = 0;
	from->samples = 0;
	return lost;
}

/* Releases l->v[0..k) and shifts the rest down. */
static void list_forget(struct batch_list *l, size_t k)
{
	for (size_t i = 0; i < k; i++) {
		l->samples -= l->v[i].n;
		sample_batch_release(&l->v[i]);
	}
	if (k < l->n) /* l->v may be NULL, and then k == l->n == 0 */
		memmove(l->v, l->v + k, (l->n - k) * sizeof(*l->v));
	l->n -= k;
}

/* Drops the oldest batches of l, but never its last keep (the newest
 * round), while l holds more than max samples; returns the samples
 * dropped. */
static size_t list_trim(struct batch_list *l, size_t max, size_t keep)
{
	size_t k = 0, dropped = 0;

	while (k + keep < l->n && l->samples - dropped > max) {
		dropped += l->v[k].n;
		k++;
	}
	list_forget(l, k);
	return dropped;
}

static void collector_dropped(struct collector *c, size_t dropped, const char *why)
{
	if (dropped == 0)
		return;
	log_warn("collector: %zu samples dropped (%s); usage is caught up from the cumulative "
		 "counters by later samples",
		 dropped, why);
	metrics_counter_add("meter_collector_dropped_samples_total", NULL, dropped);
	(void)c;
}

/* Reads every source into l. */
static void collector_read(struct collector *c, struct batch_list *l)
{
	if (c->cgroup_root) {
		struct sample_batch b;
		char err[256];
		enum meter_rc rc;

		sample_batch_init(&b);
		snprintf(b.host_id, sizeof(b.host_id), "%s", c->host_id);
		rc = cgroup_read_all(c->cgroup_root, c->host_id, clock_real_usec(), &b, err,
				     sizeof(err));
		if (rc != METER_OK) {
			if (!c->cgroup_failing)
				log_warn("collector: cgroup %s: %s", c->cgroup_root, err);
			c->cgroup_failing = true;
			metrics_counter_add("meter_collector_source_errors_total",
					    "source=\"cgroup\"", 1);
			sample_batch_release(&b);
		} else {
			if (c->cgroup_failing)
				log_info("collector: cgroup %s readable again", c->cgroup_root);
			c->cgroup_failing = false;
			if (b.n > 0 && !list_push(l, &b))
				log_error("collector: out of memory; cgroup reading dropped");
			sample_batch_release(&b);
		}
	}
	if (c->agents) {
		struct sample_batch *got = NULL;
		struct agent_round_stats st = {0};
		size_t n = 0;

		if (agent_poller_round(c->agents, &got, &n, &st) != METER_OK)
			metrics_counter_add("meter_collector_source_errors_total",
					    "source=\"agents\"", 1);
		for (size_t i = 0; i < n; i++) {
			if (!list_push(l, &got[i])) {
				log_error("collector: out of memory; agent documents dropped");
				sample_batch_release(&got[i]);
			}
		}
		free(got);
		metrics_counter_add("meter_agent_polls_total", "result=\"ok\"", st.ok);
		metrics_counter_add("meter_agent_polls_total", "result=\"failed\"", st.failed);
		metrics_counter_add("meter_agent_polls_total", "result=\"skipped\"", st.skipped);
		for (size_t i = 0; i < c->nagents; i++) {
			uint64_t e = agent_poller_host_errors(c->agents, i);
			if (e > c->host_errors[i]) {
				metrics_counter_add("meter_agent_scrape_errors_total",
						    c->host_labels[i], e - c->host_errors[i]);
				c->host_errors[i] = e;
			}
		}
	}
}

/* Batches by reading time; a host's own batches are in time order. */
static int batch_time_cmp(const void *x, const void *y)
{
	const struct sample_batch *a = x, *b = y;

	return (a->sampled_at_usec > b->sampled_at_usec) -
	       (a->sampled_at_usec < b->sampled_at_usec);
}

/* Ingests l in one transaction; on a refusal as data, batch by batch,
 * dropping the refused ones. What was ingested (or dropped) leaves l; on a
 * database failure the rest stays. Returns false on a database failure. */
static bool collector_ingest(struct collector *c, struct batch_list *l)
{
	struct ingest_stats st;
	char err[512];
	PGconn *conn = NULL;
	enum meter_rc rc;
	bool ok = true;
	size_t before = l->samples;

	if (l->n == 0)
		return true;
	rc = db_pool_acquire(c->pool, COLLECTOR_DB_WAIT_MS, &conn);
	if (rc != METER_OK) {
		if (!c->db_down_logged)
			log_warn("collector: database unreachable; keeping %zu samples",
				 l->samples);
		c->db_down_logged = true;
		return false;
	}
	/* Whole batches, oldest first, up to COLLECTOR_TX_SAMPLES (at least
	 * one batch). Sorted by time first (a round's batches come in the order
	 * their hosts answered), so that a sandbox's samples stay in time order
	 * across chunks even when it moved hosts. */
	qsort(l->v, l->n, sizeof(*l->v), batch_time_cmp);
	for (;;) {
		size_t k = 0, samples = 0;

		while (k < l->n && (k == 0 || samples + l->v[k].n <= COLLECTOR_TX_SAMPLES))
			samples += l->v[k++].n;
		rc = ingest_batches(c->ing, conn, l->v, k, &st, err, sizeof(err));
		if (rc != METER_OK)
			break;
		log_debug("collector: %zu batches, %" PRIu64 " samples accepted, %" PRIu64
			  " ignored, %" PRId64 " micros",
			  k, st.accepted, st.ignored, st.micros);
		list_forget(l, k);
		if (l->n == 0)
			break;
	}
	if (rc == METER_OK) {
		if (c->db_down_logged)
			log_info("collector: database back; backlog ingested");
		c->db_down_logged = false;
	} else if (rc == METER_EINVAL) {
		/* One batch poisons the transaction: find it. */
		log_warn("collector: batches refused (%s); ingesting them one by one", err);
		while (l->n > 0) {
			rc = ingest_batches(c->ing, conn, &l->v[0], 1, &st, err, sizeof(err));
			if (rc == METER_EINVAL) {
				log_error("collector: batch of host %s dropped: %s",
					  l->v[0].host_id, err);
				metrics_counter_add("meter_collector_dropped_samples_total", NULL,
						    l->v[0].n);
			} else if (rc != METER_OK) {
				ok = false; /* the database failed meanwhile: keep the rest */
				break;
			}
			list_forget(l, 1);
		}
	} else {
		if (!c->db_down_logged)
			log_warn("collector: ingestion failed (%s); keeping %zu samples", err,
				 l->samples);
		c->db_down_logged = true;
		ok = false;
	}
	db_pool_release(c->pool, conn, db_conn_failed(conn));
	/* Ingestion's many small blocks are free now, and glibc's heaps may
	 * keep them: after a catch-up from an outage, 140 MB more for as long
	 * as meterd ran, every later round's peak that much higher (rv205). */
	if (before - l->samples > COLLECTOR_TRIM_SAMPLES)
		malloc_trim(0);
	return ok;
}

struct ingest_part {
	struct collector *c;
	struct batch_list l;
	bool ok;
};

static void *ingest_part_main(void *arg)
{
	struct ingest_part *p = arg;

	p->ok = collector_ingest(p->c, &p->l);
	return NULL;
}

static uint64_t str_hash(const char *s)
{
	return hash_str(HASH_START, s);
}

/* Part of each batch of l (by host, mod n) into part[], and whether some
 * sandbox has samples in two parts: a sandbox that moved hosts within the
 * batches. Those must be ingested in one call, which orders a sandbox's
 * samples by time across hosts; in two concurrent calls the later one in
 * time could commit first and the other's samples be ignored as out of
 * order (with the new host's counter starting over, their CPU would be lost).
 * False when memory runs out (the caller then uses one call). */
static bool split_parts(const struct batch_list *l, size_t n, unsigned char *part, bool *crossed)
{
	size_t total = 0, cap = 16;
	const char **ids;
	unsigned char *owner;

	*crossed = false;
	for (size_t i = 0; i < l->n; i++) {
		part[i] = (unsigned char)(str_hash(l->v[i].host_id) % n);
		total += l->v[i].n;
	}
	while (cap < 2 * total)
		cap *= 2;
	ids = calloc(cap, sizeof(*ids));
	owner = malloc(cap);
	if (!ids || !owner) {
		free(ids);
		free(owner);
		return false;
	}
	for (size_t i = 0; i < l->n && !*crossed; i++) {
		for (size_t k = 0; k < l->v[i].n && !*crossed; k++) {
			const char *id = l->v[i].items[k].sandbox_id;
			size_t at = (size_t)str_hash(id) & (cap - 1);
			while (ids[at] && strcmp(ids[at], id) != 0)
				at = (at + 1) & (cap - 1);
			if (!ids[at]) {
				ids[at] = id;
				owner[at] = part[i];
			} else if (owner[at] != part[i]) {
				*crossed = true;
			}
		}
	}
	free(ids);
	free(owner);
	return true;
}

/* Ingests l over the collector's connections at once: the batches split by
 * host (a host's batches in one part), one part per connection, each
 * ingested by collector_ingest on its own thread; in one call when a
 * sandbox's samples would be in two parts (split_parts). The parts are
 * ranges of l->v; what they could not ingest (the database failed) stays in
 * l, oldest first. */
static bool collector_ingest_split(struct collector *c, struct batch_list *l)
{
	struct ingest_part parts[COLLECTOR_MAX_CONNS];
	pthread_t threads[COLLECTOR_MAX_CONNS];
	bool started[COLLECTOR_MAX_CONNS] = {false};
	size_t n = c->conns < COLLECTOR_MAX_CONNS ? c->conns : COLLECTOR_MAX_CONNS, at = 0;
	struct sample_batch *tmp = NULL;
	unsigned char *part = NULL;
	bool ok = true, crossed = false;

	if (n <= 1 || l->n < 2)
		return collector_ingest(c, l);
	tmp = malloc(l->n * sizeof(*tmp));
	part = malloc(l->n);
	if (!tmp || !part || !split_parts(l, n, part, &crossed) || crossed) {
		free(tmp);
		free(part);
		return collector_ingest(c, l); /* one call */
	}
	memset(parts, 0, sizeof(parts));
	for (size_t p = 0; p < n; p++) {
		parts[p].c = c;
		parts[p].l.v = l->v + at;
		for (size_t i = 0; i < l->n; i++) {
			if (part[i] != p)
				continue;
			tmp[at++] = l->v[i];
			parts[p].l.n++;
			parts[p].l.samples += l->v[i].n;
		}
		parts[p].l.cap = parts[p].l.n;
	}
	memcpy(l->v, tmp, l->n * sizeof(*tmp));
	free(tmp);
	free(part);
	for (size_t p = 1; p < n; p++)
		if (parts[p].l.n > 0)
			started[p] =
			    pthread_create(&threads[p], NULL, ingest_part_main, &parts[p]) == 0;
	ingest_part_main(&parts[0]);
	for (size_t p = 1; p < n; p++) {
		if (started[p])
			pthread_join(threads[p], NULL);
		else if (parts[p].l.n > 0)
			ingest_part_main(&parts[p]); /* no thread: here, after the others */
	}
	/* Each part's leftovers are at the start of its range (list_forget):
	 * close the gaps, then oldest first again. */
	l->n = 0;
	l->samples = 0;
	for (size_t p = 0; p < n; p++) {
		ok = ok && (parts[p].ok || parts[p].l.n == 0);
		memmove(l->v + l->n, parts[p].l.v, parts[p].l.n * sizeof(*l->v));
		l->n += parts[p].l.n;
		l->samples += parts[p].l.samples;
	}
	qsort(l->v, l->n, sizeof(*l->v), batch_time_cmp);
	return ok;
}

/* ts += ms on the monotonic clock. */
static void collector_add_ms(struct timespec *ts, int64_t ms)
{
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* The poller: every period, reads the sources into pending. */
static void *collector_poll_main(void *arg)
{
	struct collector *c = arg;
	struct timespec next;

	clock_gettime(CLOCK_MONOTONIC, &next);
	pthread_mutex_lock(&c->mu);
	while (!c->stop_poll) {
		struct batch_list got = {0};
		struct timespec t0, t1;
		size_t lost, dropped;

		pthread_mutex_unlock(&c->mu);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		collector_read(c, &got);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		metrics_counter_add("meter_collector_rounds_total", NULL, 1);
		metrics_gauge_set_fixed("meter_collector_round_seconds", NULL,
					(int64_t)(t1.tv_sec - t0.tv_sec) * 1000000 +
					    (t1.tv_nsec - t0.tv_nsec) / 1000,
					6);
		pthread_mutex_lock(&c->mu);
		{
			size_t before = c->pending.n;

			lost = list_move(&c->pending, &got);
			/* A round that gave nothing (every source failed)
			 * leaves the newest round as it was. */
			if (c->pending.n > before)
				c->round_batches = c->pending.n - before;
		}
		/* What waits for the ingester: the newest rounds, within the
		 * bound, and always the round just read (a round larger than
		 * the bound is still ingested when the database answers). */
		dropped = list_trim(&c->pending, (size_t)c->o.backlog_max, c->round_batches);
		metrics_gauge_set("meter_collector_backlog_samples", NULL,
				  (int64_t)(c->pending.samples + c->work_samples));
		pthread_cond_signal(&c->ready);
		free(got.v);
		collector_dropped(c, lost, "out of memory");
		collector_dropped(c, dropped, "backlog over collector_backlog_max");
		/* Rounds start every period from the first; one that overran
		 * the period is followed at once. */
		collector_add_ms(&next, c->o.period_s * 1000);
		if (next.tv_sec < t1.tv_sec ||
		    (next.tv_sec == t1.tv_sec && next.tv_nsec < t1.tv_nsec))
			next = t1;
		while (!c->stop_poll)
			if (pthread_cond_timedwait(&c->wake, &c->mu, &next) == ETIMEDOUT)
				break;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* The ingester: ingests whatever is pending, all of it in one transaction;
 * after a database failure, retries a second later with what came since. */
static void *collector_ingest_main(void *arg)
{
	struct collector *c = arg;
	bool failed = false;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		size_t lost, dropped, stale;
		char why[SCHEMA_WHY_MAX];
		bool ok, gated;

		if (failed && !c->stop_ingest) {
			struct timespec until = clock_mono_after_ms(1000);

			while (!c->stop_ingest)
				if (pthread_cond_timedwait(&c->ready, &c->mu, &until) == ETIMEDOUT)
					break;
		}
		while (!c->stop_ingest && c->pending.n == 0 && c->work.n == 0)
			pthread_cond_wait(&c->ready, &c->mu);
		if (c->pending.n == 0 && c->work.n == 0)
			break; /* stopping, nothing left */
		lost = list_move(&c->work, &c->pending);
		/* Several rounds at once (a lag, an outage) are ingested by
		 * time: a host's reading older than one it sent before is
		 * ignored here, as it is when rounds go one at a time. */
		stale = sample_batches_drop_stale(c->work.v, c->work.n);
		c->work.samples -= stale;
		c->work_samples = c->work.samples;
		pthread_mutex_unlock(&c->mu);
		if (stale > 0)
			metrics_counter_add("meter_samples_ignored_total", NULL, stale);
		collector_dropped(c, lost, "out of memory");
		/* On a schema not this binary's (schema_gate.h), kept as
		 * while the database is down, but not counted as its error. */
		gated = !schema_gate_open(why, sizeof(why));
		if (gated && !c->schema_logged)
			log_warn("collector: keeping %zu samples: %s", c->work.samples, why);
		c->schema_logged = gated;
		ok = !gated && collector_ingest_split(c, &c->work);
		if (!ok && !gated)
			metrics_counter_add("meter_collector_db_errors_total", NULL, 1);
		pthread_mutex_lock(&c->mu);
		dropped = 0;
		if (!ok) {
			/* Kept for the next attempt: with what came meanwhile,
			 * the newest rounds within the bound (the newest one
			 * whole); the oldest are dropped. */
			lost = list_move(&c->work, &c->pending);
			dropped =
			    list_trim(&c->work, (size_t)c->o.backlog_max,
				      c->round_batches < c->work.n ? c->round_batches : c->work.n);
			collector_dropped(c, lost, "out of memory");
		}
		c->work_samples = c->work.samples;
		metrics_gauge_set("meter_collector_backlog_samples", NULL,
				  (int64_t)(c->pending.samples + c->work_samples));
		collector_dropped(c, dropped, "backlog over collector_backlog_max");
		failed = !ok;
		if (failed && c->stop_ingest)
			break; /* one last try was made */
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Frees everything but the thread. */
static void collector_free(struct collector *c)
{
	if (!c)
		return;
	list_forget(&c->pending, c->pending.n);
	free(c->pending.v);
	list_forget(&c->work, c->work.n);
	free(c->work.v);
	agent_poller_free(c->agents);
	for (size_t i = 0; c->host_labels && i < c->nagents; i++)
		free(c->host_labels[i]);
	free(c->host_labels);
	free(c->host_errors);
	ingest_free(c->ing);
	db_pool_free(c->pool);
	free(c->database_url);
	free(c->cgroup_root);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->ready);
	free(c);
}

/* Loads the agents' URLs (list and file) and makes the poller. */
static enum meter_rc collector_agents(struct collector *c, char *err, size_t errlen)
{
	char **a = NULL, **b = NULL;
	size_t na = 0, nb = 0;
	const char **all = NULL;
	struct agent_poller_opts po;
	enum meter_rc rc = METER_OK;

	if (c->o.agents && c->o.agents[0]) {
		rc = agent_urls_split(c->o.agents, &a, &na, err, errlen);
		if (rc != METER_OK)
			goto out;
	}
	if (c->o.agents_file && c->o.agents_file[0]) {
		char why[320];

		rc = agent_urls_load_file(c->o.agents_file, &b, &nb, why, sizeof(why));
		if (rc != METER_OK) {
			snprintf(err, errlen, "agents_file: %s", why);
			goto out;
		}
	}
	if (na + nb == 0)
		goto out;
	all = calloc(na + nb, sizeof(*all));
	c->host_labels = calloc(na + nb, sizeof(*c->host_labels));
	c->host_errors = calloc(na + nb, sizeof(*c->host_errors));
	if (!all || !c->host_labels || !c->host_errors) {
		rc = METER_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < na; i++)
		all[i] = a[i];
	for (size_t i = 0; i < nb; i++)
		all[na + i] = b[i];
	agent_poller_opts_init(&po);
	po.timeout_ms = c->o.agent_timeout_ms;
	c->agents = agent_poller_new(all, na + nb, &po);
	if (!c->agents) {
		rc = METER_ENOMEM;
		goto out;
	}
	c->nagents = na + nb;
	for (size_t i = 0; i < c->nagents; i++) {
		char label[METRICS_LABELS_MAX];
		label[0] = '\0';
		if (metrics_label(label, sizeof(label), "host",
				  agent_poller_host_url(c->agents, i)) != METER_OK)
			snprintf(label, sizeof(label), "host=\"agent-%zu\"", i);
		c->host_labels[i] = strdup(label);
		if (!c->host_labels[i]) {
			rc = METER_ENOMEM;
			goto out;
		}
	}
	log_info("collector: %zu host agents", c->nagents);
out:
	if (rc == METER_ENOMEM)
		snprintf(err, errlen, "out of memory");
	free(all);
	if (a)
		agent_urls_free(a);
	if (b)
		agent_urls_free(b);
	return rc;
}

/* Stops the threads: the poller first, then the ingester after one last
 * attempt at what is pending. */
static void collector_join(struct collector *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop_poll = true;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->mu);
	if (c->poll_started)
		pthread_join(c->poll_thread, NULL);
	c->poll_started = false;
	pthread_mutex_lock(&c->mu);
	c->stop_ingest = true;
	pthread_cond_signal(&c->ready);
	pthread_mutex_unlock(&c->mu);
	if (c->ingest_started)
		pthread_join(c->ingest_thread, NULL);
	c->ingest_started = false;
}

enum meter_rc collector_start(const struct collector_opts *o, struct collector **out, char *err,
			      size_t errlen)
{
	struct collector *c;
	struct ingest_opts io;
	enum meter_rc rc;

	*out = NULL;
	if ((!o->cgroup_root || !o->cgroup_root[0]) && (!o->agents || !o->agents[0]) &&
	    (!o->agents_file || !o->agents_file[0])) {
		log_info("collector: no source configured (cgroup_root, agents, agents_file); "
			 "samples come only through POST /v1/samples, of a meterd whose API is "
			 "on");
		return METER_OK;
	}
	if (o->period_s < 1 || !o->database_url) {
		snprintf(err, errlen, "collector: bad options");
		return METER_EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return METER_ENOMEM;
	}
	/* Waits are on the monotonic clock, like the rounds' schedule. */
	if (clock_mono_cond_init(&c->wake) != 0 || clock_mono_cond_init(&c->ready) != 0) {
		snprintf(err, errlen, "cannot make the collector's condition variables");
		free(c);
		return METER_ENOMEM;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->o = *o;
	c->conns = o->connections < 1			  ? 1
		   : o->connections > COLLECTOR_MAX_CONNS ? COLLECTOR_MAX_CONNS
							  : (size_t)o->connections;
	c->database_url = strdup(o->database_url);
	if (!c->database_url) {
		rc = METER_ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	c->o.database_url = c->database_url;
	if (o->cgroup_root && o->cgroup_root[0]) {
		if (!o->host_id || !parse_is_id(o->host_id)) {
			snprintf(err, errlen,
				 "host_id must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
			rc = METER_EINVAL;
			goto fail;
		}
		snprintf(c->host_id, sizeof(c->host_id), "%s", o->host_id);
		c->cgroup_root = strdup(o->cgroup_root);
		if (!c->cgroup_root) {
			rc = METER_ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		log_info("collector: cgroup source %s (%s), host %s", c->cgroup_root,
			 cgroup_detect(c->cgroup_root) == CGROUP_V1   ? "cgroup v1"
			 : cgroup_detect(c->cgroup_root) == CGROUP_V2 ? "cgroup v2"
								      : "layout not detected yet",
			 c->host_id);
	}
	rc = collector_agents(c, err, errlen);
	if (rc != METER_OK)
		goto fail;
	/* A long statement timeout: a catch-up round after an outage is big. */
	c->pool = db_pool_new(c->database_url, (int)c->conns,
			      o->statement_timeout_ms > 60000 ? o->statement_timeout_ms : 60000);
	ingest_opts_init(&io);
	io.statement_timeout_ms = o->statement_timeout_ms > 60000 ? o->statement_timeout_ms : 60000;
	if (o->cache_sandboxes != 0)
		io.cache_sandboxes = o->cache_sandboxes > 0 ? (size_t)o->cache_sandboxes : 0;
	c->ing = ingest_new(&io);
	if (!c->pool || !c->ing) {
		rc = METER_ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	collector_describe();
	if (pthread_create(&c->ingest_thread, NULL, collector_ingest_main, c) != 0) {
		rc = METER_ENOMEM;
		snprintf(err, errlen, "cannot start the collector's threads");
		goto fail;
	}
	c->ingest_started = true;
	if (pthread_create(&c->poll_thread, NULL, collector_poll_main, c) != 0) {
		rc = METER_ENOMEM;
		snprintf(err, errlen, "cannot start the collector's threads");
		goto fail;
	}
	c->poll_started = true;
	log_info("collector: every %" PRId64 " s", o->period_s);
	*out = c;
	return METER_OK;
fail:
	collector_join(c);
	collector_free(c);
	return rc;
}

void collector_stop(struct collector *c)
{
	if (!c)
		return;
	collector_join(c);
	if (c->pending.samples + c->work.samples)
		log_warn("collector: stopping with %zu samples not ingested (caught up from the "
			 "cumulative counters by the next run)",
			 c->pending.samples + c->work.samples);
	collector_free(c);
}
