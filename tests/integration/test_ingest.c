/* Integration: ingestion of sample batches against a real PostgreSQL.
 *
 * Every expected quantity and amount below is computed here from DESIGN.md
 * §2's formula (micros(Q) = floor(Q × rate / (unit × 3.6e9)), money of a
 * period = micros(Q_end) − micros(Q_start) per sandbox and price version),
 * never by calling the pricing code under test. Each case meters sandboxes
 * of its own so the cases do not disturb one another. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "check.h"
#include "db.h"
#include "db_checks.h"
#include "ingest.h"
#include "metrics.h"
#include "migrate.h"
#include "sample.h"
#include "testdb.h"

#define SEC	INT64_C(1000000)
#define HOUR	(3600 * SEC)
#define DIV_CPU ((__int128)1000 * 3600000000LL)
#define DIV_MIB ((__int128)1024 * 3600000000LL)
/* created_at of the sandboxes rows made here: before every sample. */
#define MADE "'2026-11-01T00:00:00Z'"

static PGconn *conn;
static struct ingest *ing;

/* ---- helpers ------------------------------------------------------------- */

/* "2026-11-30T01:02:03Z" (optionally with .ffffff) to UTC µs. */
static int64_t T(const char *s)
{
	struct tm tm;
	const char *rest;
	int64_t frac = 0;

	memset(&tm, 0, sizeof(tm));
	rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!rest) {
		fprintf(stderr, "bad time %s\n", s);
		exit(1);
	}
	if (*rest == '.') {
		int digits = 0;
		for (rest++; *rest >= '0' && *rest <= '9'; rest++, digits++)
			frac = frac * 10 + (*rest - '0');
		for (; digits < 6; digits++)
			frac *= 10;
	}
	return (int64_t)timegm(&tm) * SEC + frac;
}

static int64_t micros(__int128 q, int64_t rate, __int128 div)
{
	return (int64_t)(q * rate / div);
}

static void exec_on(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);

	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "SQL failed: %s\n%s", sql, PQerrorMessage(c));
		CHECK(0);
	}
	PQclear(r);
}

static void exec(const char *sql)
{
	exec_on(conn, sql);
}

/* The first column of the first row as int64 (-1 on NULL or error). */
static int64_t q64(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int64_t q64(const char *fmt, ...)
{
	char sql[2048];
	va_list ap;
	PGresult *r;
	int64_t v = -1;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "SQL failed: %s\n%s", sql, PQerrorMessage(conn));
	} else if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)) {
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	}
	PQclear(r);
	return v;
}

/* The first column of the first row as text into buf ("" on NULL/error). */
static void qtext(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void qtext(char *buf, size_t len, const char *fmt, ...)
{
	char sql[2048];
	va_list ap;
	PGresult *r;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	buf[0] = '\0';
	r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fprintf(stderr, "SQL failed: %s\n%s", sql, PQerrorMessage(conn));
	else if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
		snprintf(buf, len, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
}

/* Appends a sample to b. state: 'r', 'p' or 's'. */
static void add(struct sample_batch *b, const char *sandbox, const char *key, int64_t at,
		char state, int64_t cpu_usec, int64_t memory_mib, int64_t storage_mib, int vcpus)
{
	struct meter_sample s;

	memset(&s, 0, sizeof(s));
	snprintf(s.sandbox_id, sizeof(s.sandbox_id), "%s", sandbox);
	snprintf(s.key_id, sizeof(s.key_id), "%s", key ? key : "");
	s.u.at_usec = at;
	s.u.state = state == 'r'   ? SANDBOX_RUNNING
		    : state == 'p' ? SANDBOX_PAUSED
				   : SANDBOX_STOPPED;
	s.u.cpu_usec = cpu_usec;
	s.u.memory_mib = memory_mib;
	s.u.storage_mib = storage_mib;
	s.u.vcpus = vcpus;
	if (sample_batch_push(b, &s) != METER_OK) {
		fprintf(stderr, "sample_batch_push failed\n");
		exit(1);
	}
	if (at > b->sampled_at_usec)
		b->sampled_at_usec = at;
}

/* Appends a sample as a cgroup gives it: its CPU counter alone, the sizes
 * unknown and the state left to the lifecycle events. */
static void add_cgroup(struct sample_batch *b, const char *sandbox, int64_t at, int64_t cpu_usec)
{
	add(b, sandbox, NULL, at, 'r', cpu_usec, SAMPLE_UNKNOWN, SAMPLE_UNKNOWN, 0);
	b->items[b->n - 1].state_from_events = true;
}

static void batch(struct sample_batch *b, const char *host)
{
	sample_batch_init(b);
	snprintf(b->host_id, sizeof(b->host_id), "%s", host);
}

/* Ingests n batches; returns the stats; fails the test on error. */
static struct ingest_stats run(struct sample_batch *b, size_t n)
{
	struct ingest_stats st;
	char err[512];
	enum meter_rc rc = ingest_batches(ing, conn, b, n, &st, err, sizeof(err));

	if (rc != METER_OK)
		fprintf(stderr, "ingest_batches: %s: %s\n", meter_rc_str(rc), err);
	CHECK_I64(rc, METER_OK);
	return st;
}

/* Ingests one batch and releases it. */
static struct ingest_stats run1(struct sample_batch *b)
{
	struct ingest_stats st = run(b, 1);

	sample_batch_release(b);
	return st;
}

/* A usage_hourly column summed over a sandbox's rows. */
static int64_t usum(const char *sandbox, const char *col)
{
	return q64("SELECT COALESCE(sum(%s), 0) FROM usage_hourly WHERE sandbox_id = '%s'", col,
		   sandbox);
}

/* A sandbox's stored sample states in time order, comma-separated, into
 * buf. */
static const char *states_of(char *buf, size_t len, const char *sandbox)
{
	qtext(buf, len,
	      "SELECT string_agg(state::text, ',' ORDER BY sampled_at) FROM samples"
	      " WHERE sandbox_id = '%s'",
	      sandbox);
	return buf;
}

/* A usage_hourly column of one row (hour, day; version 1 unless given). */
static int64_t urow(const char *sandbox, const char *hour, const char *day, const char *col)
{
	return q64("SELECT %s FROM usage_hourly WHERE sandbox_id = '%s' AND hour = '%s'"
		   " AND day = '%s'",
		   col, sandbox, hour, day);
}

/* Digest of everything ingestion writes. */
static void dump(char *buf, size_t len)
{
	qtext(buf, len,
	      "SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM ("
	      " SELECT 'u' || t::text AS x FROM usage_hourly t"
	      " UNION ALL SELECT 'l' || t::text FROM key_day_ledger t"
	      " UNION ALL SELECT 'm' || t::text FROM sandbox_meter t"
	      " UNION ALL SELECT 'h' || t::text FROM holds t"
	      " UNION ALL SELECT 's' || t::text FROM samples t"
	      " UNION ALL SELECT 'b' || t::text FROM sandboxes t"
	      " UNION ALL SELECT 'w' || t::text FROM ingest_watermarks t) d");
}

/* Checks one sandbox's totals: quantities and money (cpu, memory, storage). */
static void check_totals(const char *sbx, int64_t running_s, int64_t paused_s, int64_t used,
			 int64_t billed, int64_t mem, int64_t sto, int64_t cpu_m, int64_t mem_m,
			 int64_t sto_m)
{
	fprintf(stderr, "  sandbox %s\n", sbx);
	CHECK_I64(usum(sbx, "running_usec"), running_s * SEC);
	CHECK_I64(usum(sbx, "paused_usec"), paused_s * SEC);
	CHECK_I64(usum(sbx, "cpu_used_mcus"), used);
	CHECK_I64(usum(sbx, "cpu_billed_mcus"), billed);
	CHECK_I64(usum(sbx, "memory_mibus"), mem);
	CHECK_I64(usum(sbx, "storage_mibus"), sto);
	CHECK_I64(usum(sbx, "cpu_micros"), cpu_m);
	CHECK_I64(usum(sbx, "memory_micros"), mem_m);
	CHECK_I64(usum(sbx, "storage_micros"), sto_m);
	CHECK_I64(usum(sbx, "total_micros"), cpu_m + mem_m + sto_m);
	CHECK_I64(q64("SELECT cpu_cum_micros + memory_cum_micros + storage_cum_micros"
		      " FROM sandbox_meter WHERE sandbox_id = '%s'",
		      sbx),
		  cpu_m + mem_m + sto_m);
}

/* ---- cases ----------------------------------------------------------------- */

/* Running below the floor for 50 s: the floor is billed. */
static void test_steady_floor(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T01:00:00Z");
	int64_t billed = 50 * 50 * SEC, mem = 4096 * 50 * SEC;

	fprintf(stderr, "steady running with the floor\n");
	batch(&b, "h1");
	for (int i = 0; i <= 5; i++)
		add(&b, "s_steady", "key_a", t0 + i * 10 * SEC, 'r', 1000 + i * 100, 4096, 0, 2);
	st = run1(&b);
	CHECK_I64(st.accepted, 6);
	CHECK_I64(st.ignored, 0);
	CHECK_I64(st.intervals, 5);
	CHECK_I64(st.anomalies, 0);
	CHECK_I64(st.new_sandboxes, 1);
	check_totals("s_steady", 50, 0, 1000 * 500, billed, mem, 0, micros(billed, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	CHECK_I64(st.micros, micros(billed, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB));
	/* Attributed through the document's key: the key's account. */
	CHECK_I64(q64("SELECT count(*) FROM sandboxes WHERE sandbox_id = 's_steady'"
		      " AND account_id = 'acct_1' AND key_id = 'key_a' AND vcpus = 2"
		      " AND memory_mib = 4096"),
		  1);
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 's_steady'"), 6);
	CHECK_I64(q64("SELECT batches FROM ingest_watermarks WHERE host_id = 'h1'"), 1);
}

/* A whole hour idle (2 vCPU, 4 GiB) is 31,250 µ$; both vCPUs busy, 80,000 µ$
 * (DESIGN.md §1). Once as one call of 361 batches, once as 361 calls. */
static void test_worked_figures(void)
{
	struct sample_batch bs[361], b;
	int64_t t0 = T("2026-11-30T02:00:00Z");

	fprintf(stderr, "worked figures\n");
	for (int i = 0; i <= 360; i++) {
		char host[16];
		snprintf(host, sizeof(host), "hw%d", i % 3);
		batch(&bs[i], host);
		add(&bs[i], "s_idle_a", "key_w", t0 + i * 10 * SEC, 'r', 0, 4096, 0, 2);
		add(&bs[i], "s_busy", "key_w", t0 + i * 10 * SEC, 'r', i * 20 * SEC, 4096, 0, 2);
	}
	run(bs, 361);
	for (int i = 0; i <= 360; i++)
		sample_batch_release(&bs[i]);
	for (int i = 0; i <= 360; i++) {
		batch(&b, "hw9");
		add(&b, "s_idle_b", "key_w", t0 + i * 10 * SEC, 'r', 0, 4096, 0, 2);
		run1(&b);
	}
	CHECK_I64(urow("s_idle_a", "2026-11-30T02:00:00Z", "2026-11-30", "total_micros"), 31250);
	CHECK_I64(urow("s_idle_a", "2026-11-30T02:00:00Z", "2026-11-30", "cpu_micros"), 1250);
	CHECK_I64(urow("s_idle_a", "2026-11-30T02:00:00Z", "2026-11-30", "memory_micros"), 30000);
	CHECK_I64(urow("s_idle_a", "2026-11-30T02:00:00Z", "2026-11-30", "running_usec"), HOUR);
	CHECK_I64(urow("s_idle_b", "2026-11-30T02:00:00Z", "2026-11-30", "total_micros"), 31250);
	CHECK_I64(urow("s_idle_b", "2026-11-30T02:00:00Z", "2026-11-30", "cpu_billed_mcus"),
		  50 * HOUR);
	CHECK_I64(urow("s_busy", "2026-11-30T02:00:00Z", "2026-11-30", "total_micros"), 80000);
	CHECK_I64(urow("s_busy", "2026-11-30T02:00:00Z", "2026-11-30", "cpu_used_mcus"),
		  2000 * HOUR);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id IN"
		      " ('s_idle_a', 's_idle_b', 's_busy')"),
		  3);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_w'"
		      " AND day = '2026-11-30'"),
		  31250 * 2 + 80000);
}

/* The counter goes down: the new value is the usage since the reset. */
static void test_counter_reset(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T01:10:00Z");
	/* Intervals: 1.0 s, 0.3 s (after the reset), 0.5 s of CPU in 10 s each. */
	int64_t used = 1000 * (1000000 + 300000 + 500000);
	int64_t billed = 1000 * INT64_C(1000000) + 50 * 10 * SEC + 50 * 10 * SEC;
	int64_t mem = 1024 * 30 * SEC;

	fprintf(stderr, "counter reset\n");
	batch(&b, "h1");
	add(&b, "s_reset", "key_a", t0, 'r', 5000000, 1024, 0, 1);
	add(&b, "s_reset", "key_a", t0 + 10 * SEC, 'r', 6000000, 1024, 0, 1);
	add(&b, "s_reset", "key_a", t0 + 20 * SEC, 'r', 300000, 1024, 0, 1);
	add(&b, "s_reset", "key_a", t0 + 30 * SEC, 'r', 800000, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.resets, 1);
	CHECK_I64(st.anomalies, 1);
	check_totals("s_reset", 30, 0, used, billed, mem, 0, micros(billed, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
}

/* Missed samples: one 60 s interval priced from the cumulative counter. */
static void test_gap(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T01:20:00Z");
	int64_t used = 1000 * 30 * SEC, mem = 1024 * 60 * SEC;

	fprintf(stderr, "gap\n");
	batch(&b, "h1");
	add(&b, "s_gap", "key_a", t0, 'r', 7 * SEC, 1024, 0, 1);
	run1(&b);
	batch(&b, "h1");
	add(&b, "s_gap", "key_a", t0 + 60 * SEC, 'r', 37 * SEC, 1024, 0, 1);
	run1(&b);
	check_totals("s_gap", 60, 0, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
}

/* A numeric sum of a usage_hourly column equal to want (which may pass a
 * bigint: the sum is compared in the database). */
static void check_sum128(const char *sandbox, const char *col, __int128 want)
{
	char w[48], *p = w + sizeof(w) - 1;
	unsigned __int128 v = (unsigned __int128)want;

	*p = '\0';
	do {
		*--p = (char)('0' + (int)(v % 10));
		v /= 10;
	} while (v);
	CHECK_I64(q64("SELECT (sum(%s) = %s::numeric)::int FROM usage_hourly"
		      " WHERE sandbox_id = '%s'",
		      col, p, sandbox),
		  1);
}

/* Samples days apart at the largest sizes a document takes: the whole
 * interval's memory (or storage) in MiB-µs is past a bigint, each hour's is
 * not. Every hour is billed, to the µ$; nothing is dropped as an overflow. */
static void test_long_gap(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	const int64_t big = INT64_C(16777216); /* 16 TiB in MiB */
	int64_t t0 = T("2026-11-01T05:17:23Z");
	int64_t run_w = 7 * 24 * HOUR + 31 * 60 * SEC + 7; /* 7 days 31 min 7 µs */
	int64_t cpu = 2 * 24 * HOUR + 123;
	int64_t pause_w = 8 * 24 * HOUR + 5 * SEC;
	__int128 mem = (__int128)big * run_w, sto = (__int128)big * pause_w;

	fprintf(stderr, "long gap\n");
	CHECK(mem > INT64_MAX && sto > INT64_MAX);
	batch(&b, "h_lg");
	add(&b, "s_lg_run", "key_a", t0, 'r', 5, big, 0, 1);
	add(&b, "s_lg_pause", "key_a", t0, 'p', 0, 1024, big, 1);
	add(&b, "s_lg_floor", "key_a", t0, 'r', 0, big, 0, 1);
	run1(&b);
	batch(&b, "h_lg");
	add(&b, "s_lg_run", "key_a", t0 + run_w, 'r', 5 + cpu, big, 0, 1);
	/* Used a hair under the floor over the whole: the floor is billed,
	 * exactly as for the interval as one, hour by hour. */
	add(&b, "s_lg_floor", "key_a", t0 + run_w, 'r', 50 * run_w / 1000, big, 0, 1);
	run1(&b);
	batch(&b, "h_lg");
	add(&b, "s_lg_pause", "key_a", t0 + pause_w, 'p', 0, 1024, big, 1);
	st = run1(&b);
	CHECK_I64(st.anomalies, 0);
	CHECK_I64(usum("s_lg_run", "running_usec"), run_w);
	CHECK_I64(usum("s_lg_run", "cpu_used_mcus"), cpu * 1000);
	/* Used (two sevenths of a vCPU) is above the 50-millicore floor all
	 * along, so billed is used. */
	CHECK_I64(usum("s_lg_run", "cpu_billed_mcus"), cpu * 1000);
	check_sum128("s_lg_run", "memory_mibus", mem);
	CHECK_I64(usum("s_lg_run", "cpu_micros"), micros((__int128)cpu * 1000, 25000, DIV_CPU));
	CHECK_I64(usum("s_lg_run", "memory_micros"), micros(mem, 7500, DIV_MIB));
	CHECK_I64(usum("s_lg_run", "total_micros"),
		  micros((__int128)cpu * 1000, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB));
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_lg_run'"),
		  7 * 24 + 1); /* 05:17 to 05:48 a week on */
	CHECK_I64(usum("s_lg_floor", "cpu_used_mcus"), 50 * run_w / 1000 * 1000);
	CHECK_I64(usum("s_lg_floor", "cpu_billed_mcus"), 50 * run_w);
	CHECK_I64(usum("s_lg_floor", "cpu_micros"), micros((__int128)50 * run_w, 25000, DIV_CPU));
	CHECK_I64(usum("s_lg_pause", "paused_usec"), pause_w);
	check_sum128("s_lg_pause", "storage_mibus", sto);
	CHECK_I64(usum("s_lg_pause", "storage_micros"), micros(sto, 100, DIV_MIB));
	CHECK_I64(q64("SELECT storage_cum_micros FROM sandbox_meter"
		      " WHERE sandbox_id = 's_lg_pause'"),
		  micros(sto, 100, DIV_MIB));
}

/* A long gap is an hourly row for every hour of it: a call that writes
 * many more rows than a round of samples gets more time for each statement
 * than the connection's statement timeout, instead of failing the same way
 * at every try. */
static void test_many_rows(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	const int64_t n = 30, hours = 90 * 24;
	int64_t t0 = T("2026-06-01T00:00:00Z");
	char id[32];

	fprintf(stderr, "many rows\n");
	batch(&b, "h_rows");
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "s_rows_%d", i);
		add(&b, id, "key_rows", t0, 'r', 0, 1024, 0, 1);
	}
	run1(&b);
	exec("SET statement_timeout = 100");
	batch(&b, "h_rows");
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "s_rows_%d", i);
		add(&b, id, "key_rows", t0 + hours * HOUR, 'r', hours * HOUR / 10, 1024, 0, 1);
	}
	st = run1(&b);
	exec("RESET statement_timeout");
	CHECK_I64(st.usage_rows, n * hours);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id LIKE 's_rows_%%'"),
		  n * hours);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly"
		      " WHERE sandbox_id LIKE 's_rows_%%'"),
		  n * hours * HOUR);
	CHECK_I64(
	    q64("SELECT sum(spent_micros) FROM key_day_ledger WHERE key_id = 'key_rows'"),
	    q64("SELECT sum(total_micros) FROM usage_hourly WHERE sandbox_id LIKE 's_rows_%%'"));
}

/* Calls that add to usage rows of an hour where the account has many
 * others: each row of a call is added to its own stored row (found by the
 * primary key) or inserted, the others left as they were. The statement
 * was once an UPDATE joined to usage_hourly, which the planner could run
 * through the (account_id, hour) index, comparing every row of the call
 * with every row of the hour: 20,000 rows over 185,000 ran past every
 * timeout (that size takes minutes to set up here, so it is not repeated;
 * see the commit). */
