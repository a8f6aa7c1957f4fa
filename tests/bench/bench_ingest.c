/* Benchmark: ingestion throughput beside raw COPY of the same rows, in one run.
 *
 *   bench_ingest DATABASE_URL [--sandboxes N] [--intervals K] [--hosts H]
 *                [--rounds-per-call R]
 *
 * On a migrated, otherwise empty database it creates N sandboxes (keys in
 * several time zones, one open hold each, so the ledger and holds are
 * exercised), then generates the same K + 1 rounds of samples (one sample
 * per sandbox per round, 10 s apart; H hosts per round, as a collector's
 * round) for two sets of N sandboxes that differ only in their ids:
 *   (a) raw: binary COPY of each round's rows into the samples table (same
 *       partitions, indexes and foreign-key targets), one transaction per
 *       round;
 *   (b) ingest: ingest_batches() of each round (raw samples + intervals +
 *       hourly rollups + ledger + holds + watermarks), one call per round.
 * Rounds alternate (raw r, ingest r, raw r+1, ...), so that whatever else
 * the machine does weighs on both alike; each side's time is the sum of its
 * rounds. Prints samples/s of both, the ratio (target: >= 50%) and where
 * ingestion's time goes. With --rounds-per-call R, ingestion takes R rounds
 * per call (as the collector does when it catches up after falling behind);
 * the default, 1, is the steady state. Not a test: figures depend on the
 * machine. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db.h"
#include "ingest.h"
#include "migrate.h"
#include "parse.h"
#include "sample.h"

#define SEC	      INT64_C(1000000)
#define PG_EPOCH_USEC INT64_C(946684800000000)

struct gen {
	const char *prefix; /* sandbox ids: <prefix><i> */
	size_t nsbx;
	size_t nhosts;
	int64_t t0;
	int64_t *cpu; /* cumulative per sandbox */
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* Sample of sandbox i at round r (advances the cumulative counter). */
static void gen_sample(struct gen *g, size_t i, int r, struct meter_sample *s)
{
	uint64_t h = mix((uint64_t)i * 1000003u + (uint64_t)r);
	int vcpus = 1 + (int)(i % 4);
	bool paused = (i % 10 == 7) && r >= 40 && r < 60;

	memset(s, 0, sizeof(*s));
	snprintf(s->sandbox_id, sizeof(s->sandbox_id), "%s%zu", g->prefix, i);
	s->u.at_usec = g->t0 + (int64_t)r * 10 * SEC;
	s->u.state = paused ? SANDBOX_PAUSED : SANDBOX_RUNNING;
	s->u.vcpus = vcpus;
	s->u.memory_mib = 512 * (int64_t)(1 + i % 8);
	s->u.storage_mib = 1024;
	if (r > 0 && !paused) {
		if (h % 5 == 0) /* a burst */
			g->cpu[i] += (int64_t)vcpus * 10 * SEC * (int64_t)(h % 100) / 100;
		else /* waiting on its model: a few millicores */
			g->cpu[i] += 2000 + (int64_t)(h % 18000);
	}
	s->u.cpu_usec = g->cpu[i];
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int sql(PGconn *c, const char *q)
{
	PGresult *r = PQexec(c, q);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

	if (!ok)
		fprintf(stderr, "bench: %s\n%s", q, PQerrorMessage(c));
	PQclear(r);
	return ok ? 0 : -1;
}

/* Binary COPY helpers (network byte order). */
struct buf {
	char *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p) {
			fprintf(stderr, "bench: out of memory\n");
			exit(1);
		}
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void put32(struct buf *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
			      (unsigned char)(v >> 8), (unsigned char)v};
	put(b, x, 4);
}

static void put64(struct buf *b, uint64_t v)
{
	put32(b, (uint32_t)(v >> 32));
	put32(b, (uint32_t)v);
}

static void field_text(struct buf *b, const char *s)
{
	put32(b, (uint32_t)strlen(s));
	put(b, s, strlen(s));
}

static void field_i64(struct buf *b, int64_t v)
{
	put32(b, 8);
	put64(b, (uint64_t)v);
}