static void test_full_hour(void)
{
	enum { OLD = 2000, NEW = 500 };
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-07-01T10:00:00Z");
	char id[32];

	fprintf(stderr, "calls in a full hour\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
	     " SELECT 'unattributed', 's_full_' || g, NULL, 1, 512, 'running'"
	     " FROM generate_series(1, 2000) g");
	exec("INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id, day,"
	     " running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus,"
	     " storage_mibus, cpu_micros, memory_micros, storage_micros, total_micros,"
	     " cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
	     " SELECT 'unattributed', 's_full_' || g, '2026-07-01T10:00:00Z', 1, NULL,"
	     " '2026-07-01', 1, 0, 1, 1, 1, 0, 1, 1, 0, 2, 1, 1, 0"
	     " FROM generate_series(1, 2000) g");
	for (int k = 0; k < 3; k++) {
		batch(&b, "h_full");
		for (int i = 0; i < NEW; i++) {
			snprintf(id, sizeof(id), "s_full_new_%d", i);
			add(&b, id, NULL, t0 + k * 10 * SEC, 'r', k * SEC, 512, 0, 1);
		}
		/* The second call inserts the rows, the third adds to them. */
		st = run1(&b);
		CHECK_I64(st.usage_rows, k ? NEW : 0);
	}
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id LIKE 's_full_new_%%'"),
		  NEW);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly"
		      " WHERE sandbox_id LIKE 's_full_new_%%'"),
		  (int64_t)NEW * 20 * SEC);
	CHECK_I64(q64("SELECT sum(cpu_used_mcus) FROM usage_hourly"
		      " WHERE sandbox_id LIKE 's_full_new_%%'"),
		  (int64_t)NEW * 2 * SEC * 1000);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE account_id = 'unattributed'"
		      " AND hour = '2026-07-01T10:00:00Z' AND running_usec = 1"),
		  OLD);
}

/* A stopped sample is a reading as any, not a stop of the sandbox (only a
 * stop event is final, test_events): the interval after it bills nothing,
 * and a later sample that finds the VM running again is billed, in the same
 * call or a later one. So is what an event after it says: a wake's running
 * event (the control plane may wake a sandbox it did not stop), a pause's
 * storage. And a stale stopped reading dated before the create stops
 * nothing. */
static void test_stop_sample(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T03:10:00Z");
	int64_t used = 1000 * 30 * SEC, billed = used + 50 * 10 * SEC, mem = 1024 * 40 * SEC;
	int64_t sto = 512 * 10 * SEC;
	int64_t used28 = 1000 * 28 * SEC, mem28 = 1024 * 28 * SEC;
	int64_t used10 = 1000 * 10 * SEC, mem10 = 1024 * 10 * SEC, sto8 = 5120 * 8 * SEC;
	int64_t used20 = 1000 * 20 * SEC, mem20 = 1024 * 20 * SEC;

	fprintf(stderr, "stopped sample\n");
	/* 0-20 running, 20-30 stopped (its CPU not billed), 30-50 running
	 * (40-50 at the floor), 50-60 paused. */
	batch(&b, "h_st");
	add(&b, "s_stop_smp", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_stop_smp", "key_a", t0 + 10 * SEC, 'r', 10 * SEC, 1024, 0, 1);
	add(&b, "s_stop_smp", "key_a", t0 + 20 * SEC, 's', 20 * SEC, 1024, 0, 1);
	add(&b, "s_stop_smp", "key_a", t0 + 30 * SEC, 'r', 30 * SEC, 1024, 0, 1);
	run1(&b);
	batch(&b, "h_st");
	add(&b, "s_stop_smp", "key_a", t0 + 40 * SEC, 'r', 40 * SEC, 1024, 0, 1);
	add(&b, "s_stop_smp", "key_a", t0 + 50 * SEC, 'p', 40 * SEC, 1024, 512, 1);
	add(&b, "s_stop_smp", "key_a", t0 + 60 * SEC, 'p', 40 * SEC, 1024, 512, 1);
	run1(&b);
	check_totals("s_stop_smp", 40, 10, used, billed, mem, sto, micros(billed, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), micros(sto, 100, DIV_MIB));

	/* Stopped at 10 s by a sample, then woken at 12 s (running event)
	 * and sampled running: 0-10 and 12-30; or paused at 12 s: 0-10,
	 * then the pause's snapshot from 12 to 20. */
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES"
	     " ('acct_1', 's_stop_run', 'key_a', 1, 1024, 5120, 'running', " MADE "),"
	     " ('acct_1', 's_stop_pau', 'key_a', 1, 1024, 5120, 'running', " MADE ")");
	batch(&b, "h_st");
	add(&b, "s_stop_run", NULL, t0, 'r', 0, 1024, 5120, 1);
	add(&b, "s_stop_run", NULL, t0 + 10 * SEC, 's', 10 * SEC, 1024, 5120, 1);
	add(&b, "s_stop_pau", NULL, t0, 'r', 0, 1024, 5120, 1);
	add(&b, "s_stop_pau", NULL, t0 + 10 * SEC, 's', 10 * SEC, 1024, 5120, 1);
	run1(&b);
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_stop_run', 'running', '2026-11-30T03:10:12Z'),"
	     " ('acct_1', 's_stop_pau', 'paused', '2026-11-30T03:10:12Z')");
	batch(&b, "h_st");
	add(&b, "s_stop_run", NULL, t0 + 20 * SEC, 'r', 18 * SEC, 1024, 5120, 1);
	add(&b, "s_stop_run", NULL, t0 + 30 * SEC, 'r', 28 * SEC, 1024, 5120, 1);
	add(&b, "s_stop_pau", NULL, t0 + 20 * SEC, 'p', 10 * SEC, 1024, 5120, 1);
	run1(&b);
	check_totals("s_stop_run", 28, 0, used28, used28, mem28, 0, micros(used28, 25000, DIV_CPU),
		     micros(mem28, 7500, DIV_MIB), 0);
	check_totals("s_stop_pau", 10, 8, used10, used10, mem10, sto8,
		     micros(used10, 25000, DIV_CPU), micros(mem10, 7500, DIV_MIB),
		     micros(sto8, 100, DIV_MIB));

	/* Created at t0, running from its create (event); its host's first
	 * reading, stale, says stopped 5 s before: billed from t0 on. */
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES"
	     " ('acct_1', 's_stop_old', 'key_a', 1, 1024, 5120, 'running',"
	     " '2026-11-30T03:10:00Z')");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_stop_old', 'running', '2026-11-30T03:10:00Z')");
	batch(&b, "h_st");
	add(&b, "s_stop_old", NULL, t0 - 5 * SEC, 's', 0, 1024, 5120, 1);
	add(&b, "s_stop_old", NULL, t0 + 10 * SEC, 'r', 10 * SEC, 1024, 5120, 1);
	run1(&b);
	batch(&b, "h_st");
	add(&b, "s_stop_old", NULL, t0 + 20 * SEC, 'r', 20 * SEC, 1024, 5120, 1);
	run1(&b);
	check_totals("s_stop_old", 20, 0, used20, used20, mem20, 0, micros(used20, 25000, DIV_CPU),
		     micros(mem20, 7500, DIV_MIB), 0);
}

/* Pause and stop events inside intervals: billing changes exactly there. */
static void test_events(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T01:30:00Z");
	int64_t used = 1000 * 4 * SEC, mem = 2048 * 4 * SEC, sto = 5120 * 16 * SEC;
	int64_t s_used = 1000 * 2 * SEC, s_mem = 1024 * 3 * SEC;

	fprintf(stderr, "pause and stop events\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_pause', 'key_a', 2, 2048, "
	     "5120, 'running', " MADE "),"
	     " ('acct_1', 's_stop', 'key_a', 1, 1024, 0, 'running', " MADE ")");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_pause', 'paused', '2026-11-30T01:30:04Z'),"
	     " ('acct_1', 's_stop', 'stopped', '2026-11-30T01:30:03Z')");
	batch(&b, "h2");
	add(&b, "s_pause", NULL, t0, 'r', 0, 2048, 5120, 2);
	add(&b, "s_stop", NULL, t0, 'r', 0, 1024, 0, 1);
	run1(&b);
	batch(&b, "h2");
	/* The agent still saw CPU time it cannot have used after the events:
	 * 4 s in the first 4 s (2 vCPUs), 2 s in the first 3 s. */
	add(&b, "s_pause", NULL, t0 + 10 * SEC, 'p', 4 * SEC, 2048, 5120, 2);
	add(&b, "s_stop", NULL, t0 + 10 * SEC, 's', 2 * SEC, 1024, 0, 1);
	run1(&b);
	batch(&b, "h2");
	add(&b, "s_pause", NULL, t0 + 20 * SEC, 'p', 4 * SEC, 2048, 5120, 2);
	add(&b, "s_stop", NULL, t0 + 20 * SEC, 's', 2 * SEC, 1024, 0, 1);
	run1(&b);
	check_totals("s_pause", 4, 16, used, used, mem, sto, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), micros(sto, 100, DIV_MIB));
	check_totals("s_stop", 3, 0, s_used, s_used, s_mem, 0, micros(s_used, 25000, DIV_CPU),
		     micros(s_mem, 7500, DIV_MIB), 0);
}

/* Events that meet a sample: a pause at a sample's own time (delivered
 * before the interval it ends is metered, or after) starts the next
 * interval paused, whatever that sample said; a stop is final, so a
 * running event and running samples after it bill nothing. */
static void test_events_edges(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T02:30:00Z");

	fprintf(stderr, "events at a sample's time, and after a stop\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 'e_late', 'key_a', 1, 1024, 5120, "
	     "'running', " MADE "),"
	     " ('acct_1', 'e_early', 'key_a', 1, 1024, 5120, 'running', " MADE "),"
	     " ('acct_1', 'e_final', 'key_a', 1, 1024, 0, 'running', " MADE ")");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 'e_early', 'paused', '2026-11-30T02:30:10Z'),"
	     " ('acct_1', 'e_final', 'stopped', '2026-11-30T02:30:05Z'),"
	     " ('acct_1', 'e_final', 'running', '2026-11-30T02:30:08Z')");
	for (int i = 0; i < 4; i++) {
		static const int64_t at[] = {0, 10, 70, 80};
		static const char st[] = {'r', 'r', 'p', 'p'};

		if (i == 2)
			exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
			     " VALUES ('acct_1', 'e_late', 'paused', '2026-11-30T02:30:10Z')");
		batch(&b, "h2");
		add(&b, "e_late", NULL, t0 + at[i] * SEC, st[i], 0, 1024, 5120, 1);
		add(&b, "e_early", NULL, t0 + at[i] * SEC, st[i], 0, 1024, 5120, 1);
		add(&b, "e_final", NULL, t0 + at[i] * SEC, 'r', 0, 1024, 0, 1);
		run1(&b);
	}
	CHECK_I64(usum("e_late", "running_usec"), 10 * SEC);
	CHECK_I64(usum("e_late", "paused_usec"), 70 * SEC);
	CHECK_I64(usum("e_early", "running_usec"), 10 * SEC);
	CHECK_I64(usum("e_early", "paused_usec"), 70 * SEC);
	CHECK_I64(usum("e_final", "running_usec"), 5 * SEC);
	CHECK_I64(usum("e_final", "paused_usec"), 0);
	CHECK_I64(usum("e_final", "total_micros"),
		  micros(50 * 5 * SEC, 25000, DIV_CPU) + micros(1024 * 5 * SEC, 7500, DIV_MIB));
}

/* A cgroup says nothing of its VM's state (a paused VM keeps its cgroup):
 * its samples take the state the lifecycle events give. A pause and a
 * resume bill storage between them, whether the samples come one a call
 * or all in one; a pause recorded after samples past it were metered
 * makes the next sample paused; a pause before the first sample makes
 * that sample paused, and one at a sample's time that sample. A sandbox
 * that moves from an agent's host (which said running after the pause: a
 * wake with no event) to a cgroup's is billed the same in one call or in
 * several. The samples are stored in those states. */
static void test_cgroup_state(void)
{
	static const char *const both[] = {"c_pause", "c_one"};
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T05:30:00Z");
	int64_t billed = 50 * 30 * SEC, mem = 2048 * 30 * SEC, sto = 5120 * 20 * SEC;
	char states[256];

	fprintf(stderr, "cgroup samples: the state from the events\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES"
	     " ('acct_1', 'c_pause', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_one', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_late', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_first', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_at', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_move', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_move1', 'key_a', 2, 2048, 5120, 'running', " MADE "),"
	     " ('acct_1', 'c_pre', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z'),"
	     " ('acct_1', 'c_pre1', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z'),"
	     " ('acct_1', 'c_made', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:00Z'),"
	     " ('acct_1', 'a_pre', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z'),"
	     " ('acct_1', 'a_pre1', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z'),"
	     " ('acct_1', 'a_at', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z'),"
	     " ('acct_1', 'a_at1', 'key_a', 2, 2048, 5120, 'running', '2026-11-30T05:30:25Z')");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 'c_pause', 'paused', '2026-11-30T05:30:15Z'),"
	     " ('acct_1', 'c_pause', 'running', '2026-11-30T05:30:35Z'),"
	     " ('acct_1', 'c_one', 'paused', '2026-11-30T05:30:15Z'),"
	     " ('acct_1', 'c_one', 'running', '2026-11-30T05:30:35Z'),"
	     " ('acct_1', 'c_first', 'paused', '2026-11-30T05:29:55Z'),"
	     " ('acct_1', 'c_at', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'c_move', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'c_move1', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'c_pre', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'c_pre1', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'c_made', 'paused', '2026-11-30T05:29:55Z'),"
	     " ('acct_1', 'a_pre', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'a_pre1', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'a_at', 'paused', '2026-11-30T05:30:10Z'),"
	     " ('acct_1', 'a_at1', 'paused', '2026-11-30T05:30:10Z')");
	batch(&b, "cg1");
	for (int i = 0; i <= 5; i++)
		add_cgroup(&b, "c_one", t0 + i * 10 * SEC, 0);
	run1(&b);
	/* The move in one call: the agent's host, then the cgroup's. */
	{
		struct sample_batch two[2];

		batch(&two[0], "ag1");
		add(&two[0], "c_move1", NULL, t0, 'r', 0, 2048, 5120, 2);
		add(&two[0], "c_move1", NULL, t0 + 20 * SEC, 'r', 0, 2048, 5120, 2);
		batch(&two[1], "cg1");
		add_cgroup(&two[1], "c_move1", t0 + 30 * SEC, 0);
		run(two, 2);
		sample_batch_release(&two[0]);
		sample_batch_release(&two[1]);
	}
	for (int i = 0; i <= 5; i++) {
		if (i == 3)
			exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
			     " VALUES ('acct_1', 'c_late', 'paused', '2026-11-30T05:30:05Z')");
		batch(&b, "cg1");
		add_cgroup(&b, "c_pause", t0 + i * 10 * SEC, 0);
		if (i <= 4)
			add_cgroup(&b, "c_late", t0 + i * 10 * SEC, 0);
		if (i <= 1)
			add_cgroup(&b, "c_first", t0 + i * 10 * SEC, 0);
		if (i <= 2)
			add_cgroup(&b, "c_at", t0 + i * 10 * SEC, 0);
		run1(&b);
	}
	/* Created at 25 s, paused at 10 s (so from 25 s), sampled at 0, 20
	 * and 40 s: in one call, and in two cut after 20 s. */
	batch(&b, "cg1");
	for (int i = 0; i < 3; i++)
		add_cgroup(&b, "c_pre1", t0 + i * 20 * SEC, 0);
	run1(&b);
	batch(&b, "cg1");
	add_cgroup(&b, "c_pre", t0, 0);
	add_cgroup(&b, "c_pre", t0 + 20 * SEC, 0);
	run1(&b);
	batch(&b, "cg1");
	add_cgroup(&b, "c_pre", t0 + 40 * SEC, 0);
	run1(&b);
	/* An agent's running samples at 0, 25 (the create) and 35 s, the
	 * pause before the create: [25, 35) is paused, in one call and in
	 * two cut at the create. */
	batch(&b, "ag1");
	add(&b, "a_pre1", NULL, t0, 'r', 0, 2048, 5120, 2);
	add(&b, "a_pre1", NULL, t0 + 25 * SEC, 'r', 0, 2048, 5120, 2);
	add(&b, "a_pre1", NULL, t0 + 35 * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	batch(&b, "ag1");
	add(&b, "a_pre", NULL, t0, 'r', 0, 2048, 5120, 2);
	add(&b, "a_pre", NULL, t0 + 25 * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	batch(&b, "ag1");
	add(&b, "a_pre", NULL, t0 + 35 * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	/* The same with the first sample at the create (25, 35 and 45 s):
	 * the pause counts as at it, in one call and in two. */
	batch(&b, "ag1");
	for (int i = 0; i < 3; i++)
		add(&b, "a_at1", NULL, t0 + (25 + i * 10) * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	batch(&b, "ag1");
	add(&b, "a_at", NULL, t0 + 25 * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	batch(&b, "ag1");
	add(&b, "a_at", NULL, t0 + 35 * SEC, 'r', 0, 2048, 5120, 2);
	add(&b, "a_at", NULL, t0 + 45 * SEC, 'r', 0, 2048, 5120, 2);
	run1(&b);
	/* Created at 0 s, paused before: a first sample at its create alone
	 * in its call is paused. */
	for (int i = 0; i < 3; i++) {
		batch(&b, "cg1");
		add_cgroup(&b, "c_made", t0 + i * 10 * SEC, 0);
		run1(&b);
	}
	/* The move in three calls. */
	for (int i = 0; i < 3; i++) {
		batch(&b, i < 2 ? "ag1" : "cg1");
		if (i < 2)
			add(&b, "c_move", NULL, t0 + i * 20 * SEC, 'r', 0, 2048, 5120, 2);
		else
			add_cgroup(&b, "c_move", t0 + 30 * SEC, 0);
		run1(&b);
	}
	for (size_t i = 0; i < 2; i++) {
		check_totals(both[i], 30, 20, 0, billed, mem, sto, micros(billed, 25000, DIV_CPU),
			     micros(mem, 7500, DIV_MIB), micros(sto, 100, DIV_MIB));
		CHECK_STR(states_of(states, sizeof(states), both[i]),
			  "running,running,paused,paused,running,running");
	}
	/* The late pause: [0, 30) was metered running, up to the sample
	 * after it came. */
	CHECK_I64(usum("c_late", "running_usec"), 30 * SEC);
	CHECK_I64(usum("c_late", "paused_usec"), 10 * SEC);
	CHECK_I64(usum("c_late", "storage_mibus"), 5120 * 10 * SEC);
	CHECK_STR(states_of(states, sizeof(states), "c_late"),
		  "running,running,running,paused,paused");
	CHECK_STR(states_of(states, sizeof(states), "c_at"), "running,paused,paused");
	CHECK_I64(usum("c_at", "running_usec"), 10 * SEC);
	CHECK_I64(usum("c_at", "paused_usec"), 10 * SEC);
	for (int i = 0; i < 2; i++) {
		const char *m = i ? "c_pre1" : "c_pre";

		CHECK_I64(usum(m, "running_usec"), 0);
		CHECK_I64(usum(m, "paused_usec"), 15 * SEC);
		CHECK_I64(usum(m, "total_micros"), micros(5120 * 15 * SEC, 100, DIV_MIB));
	}
	for (int i = 0; i < 2; i++) {
		const char *m = i ? "a_pre1" : "a_pre";
		const char *a = i ? "a_at1" : "a_at";

		CHECK_I64(usum(m, "running_usec"), 0);
		CHECK_I64(usum(m, "paused_usec"), 10 * SEC);
		/* [25, 35) paused by the pause at the create, [35, 45) as the
		 * agent's sample at 35 s says. */
		CHECK_I64(usum(a, "running_usec"), 10 * SEC);
		CHECK_I64(usum(a, "paused_usec"), 10 * SEC);
	}
	CHECK_STR(states_of(states, sizeof(states), "c_made"), "paused,paused,paused");
	CHECK_I64(usum("c_made", "running_usec"), 0);
	CHECK_I64(usum("c_made", "paused_usec"), 20 * SEC);
	/* The move: [0, 10) running, [10, 20) paused by the event, [20, 30)
	 * from the agent's running sample (the wake it saw), the cgroup's
	 * sample paused as the events say. */
	for (int i = 0; i < 2; i++) {
		const char *m = i ? "c_move1" : "c_move";

		CHECK_I64(usum(m, "running_usec"), 20 * SEC);
		CHECK_I64(usum(m, "paused_usec"), 10 * SEC);
		CHECK_STR(states_of(states, sizeof(states), m), "running,running,paused");
	}
	CHECK_STR(states_of(states, sizeof(states), "c_first"), "paused,paused");
	CHECK_I64(usum("c_first", "running_usec"), 0);
	CHECK_I64(usum("c_first", "paused_usec"), 10 * SEC);
	CHECK_I64(usum("c_first", "total_micros"), micros(5120 * 10 * SEC, 100, DIV_MIB));
}

/* More CPU than vcpus × Δwall: capped, counted. */
static void test_cap(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T01:40:00Z");
	int64_t used = 1000 * 10 * SEC, mem = 1024 * 10 * SEC;

	fprintf(stderr, "anomaly cap\n");
	batch(&b, "h1");
	add(&b, "s_cap", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_cap", "key_a", t0 + 10 * SEC, 'r', 25 * SEC, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.cpu_capped, 1);
	CHECK_I64(st.anomalies, 1);
	check_totals("s_cap", 10, 0, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
}

/* The same batch twice, and a crash-like replay: nothing changes anywhere. */
static void test_duplicate_batch(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	char before[64], after[64];
	int64_t t0 = T("2026-11-30T01:50:00Z");

	fprintf(stderr, "duplicate batch\n");
	batch(&b, "h3");
	add(&b, "s_dup", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_dup", "key_a", t0 + 10 * SEC, 'r', 3 * SEC, 1024, 0, 1);
	add(&b, "s_dup2", NULL, t0 + 10 * SEC, 'p', 0, 1024, 100, 1);
	st = run(&b, 1);
	CHECK_I64(st.accepted, 3);
	dump(before, sizeof(before));
	st = run(&b, 1);
	CHECK_I64(st.accepted, 0);
	CHECK_I64(st.ignored, 3);
	CHECK_I64(st.micros, 0);
	dump(after, sizeof(after));
	CHECK(before[0] != '\0');
	CHECK_STR(after, before);
	sample_batch_release(&b);
}

/* Samples out of order and duplicated, within a call and across calls,
 * give exactly what the same samples in order give. */
static void test_out_of_order(void)
{
	struct sample_batch b[3];
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T01:55:00Z");
	static const char *const cols[] = {"running_usec", "cpu_used_mcus", "cpu_billed_mcus",
					   "memory_mibus", "cpu_micros",    "memory_micros",
					   "total_micros"};

	fprintf(stderr, "out of order and duplicated samples\n");
	/* Reference, in order. */
	batch(&b[0], "h4");
	add(&b[0], "s_ord", "key_a", t0, 'r', 0, 512, 0, 1);
	add(&b[0], "s_ord", "key_a", t0 + 10 * SEC, 'r', 1 * SEC, 512, 0, 1);
	add(&b[0], "s_ord", "key_a", t0 + 20 * SEC, 'r', 9 * SEC, 512, 0, 1);
	add(&b[0], "s_ord", "key_a", t0 + 30 * SEC, 'r', 9 * SEC + 1, 512, 0, 1);
	run1(&b[0]);
	/* Scrambled over three batches of one call, with duplicates. */
	batch(&b[0], "h5");
	batch(&b[1], "h5");
	batch(&b[2], "h6");
	add(&b[0], "s_ooo", "key_a", t0 + 20 * SEC, 'r', 9 * SEC, 512, 0, 1);
	add(&b[0], "s_ooo", "key_a", t0, 'r', 0, 512, 0, 1);
	add(&b[1], "s_ooo", "key_a", t0 + 10 * SEC, 'r', 1 * SEC, 512, 0, 1);
	add(&b[1], "s_ooo", "key_a", t0 + 20 * SEC, 'r', 9 * SEC, 512, 0, 1);
	add(&b[2], "s_ooo", "key_a", t0, 'r', 0, 512, 0, 1);
	st = run(b, 3);
	CHECK_I64(st.accepted, 3);
	CHECK_I64(st.ignored, 2);
	for (int i = 0; i < 3; i++)
		sample_batch_release(&b[i]);
	/* Later calls: one before the watermark (ignored), then the next one. */
	batch(&b[0], "h5");
	add(&b[0], "s_ooo", "key_a", t0 + 15 * SEC, 'r', 5 * SEC, 512, 0, 1);
	st = run1(&b[0]);
	CHECK_I64(st.ignored, 1);
	CHECK_I64(st.accepted, 0);
	batch(&b[0], "h5");
	add(&b[0], "s_ooo", "key_a", t0 + 30 * SEC, 'r', 9 * SEC + 1, 512, 0, 1);
	add(&b[0], "s_ooo", "key_a", t0 + 10 * SEC, 'r', 1 * SEC, 512, 0, 1);
	st = run1(&b[0]);
	CHECK_I64(st.accepted, 1);
	CHECK_I64(st.ignored, 1);
	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
		int64_t want = usum("s_ord", cols[i]);
		CHECK(want > 0);
		CHECK_I64(usum("s_ooo", cols[i]), want);
	}
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 's_ooo'"), 4);
}

/* Late samples of yesterday land in yesterday's hour, day and partition; an
 * interval across UTC midnight is split there. */
static void test_late(void)
{
	struct sample_batch b;
	char part[64];
	int64_t t = T("2026-11-29T23:59:40Z");

	fprintf(stderr, "late samples\n");
	batch(&b, "h7");
	add(&b, "s_late", "key_a", t, 'r', 0, 1024, 0, 1);
	add(&b, "s_late", "key_a", t + 10 * SEC, 'r', 1 * SEC, 1024, 0, 1);
	add(&b, "s_late", "key_a", t + 30 * SEC, 'r', 3 * SEC, 1024, 0, 1);
	run1(&b);
	/* 10 s + 10 s on the 29th, 10 s on the 30th; the CPU of the split
	 * interval (2 s over 20 s) in proportion. */
	CHECK_I64(urow("s_late", "2026-11-29T23:00:00Z", "2026-11-29", "running_usec"), 20 * SEC);
	CHECK_I64(urow("s_late", "2026-11-29T23:00:00Z", "2026-11-29", "cpu_used_mcus"),
		  1000 * 2 * SEC);
	CHECK_I64(urow("s_late", "2026-11-30T00:00:00Z", "2026-11-30", "running_usec"), 10 * SEC);
	CHECK_I64(urow("s_late", "2026-11-30T00:00:00Z", "2026-11-30", "cpu_used_mcus"),
		  1000 * 1 * SEC);
	qtext(part, sizeof(part),
	      "SELECT string_agg(DISTINCT tableoid::regclass::text, ',') FROM samples"
	      " WHERE sandbox_id = 's_late' AND sampled_at < '2026-11-30'");
	CHECK_STR(part, "samples_20261129");
	qtext(part, sizeof(part),
	      "SELECT string_agg(DISTINCT tableoid::regclass::text, ',') FROM samples"
	      " WHERE sandbox_id = 's_late' AND sampled_at >= '2026-11-30'");
	CHECK_STR(part, "samples_20261130");
	/* The ledger of each day has that day's part. */
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger WHERE key_id = 'key_a'"
		      " AND day = '2026-11-29'"),
		  1);
}

/* One interval across an hour and the key's local midnight. */
static void test_kolkata(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-29T18:29:00Z"), t1 = T("2026-11-29T19:00:30Z");
	int64_t w = t1 - t0;	  /* 1890 s */
	int64_t cpu = w * 3 / 10; /* 0.3 cores */
	int64_t parts[3] = {60 * SEC, 1800 * SEC, 30 * SEC};
	const char *hours[3] = {"2026-11-29T18:00:00Z", "2026-11-29T18:00:00Z",
				"2026-11-29T19:00:00Z"};
	const char *days[3] = {"2026-11-29", "2026-11-30", "2026-11-30"};
	__int128 qc = 0, qm = 0;
	int64_t day_total[2] = {0, 0};

	fprintf(stderr, "Asia/Kolkata midnight\n");
	batch(&b, "h8");
	add(&b, "s_ist", "key_ist", t0, 'r', 0, 4096, 0, 2);
	add(&b, "s_ist", "key_ist", t1, 'r', cpu, 4096, 0, 2);
	run1(&b);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_ist'"), 3);
	for (int i = 0; i < 3; i++) {
		int64_t used = 1000 * (cpu * parts[i] / w);
		int64_t cm, mm;
		cm = micros(qc + used, 25000, DIV_CPU) - micros(qc, 25000, DIV_CPU);
		mm = micros(qm + (__int128)4096 * parts[i], 7500, DIV_MIB) -
		     micros(qm, 7500, DIV_MIB);
		qc += used;
		qm += (__int128)4096 * parts[i];
		CHECK_I64(urow("s_ist", hours[i], days[i], "running_usec"), parts[i]);
		CHECK_I64(urow("s_ist", hours[i], days[i], "cpu_used_mcus"), used);
		CHECK_I64(urow("s_ist", hours[i], days[i], "cpu_billed_mcus"), used);
		CHECK_I64(urow("s_ist", hours[i], days[i], "memory_mibus"), 4096 * parts[i]);
		CHECK_I64(urow("s_ist", hours[i], days[i], "cpu_micros"), cm);
		CHECK_I64(urow("s_ist", hours[i], days[i], "memory_micros"), mm);
		day_total[i == 0 ? 0 : 1] += cm + mm;
	}
	CHECK_I64(usum("s_ist", "running_usec"), w);
	CHECK_I64(usum("s_ist", "cpu_used_mcus"), 1000 * cpu);
	CHECK_I64(usum("s_ist", "total_micros"), micros((__int128)1000 * cpu, 25000, DIV_CPU) +
						     micros((__int128)4096 * w, 7500, DIV_MIB));
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_ist'"
		      " AND day = '2026-11-29'"),
		  day_total[0]);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_ist'"
		      " AND day = '2026-11-30'"),
		  day_total[1]);
}

/* America/New_York: DST ends on 2026-11-01 (a 25-hour day) and begins on
 * 2026-03-08 (a 23-hour day). One long interval across each. */
static void test_new_york(void)
{
	struct sample_batch b;
	int64_t a0 = T("2026-11-01T03:30:00Z"), a1 = T("2026-11-02T05:30:00Z");
	int64_t s0 = T("2026-03-08T04:30:00Z"), s1 = T("2026-03-09T04:30:00Z");

	fprintf(stderr, "America/New_York across DST\n");
	batch(&b, "h9");
	add(&b, "s_ny", "key_ny", a0, 'r', 0, 1024, 0, 1);
	add(&b, "s_ny", "key_ny", a1, 'r', (a1 - a0) / 2, 1024, 0, 1);
	add(&b, "s_ny2", "key_ny", s0, 'r', 0, 1024, 0, 1);
	add(&b, "s_ny2", "key_ny", s1, 'r', (s1 - s0) / 2, 1024, 0, 1);
	run1(&b);
	/* Local midnights: Oct 31/Nov 1 at 04:00Z (EDT), Nov 1/2 at 05:00Z (EST). */
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny'"
		      " AND day = '2026-10-31'"),
		  30 * 60 * SEC);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny'"
		      " AND day = '2026-11-01'"),
		  25 * HOUR);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny'"
		      " AND day = '2026-11-02'"),
		  30 * 60 * SEC);
	CHECK_I64(usum("s_ny", "running_usec"), a1 - a0);
	CHECK_I64(usum("s_ny", "cpu_used_mcus"), 1000 * ((a1 - a0) / 2));
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_ny'"), 27);
	CHECK_I64(usum("s_ny", "total_micros"),
		  micros((__int128)1000 * ((a1 - a0) / 2), 25000, DIV_CPU) +
		      micros((__int128)1024 * (a1 - a0), 7500, DIV_MIB));
	/* Spring: Mar 7/8 at 05:00Z (EST), Mar 8/9 at 04:00Z (EDT). */
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny2'"
		      " AND day = '2026-03-07'"),
		  30 * 60 * SEC);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny2'"
		      " AND day = '2026-03-08'"),
		  23 * HOUR);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_ny2'"
		      " AND day = '2026-03-09'"),
		  30 * 60 * SEC);
	/* Each day's ledger = the sum of that day's usage rows. */
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger l WHERE key_id = 'key_ny'"
		      " AND spent_micros <> (SELECT sum(total_micros) FROM usage_hourly u"
		      "  WHERE u.key_id = l.key_id AND u.day = l.day)"),
		  0);
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger WHERE key_id = 'key_ny'"), 6);
}

/* Pacific/Apia skipped 2011-12-30 (from UTC-10 to UTC+14): its day starts
 * as the 31st does, a day of no time. An interval across it is metered on
 * the 29th and the 31st, 24 hours each, and nothing on the 30th. The call
 * was refused whole ("day starts ... not consecutive"), and with it every
 * later sample of the sandbox (each interval from its last one) and every
 * sandbox of its document. */
static void test_apia(void)
{
	struct sample_batch b;
	int64_t t0 = T("2011-12-29T10:00:00Z"), t1 = T("2011-12-31T10:00:00Z");

	fprintf(stderr, "Pacific/Apia's skipped day\n");
	batch(&b, "h9a");
	add(&b, "s_apia", "key_apia", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_apia", "key_apia", t1, 'r', (t1 - t0) / 4, 1024, 0, 1);
	run1(&b);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_apia'"
		      " AND day = '2011-12-29'"),
		  24 * HOUR);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_apia'"
		      " AND day = '2011-12-30'"),
		  0);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 's_apia'"
		      " AND day = '2011-12-31'"),
		  24 * HOUR);
	CHECK_I64(usum("s_apia", "total_micros"),
		  micros((__int128)1000 * ((t1 - t0) / 4), 25000, DIV_CPU) +
		      micros((__int128)1024 * (t1 - t0), 7500, DIV_MIB));
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger l WHERE key_id = 'key_apia'"
		      " AND spent_micros <> (SELECT sum(total_micros) FROM usage_hourly u"
		      "  WHERE u.key_id = l.key_id AND u.day = l.day)"),
		  0);
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger WHERE key_id = 'key_apia'"), 2);
}

/* A price-book version taking effect in the middle of an interval. */
static void test_price_change(void)
{
	struct sample_batch b;
	int64_t t0 = T("2027-06-01T12:00:00Z");
	int64_t v2;
	/* v1 part: 5 s, 0.5 s CPU; v2 part: 5 s, 0.5 s CPU, then 10 s idle. */
	int64_t c1 = 1000 * 500000, m1 = 1024 * 5 * SEC;
	int64_t c2 = 1000 * 500000 + 100 * 10 * SEC, m2 = 1024 * 15 * SEC;

	fprintf(stderr, "price change mid-interval\n");
	exec("INSERT INTO price_book (effective_from, cpu_micros_per_vcpu_hour,"
	     " memory_micros_per_gib_hour, storage_micros_per_gib_hour, floor_millicores)"
	     " VALUES ('2027-06-01T12:00:05Z', 50000, 15000, 200, 100)");
	v2 = q64("SELECT version FROM price_book WHERE effective_from = '2027-06-01T12:00:05Z'");
	batch(&b, "h10");
	add(&b, "s_price", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_price", "key_a", t0 + 10 * SEC, 'r', 1 * SEC, 1024, 0, 1);
	add(&b, "s_price", "key_a", t0 + 20 * SEC, 'r', 1 * SEC, 1024, 0, 1);
	run1(&b);
	CHECK_I64(q64("SELECT cpu_billed_mcus FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = 1"),
		  c1);
	CHECK_I64(q64("SELECT cpu_micros FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = 1"),
		  micros(c1, 25000, DIV_CPU));
	CHECK_I64(q64("SELECT memory_micros FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = 1"),
		  micros(m1, 7500, DIV_MIB));
	CHECK_I64(q64("SELECT cpu_billed_mcus FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = %" PRId64,
		      v2),
		  c2);
	CHECK_I64(q64("SELECT cpu_micros FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = %" PRId64,
		      v2),
		  micros(c2, 50000, DIV_CPU));
	CHECK_I64(q64("SELECT memory_micros FROM usage_hourly WHERE sandbox_id = 's_price'"
		      " AND price_version = %" PRId64,
		      v2),
		  micros(m2, 15000, DIV_MIB));
	CHECK_I64(q64("SELECT price_version FROM sandbox_meter WHERE sandbox_id = 's_price'"), v2);

	/* 7 µs of CPU over 3 s cut at its first second: a third each second,
	 * in millicore-µs as an hour's cut takes it (2,333 and 4,667), not in
	 * whole µs (2,000 and 5,000), which moved up to a CPU-µs to the
	 * later version: at a rate of 10^12 µ$ a vCPU-hour, 277 µ$. */
	batch(&b, "h10");
	add(&b, "s_price_odd", "key_a", t0 + 4 * SEC, 'r', 0, 1024, 0, 1);
	add(&b, "s_price_odd", "key_a", t0 + 7 * SEC, 'r', 7, 1024, 0, 1);
	run1(&b);
	CHECK_I64(q64("SELECT cpu_used_mcus FROM usage_hourly WHERE sandbox_id = 's_price_odd'"
		      " AND price_version = 1"),
		  2333);
	CHECK_I64(q64("SELECT cpu_used_mcus FROM usage_hourly WHERE sandbox_id = 's_price_odd'"
		      " AND price_version = %" PRId64,
		      v2),
		  4667);
}

/* Without a sandbox row or a known key: metered under 'unattributed'. And
 * sizes a cgroup cannot know come from the sandbox row, or the defaults. */
static void test_unattributed(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T00:10:00Z");
	int64_t used = 1000 * 2 * SEC;

	fprintf(stderr, "unattributed and unknown sizes\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_cg_known', 'key_a', 2, 2048, "
	     "0, 'running', " MADE ")");
	batch(&b, "h11");
	add(&b, "s_orphan", NULL, t0, 'r', 0, 512, 0, 1);
	add(&b, "s_orphan", NULL, t0 + 10 * SEC, 'r', 2 * SEC, 512, 0, 1);
	add(&b, "s_badkey", "no_such_key", t0, 'r', 0, 512, 0, 1);
	add(&b, "s_badkey", "no_such_key", t0 + 10 * SEC, 'r', 2 * SEC, 512, 0, 1);
	/* A read_only key changes nothing, a revoked one nothing more: a
	 * host naming either makes no sandbox of theirs. */
	add(&b, "s_rokey", "key_ro", t0, 'r', 0, 512, 0, 1);
	add(&b, "s_rokey", "key_ro", t0 + 10 * SEC, 'r', 2 * SEC, 512, 0, 1);
	add(&b, "s_revkey", "key_rev", t0, 'r', 0, 512, 0, 1);
	add(&b, "s_revkey", "key_rev", t0 + 10 * SEC, 'r', 2 * SEC, 512, 0, 1);
	add(&b, "s_cg_known", NULL, t0, 'r', 0, SAMPLE_UNKNOWN, SAMPLE_UNKNOWN, 0);
	add(&b, "s_cg_known", NULL, t0 + 10 * SEC, 'r', 2 * SEC, SAMPLE_UNKNOWN, SAMPLE_UNKNOWN, 0);
	add(&b, "s_cg_new", NULL, t0, 'r', 0, SAMPLE_UNKNOWN, SAMPLE_UNKNOWN, 0);
	add(&b, "s_cg_new", NULL, t0 + 10 * SEC, 'r', 25 * SEC, SAMPLE_UNKNOWN, SAMPLE_UNKNOWN, 0);
	st = run1(&b);
	CHECK_I64(st.unattributed, 10);
	CHECK_I64(st.new_sandboxes, 5);
	/* A key_id that is no key (or not one that takes sandboxes) is an
	 * anomaly, once, when it makes the sandbox's row; no key_id at all
	 * is not. */
	CHECK_I64(st.unknown_keys, 3);
	CHECK_I64(st.anomalies, 3);
	CHECK(metrics_value("meter_ingest_anomalies_total", "kind=\"unknown_key\"") >= 3);
	CHECK(metrics_value("meter_ingest_new_sandboxes_total", NULL) >= 5);
	CHECK_I64(q64("SELECT count(*) FROM sandboxes WHERE account_id = 'unattributed'"
		      " AND key_id IS NULL AND sandbox_id IN ('s_orphan', 's_badkey', 's_cg_new',"
		      " 's_rokey', 's_revkey')"),
		  5);
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger WHERE key_id IN ('key_ro', 'key_rev')"),
		  0);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE account_id = 'unattributed'"
		      " AND key_id IS NULL AND sandbox_id = 's_orphan'"),
		  1);
	check_totals("s_orphan", 10, 0, used, used, 512 * 10 * SEC, 0, micros(used, 25000, DIV_CPU),
		     micros(512 * 10 * SEC, 7500, DIV_MIB), 0);
	CHECK_I64(usum("s_badkey", "total_micros"), usum("s_orphan", "total_micros"));
	/* Known row: 2 vCPUs, 2048 MiB. */
	CHECK_I64(usum("s_cg_known", "memory_mibus"), 2048 * 10 * SEC);
	CHECK_I64(q64("SELECT vcpus FROM samples WHERE sandbox_id = 's_cg_known' LIMIT 1"), 2);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_a'"
		      " AND day = '2026-11-30'") > 0,
		  1);
	/* New row: vcpus = the default (3 here), memory 0; 25 s of CPU in 10 s
	 * is within 3 vCPUs × 10 s, so not capped. */
	CHECK_I64(q64("SELECT vcpus FROM sandboxes WHERE sandbox_id = 's_cg_new'"), 3);
	CHECK_I64(usum("s_cg_new", "memory_mibus"), 0);
	CHECK_I64(usum("s_cg_new", "cpu_used_mcus"), 1000 * 25 * SEC);
	CHECK_I64(st.cpu_capped, 0);
	/* No ledger rows without a key. */
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger WHERE account_id = 'unattributed'"), 0);
	/* The row made, later samples are of a known sandbox (without a key). */
	batch(&b, "h11");
	add(&b, "s_badkey", "no_such_key", t0 + 20 * SEC, 'r', 4 * SEC, 512, 0, 1);
	st = run1(&b);
	CHECK_I64(st.accepted, 1);
	CHECK_I64(st.unattributed, 1);
	CHECK_I64(st.unknown_keys, 0);
	CHECK_I64(st.anomalies, 0);
}