/* One round as raw COPY rows (exactly what ingestion stores). */
static int raw_round(PGconn *c, struct gen *g, int r, struct buf *b)
{
	static const char sig[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};
	PGresult *res;
	int ok;

	b->n = 0;
	put(b, sig, sizeof(sig));
	put32(b, 0);
	put32(b, 0);
	for (size_t h = 0; h < g->nhosts; h++) {
		char host[32];
		snprintf(host, sizeof(host), "host_%zu", h);
		for (size_t i = h; i < g->nsbx; i += g->nhosts) {
			struct meter_sample s;
			unsigned char nf[2] = {0, 9};
			gen_sample(g, i, r, &s);
			put(b, nf, 2);
			field_text(b, "acct_b");
			field_text(b, s.sandbox_id);
			field_i64(b, s.u.at_usec - PG_EPOCH_USEC);
			field_text(b, sandbox_state_name(s.u.state));
			field_i64(b, s.u.cpu_usec);
			field_i64(b, s.u.memory_mib);
			field_i64(b, s.u.storage_mib);
			put32(b, 4);
			put32(b, (uint32_t)s.u.vcpus);
			field_text(b, host);
		}
	}
	put(b, "\377\377", 2);
	res = PQexec(c, "COPY samples (account_id, sandbox_id, sampled_at, state, cpu_usec,"
			" memory_mib, storage_mib, vcpus, host_id) FROM STDIN (FORMAT binary)");
	if (PQresultStatus(res) != PGRES_COPY_IN) {
		fprintf(stderr, "bench: COPY: %s", PQerrorMessage(c));
		PQclear(res);
		return -1;
	}
	PQclear(res);
	if (PQputCopyData(c, b->p, (int)b->n) != 1 || PQputCopyEnd(c, NULL) != 1) {
		fprintf(stderr, "bench: COPY: %s", PQerrorMessage(c));
		return -1;
	}
	ok = 0;
	while ((res = PQgetResult(c)) != NULL) {
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			fprintf(stderr, "bench: COPY: %s", PQerrorMessage(c));
			ok = -1;
		}
		PQclear(res);
	}
	return ok;
}

/* One round through ingestion: nhosts batches. */
static int ingest_round(PGconn *c, struct ingest *ing, struct gen *g, int r0, int nr,
			struct sample_batch *bs, struct ingest_stats *total)
{
	struct ingest_stats st;
	char err[512];

	for (int k = 0; k < nr; k++) {
		int r = r0 + k;
		for (size_t h = 0; h < g->nhosts; h++) {
			struct sample_batch *b = &bs[(size_t)k * g->nhosts + h];
			b->n = 0;
			snprintf(b->host_id, sizeof(b->host_id), "host_%zu", h);
			b->sampled_at_usec = g->t0 + (int64_t)r * 10 * SEC;
			for (size_t i = h; i < g->nsbx; i += g->nhosts) {
				struct meter_sample s;
				gen_sample(g, i, r, &s);
				if (sample_batch_push(b, &s) != METER_OK) {
					fprintf(stderr, "bench: out of memory\n");
					return -1;
				}
			}
		}
	}
	if (ingest_batches(ing, c, bs, g->nhosts * (size_t)nr, &st, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "bench: ingest: %s\n", err);
		return -1;
	}
	total->accepted += st.accepted;
	total->intervals += st.intervals;
	total->usage_rows += st.usage_rows;
	total->micros += st.micros;
	total->ignored += st.ignored;
	total->usec_read += st.usec_read;
	total->usec_compute += st.usec_compute;
	total->usec_samples += st.usec_samples;
	total->usec_state += st.usec_state;
	total->usec_ledger += st.usec_ledger;
	total->usec_commit += st.usec_commit;
	return 0;
}

static int64_t arg_int(int argc, char **argv, const char *name, int64_t def, int64_t max)
{
	for (int i = 2; i + 1 < argc; i++) {
		if (strcmp(argv[i], name) == 0) {
			int64_t v;
			if (parse_int64(argv[i + 1], 1, max, &v) != METER_OK) {
				fprintf(stderr, "bench: bad %s\n", name);
				exit(2);
			}
			return v;
		}
	}
	return def;
}

static void phase(const char *name, int64_t usec, size_t rows)
{
	printf("  %-34s %7.2f s  %6.1f us/sample\n", name, (double)usec / 1e6,
	       (double)usec / (double)rows);
}