/* Nothing of a sandbox before its create is billed (an agent's clock
 * behind, a stale first reading): the interval across the create starts
 * there with all its CPU, and an event before it counts as at it. A
 * sandbox first seen in samples was made at its first sample. */
static void test_before_create(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T04:00:00Z"), made = T("2026-11-30T05:00:30Z");
	int64_t used = 1000 * 10 * SEC, billed = used, mem = 2048 * 30 * SEC;

	fprintf(stderr, "nothing before the create\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES"
	     " ('acct_1', 's_made', 'key_a', 2, 2048, 0, 'running', '2026-11-30T05:00:30Z'),"
	     " ('acct_1', 's_made_p', 'key_a', 2, 2048, 0, 'running', '2026-11-30T05:00:30Z'),"
	     " ('acct_1', 's_made_q', 'key_a', 2, 2048, 0, 'running', '2026-11-30T05:00:30Z'),"
	     " ('acct_1', 's_made_r', 'key_a', 2, 2048, 0, 'running', '2026-11-30T05:00:30Z')");
	/* s_made_q's and s_made_r's pauses come before their first reading
	 * too, which says running: the pause counts as at the create all the
	 * same (it was read only from that reading on, and they were billed
	 * running until their first paused sample). s_made_r's readings come
	 * one a call. */
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_made_p', 'paused', '2026-11-30T04:30:00Z'),"
	     " ('acct_1', 's_made_q', 'paused', '2026-11-30T03:30:00Z'),"
	     " ('acct_1', 's_made_r', 'paused', '2026-11-30T03:30:00Z')");
	batch(&b, "h_made_r");
	add(&b, "s_made_r", "key_a", t0, 'r', 0, 2048, 0, 2);
	run1(&b);
	batch(&b, "h_made_r");
	add(&b, "s_made_r", "key_a", made + 30 * SEC, 'p', 0, 2048, 1024, 2);
	run1(&b);
	batch(&b, "h_made");
	add(&b, "s_made", "key_a", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_made", "key_a", t0 + HOUR, 'r', 5 * SEC, 2048, 0, 2);
	add(&b, "s_made", "key_a", made + 30 * SEC, 'r', 15 * SEC, 2048, 0, 2);
	add(&b, "s_made_p", "key_a", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_made_p", "key_a", made + 30 * SEC, 'p', 0, 2048, 1024, 2);
	add(&b, "s_made_q", "key_a", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_made_q", "key_a", made + 30 * SEC, 'p', 0, 2048, 1024, 2);
	add(&b, "s_seen", "key_a", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_seen", "key_a", t0 + 10 * SEC, 'r', SEC, 2048, 0, 2);
	run1(&b);
	/* 30 s from the create, with the interval's 10 s of CPU. */
	check_totals("s_made", 30, 0, used, billed, mem, 0, micros(billed, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_made'"
		      " AND hour < '2026-11-30T05:00:00Z'"),
		  0);
	/* Paused before its create: paused from it (storage as the sample
	 * after the pause reported). */
	check_totals("s_made_p", 0, 30, 0, 0, 0, 1024 * 30 * SEC, 0, 0,
		     micros(1024 * 30 * SEC, 100, DIV_MIB));
	check_totals("s_made_q", 0, 30, 0, 0, 0, 1024 * 30 * SEC, 0, 0,
		     micros(1024 * 30 * SEC, 100, DIV_MIB));
	check_totals("s_made_r", 0, 30, 0, 0, 0, 1024 * 30 * SEC, 0, 0,
		     micros(1024 * 30 * SEC, 100, DIV_MIB));
	/* First seen in samples: made at its first, and billed from it. */
	CHECK_I64(q64("SELECT (extract(epoch FROM created_at) * 1000000)::bigint"
		      " FROM sandboxes WHERE sandbox_id = 's_seen'"),
		  t0);
	CHECK_I64(usum("s_seen", "running_usec"), 10 * SEC);
}

/* A sandbox a create check made is billed from the running event the
 * control plane reports before its first sample, as from a CPU counter
 * of 0 there (the VM's counter starts at its boot), and so with all of
 * that sample's CPU. With no running event first, from the first sample. */
static void test_head(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T09:00:10Z"), sto = 1024 * 3 * SEC;
	int64_t billed = 1000 * 4 * SEC, mem = 2048 * 18 * SEC;
	struct ingest_stats st;

	fprintf(stderr, "from the running event before the first sample\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) SELECT 'acct_1', s, 'key_a', 2, 2048, 0,"
	     " 'running', '2026-11-30T09:00:00Z' FROM unnest(ARRAY['s_hd', 's_hd_early',"
	     " 's_hd_none', 's_hd_pause', 's_hd_evp', 's_hd_cap', 's_hd_late']) AS s");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_hd', 'running', '2026-11-30T09:00:02Z'),"
	     " ('acct_1', 's_hd_early', 'running', '2026-11-30T08:59:50Z'),"
	     " ('acct_1', 's_hd_pause', 'paused', '2026-11-30T09:00:02Z'),"
	     " ('acct_1', 's_hd_evp', 'running', '2026-11-30T09:00:02Z'),"
	     " ('acct_1', 's_hd_evp', 'paused', '2026-11-30T09:00:07Z'),"
	     " ('acct_1', 's_hd_cap', 'running', '2026-11-30T09:00:08Z'),"
	     " ('acct_1', 's_hd_late', 'running', '2026-11-30T09:00:15Z')");
	/* One sample a call, as a collector's rounds give them (s_hd_pause's
	 * two in one). */
	batch(&b, "h_hd");
	add(&b, "s_hd", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_early", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_none", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_pause", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_pause", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	add(&b, "s_hd_evp", "key_a", t0, 'p', 3 * SEC, 2048, 1024, 2);
	add(&b, "s_hd_cap", "key_a", t0, 'r', 9 * SEC, 2048, 0, 2);
	add(&b, "s_hd_late", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	st = run1(&b);
	CHECK_I64(st.intervals, 5);
	CHECK_I64(st.cpu_capped, 1);
	batch(&b, "h_hd");
	add(&b, "s_hd", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	add(&b, "s_hd_early", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	add(&b, "s_hd_none", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	run1(&b);
	/* 8 s from the event with the counter's 3 s, then 10 s with 1 s. */
	check_totals("s_hd", 18, 0, billed, billed, mem, 0, micros(billed, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	/* An event before the create counts as at it: 10 s, then 10 s. */
	check_totals("s_hd_early", 20, 0, billed, billed, 2048 * 20 * SEC, 0,
		     micros(billed, 25000, DIV_CPU), micros(2048 * 20 * SEC, 7500, DIV_MIB), 0);
	/* No event, or a pause first: from the first sample (its 1 s of CPU
	 * over 10 s), the pause before it unused (not what the interval
	 * after that sample starts in). */
	check_totals("s_hd_none", 10, 0, 1000 * SEC, 1000 * SEC, 2048 * 10 * SEC, 0,
		     micros(1000 * SEC, 25000, DIV_CPU), micros(2048 * 10 * SEC, 7500, DIV_MIB), 0);
	check_totals("s_hd_pause", 10, 0, 1000 * SEC, 1000 * SEC, 2048 * 10 * SEC, 0,
		     micros(1000 * SEC, 25000, DIV_CPU), micros(2048 * 10 * SEC, 7500, DIV_MIB), 0);
	/* Running 5 s with the counter's 3 s, then paused 3 s at the size the
	 * paused sample reports. */
	check_totals("s_hd_evp", 5, 3, 1000 * 3 * SEC, 1000 * 3 * SEC, 2048 * 5 * SEC, sto,
		     micros(1000 * 3 * SEC, 25000, DIV_CPU), micros(2048 * 5 * SEC, 7500, DIV_MIB),
		     micros(sto, 100, DIV_MIB));
	/* 2 s of 2 vCPUs cannot hold 9 s of CPU: capped, an anomaly. */
	check_totals("s_hd_cap", 2, 0, 1000 * 4 * SEC, 1000 * 4 * SEC, 2048 * 2 * SEC, 0,
		     micros(1000 * 4 * SEC, 25000, DIV_CPU), micros(2048 * 2 * SEC, 7500, DIV_MIB),
		     0);
	/* An event after the first sample starts nothing before it. */
	check_totals("s_hd_late", 0, 0, 0, 0, 0, 0, 0, 0, 0);

	/* Two days from the event to the first sample: billed whole, the
	 * floor over the counter's 3 s, the days of its key's zone (one no
	 * call loaded before) loaded from the event's. */
	exec("INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES"
	     " ('acct_1', 'key_hd', decode(repeat('ab', 32), 'hex'), 'full',"
	     " 'America/Sao_Paulo')");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_hd_long', 'key_hd', 2, 2048,"
	     " 0, 'running', '2026-11-28T09:00:00Z')");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_hd_long', 'running', '2026-11-28T09:00:10Z')");
	batch(&b, "h_hd");
	add(&b, "s_hd_long", "key_hd", t0, 'r', 3 * SEC, 2048, 0, 2);
	st = run1(&b);
	CHECK_I64(st.intervals, 1);
	check_totals("s_hd_long", 48 * 3600, 0, 1000 * 3 * SEC, 50 * 48 * HOUR, 2048 * 48 * HOUR, 0,
		     micros(50 * 48 * HOUR, 25000, DIV_CPU),
		     micros(2048 * 48 * HOUR, 7500, DIV_MIB), 0);
	CHECK_I64(q64("SELECT count(DISTINCT day) FROM usage_hourly"
		      " WHERE sandbox_id = 's_hd_long'"),
		  3);

	/* A first sample at the create: billed from it, the events before
	 * the create (a pause, or a running event then a pause) counting as
	 * at it, so the interval starts paused, as when its samples come one
	 * a call (the CPU the agent saw then is not billed). */
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) SELECT 'acct_1', s, 'key_a', 2, 2048, 0,"
	     " 'running', '2026-11-30T09:00:10Z' FROM unnest(ARRAY['s_hd_eq', 's_hd_eq2']) AS s");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_hd_eq', 'paused', '2026-11-30T09:00:05Z'),"
	     " ('acct_1', 's_hd_eq2', 'running', '2026-11-30T09:00:00Z'),"
	     " ('acct_1', 's_hd_eq2', 'paused', '2026-11-30T09:00:05Z')");
	batch(&b, "h_hd");
	add(&b, "s_hd_eq", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_eq", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	add(&b, "s_hd_eq2", "key_a", t0, 'r', 3 * SEC, 2048, 0, 2);
	add(&b, "s_hd_eq2", "key_a", t0 + 10 * SEC, 'r', 4 * SEC, 2048, 0, 2);
	run1(&b);
	check_totals("s_hd_eq", 0, 10, 0, 0, 0, 0, 0, 0, 0);
	check_totals("s_hd_eq2", 0, 10, 0, 0, 0, 0, 0, 0, 0);
	/* The same one sample a call. */
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_hd_eq3', 'key_a', 2, 2048, 0,"
	     " 'running', '2026-11-30T09:00:10Z')");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_hd_eq3', 'running', '2026-11-30T09:00:00Z'),"
	     " ('acct_1', 's_hd_eq3', 'paused', '2026-11-30T09:00:05Z')");
	for (int i = 0; i < 2; i++) {
		batch(&b, "h_hd");
		add(&b, "s_hd_eq3", "key_a", t0 + i * 10 * SEC, 'r', (3 + i) * SEC, 2048, 0, 2);
		run1(&b);
	}
	check_totals("s_hd_eq3", 0, 10, 0, 0, 0, 0, 0, 0, 0);
}

/* The sweeper's readings at a stop no sample will meter (sql/0048), as
 * checks.c ingests them: the stretch from the last sample to the stop is
 * billed as running at the floor (or paused), once the grace has passed
 * and the last sample's host has reported since; a sandbox never sampled
 * from its running event; nothing twice, and a sample after it changes
 * nothing. */
static void test_stop_tails(void)
{
	struct sample_batch b, tails;
	int64_t t0 = T("2026-11-30T10:00:00Z"), now = t0 + 22 * SEC;
	int64_t mcus = 1000 * SEC + 50 * 5 * SEC, sto = 1024 * 4 * SEC;
	char got[256] = "";

	fprintf(stderr, "stops' tails\n");
	exec("INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES"
	     " ('acct_1', 'key_tl', decode(repeat('ab', 32), 'hex'), 'full', 'UTC')");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at, state_since) VALUES"
	     " ('acct_1', 's_tl', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:15Z'),"
	     " ('acct_1', 's_tl_wait', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:15Z'),"
	     " ('acct_1', 's_tl_grace', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:20Z'),"
	     " ('acct_1', 's_tl_never', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T09:59:06Z'),"
	     " ('acct_1', 's_tl_norun', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T09:59:06Z'),"
	     " ('acct_1', 's_tl_paused', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:14Z'),"
	     " ('acct_1', 's_tl_old', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T08:00:00Z',"
	     "  '2026-11-30T08:00:10Z'),"
	     " ('acct_1', 's_tl_ps', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:12Z'),"
	     " ('acct_1', 's_tl_pps', 'key_tl', 2, 2048, 0, 'stopped', '2026-11-30T09:59:00Z',"
	     "  '2026-11-30T10:00:13Z')");
	/* Each stop kept a hold for its tail (the set the sweeper looks in). */
	exec("INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
	     " reserved_micros, status, lease_starts_at, lease_ends_at, settles_at)"
	     " SELECT 'acct_1', 'key_tl', sandbox_id, '2026-11-30', 100000, 100000, 'open',"
	     " '2026-11-30T07:59:00Z', '2026-11-30T10:14:00Z', state_since FROM sandboxes"
	     " WHERE sandbox_id LIKE 's\\_tl%'");
	exec("INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
	     " VALUES ('acct_1', 'key_tl', '2026-11-30', 0, 900000)");
	/* s_tl_ps's open hold is the one its pause kept (its stop found none
	 * open): the stop's stretch is metered on it, which stays open until
	 * then though its grace passed first. */
	exec("UPDATE holds SET settles_at = '2026-11-30T10:00:05Z' WHERE sandbox_id = 's_tl_ps'");
	/* s_tl_pps's too, and a paused sample after the pause meters past it:
	 * its hold waits all the same. */
	exec("UPDATE holds SET settles_at = '2026-11-30T10:00:03Z' WHERE sandbox_id = 's_tl_pps'");
	exec("INSERT INTO lifecycle_events (account_id, sandbox_id, type, at) VALUES"
	     " ('acct_1', 's_tl', 'stopped', '2026-11-30T10:00:15Z'),"
	     " ('acct_1', 's_tl_wait', 'stopped', '2026-11-30T10:00:15Z'),"
	     " ('acct_1', 's_tl_grace', 'stopped', '2026-11-30T10:00:20Z'),"
	     " ('acct_1', 's_tl_never', 'running', '2026-11-30T09:59:02Z'),"
	     " ('acct_1', 's_tl_never', 'stopped', '2026-11-30T09:59:06Z'),"
	     " ('acct_1', 's_tl_norun', 'stopped', '2026-11-30T09:59:06Z'),"
	     " ('acct_1', 's_tl_paused', 'stopped', '2026-11-30T10:00:14Z'),"
	     " ('acct_1', 's_tl_old', 'stopped', '2026-11-30T08:00:10Z'),"
	     " ('acct_1', 's_tl_ps', 'paused', '2026-11-30T10:00:05Z'),"
	     " ('acct_1', 's_tl_ps', 'stopped', '2026-11-30T10:00:12Z'),"
	     " ('acct_1', 's_tl_pps', 'paused', '2026-11-30T10:00:03Z'),"
	     " ('acct_1', 's_tl_pps', 'stopped', '2026-11-30T10:00:13Z')");
	batch(&b, "h_tl");
	add(&b, "s_tl_old", "key_tl", T("2026-11-30T08:00:00Z"), 'r', 0, 2048, 0, 2);
	run1(&b);
	batch(&b, "h_tl");
	add(&b, "s_tl", "key_tl", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_tl_grace", "key_tl", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_tl_paused", "key_tl", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_tl_ps", "key_tl", t0, 'r', 0, 2048, 0, 2);
	add(&b, "s_tl_pps", "key_tl", t0, 'r', 0, 2048, 0, 2);
	run1(&b);
	batch(&b, "h_tw");
	add(&b, "s_tl_wait", "key_tl", t0, 'r', 0, 2048, 0, 2);
	run1(&b);
	batch(&b, "h_tl");
	add(&b, "s_tl", "key_tl", t0 + 10 * SEC, 'r', SEC, 2048, 0, 2);
	add(&b, "s_tl_grace", "key_tl", t0 + 10 * SEC, 'r', SEC, 2048, 0, 2);
	add(&b, "s_tl_paused", "key_tl", t0 + 10 * SEC, 'p', 0, 2048, 1024, 2);
	add(&b, "s_tl_pps", "key_tl", t0 + 10 * SEC, 'p', 0, 2048, 1024, 2);
	run1(&b);
	batch(&b, "h_tw");
	add(&b, "s_tl_wait", "key_tl", t0 + 10 * SEC, 'r', SEC, 2048, 0, 2);
	run1(&b);
	/* h_tl reports after the stops, without them. */
	batch(&b, "h_tl");
	add(&b, "s_tl_other", "key_tl", t0 + 20 * SEC, 'r', 0, 2048, 0, 2);
	run1(&b);

	sample_batch_init(&tails);
	CHECK_I64(db_checks_stop_tails(conn, now, 5, 100, &tails), METER_OK);
	for (size_t i = 0; i < tails.n; i++) {
		const struct meter_sample *m = &tails.items[i];
		char one[160];

		snprintf(one, sizeof(one), "%s%s@%" PRId64 "/%" PRId64 "/%c", got[0] ? "," : "",
			 m->sandbox_id, (m->u.at_usec - t0) / SEC, m->u.cpu_usec / SEC,
			 sandbox_state_name(m->u.state)[0]);
		if (strlen(got) + strlen(one) < sizeof(got))
			memcpy(got + strlen(got), one, strlen(one) + 1);
	}
	CHECK_STR(got, "s_tl_never@-54/0/s,s_tl_pps@13/0/s,s_tl_ps@12/0/s,s_tl_paused@14/0/s,"
		       "s_tl@15/1/s");
	CHECK_STR(tails.host_id, SAMPLE_HOST_STOP);
	/* A stop's tail hold waits for the stretch to be metered. */
	CHECK_I64(q64("SELECT count(*) FROM unnest(ARRAY['s_tl', 's_tl_never', 's_tl_wait'])"
		      " AS x WHERE meter_tail_done('acct_1', x, '2026-11-30T10:00:15Z',"
		      " '2026-11-30T10:00:22Z', 5)"),
		  0);
	/* At 10:00:13 the pause's grace has passed, not yet the stop's. */
	CHECK_I64(q64("SELECT count(*) FROM holds h, unnest(ARRAY['2026-11-30T10:00:13Z',"
		      " '2026-11-30T10:00:22Z']::timestamptz[]) AS t WHERE h.sandbox_id IN"
		      " ('s_tl_ps', 's_tl_pps') AND meter_tail_done(h.account_id, h.sandbox_id,"
		      " h.settles_at, t, 5)"),
		  0);
	run1(&tails);
	CHECK_I64(q64("SELECT count(*) FROM holds h WHERE sandbox_id = 's_tl_ps' AND"
		      " meter_tail_done(account_id, sandbox_id, settles_at,"
		      " '2026-11-30T10:00:22Z', 5)"),
		  1);
	/* Running to the pause (at the floor), paused to the stop (no
	 * snapshot size reported: its record's 0). */
	check_totals("s_tl_ps", 5, 7, 0, 50 * 5 * SEC, 2048 * 5 * SEC, 0,
		     micros(50 * 5 * SEC, 25000, DIV_CPU), micros(2048 * 5 * SEC, 7500, DIV_MIB),
		     0);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE sandbox_id = 's_tl_ps'"),
		  usum("s_tl_ps", "total_micros"));
	/* Running to the pause, paused to the paused sample and on to the
	 * stop at its snapshot's size. */
	check_totals("s_tl_pps", 3, 10, 0, 50 * 3 * SEC, 2048 * 3 * SEC, 1024 * 10 * SEC,
		     micros(50 * 3 * SEC, 25000, DIV_CPU), micros(2048 * 3 * SEC, 7500, DIV_MIB),
		     micros(1024 * 10 * SEC, 100, DIV_MIB));
	CHECK_I64(q64("SELECT count(*) FROM holds h WHERE sandbox_id = 's_tl_pps' AND"
		      " meter_tail_done(account_id, sandbox_id, settles_at,"
		      " '2026-11-30T10:00:22Z', 5)"),
		  1);
	CHECK_I64(q64("SELECT count(*) FROM unnest(ARRAY['s_tl', 's_tl_never', 's_tl_wait'])"
		      " AS x WHERE meter_tail_done('acct_1', x, '2026-11-30T10:00:15Z',"
		      " '2026-11-30T10:00:22Z', 5)"),
		  2);
	CHECK_I64(q64("SELECT count(*) FROM ingest_watermarks WHERE host_id = '%s'"
		      " AND last_sampled_at = '2026-11-30T10:00:22Z'",
		      SAMPLE_HOST_STOP),
		  1);
	/* 10 s with the counter's 1 s, then 5 s at the floor. */
	check_totals("s_tl", 15, 0, 1000 * SEC, mcus, 2048 * 15 * SEC, 0,
		     micros(mcus, 25000, DIV_CPU), micros(2048 * 15 * SEC, 7500, DIV_MIB), 0);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE sandbox_id = 's_tl'"),
		  usum("s_tl", "total_micros"));
	/* From its running event to its stop, at the floor. */
	check_totals("s_tl_never", 4, 0, 0, 50 * 4 * SEC, 2048 * 4 * SEC, 0,
		     micros(50 * 4 * SEC, 25000, DIV_CPU), micros(2048 * 4 * SEC, 7500, DIV_MIB),
		     0);
	/* Running to its paused sample, then paused to the stop. */
	check_totals("s_tl_paused", 10, 4, 0, 50 * 10 * SEC, 2048 * 10 * SEC, sto,
		     micros(50 * 10 * SEC, 25000, DIV_CPU), micros(2048 * 10 * SEC, 7500, DIV_MIB),
		     micros(sto, 100, DIV_MIB));
	/* Not yet: its host has not reported since; within the grace; nothing
	 * to bill (no sample, no running event); stopped over an hour ago. */
	CHECK_I64(usum("s_tl_wait", "running_usec"), 10 * SEC);
	CHECK_I64(usum("s_tl_grace", "running_usec"), 10 * SEC);
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 's_tl_norun'"), 0);
	CHECK_I64(usum("s_tl_old", "running_usec"), 0);

	/* Metered: nothing more to do, and a late sample bills nothing. */
	CHECK_I64(db_checks_stop_tails(conn, now + SEC, 5, 100, &tails), METER_OK);
	CHECK_I64(tails.n, 0);
	sample_batch_release(&tails);
	batch(&b, "h_tl");
	add(&b, "s_tl", "key_tl", t0 + 21 * SEC, 'r', 9 * SEC, 2048, 0, 2);
	run1(&b);
	CHECK_I64(usum("s_tl", "total_micros"),
		  micros(mcus, 25000, DIV_CPU) + micros(2048 * 15 * SEC, 7500, DIV_MIB));
}

/* A sample that leaves storage_mib out keeps the size last reported (the
 * record's is 0 for a sandbox a create made). */
static void test_storage_left_out(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T06:00:00Z");
	int64_t sto = (int64_t)1048576 * 2 * HOUR;

	fprintf(stderr, "storage left out\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES"
	     " ('acct_1', 's_sto', 'key_a', 1, 1024, 0, 'paused', " MADE ")");
	batch(&b, "h_sto");
	add(&b, "s_sto", "key_a", t0, 'p', 0, 1024, 1048576, 1);
	run1(&b);
	/* As an agent's documents say it: left out, then null. */
	for (int i = 1; i <= 2; i++) {
		static const char *const docs[] = {
		    NULL,
		    "{\"host_id\":\"h_sto\",\"sampled_at\":\"2026-11-30T07:00:00Z\","
		    "\"sandboxes\":[{\"sandbox_id\":\"s_sto\",\"key_id\":\"key_a\","
		    "\"state\":\"paused\",\"vcpus\":1,\"memory_mib\":1024,\"cpu_usec\":0}]}",
		    "{\"host_id\":\"h_sto\",\"sampled_at\":\"2026-11-30T08:00:00Z\","
		    "\"sandboxes\":[{\"sandbox_id\":\"s_sto\",\"key_id\":\"key_a\","
		    "\"state\":\"paused\",\"vcpus\":1,\"memory_mib\":1024,"
		    "\"storage_mib\":null,\"cpu_usec\":0}]}"};
		char err[256];

		CHECK_I64(
		    agent_doc_parse(docs[i], strlen(docs[i]), t0 + 3 * HOUR, &b, err, sizeof(err)),
		    METER_OK);
		run1(&b);
	}
	check_totals("s_sto", 0, 2 * 3600, 0, 0, 0, sto, 0, 0, micros(sto, 100, DIV_MIB));
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 's_sto'"
		      " AND storage_mib = 1048576"),
		  3);
}

/* Metering consumes the sandbox's open holds; committed = spent + holds. */
static void test_holds(void)
{
	struct sample_batch b;
	int64_t t0 = T("2026-11-30T00:20:00Z");
	int64_t billed = 2000 * 60 * SEC, mem = 4096 * 60 * SEC; /* both vCPUs busy 60 s */
	int64_t cost = micros(billed, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB);
	struct ingest_stats st;
	int64_t spent, held;

	fprintf(stderr, "holds consumed\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_hold', 'key_hold', 2, 4096, 0, "
	     "'running', " MADE ")");
	exec("INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
	     " lease_starts_at, lease_ends_at) VALUES ('acct_1', 'key_hold', 's_hold',"
	     " '2026-11-30', 2000, 'open', '2026-11-30T00:20:00Z', '2026-11-30T00:35:00Z')");
	exec("INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
	     " VALUES ('acct_1', 'key_hold', '2026-11-30', 0, 2000)");
	batch(&b, "h12");
	add(&b, "s_hold", NULL, t0, 'r', 0, 4096, 0, 2);
	add(&b, "s_hold", NULL, t0 + 60 * SEC, 'r', 120 * SEC, 4096, 0, 2);
	st = run1(&b);
	CHECK_I64(st.retries, 0);
	CHECK(cost < 2000);
	spent = q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_hold'");
	held = q64("SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_hold'");
	CHECK_I64(spent, cost);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE key_id = 'key_hold'"), cost);
	CHECK_I64(held, 2000 - cost);
	CHECK_I64(spent + held, 2000);
	/* Another minute: past the hold, consumed grows beyond the amount,
	 * held stays at 0, committed = spent. */
	batch(&b, "h12");
	add(&b, "s_hold", NULL, t0 + 120 * SEC, 'r', 240 * SEC, 4096, 0, 2);
	st = run1(&b);
	CHECK_I64(st.retries, 0);
	CHECK(2 * cost > 2000);
	spent = q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_hold'");
	held = q64("SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_hold'");
	CHECK_I64(spent, micros(2 * billed, 25000, DIV_CPU) + micros(2 * mem, 7500, DIV_MIB));
	CHECK_I64(held, 0);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE key_id = 'key_hold'"), spent);
	CHECK_I64(held, q64("SELECT COALESCE(sum(GREATEST(amount_micros - consumed_micros, 0)), 0)"
			    " FROM holds WHERE key_id = 'key_hold' AND status = 'open'"));
}

/* The money of one minute of a sandbox of 2 vCPUs, both busy, and 4 GiB. */
static int64_t busy_minute_micros(void)
{
	return micros((__int128)2000 * 60 * SEC, 25000, DIV_CPU) +
	       micros((__int128)4096 * 60 * SEC, 7500, DIV_MIB);
}

/* Sandbox sbx of key (2 vCPUs, 4 GiB) with one open hold of 5,000 on
 * 2026-11-30 under hold_key, its lease from..to, and hold_key's ledger row
 * of the day holding it. */
static void one_hold(const char *sbx, const char *key, const char *hold_key, const char *from,
		     const char *to)
{
	char sql[1024];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at) VALUES ('acct_1', '%s', '%s', 2, 4096, 0, "
		 "'running', " MADE ")",
		 sbx, key);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
		 " lease_starts_at, lease_ends_at) VALUES ('acct_1', '%s', '%s', '2026-11-30',"
		 " 5000, 'open', '%s', '%s')",
		 hold_key, sbx, from, to);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
		 " VALUES ('acct_1', '%s', '2026-11-30', 0, 5000)",
		 hold_key);
	exec(sql);
}

/* The holds of sandbox sbx, oldest first, and the ledger of key on
 * 2026-11-30, as text: "consumed/status,... held H spent S". */
static void holds_of(const char *sbx, const char *key, char *out, size_t len)
{
	const char *params[2] = {sbx, key};
	PGresult *r = PQexecParams(
	    conn,
	    "SELECT string_agg(consumed_micros || '/' || status, ',' ORDER BY hold_id)"
	    " || ' held ' || (SELECT held_micros FROM key_day_ledger WHERE key_id = $2"
	    "                 AND day = '2026-11-30')"
	    " || ' spent ' || (SELECT spent_micros FROM key_day_ledger WHERE key_id = $2"
	    "                  AND day = '2026-11-30')"
	    " FROM holds WHERE sandbox_id = $1",
	    2, NULL, params, NULL, NULL, 0);

	CHECK_I64(PQresultStatus(r), PGRES_TUPLES_OK);
	snprintf(out, len, "%s", PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0) : "");
	PQclear(r);
}

/* Sandbox s_<x> of key_<x> (2 vCPUs, 4 GiB) with five holds: on 2026-11-30
 * open with 700 left, open and already outrun, settled, open with 1000
 * left; on 2026-12-01 open. The ledger rows agree. */
static void holds_setup(const char *x)
{
	char sql[1024];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at) VALUES ('acct_1', 's_%s', 'key_%s', 2, 4096, 0, "
		 "'running', " MADE ")",
		 x, x);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " consumed_micros, status, settled_at, lease_starts_at, lease_ends_at)"
		 " SELECT 'acct_1', 'key_%s', 's_%s', d::date, amt, used, st::meter_hold_status,"
		 " CASE WHEN st = 'open' THEN NULL ELSE now() END,"
		 " '2026-11-30T01:00:00Z', '2026-11-30T02:00:00Z'"
		 " FROM (VALUES ('2026-11-30', 800, 100, 'open', 1),"
		 " ('2026-11-30', 200, 250, 'open', 2), ('2026-11-30', 5000, 0, 'settled', 3),"
		 " ('2026-11-30', 1000, 0, 'open', 4), ('2026-12-01', 5000, 0, 'open', 5))"
		 " AS v(d, amt, used, st, n) ORDER BY n",
		 x, x);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
		 " VALUES ('acct_1', 'key_%s', '2026-11-30', 0, 1700),"
		 " ('acct_1', 'key_%s', '2026-12-01', 0, 5000)",
		 x, x);
	exec(sql);
}

/* Several open holds on one sandbox-day: ingestion covers them oldest first
 * and adds what is left over (outrun) to the newest; settled holds and
 * holds of other days are left alone. Differential: the same money spent
 * through meter_ledger_spend on an identical sandbox leaves the same holds
 * and ledger. */
static void test_holds_multi(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T01:00:00Z");
	int64_t cost = busy_minute_micros();
	char got[256], want[256];

	fprintf(stderr, "several holds on one sandbox-day\n");
	holds_setup("ma");
	holds_setup("mb");
	CHECK(cost > 700 && cost < 1700 && 2 * cost > 1700);
	for (int round = 1; round <= 2; round++) {
		batch(&b, "h15");
		if (round == 1)
			add(&b, "s_ma", NULL, t0, 'r', 0, 4096, 0, 2);
		add(&b, "s_ma", NULL, t0 + round * 60 * SEC, 'r', round * 120 * SEC, 4096, 0, 2);
		st = run1(&b);
		CHECK_I64(st.retries, 0); /* the holds were spent in C, not on the retry */
		/* Round 1 fits in the holds; round 2 outruns them. */
		CHECK_I64(st.outrun_micros, round == 1 ? 0 : 2 * cost - 1700);
		CHECK_I64(q64("SELECT count(*) FROM meter_ledger_spend(ARRAY['acct_1'],"
			      " ARRAY['key_mb'], ARRAY['s_mb'], ARRAY['2026-11-30']::date[],"
			      " ARRAY[%lld]::bigint[])",
			      (long long)cost),
			  1);
		holds_of("s_ma", "key_ma", got, sizeof(got));
		holds_of("s_mb", "key_mb", want, sizeof(want));
		CHECK_STR(got, want);
	}
	snprintf(want, sizeof(want),
		 "800/open,250/open,0/settled,%lld/open,0/open held 0 spent %lld",
		 (long long)(2 * cost - 700), (long long)(2 * cost));
	CHECK_STR(got, want);
	CHECK_I64(q64("SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_ma'"
		      " AND day = '2026-12-01'"),
		  5000);
	/* The reference was spent without usage rows: out of the invariants. */
	exec("DELETE FROM holds WHERE key_id = 'key_mb'");
	exec("DELETE FROM key_day_ledger WHERE key_id = 'key_mb'");
}

/* A hold under another key than its sandbox's (no writer of the service
 * makes one): its key-day's ledger row is not among those ingestion locks,
 * so the call does not spend it in C but on its retry, through
 * meter_ledger_spend. */
static void test_hold_other_key(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T03:00:00Z");
	int64_t cost = busy_minute_micros();

	fprintf(stderr, "a hold under another key\n");
	one_hold("s_ok", "key_ok", "key_other", "2026-11-30T03:00:00Z", "2026-11-30T04:00:00Z");
	/* meter_ledger_spend takes held from the spending key's day. */
	exec("INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
	     " VALUES ('acct_1', 'key_ok', '2026-11-30', 0, 5000)");
	batch(&b, "h17");
	add(&b, "s_ok", NULL, t0, 'r', 0, 4096, 0, 2);
	add(&b, "s_ok", NULL, t0 + 60 * SEC, 'r', 120 * SEC, 4096, 0, 2);
	st = run1(&b);
	CHECK_I64(st.retries, 1);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE sandbox_id = 's_ok'"), cost);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_ok'"), cost);
	/* meter_ledger_spend's rule: held shrinks on the spending key's day. */
	CHECK_I64(q64("SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_ok'"),
		  5000 - cost);
}

/* The day of the cases of leases' times: ahead of the clock, as their
 * leases must be for hold_outrun "hold_consumed" to be sent (sql/0044). */
#define TDAY "2099-03-10"

/* Sandbox s_<x> of key_<x> (2 vCPUs, 4 GiB, 100 GiB of storage) with the
 * holds of TDAY in rows (SQL VALUES of amount, status, lease start,
 * settles_at), oldest first, and key_<x>'s ledger row holding those open.
 * With stray, one more open hold of that sandbox-day under key_stray whose
 * lease starts at 23:00, after all its usage: it takes none of it, but
 * makes the call spend on its retry, through meter_ledger_spend. */
static void timed_setup(const char *x, const char *rows, bool stray)
{
	char sql[2048];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES"
		 " ('acct_1', 'key_%s', decode(repeat('ab', 32), 'hex'), 'full', 'UTC')",
		 x);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at) VALUES ('acct_1', 's_%s', 'key_%s', 2, 4096,"
		 " 102400, 'running', " MADE ")",
		 x, x);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " reserved_micros, status, settled_at, lease_starts_at, lease_ends_at,"
		 " settles_at)"
		 " SELECT 'acct_1', 'key_%s', 's_%s', '" TDAY "', amt,"
		 " CASE WHEN settles IS NULL THEN NULL ELSE amt END, st::meter_hold_status,"
		 " CASE WHEN st = 'open' THEN NULL ELSE now() END, starts::timestamptz,"
		 " starts::timestamptz + CASE WHEN settles IS NULL THEN interval '30 minutes'"
		 " ELSE interval '90 minutes' END, settles::timestamptz"
		 " FROM (VALUES %s) AS v(amt, st, starts, settles, n) ORDER BY n",
		 x, x, rows);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
		 " SELECT 'acct_1', 'key_%s', '" TDAY "', 0, COALESCE(sum(amount_micros), 0)"
		 " FROM holds WHERE sandbox_id = 's_%s' AND status = 'open'",
		 x, x);
	exec(sql);
	if (!stray)
		return;
	exec("INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
	     " VALUES ('acct_1', 'key_stray', decode(repeat('ab', 32), 'hex'), 'full', 'UTC')"
	     " ON CONFLICT DO NOTHING");
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
		 " lease_starts_at, lease_ends_at) VALUES ('acct_1', 'key_stray', 's_%s',"
		 " '" TDAY "', 5000, 'open', '" TDAY "T23:00:00Z', '" TDAY "T23:30:00Z')",
		 x);
	exec(sql);
}