int main(int argc, char **argv)
{
	PGconn *c = NULL;
	struct ingest *ing = NULL;
	struct gen g = {0}, graw = {0};
	struct sample_batch *bs = NULL;
	struct ingest_stats total = {0};
	struct buf b = {0};
	char err[512], q[1024];
	int applied, intervals, per_call, status = 1;
	double t_raw = 0, t_ing = 0, t;
	size_t rows;

	if (argc < 2) {
		fprintf(stderr, "usage: bench_ingest DATABASE_URL [--sandboxes N] [--intervals K]"
				" [--hosts H] [--rounds-per-call R]\n");
		return 2;
	}
	g.nsbx = (size_t)arg_int(argc, argv, "--sandboxes", 10000, 100000);
	intervals = (int)arg_int(argc, argv, "--intervals", 100, 10000);
	g.nhosts = (size_t)arg_int(argc, argv, "--hosts", 100, 10000);
	per_call = (int)arg_int(argc, argv, "--rounds-per-call", 1, 100);
	if (g.nhosts > g.nsbx)
		g.nhosts = g.nsbx;
	g.t0 = INT64_C(1796035800) * SEC; /* 2026-11-30T10:50:00Z: rounds cross 11:00 */
	g.prefix = "sb_";
	graw = g;
	graw.prefix = "rw_";
	g.cpu = calloc(g.nsbx, sizeof(*g.cpu));
	graw.cpu = calloc(g.nsbx, sizeof(*g.cpu));
	bs = calloc(g.nhosts * (size_t)per_call, sizeof(*bs));
	if (!g.cpu || !graw.cpu || !bs)
		goto out;
	if (db_connect(argv[1], &c, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "bench: %s\n", err);
		goto out;
	}
	if (migrate_apply(c, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "bench: migrate: %s\n", err);
		goto out;
	}
	if (sql(c, "SET client_min_messages = warning") ||
	    sql(c, "INSERT INTO accounts (account_id, name) VALUES ('acct_b', 'bench')"
		   " ON CONFLICT DO NOTHING"))
		goto out;
	if (sql(c, "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
		   " SELECT 'acct_b', 'k' || i, decode(repeat('ab', 32), 'hex'), 'full',"
		   " (ARRAY['UTC', 'Asia/Kolkata', 'America/New_York', 'Europe/Paris'])[1 + i % 4]"
		   " FROM generate_series(0, 99) i"))
		goto out;
	/* Both sets of sandboxes; the ingested set has an open hold each. */
	snprintf(q, sizeof(q),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at, state_since) SELECT 'acct_b', p || i,"
		 " 'k' || (i %% 100), 1 + i %% 4, 512 * (1 + i %% 8), 1024, 'running',"
		 /* Made at the first sample: nothing before a create is billed. */
		 " '2026-11-30T10:50:00Z', '2026-11-30T10:50:00Z'"
		 " FROM generate_series(0, %zu) i, unnest(ARRAY['sb_', 'rw_']) p",
		 g.nsbx - 1);
	if (sql(c, q))
		goto out;
	if (sql(c, "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		   " lease_starts_at, lease_ends_at)"
		   " SELECT s.account_id, s.key_id, s.sandbox_id,"
		   " meter_key_day(k.time_zone, '2026-11-30T10:50:00Z'), 100000000,"
		   " '2026-11-30T10:50:00Z', '2026-11-30T12:50:00Z'"
		   " FROM sandboxes s JOIN api_keys k USING (account_id, key_id)"
		   " WHERE s.account_id = 'acct_b' AND s.sandbox_id LIKE 'sb\\_%'") ||
	    sql(c, "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros)"
		   " SELECT account_id, key_id, day, sum(amount_micros) FROM holds"
		   " WHERE account_id = 'acct_b' GROUP BY 1, 2, 3") ||
	    sql(c, "SELECT meter_ensure_sample_partitions('2026-11-29', '2026-12-01')") ||
	    sql(c, "VACUUM ANALYZE") || sql(c, "CHECKPOINT"))
		goto out;
	ing = ingest_new(NULL);
	if (!ing)
		goto out;
	rows = g.nsbx * (size_t)(intervals + 1);
	printf("bench-ingest: %zu sandboxes x %d intervals = %zu samples each side"
	       " (%d rounds of %zu hosts, alternating; %d round(s) per ingestion call)\n",
	       g.nsbx, intervals, rows, intervals + 1, g.nhosts, per_call);
	fflush(stdout);
	for (int r = 0; r <= intervals;) {
		int nr = intervals + 1 - r < per_call ? intervals + 1 - r : per_call;
		for (int k = 0; k < nr; k++) {
			t = now_s();
			if (raw_round(c, &graw, r + k, &b) != 0)
				goto out;
			t_raw += now_s() - t;
		}
		t = now_s();
		if (ingest_round(c, ing, &g, r, nr, bs, &total) != 0)
			goto out;
		t_ing += now_s() - t;
		r += nr;
	}
	printf("raw COPY:        %8.2f s  %10.0f samples/s\n", t_raw, (double)rows / t_raw);
	printf("full ingestion:  %8.2f s  %10.0f samples/s  (%" PRIu64 " intervals, %" PRIu64
	       " usage rows written, %" PRId64 " micros)\n",
	       t_ing, (double)rows / t_ing, total.intervals, total.usage_rows, total.micros);
	printf("ratio:           %8.1f %% of raw COPY (target >= 50 %%)\n", 100.0 * t_raw / t_ing);
	printf("ingestion's time:\n");
	phase("reads (meter rows, events, days)", total.usec_read, rows);
	phase("arithmetic (C)", total.usec_compute, rows);
	phase("raw samples COPY", total.usec_samples, rows);
	phase("sandbox_meter + usage_hourly", total.usec_state, rows);
	phase("key-day ledger, holds, watermarks", total.usec_ledger, rows);
	phase("COMMIT", total.usec_commit, rows);
	if (total.accepted != rows || total.intervals != rows - g.nsbx) {
		fprintf(stderr, "bench: expected %zu accepted samples, got %" PRIu64 "\n", rows,
			total.accepted);
		goto out;
	}
	/* Every interval is one hour's running usage (none crosses an hour
	 * in this workload's rounds): a run that bills nothing measured
	 * nothing. */
	if (total.usage_rows != total.intervals || total.micros <= 0) {
		fprintf(stderr,
			"bench: expected %" PRIu64 " usage rows and money, got %" PRIu64
			" rows and %" PRId64 " micros\n",
			total.intervals, total.usage_rows, total.micros);
		goto out;
	}
	status = 0;
out:
	for (size_t h = 0; bs && h < g.nhosts * (size_t)per_call; h++)
		sample_batch_release(&bs[h]);
	free(bs);
	free(b.p);
	free(g.cpu);
	free(graw.cpu);
	ingest_free(ing);
	PQfinish(c);
	return status;
}