/* The holds of sandbox s_<x> under its key, oldest first, its key's
 * ledger, and the hold_outrun events of the sandbox, as text:
 * "consumed/status,... held H spent S outrun events N". */
static void timed_holds(const char *x, char *out, size_t len)
{
	qtext(out, len,
	      "SELECT string_agg(consumed_micros || '/' || status, ',' ORDER BY hold_id)"
	      " || ' held ' || (SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_%s'"
	      "                 AND day = '" TDAY "')"
	      " || ' spent ' || (SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_%s'"
	      "                  AND day = '" TDAY "')"
	      " || ' outrun events ' || (SELECT count(*) FROM webhook_outbox"
	      "                          WHERE type = 'hold_outrun'"
	      "                          AND payload->>'sandbox_id' = 's_%s')"
	      " FROM holds WHERE sandbox_id = 's_%s' AND key_id = 'key_%s'",
	      x, x, x, x, x);
}

/* The money of s_<x>'s usage in one UTC hour of TDAY ("09"). */
static int64_t hour_micros(const char *x, const char *hour)
{
	return q64("SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly"
		   " WHERE sandbox_id = 's_%s' AND hour = '" TDAY "T%s:00:00Z'",
		   x, hour);
}

/* A sample of s_<x> for timed_run: its seconds from t0, its state ('r',
 * 'p') and its CPU counter in seconds. */
struct timed_sample {
	int64_t at_s;
	char state;
	int64_t cpu_s;
};

/* timed_setup(x, rows, stray), the statement before when not NULL, then
 * samples[0..n) of s_<x> from t0 (2 vCPUs, 4 GiB, 100 GiB of storage)
 * taken in by one call; its stats. The call spends in C, or with stray on
 * its one retry in SQL. */
static struct ingest_stats timed_run_after(const char *x, const char *rows, bool stray,
					   const char *before, int64_t t0,
					   const struct timed_sample *samples, size_t n)
{
	struct sample_batch b;
	struct ingest_stats st;
	char sbx[32];

	timed_setup(x, rows, stray);
	if (before)
		exec(before);
	snprintf(sbx, sizeof(sbx), "s_%s", x);
	batch(&b, "h18");
	for (size_t i = 0; i < n; i++)
		add(&b, sbx, NULL, t0 + samples[i].at_s * SEC, samples[i].state,
		    samples[i].cpu_s * SEC, 4096, 102400, 2);
	st = run1(&b);
	CHECK_I64(st.retries, stray ? 1 : 0);
	return st;
}

/* timed_run_after with no statement between. */
static struct ingest_stats timed_run(const char *x, const char *rows, bool stray, int64_t t0,
				     const struct timed_sample *samples, size_t n)
{
	return timed_run_after(x, rows, stray, NULL, t0, samples, n);
}

/* The audit's case: a sandbox whose first lease (09:00) is settled ran to
 * 09:15 and was paused, its storage billed while paused, and a wake's check
 * made a hold from 10:00; the samples up to and after the wake are taken
 * in after it, in one call. The wake's hold consumes only the usage from
 * 10:00 (it fits the hold, so no hold_outrun "hold_consumed" is sent); the
 * usage before it has no hold of its time and is outrun, spent all the
 * same. x's call spends in C; with stray, on its retry in SQL. Returns the
 * digest of timed_holds. */
static void wake_case(const char *x, bool stray, char *out, size_t len)
{
	static const struct timed_sample samples[] = {
	    {0, 'r', 0}, {900, 'p', 1800}, {3600, 'r', 1800}, {3900, 'r', 2400}};
	struct ingest_stats st;
	char want[256];
	int64_t h9, h10;

	st = timed_run(x,
		       "(20000, 'settled', '" TDAY "T09:00:00Z', NULL, 1),"
		       " (20000, 'open', '" TDAY "T10:00:00Z', NULL, 2)",
		       stray, T(TDAY "T09:00:00Z"), samples, 4);
	h9 = hour_micros(x, "09");
	h10 = hour_micros(x, "10");
	/* The wake's hold is enough for its own usage, not for the paused
	 * stretch's as well: the case the audit saw read as outrun. */
	CHECK(h10 > 0 && h10 <= 20000 && h9 + h10 > 20000);
	CHECK_I64(st.outrun_micros, h9);
	timed_holds(x, out, len);
	snprintf(want, sizeof(want),
		 "0/settled,%" PRId64 "/open held %" PRId64 " spent %" PRId64 " outrun events 0",
		 h10, 20000 - h10, h9 + h10);
	CHECK_STR(out, want);
}

/* A hold kept for a pause's tail (settles_at 12:00, within its lease from
 * 11:00) takes the usage up to the pause, none of the paused storage after
 * it, though it is the only hold open then and has room left; the wake's
 * hold from 13:00 takes the usage from there. As wake_case otherwise. */
static void tail_case(const char *x, bool stray, char *out, size_t len)
{
	static const struct timed_sample samples[] = {
	    {0, 'r', 0}, {3600, 'p', 7200}, {7200, 'r', 7200}, {7500, 'r', 7800}};
	struct ingest_stats st;
	char want[256];
	int64_t h11, h12, h13;

	st = timed_run(x,
		       "(250000, 'open', '" TDAY "T11:00:00Z', '" TDAY "T12:00:00Z', 1),"
		       " (20000, 'open', '" TDAY "T13:00:00Z', NULL, 2)",
		       stray, T(TDAY "T11:00:00Z"), samples, 4);
	h11 = hour_micros(x, "11");
	h12 = hour_micros(x, "12");
	h13 = hour_micros(x, "13");
	/* The tail had room for the paused hour and the woken minutes. */
	CHECK(h12 > 0 && h11 + h12 + h13 <= 250000 && h13 <= 20000);
	CHECK_I64(st.outrun_micros, h12);
	timed_holds(x, out, len);
	snprintf(want, sizeof(want),
		 "%" PRId64 "/open,%" PRId64 "/open held %" PRId64 " spent %" PRId64
		 " outrun events 0",
		 h11, h13, 270000 - h11 - h13, h11 + h12 + h13);
	CHECK_STR(out, want);
}

/* The rate column (of price_book) in force on TDAY. */
static int64_t tday_rate(const char *column)
{
	return q64("SELECT %s FROM price_book WHERE effective_from <= '" TDAY "'"
		   " ORDER BY effective_from DESC LIMIT 1",
		   column);
}

/* The money of s_<x>'s storage (100 GiB) from the pause at 09:15 to m
 * minutes past it, at TDAY's storage rate, priced as a whole (rounded
 * down), as ingestion's cumulative pricing does (DESIGN.md §2). */
static int64_t paused_micros(int64_t m)
{
	int64_t rate = tday_rate("storage_micros_per_gib_hour");

	return 100 * m * rate / 60;
}

/* A wake's lease starts inside a piece (10:20, between the paused samples
 * of 10:00 and 10:40: its running event has not come yet, and nothing
 * cuts the samples at its check): the wake's hold takes the money of the
 * piece from its start, not the whole. The piece is priced apart at the
 * lease's start (ing_load_cuts): the hold's money is the cumulative money
 * at 10:40 less that at 10:20, each rounded down, 6,667 of 13,333 (by
 * time, the share would be 6,666). As wake_case otherwise. */
static void straddle_case(const char *x, bool stray, char *out, size_t len)
{
	static const struct timed_sample samples[] = {
	    {0, 'r', 0}, {900, 'p', 1800}, {3600, 'p', 1800}, {6000, 'p', 1800}};
	struct ingest_stats st;
	char want[256];
	int64_t h9, h10, after, before;

	st = timed_run(x,
		       "(20000, 'settled', '" TDAY "T09:00:00Z', NULL, 1),"
		       " (20000, 'open', '" TDAY "T10:20:00Z', NULL, 2)",
		       stray, T(TDAY "T09:00:00Z"), samples, 4);
	h9 = hour_micros(x, "09");
	h10 = hour_micros(x, "10");
	after = paused_micros(85) - paused_micros(65);
	before = paused_micros(65) - paused_micros(45);
	CHECK_I64(before + after, h10);
	CHECK(after != h10 * 20 / 40); /* the cut by time would differ */
	CHECK_I64(st.outrun_micros, h9 + before);
	timed_holds(x, out, len);
	snprintf(want, sizeof(want),
		 "0/settled,%" PRId64 "/open held %" PRId64 " spent %" PRId64 " outrun events 0",
		 after, 20000 - after, h9 + h10);
	CHECK_STR(out, want);
}

/* A lease at its worst case from its start (09:00:09), its sandbox sampled
 * 9 s before it and 1 s after, both vCPUs busy throughout: the hold, that
 * worst case, takes exactly its amount, nothing outrun. The usage before
 * the lease, priced apart at the lease's start (ing_load_cuts), carries no
 * sub-micro remainder into it: a review saw 401 of 400 here, read as
 * outrun (hold_consumed). As wake_case otherwise. */
static void worst_case(const char *x, bool stray, char *out, size_t len)
{
	static const struct timed_sample samples[] = {{0, 'r', 0}, {10, 'r', 20}, {18, 'r', 36}};
	int64_t cpu = tday_rate("cpu_micros_per_vcpu_hour");
	int64_t mem = tday_rate("memory_micros_per_gib_hour");
	/* 2 vCPUs and 4 GiB for 9 s, each rounded up (DESIGN.md §4). */
	int64_t amount = (2 * 9 * cpu + 3599) / 3600 + (4 * 9 * mem + 3599) / 3600;
	struct ingest_stats st;
	char rows[128], want[256];
	int64_t h9;

	snprintf(rows, sizeof(rows), "(%" PRId64 ", 'open', '" TDAY "T09:00:09Z', NULL, 1)",
		 amount);
	st = timed_run(x, rows, stray, T(TDAY "T09:00:00Z"), samples, 3);
	h9 = hour_micros(x, "09");
	CHECK(h9 > amount);
	CHECK_I64(st.outrun_micros, h9 - amount);
	timed_holds(x, out, len);
	snprintf(want, sizeof(want), "%" PRId64 "/open held 0 spent %" PRId64 " outrun events 0",
		 amount, h9);
	CHECK_STR(out, want);
}

/* The money of 2 vCPUs busy and 4 GiB for 30 minutes at TDAY's rates, a
 * lease's exact worst case (no rounding: half of each hourly rate). */
static int64_t half_hour_micros(void)
{
	return tday_rate("cpu_micros_per_vcpu_hour") + 2 * tday_rate("memory_micros_per_gib_hour");
}

/* A lease from 09:00 to 09:30 that no event and no sweep has settled yet
 * (settles_at NULL, as in the second before the lease-end sweep), its
 * sandbox sampled at 09:29 and 09:40, both vCPUs busy: the hold covers the
 * usage up to its lease's end only, though it has room for all of it; the
 * ten minutes after are spent on no hold, as once the sweep has settled it
 * (sql/0060). A review saw the hold take them when ingestion came before
 * the sweep. As wake_case otherwise. */
static void ended_case(const char *x, bool stray, char *out, size_t len)
{
	static const struct timed_sample samples[] = {
	    {0, 'r', 0}, {1740, 'r', 3480}, {2400, 'r', 4800}};
	int64_t lease = half_hour_micros();
	struct ingest_stats st;
	char rows[128], want[256];
	int64_t h9;

	snprintf(rows, sizeof(rows), "(%" PRId64 ", 'open', '" TDAY "T09:00:00Z', NULL, 1)",
		 2 * lease);
	st = timed_run(x, rows, stray, T(TDAY "T09:00:00Z"), samples, 3);
	h9 = hour_micros(x, "09");
	CHECK(h9 > lease);
	CHECK_I64(st.outrun_micros, h9 - lease);
	timed_holds(x, out, len);
	snprintf(want, sizeof(want),
		 "%" PRId64 "/open held %" PRId64 " spent %" PRId64 " outrun events 0", lease,
		 lease, h9);
	CHECK_STR(out, want);
}

/* A lease from 09:00 to 09:30 renewed by one from 09:20 to 09:50, the
 * sandbox paused at 09:51 by an event that comes before its samples:
 * within the renewal's grace (2 minutes), past the first lease's. The
 * first lease's hold is settled as at its end (sql/0061), as the renewal
 * ran the sandbox past it; it covers its own 30 minutes, its exact worst
 * case, and the minute past the renewal's end is on no hold. A review saw
 * that minute put on the first hold, settled at the event, and sent as
 * hold_consumed. With late, the renewal's hold is made after the event
 * (its check came after the pause, a control plane's clock ahead): the
 * first hold keeps the event's settles_at but covers only its lease all
 * the same (meter_hold_covers_to). As wake_case otherwise. */
static void renewal_case(const char *x, bool stray, bool late, char *out, size_t len)
{
	static const struct timed_sample samples[] = {{0, 'r', 0}, {3060, 'r', 6120}};
	int64_t lease = half_hour_micros();
	struct ingest_stats st;
	char rows[192], pause[1024];
	int64_t h9;

	snprintf(rows, sizeof(rows),
		 late ? "(%" PRId64 ", 'open', '" TDAY "T09:00:00Z', NULL, 1)"
		      : "(%" PRId64 ", 'open', '" TDAY "T09:00:00Z', NULL, 1),"
			" (%" PRId64 ", 'open', '" TDAY "T09:20:00Z', NULL, 2)",
		 lease, lease);
	snprintf(pause, sizeof(pause),
		 "SELECT * FROM meter_sandbox_event('s_%s', 'paused', '" TDAY "T09:51:00Z', 120)",
		 x);
	if (late) {
		size_t n = strlen(pause);
		snprintf(pause + n, sizeof(pause) - n,
			 "; INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
			 " status, lease_starts_at, lease_ends_at) VALUES ('acct_1', 'key_%s',"
			 " 's_%s', '" TDAY "', %" PRId64 ", 'open', '" TDAY "T09:20:00Z',"
			 " '" TDAY "T09:50:00Z');"
			 " UPDATE key_day_ledger SET held_micros = held_micros + %" PRId64
			 " WHERE key_id = 'key_%s' AND day = '" TDAY "'",
			 x, x, lease, lease, x);
	}
	st = timed_run_after(x, rows, stray, pause, T(TDAY "T09:00:00Z"), samples, 2);
	h9 = hour_micros(x, "09");
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE sandbox_id = 's_%s'"
		      " AND key_id = 'key_%s' ORDER BY hold_id LIMIT 1",
		      x, x),
		  lease);
	CHECK_I64(q64("SELECT count(*) FROM holds WHERE sandbox_id = 's_%s' AND key_id = 'key_%s'"
		      " AND consumed_micros > amount_micros",
		      x, x),
		  0);
	CHECK(st.outrun_micros > 0);
	timed_holds(x, out, len);
	CHECK(strstr(out, " outrun events 0") != NULL);
	CHECK(h9 > lease + st.outrun_micros); /* the renewal's hold took its part */
}

/* A hold consumes only usage from its lease's time (sql/0056), in C and,
 * on a call's retry, through meter_ledger_spend: the same holds both ways.
 * The function called directly with the pieces' times agrees too. */
static void test_holds_by_time(void)
{
	char c_way[256], sql_way[256], direct[256], want[256];
	const char *state;
	PGresult *r;
	int64_t h9, h10;

	fprintf(stderr, "holds consume usage of their leases' time\n");
	wake_case("wk", false, c_way, sizeof(c_way));
	wake_case("wl", true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	tail_case("kt", false, c_way, sizeof(c_way));
	tail_case("kl", true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	straddle_case("st", false, c_way, sizeof(c_way));
	straddle_case("sl", true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	worst_case("wc", false, c_way, sizeof(c_way));
	worst_case("wq", true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	ended_case("le", false, c_way, sizeof(c_way));
	ended_case("lq", true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	renewal_case("rn", false, false, c_way, sizeof(c_way));
	renewal_case("rq", true, false, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	renewal_case("rl", false, true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);
	renewal_case("rm", true, true, sql_way, sizeof(sql_way));
	CHECK_STR(sql_way, c_way);

	/* Directly: the wake's pieces by the hour, as spent by s_wk. */
	h9 = hour_micros("wk", "09");
	h10 = hour_micros("wk", "10");
	timed_setup("wd",
		    "(20000, 'settled', '" TDAY "T09:00:00Z', NULL, 1),"
		    " (20000, 'open', '" TDAY "T10:00:00Z', NULL, 2)",
		    false);
	qtext(direct, sizeof(direct),
	      "SELECT string_agg(spent_micros || '/' || outrun_micros, ',')"
	      " FROM meter_ledger_spend(ARRAY['acct_1', 'acct_1'], ARRAY['key_wd', 'key_wd'],"
	      " ARRAY['s_wd', 's_wd'], ARRAY['" TDAY "', '" TDAY "']::date[],"
	      " ARRAY['" TDAY "T10:00:00Z', '" TDAY "T09:00:00Z']::timestamptz[],"
	      " ARRAY['" TDAY "T10:05:00Z', '" TDAY "T10:00:00Z']::timestamptz[],"
	      " ARRAY[%" PRId64 ", %" PRId64 "]::bigint[])",
	      h10, h9);
	snprintf(want, sizeof(want), "%" PRId64 "/%" PRId64, h9 + h10, h9);
	CHECK_STR(direct, want);
	timed_holds("wd", direct, sizeof(direct));
	timed_holds("wk", want, sizeof(want));
	CHECK_STR(direct, want);
	/* A piece without its time is refused. */
	r = PQexec(conn, "SELECT * FROM meter_ledger_spend(ARRAY['acct_1'], ARRAY['key_wd'],"
			 " ARRAY['s_wd'], ARRAY['" TDAY "']::date[], ARRAY[NULL]::timestamptz[],"
			 " ARRAY['" TDAY "T10:00:00Z']::timestamptz[], ARRAY[1]::bigint[])");
	state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	CHECK_STR(state ? state : "", "22023");
	PQclear(r);
	/* The reference was spent without usage rows: out of the invariants. */
	exec("DELETE FROM holds WHERE key_id = 'key_wd'");
	exec("DELETE FROM key_day_ledger WHERE key_id = 'key_wd'");
}

/* Sandbox s_rp_<x> of key_rp, paused by an event at 03:00:10 with its hold
 * (03:00 to 03:15) settled, as a pause leaves it; then the statement extra
 * when not NULL. */
static void rp_setup(const char *x, const char *extra)
{
	char sql[1024], sb[32];

	snprintf(sb, sizeof(sb), "s_rp_%s", x);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, state_since, created_at) VALUES ('acct_1', '%s', 'key_rp',"
		 " 1, 1024, 0, 'paused', '2026-11-30T03:00:10Z', " MADE ")",
		 sb);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
		 " settled_at, lease_starts_at, lease_ends_at) VALUES ('acct_1', 'key_rp', '%s',"
		 " '2026-11-30', 5000, 'settled', now(), '2026-11-30T03:00:00Z',"
		 " '2026-11-30T03:15:00Z')",
		 sb);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
		 " VALUES ('acct_1', '%s', 'paused', '2026-11-30T03:00:10Z')",
		 sb);
	exec(sql);
	if (extra)
		exec(extra);
}

/* Ingests, in one call, the samples of s_rp_<x> given as states ('r',
 * 'p') at 03:00:00 + 10 s × (first + i), one batch each. */
static void rp_call(const char *x, int first, const char *states)
{
	struct sample_batch b[8];
	size_t n = strlen(states);
	char sb[32];

	snprintf(sb, sizeof(sb), "s_rp_%s", x);
	for (size_t i = 0; i < n; i++) {
		batch(&b[i], "h_rp");
		add(&b[i], sb, NULL, T("2026-11-30T03:00:00Z") + (first + (int64_t)i) * 10 * SEC,
		    states[i], 0, 1024, 0, 1);
	}
	run(b, n);
	for (size_t i = 0; i < n; i++)
		sample_batch_release(&b[i]);
}

/* The running_while_paused reports of s_rp_<x>. */
static int64_t rp_count(const char *x)
{
	return q64("SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
		   " AND payload->>'sandbox_id' = 's_rp_%s'"
		   " AND payload->>'reason' = 'running_while_paused'",
		   x);
}

/* The running_while_paused reports of s_rp_<x> by its hold whose lease
 * starts at 2026-11-30T<hms>Z. */
static int64_t rp_by_hold(const char *x, const char *hms)
{
	return q64("SELECT count(*) FROM webhook_outbox o JOIN holds h"
		   " ON o.dedup_key = 'paused-running/' || h.hold_id"
		   " WHERE h.sandbox_id = 's_rp_%s'"
		   " AND h.lease_starts_at = '2026-11-30T%sZ'",
		   x, hms);
}

/* Whether s_rp_<x>'s one report and s_rp_<y>'s are the same but for the
 * sandbox and the hold: 1 when they are. */
static int64_t rp_same(const char *x, const char *y)
{
	return q64("SELECT count(DISTINCT payload - 'sandbox_id' - 'hold_id')"
		   " FILTER (WHERE payload->>'sandbox_id' IN ('s_rp_%s', 's_rp_%s'))"
		   " FROM webhook_outbox WHERE type = 'hold_outrun'"
		   " AND payload->>'reason' = 'running_while_paused'",
		   x, y);
}

/* running_while_paused (sql/0039, 0057) for a resume whose paused and
 * running samples come in one call, as in calls of one sample each: the
 * same one report, by the settled hold, at the first sample that found
 * the sandbox running. None when a hold began or a running event came
 * between the two samples. */
static void test_paused_running_one_call(void)
{
	char at[64];

	fprintf(stderr, "running_while_paused in one call\n");
	exec("INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES"
	     " ('acct_1', 'key_rp', decode(repeat('cd', 32), 'hex'), 'full', 'UTC')");
	/* Seen running before the pause, then paused and running in one
	 * call: the row goes from running to running, no trigger. */
	rp_setup("one", NULL);
	rp_call("one", 0, "r");
	rp_call("one", 2, "prr");
	CHECK_I64(rp_count("one"), 1);
	qtext(at, sizeof(at),
	      "SELECT payload->>'at' FROM webhook_outbox WHERE type = 'hold_outrun'"
	      " AND payload->>'sandbox_id' = 's_rp_one'");
	CHECK_STR(at, "2026-11-30T03:00:30.000000Z");
	/* The same samples a call each: the same report. */
	rp_setup("split", NULL);
	rp_call("split", 0, "r");
	rp_call("split", 2, "p");
	CHECK_I64(rp_count("split"), 0);
	rp_call("split", 3, "r");
	rp_call("split", 4, "r");
	CHECK_I64(rp_count("split"), 1);
	CHECK_I64(rp_same("one", "split"), 1);
	/* A new meter row (an insert, no trigger): the same. */
	rp_setup("new", NULL);
	rp_call("new", 2, "prr");
	CHECK_I64(rp_count("new"), 1);
	CHECK_I64(rp_same("one", "new"), 1);
	/* Seen paused before the call, then running, paused and running in
	 * it: the first resume is reported (at 03:00:30), as calls of one
	 * sample each would, not the last one. */
	rp_setup("twice", NULL);
	rp_call("twice", 2, "p");
	rp_call("twice", 3, "rpr");
	CHECK_I64(rp_count("twice"), 1);
	qtext(at, sizeof(at),
	      "SELECT payload->>'at' FROM webhook_outbox WHERE type = 'hold_outrun'"
	      " AND payload->>'sandbox_id' = 's_rp_twice'");
	CHECK_STR(at, "2026-11-30T03:00:30.000000Z");
	CHECK_I64(rp_same("one", "twice"), 1);
	/* A hold begun between the paused and the running sample (a wake,
	 * since closed), or a running event between them: no report. */
	rp_setup("wake", "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
			 " status, settled_at, lease_starts_at, lease_ends_at) VALUES ('acct_1',"
			 " 'key_rp', 's_rp_wake', '2026-11-30', 5000, 'released', now(),"
			 " '2026-11-30T03:00:25Z', '2026-11-30T03:15:25Z')");
	rp_call("wake", 0, "r");
	rp_call("wake", 2, "prr");
	CHECK_I64(rp_count("wake"), 0);
	rp_setup("event", "INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
			  " VALUES ('acct_1', 's_rp_event', 'running', '2026-11-30T03:00:25Z')");
	rp_call("event", 0, "r");
	rp_call("event", 2, "prr");
	CHECK_I64(rp_count("event"), 0);
	/* Woken after the running sample (03:00:45: an open hold, a running
	 * event, the record running), and only then the samples taken in (a
	 * collector catching up): the resume at 03:00:30 is reported as it
	 * would have been on time, by the hold of its time, not the wake's
	 * (sql/0059: before, the wake's open hold and the record running
	 * now kept it from being reported at all). */
	rp_setup("after", "INSERT INTO holds (account_id, key_id, sandbox_id, day,"
			  " amount_micros, status, lease_starts_at, lease_ends_at) VALUES"
			  " ('acct_1', 'key_rp', 's_rp_after', '2026-11-30', 5000, 'open',"
			  " '2026-11-30T03:00:45Z', '2026-11-30T03:15:45Z');"
			  " INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
			  " VALUES ('acct_1', 's_rp_after', 'running', '2026-11-30T03:00:45Z');"
			  " UPDATE sandboxes SET state = 'running',"
			  " state_since = '2026-11-30T03:00:45Z' WHERE sandbox_id = 's_rp_after'");
	rp_call("after", 0, "r");
	rp_call("after", 2, "prr");
	CHECK_I64(rp_count("after"), 1);
	CHECK_I64(rp_same("one", "after"), 1);
	CHECK_I64(rp_by_hold("after", "03:00:00"), 1);
	/* A wake's hold left whole (its pause, dated 03:00:15, recorded
	 * before the wake; held on its key-day), its lease over at 03:00:25
	 * and not swept yet: it does not cover the running sample at
	 * 03:00:30, which is reported, by that hold, as it would be taken in
	 * later. */
	rp_setup("ended", "INSERT INTO holds (account_id, key_id, sandbox_id, day,"
			  " amount_micros, status, lease_starts_at, lease_ends_at) VALUES"
			  " ('acct_1', 'key_rp', 's_rp_ended', '2026-11-30', 5000, 'open',"
			  " '2026-11-30T03:00:12Z', '2026-11-30T03:00:25Z');"
			  " INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
			  " VALUES ('acct_1', 's_rp_ended', 'paused', '2026-11-30T03:00:15Z');"
			  " INSERT INTO key_day_ledger AS l (account_id, key_id, day, held_micros)"
			  " VALUES ('acct_1', 'key_rp', '2026-11-30', 5000)"
			  " ON CONFLICT (account_id, key_id, day)"
			  " DO UPDATE SET held_micros = l.held_micros + 5000");
	rp_call("ended", 0, "r");
	rp_call("ended", 2, "prr");
	CHECK_I64(rp_by_hold("ended", "03:00:12"), 1);
	/* Seen paused before the call, then running at the pause's own
	 * instant (03:00:10) and after it: no sample found it resuming after
	 * the pause, so no report, in one call as in calls of one sample
	 * each (the meter row's trigger, comparing its old sample with the
	 * call's last, not adjacent ones, once reported it). */
	rp_setup("late", NULL);
	rp_call("late", 0, "p");
	rp_call("late", 1, "rr");
	CHECK_I64(rp_count("late"), 0);
	rp_setup("lates", NULL);
	rp_call("lates", 0, "p");
	rp_call("lates", 1, "r");
	rp_call("lates", 2, "r");
	CHECK_I64(rp_count("lates"), 0);
}

/* Bad samples are refused before anything is written. */
static void test_bad_input(void)
{
	struct sample_batch b;
	char err[256];
	struct ingest_stats st;
	char before[64], after[64];

	fprintf(stderr, "bad input\n");
	dump(before, sizeof(before));
	batch(&b, "h13");
	add(&b, "s_bad", NULL, T("2026-11-30T00:30:00Z"), 'r', -5, 512, 0, 1);
	CHECK_I64(ingest_batches(ing, conn, &b, 1, &st, err, sizeof(err)), METER_EINVAL);
	CHECK(strstr(err, "cpu_usec") != NULL);
	sample_batch_release(&b);
	batch(&b, "bad host!");
	add(&b, "s_bad", NULL, T("2026-11-30T00:30:00Z"), 'r', 5, 512, 0, 1);
	CHECK_I64(ingest_batches(ing, conn, &b, 1, &st, err, sizeof(err)), METER_EINVAL);
	sample_batch_release(&b);
	dump(after, sizeof(after));
	CHECK_STR(after, before);
	/* Empty input is fine and writes nothing. */
	CHECK_I64(ingest_batches(ing, conn, NULL, 0, &st, err, sizeof(err)), METER_OK);
	CHECK_I64(metrics_value("meter_ingest_errors_total", NULL), 2);
}

struct racer {
	const char *url;
	struct sample_batch *b;
	struct ingest_stats st;
	enum meter_rc rc;
	int pid; /* its backend's, set before the barrier */
	pthread_barrier_t *go;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	PGconn *c = NULL;
	char err[512];

	r->rc = db_connect(r->url, &c, err, sizeof(err));
	if (r->rc == METER_OK)
		r->pid = PQbackendPID(c);
	pthread_barrier_wait(r->go);
	if (r->rc == METER_OK)
		r->rc = ingest_batches(ing, c, r->b, 1, &r->st, err, sizeof(err));
	if (r->rc != METER_OK)
		fprintf(stderr, "racer: %s: %s\n", meter_rc_str(r->rc), err);
	PQfinish(c);
	return NULL;
}

/* Two connections ingest the same first samples of new sandboxes at once:
 * one wins, the other retries and ignores them; nothing is counted twice. */
static void test_concurrent(const char *url)
{
	struct sample_batch b;
	struct racer r[2];
	pthread_t t[2];
	pthread_barrier_t go;
	int64_t t0 = T("2026-11-30T00:40:00Z");
	int64_t used = 1000 * 3 * SEC, mem = 256 * 20 * SEC;

	fprintf(stderr, "concurrent ingestion of new sandboxes\n");
	batch(&b, "h14");
	for (int i = 0; i < 20; i++) {
		char id[32];
		snprintf(id, sizeof(id), "s_race_%d", i);
		add(&b, id, "key_a", t0, 'r', 0, 256, 0, 1);
		add(&b, id, "key_a", t0 + 10 * SEC, 'r', 1 * SEC, 256, 0, 1);
		add(&b, id, "key_a", t0 + 20 * SEC, 'r', 3 * SEC, 256, 0, 1);
	}
	pthread_barrier_init(&go, NULL, 2);
	for (int i = 0; i < 2; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].url = url;
		r[i].b = &b;
		r[i].go = &go;
		CHECK_I64(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	CHECK_I64(r[0].rc, METER_OK);
	CHECK_I64(r[1].rc, METER_OK);
	CHECK_I64(r[0].st.accepted + r[1].st.accepted, 60);
	CHECK_I64(r[0].st.ignored + r[1].st.ignored, 60);
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id LIKE 's_race_%%'"), 60);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id LIKE"
		      " 's_race_%%'"),
		  20 * 20 * SEC);
	CHECK_I64(q64("SELECT sum(total_micros) FROM usage_hourly WHERE sandbox_id LIKE"
		      " 's_race_%%'"),
		  20 * (micros(used, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB)));
	sample_batch_release(&b);
}

/* Waits (up to 10 s) until backend pid waits on a lock in a statement
 * like pattern. */
static bool await_lock(int pid, const char *pattern)
{
	for (int i = 0; i < 1000; i++) {
		if (q64("SELECT count(*) FROM pg_stat_activity WHERE pid = %d"
			" AND wait_event_type = 'Lock' AND query LIKE '%s'",
			pid, pattern) > 0)
			return true;
		usleep(10000);
	}
	return false;
}

/* Ingests b on a connection of its own while other (in a transaction that
 * holds a row the call needs) waits until the call waits on that row in a
 * statement like pattern, runs meanwhile (if not NULL) on the test's
 * connection, then commits: the call meets the row changed between its
 * read and its write. Fills r; closes other. */
static void race_past_with(const char *url, struct sample_batch *b, PGconn *other,
			   const char *pattern, const char *meanwhile, struct racer *r)
{
	static pthread_barrier_t go; /* r keeps its address; one race at a time */
	pthread_t t;

	pthread_barrier_init(&go, NULL, 2);
	memset(r, 0, sizeof(*r));
	r->url = url;
	r->b = b;
	r->go = &go;
	CHECK_I64(pthread_create(&t, NULL, race, r), 0);
	pthread_barrier_wait(&go);
	CHECK(await_lock(r->pid, pattern));
	if (meanwhile)
		exec(meanwhile);
	exec_on(other, "COMMIT");
	pthread_join(t, NULL);
	pthread_barrier_destroy(&go);
	r->go = NULL;
	PQfinish(other);
}

static void race_past(const char *url, struct sample_batch *b, PGconn *other, const char *pattern,
		      struct racer *r)
{
	race_past_with(url, b, other, pattern, NULL, r);
}

/* A meter row changed by another transaction between the call's read (no
 * lock) and its update: the update skips the row, the call rolls back and
 * is retried with the rows locked; nothing lost, nothing counted twice. The
 * other transaction holds the changed row until ingestion waits on it. */
static void test_meter_changed(const char *url)
{
	struct sample_batch b;
	struct racer r;
	PGconn *other = NULL;
	char err[512];
	int64_t t0 = T("2026-11-30T00:40:00Z");
	int64_t used = 1000 * 4 * SEC, mem = 256 * 30 * SEC;

	fprintf(stderr, "meter row changed between read and update\n");
	CHECK_I64(db_connect(url, &other, err, sizeof(err)), METER_OK);
	exec_on(other, "BEGIN");
	exec_on(other, "UPDATE sandbox_meter SET updated_at = now() WHERE sandbox_id = 's_race_7'");
	batch(&b, "h14");
	for (int i = 0; i < 20; i++) {
		char id[32];
		snprintf(id, sizeof(id), "s_race_%d", i);
		add(&b, id, "key_a", t0 + 30 * SEC, 'r', 4 * SEC, 256, 0, 1);
	}
	race_past(url, &b, other, "UPDATE sandbox_meter %", &r);
	CHECK_I64(r.rc, METER_OK);
	CHECK_I64(r.st.accepted, 20);
	CHECK_I64(r.st.retries, 1);
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id LIKE 's_race_%%'"), 80);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id LIKE"
		      " 's_race_%%'"),
		  20 * 30 * SEC);
	CHECK_I64(q64("SELECT sum(total_micros) FROM usage_hourly WHERE sandbox_id LIKE"
		      " 's_race_%%'"),
		  20 * (micros(used, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB)));
	sample_batch_release(&b);
}

/* A hold changed by a writer that did not take its key-day's ledger row
 * first (every writer of the service does) between ingestion's read of the
 * holds and its update: the update skips it, the call is retried through
 * meter_ledger_spend, which covers only what the hold has left now (1,000
 * of the 5,000; the rest is outrun); held shrinks by that. */
static void test_hold_changed(const char *url)
{
	struct sample_batch b;
	struct racer r;
	PGconn *other = NULL;
	char err[512];
	int64_t t0 = T("2026-11-30T02:00:00Z");
	int64_t cost = busy_minute_micros();

	fprintf(stderr, "hold changed between read and update\n");
	one_hold("s_hc", "key_hc", "key_hc", "2026-11-30T02:00:00Z", "2026-11-30T03:00:00Z");
	batch(&b, "h16");
	add(&b, "s_hc", NULL, t0, 'r', 0, 4096, 0, 2);
	run1(&b);
	CHECK_I64(db_connect(url, &other, err, sizeof(err)), METER_OK);
	exec_on(other, "BEGIN");
	exec_on(other, "UPDATE holds SET consumed_micros = consumed_micros + 4000"
		       " WHERE sandbox_id = 's_hc'");
	batch(&b, "h16");
	add(&b, "s_hc", NULL, t0 + 60 * SEC, 'r', 120 * SEC, 4096, 0, 2);
	race_past(url, &b, other, "UPDATE holds %", &r);
	CHECK_I64(r.rc, METER_OK);
	CHECK_I64(r.st.retries, 1);
	CHECK(cost > 1000);
	CHECK_I64(q64("SELECT consumed_micros FROM holds WHERE sandbox_id = 's_hc'"), 4000 + cost);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_hc'"), cost);
	CHECK_I64(q64("SELECT held_micros FROM key_day_ledger WHERE key_id = 'key_hc'"), 4000);
	CHECK_I64(r.st.outrun_micros, cost - 1000);
	sample_batch_release(&b);
}

/* Sandbox sbx of key sbx's own name with a hold of 80,000 (2 vCPUs, 4 GiB
 * for an hour: 04:00 to 05:00) and the key's ledger row holding it, metered
 * from 04:00:00 running. */
static void event_setup(const char *sbx)
{
	struct sample_batch b;
	char sql[1024];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at) VALUES ('acct_1', '%s', '%s', 2, 4096, 0,"
		 " 'running', " MADE ")",
		 sbx, sbx);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
		 " lease_starts_at, lease_ends_at) VALUES ('acct_1', '%s', '%s', '2026-11-30',"
		 " 80000, 'open', '2026-11-30T04:00:00Z', '2026-11-30T05:00:00Z')",
		 sbx, sbx);
	exec(sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros)"
		 " VALUES ('acct_1', '%s', '2026-11-30', 0, 80000)",
		 sbx);
	exec(sql);
	batch(&b, "h17");
	add(&b, sbx, NULL, T("2026-11-30T04:00:00Z"), 'r', 0, 4096, 0, 2);
	run1(&b);
}

/* A pause recorded while a call that meters its sandbox is in flight. The
 * event (meter_sandbox_event, as POST .../events runs it) takes the
 * sandbox's meter row FOR SHARE and settles the hold under the key-day's
 * ledger row, keeping the tail up to 04:00:10; the call read the events
 * before the pause was committed and waits to update the meter row. It
 * must not bill the minute as running: it meets the new event once it
 * holds the ledger row, is retried and bills 10 s running and 50 s paused,
 * to the micro what a call made after the event bills, with nothing
 * outrun. */
static void test_event_in_flight(const char *url)
{
	static const char ev[] = "'paused', '2026-11-30T04:00:10Z', 30)";
	struct sample_batch b;
	struct racer r;
	PGconn *other = NULL;
	char err[512], sql[256], raced[512], after[512];
	int64_t used = 1000 * 20 * SEC, mem = 4096 * 10 * SEC;
	int64_t cost = micros(used, 25000, DIV_CPU) + micros(mem, 7500, DIV_MIB);

	fprintf(stderr, "pause recorded while its sandbox is metered\n");
	event_setup("s_evr");
	event_setup("s_eva");
	/* After: the event, then the samples. */
	snprintf(sql, sizeof(sql), "SELECT * FROM meter_sandbox_event('s_eva', %s", ev);
	exec(sql);
	batch(&b, "h17");
	add(&b, "s_eva", NULL, T("2026-11-30T04:01:00Z"), 'p', 20 * SEC, 4096, 0, 2);
	CHECK_I64(run1(&b).outrun_micros, 0);
	/* In flight: the samples' call waits for the meter row the
	 * uncommitted event holds. */
	CHECK_I64(db_connect(url, &other, err, sizeof(err)), METER_OK);
	exec_on(other, "BEGIN");
	snprintf(sql, sizeof(sql), "SELECT * FROM meter_sandbox_event('s_evr', %s", ev);
	exec_on(other, sql);
	batch(&b, "h17");
	add(&b, "s_evr", NULL, T("2026-11-30T04:01:00Z"), 'p', 20 * SEC, 4096, 0, 2);
	race_past(url, &b, other, "UPDATE sandbox_meter %", &r);
	CHECK_I64(r.rc, METER_OK);
	CHECK_I64(r.st.retries, 1);
	CHECK_I64(r.st.outrun_micros, 0);
	sample_batch_release(&b);
	check_totals("s_eva", 10, 50, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	check_totals("s_evr", 10, 50, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	/* The hold kept ceil(80,000 × 10 / 3,600) + 1 = 224 and covered the
	 * cost; committed is what it kept. */
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 's_evr'"), cost);
	CHECK_I64(q64("SELECT spent_micros + held_micros FROM key_day_ledger"
		      " WHERE key_id = 's_evr'"),
		  224);
	holds_of("s_evr", "s_evr", raced, sizeof(raced));
	holds_of("s_eva", "s_eva", after, sizeof(after));
	CHECK_STR(raced, after);
}

/* A running event recorded while a call that meters its sandbox waits for
 * the key-day's ledger row settles nothing, so the call goes on without a
 * retry, as if the event came after it: a minute running. */
static void test_running_in_flight(const char *url)
{
	struct sample_batch b;
	struct racer r;
	PGconn *other = NULL;
	char err[512];
	int64_t used = 1000 * 30 * SEC, mem = 4096 * 60 * SEC;

	fprintf(stderr, "running event recorded while its sandbox is metered\n");
	event_setup("s_evn");
	CHECK_I64(db_connect(url, &other, err, sizeof(err)), METER_OK);
	exec_on(other, "BEGIN");
	exec_on(other, "UPDATE key_day_ledger SET updated_at = now() WHERE key_id = 's_evn'");
	batch(&b, "h17");
	add(&b, "s_evn", NULL, T("2026-11-30T04:01:00Z"), 'r', 30 * SEC, 4096, 0, 2);
	race_past_with(url, &b, other, "INSERT INTO key_day_ledger %",
		       "SELECT * FROM meter_sandbox_event('s_evn', 'running',"
		       " '2026-11-30T04:00:30Z', 30)",
		       &r);
	CHECK_I64(r.rc, METER_OK);
	CHECK_I64(r.st.retries, 0);
	sample_batch_release(&b);
	CHECK_I64(q64("SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 's_evn'"), 1);
	check_totals("s_evn", 60, 0, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
}

struct sql_racer {
	const char *url;
	const char *sql;
	int pid;
	bool ok;
	pthread_barrier_t *go;
};

/* Runs r->sql on a connection of its own (its backend's pid set before the
 * barrier). */
static void *sql_race(void *arg)
{
	struct sql_racer *r = arg;
	PGconn *c = NULL;
	char err[512];

	if (db_connect(r->url, &c, err, sizeof(err)) == METER_OK)
		r->pid = PQbackendPID(c);
	pthread_barrier_wait(r->go);
	if (c) {
		PGresult *res = PQexec(c, r->sql);
		r->ok = PQresultStatus(res) == PGRES_TUPLES_OK;
		PQclear(res);
	}
	PQfinish(c);
	return NULL;
}

/* A stop of a sandbox whose hold is settled already (so that it has no
 * ledger row to take) waits for a transaction that holds the sandbox's
 * meter row, as ingestion's retry does before it reads the events: no
 * pause or stop comes between that read and the retry's commit. */
static void test_event_waits_for_meter_row(const char *url)
{
	struct sql_racer r = {.url = url,
			      .sql = "SELECT * FROM meter_sandbox_event('s_eva', 'stopped',"
				     " '2026-11-30T04:02:00Z', 30)"};
	PGconn *other = NULL;
	pthread_barrier_t go;
	pthread_t t;
	char err[512];

	fprintf(stderr, "a stop waits for the meter row ingestion holds\n");
	CHECK_I64(q64("SELECT count(*) FROM holds WHERE sandbox_id = 's_eva' AND status = 'open'"
		      " AND settles_at IS NULL"),
		  0);
	CHECK_I64(db_connect(url, &other, err, sizeof(err)), METER_OK);
	exec_on(other, "BEGIN");
	exec_on(other, "SELECT 1 FROM sandbox_meter WHERE sandbox_id = 's_eva' FOR UPDATE");
	pthread_barrier_init(&go, NULL, 2);
	r.go = &go;
	CHECK_I64(pthread_create(&t, NULL, sql_race, &r), 0);
	pthread_barrier_wait(&go);
	CHECK(await_lock(r.pid, "SELECT * FROM meter_sandbox_event%"));
	CHECK_I64(q64("SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 's_eva'"
		      " AND type = 'stopped'"),
		  0);
	exec_on(other, "COMMIT");
	pthread_join(t, NULL);
	pthread_barrier_destroy(&go);
	PQfinish(other);
	CHECK(r.ok);
	CHECK_I64(q64("SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 's_eva'"
		      " AND type = 'stopped'"),
		  1);
}

/* ---- the cache of meter rows ---------------------------------------------- */

/* Ingests b through x (another ingest object: another process). */
static struct ingest_stats run_on(struct ingest *x, struct sample_batch *b)
{
	struct ingest_stats st;
	char err[512];
	enum meter_rc rc = ingest_batches(x, conn, b, 1, &st, err, sizeof(err));

	if (rc != METER_OK)
		fprintf(stderr, "ingest_batches: %s: %s\n", meter_rc_str(rc), err);
	CHECK_I64(rc, METER_OK);
	sample_batch_release(b);
	return st;
}

/* A sandbox_meter row and its usage rows as text, ids left out. */
static void meter_state(const char *sbx, char *out, size_t len)
{
	qtext(out, len,
	      "SELECT (SELECT row(last_sampled_at, last_state, last_cpu_usec, last_memory_mib,"
	      " last_storage_mib, last_vcpus, price_version, cpu_rem, memory_rem, storage_rem,"
	      " cpu_cum_micros, memory_cum_micros, storage_cum_micros, day, day_running_usec,"
	      " day_cpu_used_mcus, day_cpu_billed_mcus, day_total_micros, month,"
	      " month_total_micros, day_ends_at)::text FROM sandbox_meter WHERE sandbox_id = '%s')"
	      " || (SELECT string_agg(row(hour, price_version, day, running_usec, paused_usec,"
	      " cpu_used_mcus, cpu_billed_mcus, memory_mibus, storage_mibus, cpu_micros,"
	      " memory_micros, storage_micros, total_micros, cpu_cum_micros, memory_cum_micros,"
	      " storage_cum_micros)::text, ';' ORDER BY hour, day, price_version)"
	      " FROM usage_hourly WHERE sandbox_id = '%s')",
	      sbx, sbx);
}

/* Calls after the first take the meter row from the cache, and end on the
 * same rows, to the microdollar, as calls that read it every time. */
static void test_cache_same(void)
{
	struct ingest_opts o;
	struct ingest *plain;
	struct sample_batch b;
	struct ingest_stats st[2];
	char with[4096], without[4096];
	int64_t t0 = T("2026-11-30T05:59:30Z");
	const int64_t cpu[5] = {0, 7 * SEC, 9 * SEC, 9 * SEC + 1, 20 * SEC};
	const char st_of[5] = {'r', 'r', 'p', 'p', 'r'};

	fprintf(stderr, "meter rows from the cache\n");
	ingest_opts_init(&o);
	o.default_vcpus = 3;
	o.cache_sandboxes = 0;
	plain = ingest_new(&o);
	CHECK(plain != NULL);
	for (int i = 0; i < 5; i++) {
		for (int k = 0; k < 2; k++) {
			batch(&b, "h20");
			add(&b, k == 0 ? "s_cache_a" : "s_cache_b", "key_a", t0 + i * 20 * SEC,
			    st_of[i], cpu[i], 2048, 512, 2);
			st[k] = run_on(k == 0 ? ing : plain, &b);
			CHECK_I64(st[k].retries, 0);
		}
		/* The first call reads the row; the others take it. */
		CHECK_I64(st[0].cached, i == 0 ? 0 : 1);
		CHECK_I64(st[1].cached, 0);
		CHECK_I64(st[0].micros, st[1].micros);
	}
	meter_state("s_cache_a", with, sizeof(with));
	meter_state("s_cache_b", without, sizeof(without));
	CHECK(with[0] != '\0');
	CHECK_STR(with, without);
	CHECK(usum("s_cache_a", "total_micros") > 0);
	ingest_free(plain);
}

/* Another process meters the sandbox between two calls: the cached row is
 * stale, its update finds another version, the call is retried reading the
 * row, and nothing is counted twice: 30 s of running, once. */
static void test_cache_stale(void)
{
	struct ingest_opts o;
	struct ingest *other;
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T06:10:00Z");
	int64_t used = 1000 * 6 * SEC, mem = 1024 * 30 * SEC; /* 200 millicores: above the floor */

	fprintf(stderr, "cached meter row changed by another process\n");
	ingest_opts_init(&o);
	other = ingest_new(&o);
	CHECK(other != NULL);
	batch(&b, "h21");
	add(&b, "s_cache_s", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_cache_s", "key_a", t0 + 10 * SEC, 'r', 2 * SEC, 1024, 0, 1);
	run1(&b);
	batch(&b, "h22");
	add(&b, "s_cache_s", "key_a", t0 + 20 * SEC, 'r', 4 * SEC, 1024, 0, 1);
	st = run_on(other, &b);
	CHECK_I64(st.retries, 0);
	batch(&b, "h21");
	add(&b, "s_cache_s", "key_a", t0 + 30 * SEC, 'r', 6 * SEC, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.retries, 1);
	CHECK_I64(st.accepted, 1);
	CHECK_I64(st.cached, 0); /* the retry read it */
	check_totals("s_cache_s", 30, 0, used, used, mem, 0, micros(used, 25000, DIV_CPU),
		     micros(mem, 7500, DIV_MIB), 0);
	/* Read again, it is cached again. */
	batch(&b, "h21");
	add(&b, "s_cache_s", "key_a", t0 + 40 * SEC, 'r', 8 * SEC, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.retries, 0);
	CHECK_I64(st.cached, 1);
	ingest_free(other);
}

/* A call whose every sample is ignored writes no meter row, so no update's
 * guard checks the cached one: it is checked on its own. Here the row was
 * moved back behind the cache's watermark by another writer: the call must
 * follow the row (take the sample at t0 + 5 s), not the cache (ignore it). */
static void test_cache_ignored(void)
{
	struct sample_batch b;
	struct ingest_stats st;
	int64_t t0 = T("2026-11-30T06:20:00Z");

	fprintf(stderr, "cached meter row checked when every sample is ignored\n");
	batch(&b, "h24");
	add(&b, "s_cache_i", "key_a", t0, 'r', 0, 1024, 0, 1);
	add(&b, "s_cache_i", "key_a", t0 + 10 * SEC, 'r', 2 * SEC, 1024, 0, 1);
	run1(&b);
	/* Unchanged, a sample at or before the watermark is ignored, from the
	 * cache, with no retry. */
	batch(&b, "h24");
	add(&b, "s_cache_i", "key_a", t0 + 10 * SEC, 'r', 2 * SEC, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.cached, 1);
	CHECK_I64(st.ignored, 1);
	CHECK_I64(st.retries, 0);
	exec("UPDATE sandbox_meter SET last_sampled_at = '2026-11-30T06:20:00Z',"
	     " last_cpu_usec = 0 WHERE sandbox_id = 's_cache_i'");
	batch(&b, "h24");
	add(&b, "s_cache_i", "key_a", t0 + 5 * SEC, 'r', 1 * SEC, 1024, 0, 1);
	st = run1(&b);
	CHECK_I64(st.retries, 1);
	CHECK_I64(st.accepted, 1);
	CHECK_I64(st.ignored, 0);
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 's_cache_i'"), 3);
	/* Past the newest sample stored again (test_invariants). */
	batch(&b, "h24");
	add(&b, "s_cache_i", "key_a", t0 + 20 * SEC, 'r', 3 * SEC, 1024, 0, 1);
	CHECK_I64(run1(&b).accepted, 1);
}

/* One sample of s_cache_z (cgroup-like: no memory), t seconds after
 * 23:50, c seconds of CPU. */
static struct ingest_stats zsample(int t, int c)
{
	struct sample_batch b;

	batch(&b, "h23");
	add(&b, "s_cache_z", NULL, T("2026-11-30T23:50:00Z") + t * SEC, 'r', c * SEC,
	    SAMPLE_UNKNOWN, 0, 2);
	return run1(&b);
}

/* A key's time zone and a sandbox's size changed between two calls: what
 * the cache holds of them is not used; the next call reads them. */
static void test_cache_generation(void)
{
	fprintf(stderr, "cached zone and size changed\n");
	exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	     " storage_mib, state, created_at) VALUES ('acct_1', 's_cache_z', 'key_cz', 2, 1024, "
	     "0, 'running', " MADE ")");
	zsample(0, 0);
	zsample(300, 30);
	CHECK_I64(q64("SELECT count(*) FROM usage_hourly WHERE sandbox_id = 's_cache_z'"
		      " AND day = '2026-11-30'"),
		  1);
	/* 23:55-23:58 UTC is 05:25-05:28 on 1 December in Kolkata. */
	exec("UPDATE api_keys SET time_zone = 'Asia/Kolkata' WHERE key_id = 'key_cz'");
	CHECK_I64(zsample(480, 48).cached, 0);
	CHECK_I64(urow("s_cache_z", "2026-11-30T23:00:00Z", "2026-12-01", "running_usec"),
		  180 * SEC);
	CHECK_I64(q64("SELECT spent_micros FROM key_day_ledger WHERE key_id = 'key_cz'"
		      " AND day = '2026-12-01'"),
		  urow("s_cache_z", "2026-11-30T23:00:00Z", "2026-12-01", "total_micros"));
	CHECK_I64(zsample(490, 49).cached, 1);
	/* The sandbox's memory, which its samples do not carry. */
	exec("UPDATE sandboxes SET memory_mib = 2048 WHERE sandbox_id = 's_cache_z'");
	CHECK_I64(zsample(500, 50).cached, 0);
	CHECK_I64(q64("SELECT last_memory_mib FROM sandbox_meter WHERE sandbox_id = 's_cache_z'"),
		  2048);
	/* A change that is not one (same zone) does not drop the cache. */
	exec("UPDATE api_keys SET time_zone = 'Asia/Kolkata' WHERE key_id = 'key_cz'");
	CHECK_I64(zsample(510, 51).cached, 1);
}

/* Invariants over everything ingested above. */
static void test_invariants(void)
{
	fprintf(stderr, "invariants\n");
	/* Every key-day's spend = the sum of that day's usage rows. */
	CHECK_I64(q64("SELECT count(*) FROM key_day_ledger l WHERE spent_micros <>"
		      " (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly u"
		      "  WHERE u.account_id = l.account_id AND u.key_id = l.key_id"
		      "  AND u.day = l.day)"),
		  0);
	/* Every sandbox's cumulative money = the sum of its rows. */
	CHECK_I64(q64("SELECT count(*) FROM sandbox_meter m WHERE"
		      " cpu_cum_micros + memory_cum_micros + storage_cum_micros <>"
		      " (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly u"
		      "  WHERE u.account_id = m.account_id AND u.sandbox_id = m.sandbox_id)"),
		  0);
	/* The newest row's cumulative money equals the meter's. */
	CHECK_I64(q64("SELECT count(*) FROM sandbox_meter m JOIN LATERAL ("
		      " SELECT * FROM usage_hourly u WHERE u.account_id = m.account_id"
		      " AND u.sandbox_id = m.sandbox_id ORDER BY hour DESC, day DESC,"
		      " price_version DESC LIMIT 1) u ON true"
		      " WHERE u.cpu_cum_micros <> m.cpu_cum_micros"
		      " OR u.memory_cum_micros <> m.memory_cum_micros"
		      " OR u.storage_cum_micros <> m.storage_cum_micros"),
		  0);
	/* The watermark is the newest sample stored. */
	CHECK_I64(q64("SELECT count(*) FROM sandbox_meter m WHERE last_sampled_at <>"
		      " (SELECT max(sampled_at) FROM samples s WHERE s.account_id = m.account_id"
		      "  AND s.sandbox_id = m.sandbox_id)"),
		  0);
	CHECK(metrics_value("meter_samples_ingested_total", NULL) > 0);
	CHECK(metrics_value("meter_ingest_anomalies_total", "kind=\"counter_reset\"") >= 1);
}

int main(void)
{
	struct testdb db;
	struct ingest_opts o;
	char err[512];
	int applied;

	if (testdb_create(&db, "ingest") != 0)
		return 1;
	conn = db.conn;
	if (migrate_apply(conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "migrate: %s\n", err);
		testdb_drop(&db);
		return 1;
	}
	exec("SET client_min_messages = warning");
	exec("INSERT INTO accounts (account_id, name) VALUES ('acct_1', 'Account one')");
	exec("INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES"
	     " ('acct_1', 'key_a', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_ro', decode(repeat('ab', 32), 'hex'), 'read_only', 'UTC'),"
	     " ('acct_1', 'key_w', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_hold', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_ma', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_mb', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_hc', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_ok', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_other', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_ist', decode(repeat('ab', 32), 'hex'), 'full', 'Asia/Kolkata'),"
	     " ('acct_1', 'key_cz', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_rows', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 's_evr', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 's_eva', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 's_evn', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),"
	     " ('acct_1', 'key_ny', decode(repeat('ab', 32), 'hex'), 'full', 'America/New_York'),"
	     " ('acct_1', 'key_apia', decode(repeat('ab', 32), 'hex'), 'full', 'Pacific/Apia')");
	exec(
	    "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone, revoked_at)"
	    " VALUES ('acct_1', 'key_rev', decode(repeat('ab', 32), 'hex'), 'full', 'UTC', now())");
	ingest_opts_init(&o);
	o.default_vcpus = 3;
	ing = ingest_new(&o);
	CHECK(ing != NULL);

	test_steady_floor();
	test_worked_figures();
	test_counter_reset();
	test_gap();
	test_long_gap();
	test_many_rows();
	test_full_hour();
	test_stop_sample();
	test_events();
	test_events_edges();
	test_cgroup_state();
	test_cap();
	test_duplicate_batch();
	test_out_of_order();
	test_late();
	test_kolkata();
	test_new_york();
	test_apia();
	test_price_change();
	test_unattributed();
	test_before_create();
	test_head();
	test_stop_tails();
	test_storage_left_out();
	test_holds();
	test_holds_multi();
	test_hold_other_key();
	test_holds_by_time();
	test_paused_running_one_call();
	test_bad_input();
	test_concurrent(db.url);
	test_meter_changed(db.url);
	test_hold_changed(db.url);
	test_event_in_flight(db.url);
	test_running_in_flight(db.url);
	test_event_waits_for_meter_row(db.url);
	test_cache_same();
	test_cache_stale();
	test_cache_ignored();
	test_cache_generation();
	test_invariants();

	ingest_free(ing);
	metrics_reset();
	testdb_drop(&db);
	return check_done();
}
