/* meter: ingestion of sample batches (see ingest.h).
 *
 * One call, one transaction:
 *   0. (before it, autocommit, cached) the daily sample partitions;
 *   1. BEGIN; the price book;
 *   2. sandbox_meter rows with their sandboxes rows (attribution, sizes) and
 *      the key's zone, read without a lock (after a conflict: locked FOR
 *      UPDATE in (account, sandbox) order); the sandboxes rows of new
 *      sandboxes, creating the missing ones;
 *   3. lifecycle events in (watermark, newest sample];
 *   4. day starts of the zones involved (cache, else PostgreSQL);
 *   5. the arithmetic, in C, per sandbox in time order;
 *   6. writes: raw samples (binary COPY), the resumes seen between two
 *      samples (running_while_paused, sql/0057; no statement when none),
 *      sandbox_meter (UPDATE of the row versions read, INSERT of new
 *      ones, counts checked), usage_hourly
 *      (UPDATE of the rows that exist, INSERT of the others), then the
 *      key-day ledger and the open holds (meter_ledger_spend's rules, see
 *      SQL_LEDGER_SPENT), the events counted again under the ledger rows
 *      (ing_events_again) and ingest_watermarks; COMMIT.
 * Rows other than samples travel as binary array parameters expanded by
 * unnest(): the meter and usage rows as one array of a row type each
 * (sql/0009_ingest_rows.sql), smaller sets one array per column. No text to
 * parse on the server, no temp tables, one statement per table. A call
 * costs about fifteen round trips, whatever its size.
 * Times are UTC µs since the Unix epoch (int64) in C, timestamptz in SQL;
 * days are days since 1970-01-01 in C, date in SQL. */
#include "ingest.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "db_util.h"
#include "dbpool.h"
#include "hash.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"
#include "usage.h"

#define ING_HOUR_USEC	  INT64_C(3600000000)
#define ING_DAY_USEC	  INT64_C(86400000000)
#define ING_ZONE_MAX	  128
#define ING_ZONE_DAYS_MAX 4000 /* days kept per zone in the cache */
#define ING_PARTS_MAX	  4096 /* partition days remembered */
#define ING_TRIES	  4    /* one try and three retries */
#define ING_COPY_CHUNK	  (1024 * 1024)
#define ING_PART_RETRY_MS 60000 /* a partition not made: the wait before the next try */
/* The longest wait for samples' lock to add a partition (1 s), set for the
 * partitions' transaction only. */
#define ING_PART_LOCK_SQL "SELECT set_config('lock_timeout', '1000', true)"
#define ING_VERSION_NONE  (-1)
#define ING_DAY_NONE	  INT32_MIN /* no day / month metered yet */
#define ING_DAY_NONE_SQL  "-2147483648"
#define ING_TIME_NONE	  INT64_MIN		    /* no instant */
#define ING_CACHE_MAX	  10000000		    /* cache_sandboxes at most */
#define ING_CACHE_AGE	  (INT64_C(3600) * 1000000) /* a cache entry is used this long, µs */

/* 0001-01-01T00:00:00Z in Unix µs: before any event (ing_load_events). */
#define ING_EVENTS_EVER_USEC INT64_C(-62135596800000000)

/* A sandbox's created_at in µs since the Unix epoch (a bigint column). */
#define ING_CREATED_SQL "(extract(epoch FROM sb.created_at) * 1000000)::bigint"

/* Cached day starts of one zone: start[i] is when day d0 + i begins. */
struct ing_zone {
	char name[ING_ZONE_MAX];
	int32_t d0;
	size_t n;
	int64_t *start; /* owned */
	/* Per call only: the span of instants the call needs. */
	bool need;
	int64_t lo, hi;
};

struct ing_cached;

struct ingest {
	struct ingest_opts opts;
	pthread_mutex_t mu; /* guards everything below */
	struct ing_zone *zones;
	size_t nzones, zcap;
	int32_t *parts; /* sorted UTC days whose sample partition exists */
	size_t nparts, pcap;
	int64_t parts_retry_ms; /* no partition made before (clock_mono_ms) */
	/* Meter rows as the last committed call left them (ing_cache_*):
	 * entries found through slots (open addressing: entry index + 1). */
	struct ing_cached *cache;
	size_t ncache, cache_cap;
	uint32_t *slots;
	size_t nslots;
	/* The server the entries come from (pg_postmaster_start_time, µs):
	 * another one (a promoted standby, a restore, a restart) may have
	 * handed out the same transaction ids again, so its rows start over. */
	int64_t server_start;
};

/* ---- small utilities ------------------------------------------------------ */

/* Grows *p (elements of size elem, capacity *cap) to hold need elements. */
static bool ing_grow(void *pp, size_t *cap, size_t need, size_t elem)
{
	void **p = pp;
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return true;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * elem);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

/* Binary COPY (PostgreSQL's "PGCOPY" format): header, tuples, trailer. */
static void copy_header(struct db_bin *b)
{
	static const char sig[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};

	db_bin_put(b, sig, sizeof(sig));
	db_bin_be32(b, 0); /* flags */
	db_bin_be32(b, 0); /* header extension */
}

static void copy_trailer(struct db_bin *b)
{
	db_bin_be16(b, -1);
}

/* floor(a / b) for b > 0. */
static int64_t ing_floordiv(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* "YYYY-MM-DD" for a day number (days since 1970-01-01). */
static void ing_fmt_day(int32_t day, char *buf, size_t len)
{
	time_t secs = (time_t)day * 86400;
	struct tm tm;

	gmtime_r(&secs, &tm);
	snprintf(buf, len, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

/* Text array literals for parameters: {"a","b"} or {1,2}. */
static void arr_open(struct db_bin *b)
{
	db_bin_reset(b);
	db_bin_str(b, "{");
}

static void arr_sep(struct db_bin *b)
{
	if (b->n > 1)
		db_bin_str(b, ",");
}

static void arr_text(struct db_bin *b, const char *s)
{
	arr_sep(b);
	db_bin_str(b, "\"");
	for (const char *p = s; *p; p++) {
		if (*p == '"' || *p == '\\')
			db_bin_put(b, "\\", 1);
		db_bin_put(b, p, 1);
	}
	db_bin_str(b, "\"");
}

static void arr_i64(struct db_bin *b, int64_t v)
{
	char t[24];

	snprintf(t, sizeof(t), "%" PRId64, v);
	arr_sep(b);
	db_bin_str(b, t);
}

static void arr_time(struct db_bin *b, int64_t usec)
{
	char t[128];

	parse_format_time(usec, t, sizeof(t));
	arr_text(b, t);
}

static void arr_close(struct db_bin *b)
{
	db_bin_str(b, "}");
}

/* Binary array parameters (db_barr, array_recv's format): the server
 * reads them without parsing text. */
#define ING_NARR 7 /* the most array parameters of one statement (the ledger) */

/* One array parameter of rows of a composite type (sql/0009_ingest_rows.sql):
 * array_recv's header with the type's oid, then per element its length and
 * record_recv's format: the number of columns, then per column its type's
 * oid and the value as in binary COPY. PostgreSQL expands such an array in
 * one pass, where one array per column costs a pass per column. */
struct ing_rows {
	struct db_barr a;
	size_t row_at; /* where the open row's length goes */
	int32_t ncols, want;
};

static void rows_start(struct ing_rows *r, Oid row_type)
{
	db_barr_start(&r->a, 0, row_type);
}

/* Opens a row of ncols columns. */
static void row_open(struct ing_rows *r, int32_t ncols)
{
	r->row_at = r->a.b.n;
	db_bin_be32(&r->a.b, 0); /* length: patched by row_close */
	db_bin_be32(&r->a.b, ncols);
	r->ncols = 0;
	r->want = ncols;
}

static void row_close(struct ing_rows *r)
{
	size_t len = r->a.b.n - r->row_at - 4;

	assert(r->ncols == r->want);
	if (r->a.b.oom)
		return;
	for (int i = 0; i < 4; i++)
		r->a.b.p[r->row_at + (size_t)i] = (char)((uint32_t)len >> (24 - 8 * i));
	r->a.n++;
}

static void row_col(struct ing_rows *r, Oid type)
{
	db_bin_be32(&r->a.b, (int32_t)type);
	r->ncols++;
}

static void row_text(struct ing_rows *r, const char *s)
{
	row_col(r, DB_OID_TEXT);
	db_bin_text(&r->a.b, s);
}

/* A NULL of column type type. */
static void row_null(struct ing_rows *r, Oid type)
{
	row_col(r, type);
	db_bin_null(&r->a.b);
}

static void row_i64(struct ing_rows *r, int64_t v)
{
	row_col(r, DB_OID_INT8);
	db_bin_i64(&r->a.b, v);
}

static void row_i32(struct ing_rows *r, int32_t v)
{
	row_col(r, DB_OID_INT4);
	db_bin_i32(&r->a.b, v);
}

static void row_ts(struct ing_rows *r, int64_t usec)
{
	row_col(r, DB_OID_TIMESTAMPTZ);
	db_bin_ts(&r->a.b, usec);
}

static void row_date(struct ing_rows *r, int32_t day)
{
	row_col(r, DB_OID_DATE);
	db_bin_date(&r->a.b, day);
}

static void row_tid(struct ing_rows *r, uint32_t block, uint16_t offset)
{
	unsigned char x[6] = {(unsigned char)(block >> 24), (unsigned char)(block >> 16),
			      (unsigned char)(block >> 8),  (unsigned char)block,
			      (unsigned char)(offset >> 8), (unsigned char)offset};

	row_col(r, DB_OID_TID);
	db_bin_be32(&r->a.b, 6);
	db_bin_put(&r->a.b, x, 6);
}

static void row_xid(struct ing_rows *r, uint32_t xid)
{
	row_col(r, DB_OID_XID);
	db_bin_i32(&r->a.b, (int32_t)xid); /* xid_recv: 4 bytes, unsigned */
}

/* ---- the object and its caches --------------------------------------------- */

void ingest_opts_init(struct ingest_opts *o)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	o->default_vcpus = n >= 1 && n <= 1024 ? (int32_t)n : 1;
	o->cache_sandboxes = INGEST_CACHE_DEFAULT;
	o->statement_timeout_ms = 0;
	o->own_readings = false;
}

struct ingest *ingest_new(const struct ingest_opts *o)
{
	struct ingest *ing = calloc(1, sizeof(*ing));

	if (!ing)
		return NULL;
	if (o)
		ing->opts = *o;
	else
		ingest_opts_init(&ing->opts);
	if (ing->opts.default_vcpus < 1 || ing->opts.default_vcpus > 1024)
		ing->opts.default_vcpus = 1;
	if (ing->opts.cache_sandboxes > ING_CACHE_MAX)
		ing->opts.cache_sandboxes = ING_CACHE_MAX;
	pthread_mutex_init(&ing->mu, NULL);
	return ing;
}

void ingest_free(struct ingest *ing)
{
	if (!ing)
		return;
	for (size_t i = 0; i < ing->nzones; i++)
		free(ing->zones[i].start);
	free(ing->zones);
	free(ing->parts);
	free(ing->cache);
	free(ing->slots);
	pthread_mutex_destroy(&ing->mu);
	free(ing);
}

static bool parts_has(const struct ingest *ing, int32_t day)
{
	size_t lo = 0, hi = ing->nparts;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ing->parts[mid] == day)
			return true;
		if (ing->parts[mid] < day)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* Remembers day (lock held). Forgets everything when full: the database
 * function is idempotent, forgetting only costs a call. */
static void parts_add(struct ingest *ing, int32_t day)
{
	size_t i;

	if (parts_has(ing, day))
		return;
	if (ing->nparts >= ING_PARTS_MAX)
		ing->nparts = 0;
	if (!ing_grow(&ing->parts, &ing->pcap, ing->nparts + 1, sizeof(*ing->parts)))
		return;
	for (i = ing->nparts; i > 0 && ing->parts[i - 1] > day; i--)
		ing->parts[i] = ing->parts[i - 1];
	ing->parts[i] = day;
	ing->nparts++;
}

/* ---- one call -------------------------------------------------------------- */

struct ing_price {
	int32_t version;
	int64_t from_usec;
	struct price_rates rates;
};

struct ing_event {
	int64_t at;
	enum sandbox_state state;
};

struct ing_item {
	const struct meter_sample *s;
	uint32_t sbx;
	uint32_t batch;
	uint32_t seq;
};

/* The dashboard's rollup on the meter row (sql/0006_dashboard.sql): sums
 * of the sandbox's latest key day and latest UTC month; days since
 * 1970-01-01, ING_DAY_NONE when nothing was metered yet. */
struct ing_roll {
	int32_t day;
	int64_t day_end; /* when day ends in the zone it was metered in; ING_TIME_NONE */
	int64_t running_usec, cpu_used_mcus, cpu_billed_mcus, total_micros;
	int32_t month; /* its first day */
	int64_t month_micros;
};

#define ING_ROLL_NONE                                                                              \
	((struct ing_roll){.day = ING_DAY_NONE, .day_end = ING_TIME_NONE, .month = ING_DAY_NONE})

struct ing_sbx {
	const char *id;	     /* borrowed from a sample */
	const char *doc_key; /* first key_id the samples gave, "" when none */
	size_t first, n;     /* items[first .. first + n) after sorting */
	int64_t min_at, max_at;
	/* Hints for creating the sandboxes row. */
	int32_t hint_vcpus;
	int64_t hint_memory_mib, hint_storage_mib;
	enum sandbox_state hint_state;
	/* From the sandboxes row. */
	bool found;
	bool made;	  /* no row when the call began: ing_create_sandboxes made it */
	bool unknown_key; /* made with no key, though its samples named one */
	char account[PARSE_ID_MAX + 1];
	char key[PARSE_ID_MAX + 1]; /* "" when none */
	int zone;
	int32_t row_vcpus;
	int64_t row_memory_mib, row_storage_mib;
	int64_t created_usec; /* its created_at: nothing before it is billed */
	/* sandbox_meter: state before the call, then as updated. */
	bool had_meter;
	bool cached;	    /* the meter row came from the cache: no ctid */
	int64_t gen;	    /* its account's ingest_generation when read */
	uint32_t tid_block; /* ctid and xmin of the meter row's version read */
	uint16_t tid_offset;
	uint32_t xmin;
	bool has_prev;
	bool changed;
	struct usage_sample last;
	int32_t version; /* ING_VERSION_NONE before the first priced piece */
	struct usage_carry carry;
	int64_t cum[3];
	struct ing_roll roll;
	size_t ev_off, ev_n, ev_pos;
	int64_t stop_at;       /* its first stopped event (final), INT64_MAX if none */
	int64_t head_at;       /* its running event before its first sample, INT64_MAX if none */
	int64_t ev_from;       /* where its events were read from (ing_load_events) */
	size_t cut_off, cut_n; /* its open holds' instants in cuts[], in order (ing_load_cuts) */
	/* Some sample of it takes its state from the events (a cgroup's). */
	bool by_events;
	/* For those: the state of its last running or paused event before the
	 * events read (has_base false when there is none). */
	bool has_base;
	enum sandbox_state base_state;
};

struct ing_piece {
	int64_t a, b;
	enum sandbox_state state;
	size_t vi;	   /* index into prices */
	__int128 cpu_mcus; /* its share of the interval's CPU, millicore-µs */
};

struct ing_sub {
	int64_t a, b; /* its time, UTC µs: [a, b) */
	int64_t hour;
	int32_t day;
	int64_t day_end;
	size_t vi;
	struct usage_qty q;
};

struct ing_usage_row {
	uint32_t sbx;
	int64_t hour;
	int32_t version;
	int32_t day;
	struct usage_qty q;
	struct usage_cost c;
	int64_t cum[3];
};

/* A sandbox-day's money, with its pieces in time order (spieces[p_off ..
 * p_off + np)): the holds a piece may consume hang on its time. */
struct ing_spend {
	uint32_t sbx;
	int32_t day;
	int64_t micros;
	size_t p_off, np;
	uint32_t kd; /* its key-day: index into kdays */
	int64_t covered;
};

/* A key-day the call spends on: its ledger row. */
struct ing_kday {
	uint32_t spend; /* one of its spends: account, key, day */
	int64_t spent, covered;
};

/* An open hold of a spend's sandbox-day, as read under the ledger lock. */
struct ing_hold {
	uint32_t spend;
	struct ledger_hold h;
};

struct ing_host {
	const char *host_id;
	int64_t last_at;
	int64_t batches;
};

/* A resume ingestion saw between two samples of a sandbox: the sample
 * before (not running) and the one that found it running, UTC µs. */
struct ing_resume {
	uint32_t sbx;
	int64_t before, at;
};

/* A usage row's place in the account-hour sums. */
struct ing_ahour {
	const char *account;
	int64_t hour;
	int64_t micros;
};

static int ing_ahour_cmp(const void *x, const void *y)
{
	const struct ing_ahour *a = x, *b = y;
	int r = strcmp(a->account, b->account);

	if (r == 0)
		r = (a->hour > b->hour) - (a->hour < b->hour);
	return r;
}

struct ing_call {
	struct ingest *ing;
	PGconn *conn;
	int64_t wait_base_ms; /* longest wait for an answer (0: no limit) */
	int64_t wait_ms;      /* the try's: the base and what ing_more_time added */
	const struct sample_batch *batches;
	size_t nbatches;
	char *err;
	size_t errlen;
	char sqlstate[6];
	bool retry;		 /* the failure is worth another try */
	bool locking;		 /* read the meter rows FOR UPDATE (after a conflict) */
	uint32_t xid;		 /* the try's transaction: xmin of the rows it writes */
	int64_t server_start;	 /* its server's (struct ingest) */
	struct ing_cached *ctmp; /* cache entries the try may use */
	size_t ctmp_cap;

	struct ing_item *items;
	size_t nitems;
	struct ing_sbx *sbx;
	size_t nsbx, sbx_cap;
	uint32_t *map; /* open addressing: sbx index + 1, 0 = empty */
	size_t mapcap;

	struct ing_price *prices;
	size_t nprices, prices_cap;
	struct ing_zone *zones; /* copies for this call */
	size_t nzones, zcap;
	struct ing_event *events;
	size_t nevents, ev_cap;
	int64_t *cuts; /* lease starts and holds' covers' ends, by sandbox (ing_load_cuts) */
	size_t ncuts, cuts_cap;
	long ev_read; /* events read that SQL_EVENTS_AGAIN counts; -1: none read */

	struct ing_piece *pieces;
	size_t npieces, pieces_cap;
	struct ing_sub *subs;
	size_t nsubs, subs_cap;
	struct ing_usage_row *rows;
	size_t nrows, rows_cap;
	struct ing_spend *spend;
	size_t nspend, spend_cap;
	struct ledger_piece *spieces; /* the spends' pieces */
	size_t nspieces, spieces_cap;
	struct ing_kday *kdays;
	size_t nkdays, kdays_cap;
	struct ing_hold *holds;
	size_t nholds, holds_cap;
	struct ing_resume *resumes; /* in time order within each sandbox */
	size_t nresumes, resumes_cap;
	struct ledger_hold *lholds; /* one spend's holds, for ledger_consume */
	size_t lholds_cap;
	bool *batch_accepted;

	struct db_barr arr[ING_NARR];  /* binary array parameters */
	struct ing_rows meter_rows[2]; /* meter rows to update, to insert */
	int64_t meter_want[2];	       /* how many of each */
	struct ing_rows usage_rows;    /* usage rows to add */
	struct ing_ahour *ahour;       /* their money per account and hour */
	size_t nahour, ahour_cap;
	Oid meter_type, usage_type;		  /* the row types of sql/0009_ingest_rows.sql */
	struct db_bin samples;			  /* binary COPY of samples */
	struct db_bin a1, a2, a3, a4, a5, a6, a7; /* array literals */

	struct ingest_stats st;
};

/* Records a failure: err, sqlstate, whether to retry. */
static void ing_fail(struct ing_call *c, const char *what, const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	size_t n;

	if (!msg || !*msg)
		msg = PQerrorMessage(c->conn);
	snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state ? state : "");
	db_util_failed_note(res); /* the answer tells a timeout from the rest */
	snprintf(c->err, c->errlen, "%s: %s", what, msg ? msg : "unknown error");
	n = strlen(c->err);
	while (n > 0 && (c->err[n - 1] == '\n' || c->err[n - 1] == ' '))
		c->err[--n] = '\0';
	for (char *p = c->err; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	/* Deadlock, serialization failure, or the unique index of a row a
	 * concurrent transaction created first: worth another try. */
	if (strcmp(c->sqlstate, "40P01") == 0 || strcmp(c->sqlstate, "40001") == 0 ||
	    strcmp(c->sqlstate, "23505") == 0)
		c->retry = true;
}

/* Takes a statement's result: METER_OK and *out (may be NULL: freed) when
 * its status is want, else METER_EDB after recording why. Frees or hands
 * over res either way. */
/* Records that what got no answer within the call's wait: the connection
 * was dropped. */
static enum meter_rc ing_no_answer(struct ing_call *c, const char *what)
{
	c->sqlstate[0] = '\0';
	db_util_failed_clear();
	snprintf(c->err, c->errlen, "%s: no answer within %lld ms: connection dropped", what,
		 (long long)c->wait_ms);
	return METER_EDB;
}

static enum meter_rc ing_result(struct ing_call *c, const char *what, PGresult *res,
				ExecStatusType want, PGresult **out)
{
	if (out)
		*out = NULL;
	if (PQresultStatus(res) != want) {
		ing_fail(c, what, res);
		PQclear(res);
		return METER_EDB;
	}
	if (out)
		*out = res;
	else
		PQclear(res);
	return METER_OK;
}

/* Runs sql (PQexecParams' arguments) within the try's wait, then takes its
 * result as ing_result does. */
static enum meter_rc ing_exec(struct ing_call *c, const char *what, const char *sql, int n,
			      const Oid *types, const char *const *values, const int *lengths,
			      const int *formats, int fmt, ExecStatusType want, PGresult **out)
{
	bool timed_out;
	PGresult *res = db_util_exec_within(c->conn, sql, n, types, values, lengths, formats, fmt,
					    c->wait_ms, &timed_out);

	if (timed_out) {
		if (out)
			*out = NULL;
		return ing_no_answer(c, what);
	}
	return ing_result(c, what, res, want, out);
}

/* Runs sql with text parameters; *out (may be NULL) gets the result when its
 * status is want. */
static enum meter_rc ing_q(struct ing_call *c, const char *what, const char *sql, int nparams,
			   const char *const *params, ExecStatusType want, PGresult **out)
{
	return ing_exec(c, what, sql, nparams, NULL, params, NULL, NULL, 0, want, out);
}

/* Starts the binary array parameters arr[0..n) with these array types. */
static void ing_arrays(struct ing_call *c, int n, const Oid *types)
{
	for (int i = 0; i < n; i++) {
		Oid elem = DB_OID_TEXT;
		switch (types[i]) {
		case DB_OID_INT8_ARR:
			elem = DB_OID_INT8;
			break;
		case DB_OID_DATE_ARR:
			elem = DB_OID_DATE;
			break;
		case DB_OID_TIMESTAMPTZ_ARR:
			elem = DB_OID_TIMESTAMPTZ;
			break;
		default:
			break;
		}
		db_barr_start(&c->arr[i], types[i], elem);
	}
}

/* Runs sql with the binary array parameters arr[0..n) followed by ntext
 * text parameters; results in format fmt (0 text, 1 binary). */
static enum meter_rc ing_qa_fmt(struct ing_call *c, const char *what, const char *sql, int n,
				int ntext, const char *const *text, int fmt, ExecStatusType want,
				PGresult **out)
{
	Oid types[ING_NARR + 4];
	const char *values[ING_NARR + 4];
	int lengths[ING_NARR + 4], formats[ING_NARR + 4];

	if (out)
		*out = NULL;
	for (int i = 0; i < n; i++) {
		db_barr_finish(&c->arr[i]);
		if (c->arr[i].b.oom) {
			snprintf(c->err, c->errlen, "%s: out of memory", what);
			return METER_ENOMEM;
		}
		types[i] = c->arr[i].array_type;
		values[i] = c->arr[i].b.p;
		lengths[i] = (int)c->arr[i].b.n;
		formats[i] = 1;
	}
	for (int i = 0; i < ntext; i++) {
		types[n + i] = 0;
		values[n + i] = text[i];
		lengths[n + i] = 0;
		formats[n + i] = 0;
	}
	return ing_exec(c, what, sql, n + ntext, types, values, lengths, formats, fmt, want, out);
}

static enum meter_rc ing_qa(struct ing_call *c, const char *what, const char *sql, int n, int ntext,
			    const char *const *text, ExecStatusType want, PGresult **out)
{
	return ing_qa_fmt(c, what, sql, n, ntext, text, 0, want, out);
}

/* Runs sql with the array of rows rec as its one (binary) parameter. */
static enum meter_rc ing_qrows(struct ing_call *c, struct ing_rows *rec, const char *what,
			       const char *sql, ExecStatusType want, PGresult **out)
{
	const char *value;
	int length, format = 1;

	if (out)
		*out = NULL;
	db_barr_finish(&rec->a);
	if (rec->a.b.oom) {
		snprintf(c->err, c->errlen, "%s: out of memory", what);
		return METER_ENOMEM;
	}
	value = rec->a.b.p;
	length = (int)rec->a.b.n;
	return ing_exec(c, what, sql, 1, NULL, &value, &length, &format, 0, want, out);
}

/* Sends buf through COPY ... FROM STDIN (sql), to its end: the server may
 * still be writing the rows when this returns; ing_copy_result waits. */
static enum meter_rc ing_copy_send(struct ing_call *c, const char *what, const char *sql,
				   const struct db_bin *buf)
{
	PGresult *res = NULL;
	enum meter_rc rc = METER_OK;

	if (PQsendQuery(c->conn, sql)) {
		if (!db_util_await(c->conn, c->wait_ms))
			return ing_no_answer(c, what);
		res = PQgetResult(c->conn);
	}
	if (PQresultStatus(res) != PGRES_COPY_IN) {
		ing_fail(c, what, res);
		PQclear(res);
		return METER_EDB;
	}
	PQclear(res);
	for (size_t off = 0; off < buf->n;) {
		size_t k = buf->n - off < ING_COPY_CHUNK ? buf->n - off : ING_COPY_CHUNK;
		if (PQputCopyData(c->conn, buf->p + off, (int)k) != 1) {
			ing_fail(c, what, NULL);
			rc = METER_EDB;
			break;
		}
		off += k;
	}
	if (PQputCopyEnd(c->conn, rc == METER_OK ? NULL : "aborted") != 1 && rc == METER_OK) {
		ing_fail(c, what, NULL);
		rc = METER_EDB;
	}
	return rc;
}

/* The outcome of the COPY ing_copy_send sent (after a failure of it too:
 * the connection leaves the COPY). */
static enum meter_rc ing_copy_result(struct ing_call *c, const char *what)
{
	enum meter_rc rc = METER_OK;
	PGresult *res;

	if (!db_util_await(c->conn, c->wait_ms))
		rc = ing_no_answer(c, what);
	while ((res = PQgetResult(c->conn)) != NULL) {
		if (rc == METER_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
			ing_fail(c, what, res);
			rc = METER_EDB;
		}
		PQclear(res);
	}
	return rc;
}

/* Big-endian integer of n bytes (n <= 8) at p. */
static uint64_t ing_be(const char *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = (v << 8) | (unsigned char)p[i];
	return v;
}

/* An integer column, text or binary (int2, int4, int8 or a domain over
 * one: PostgreSQL describes a domain by its base type); NULL or another
 * type is an error. */
static enum meter_rc ing_i64(const PGresult *res, int row, int col, int64_t *out)
{
	const char *p = PQgetvalue(res, row, col);
	int len = PQgetlength(res, row, col);

	if (PQgetisnull(res, row, col))
		return METER_EINVAL;
	if (PQfformat(res, col) == 0)
		return parse_int64(p, INT64_MIN, INT64_MAX, out);
	switch (PQftype(res, col)) {
	case DB_OID_INT2:
		*out = (int16_t)ing_be(p, 2);
		return len == 2 ? METER_OK : METER_EINVAL;
	case DB_OID_INT4:
		*out = (int32_t)ing_be(p, 4);
		return len == 4 ? METER_OK : METER_EINVAL;
	case DB_OID_INT8:
		*out = (int64_t)ing_be(p, 8);
		return len == 8 ? METER_OK : METER_EINVAL;
	default:
		return METER_EINVAL;
	}
}

/* A binary timestamptz column (µs since 2000-01-01) as µs since the Unix
 * epoch; NULL, another type, 'infinity' and instants out of range are
 * errors. */
static enum meter_rc ing_ts(const PGresult *res, int row, int col, int64_t *usec)
{
	int64_t v;

	if (PQgetisnull(res, row, col) || PQfformat(res, col) != 1 ||
	    PQftype(res, col) != DB_OID_TIMESTAMPTZ || PQgetlength(res, row, col) != 8)
		return METER_EINVAL;
	v = (int64_t)ing_be(PQgetvalue(res, row, col), 8);
	if (v <= INT64_MIN + DB_PG_EPOCH_USEC || v >= INT64_MAX - DB_PG_EPOCH_USEC)
		return METER_ERANGE;
	*usec = v + DB_PG_EPOCH_USEC;
	return METER_OK;
}

static uint64_t ing_hash(const char *s)
{
	return hash_str(HASH_START, s);
}

/* Index of sandbox id in c->sbx, or -1. */
static long ing_find(const struct ing_call *c, const char *id)
{
	size_t i = (size_t)ing_hash(id) & (c->mapcap - 1);

	for (; c->map[i]; i = (i + 1) & (c->mapcap - 1))
		if (strcmp(c->sbx[c->map[i] - 1].id, id) == 0)
			return (long)c->map[i] - 1;
	return -1;
}

static int ing_item_cmp(const void *x, const void *y)
{
	const struct ing_item *a = x, *b = y;

	if (a->sbx != b->sbx)
		return a->sbx < b->sbx ? -1 : 1;
	if (a->s->u.at_usec != b->s->u.at_usec)
		return a->s->u.at_usec < b->s->u.at_usec ? -1 : 1;
	if (a->batch != b->batch)
		return a->batch < b->batch ? -1 : 1;
	return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

/* Checks one sample from a source; err names what is wrong. */
static enum meter_rc ing_check_sample(struct ing_call *c, const struct sample_batch *b,
				      const struct meter_sample *s)
{
	const struct usage_sample *u = &s->u;
	const char *what = NULL;

	if (!parse_is_id(s->sandbox_id))
		what = "sandbox_id";
	else if (s->key_id[0] && !parse_is_id(s->key_id))
		what = "key_id";
	else if (u->at_usec < 0)
		what = "sampled_at";
	else if ((unsigned)u->state > SANDBOX_STOPPED)
		what = "state";
	else if (u->cpu_usec < 0)
		what = "cpu_usec";
	else if (u->memory_mib < 0 && u->memory_mib != SAMPLE_UNKNOWN)
		what = "memory_mib";
	else if (u->storage_mib < 0 && u->storage_mib != SAMPLE_UNKNOWN)
		what = "storage_mib";
	else if (u->vcpus < 0 || u->vcpus > 1024)
		what = "vcpus";
	if (!what)
		return METER_OK;
	snprintf(c->err, c->errlen, "batch of host %.64s: sandbox %.64s: bad %s", b->host_id,
		 s->sandbox_id, what);
	return METER_EINVAL;
}

/* Builds items, sandboxes and the id map from the batches. */
static enum meter_rc ing_prepare(struct ing_call *c)
{
	size_t total = 0, k = 0;

	for (size_t i = 0; i < c->nbatches; i++) {
		if (!parse_is_id(c->batches[i].host_id)) {
			snprintf(c->err, c->errlen, "batch %zu: bad host_id", i);
			return METER_EINVAL;
		}
		for (size_t j = 0; j < c->batches[i].n; j++) {
			enum meter_rc rc =
			    ing_check_sample(c, &c->batches[i], &c->batches[i].items[j]);
			if (rc != METER_OK)
				return rc;
		}
		total += c->batches[i].n;
	}
	if (total > UINT32_MAX / 4) {
		snprintf(c->err, c->errlen, "too many samples in one call");
		return METER_ERANGE;
	}
	c->st.samples = total;
	if (total == 0)
		return METER_OK;
	c->items = calloc(total, sizeof(*c->items));
	c->batch_accepted = calloc(c->nbatches, sizeof(*c->batch_accepted));
	c->mapcap = 16;
	while (c->mapcap < total * 2)
		c->mapcap *= 2;
	c->map = calloc(c->mapcap, sizeof(*c->map));
	if (!c->items || !c->map || !c->batch_accepted)
		return METER_ENOMEM;
	for (size_t i = 0; i < c->nbatches; i++) {
		for (size_t j = 0; j < c->batches[i].n; j++) {
			const struct meter_sample *s = &c->batches[i].items[j];
			long x = ing_find(c, s->sandbox_id);
			struct ing_sbx *sb;

			if (x < 0) {
				size_t h = (size_t)ing_hash(s->sandbox_id) & (c->mapcap - 1);
				while (c->map[h])
					h = (h + 1) & (c->mapcap - 1);
				/* Sandboxes, not samples: a call with several
				 * rounds has many samples per sandbox. */
				if (!ing_grow(&c->sbx, &c->sbx_cap, c->nsbx + 1, sizeof(*c->sbx)))
					return METER_ENOMEM;
				x = (long)c->nsbx++;
				c->map[h] = (uint32_t)x + 1;
				sb = &c->sbx[x];
				memset(sb, 0, sizeof(*sb));
				sb->id = s->sandbox_id;
				sb->doc_key = "";
				sb->min_at = s->u.at_usec;
				sb->max_at = s->u.at_usec;
				sb->hint_vcpus =
				    s->u.vcpus > 0 ? s->u.vcpus : c->ing->opts.default_vcpus;
				sb->hint_memory_mib = s->u.memory_mib >= 0 ? s->u.memory_mib : 0;
				sb->hint_storage_mib = s->u.storage_mib >= 0 ? s->u.storage_mib : 0;
				sb->hint_state = s->u.state;
			}
			assert(x >= 0 && (size_t)x < c->nsbx);
			sb = &c->sbx[x];
			if (!sb->doc_key[0] && s->key_id[0])
				sb->doc_key = s->key_id;
			if (s->state_from_events)
				sb->by_events = true;
			if (s->u.at_usec < sb->min_at)
				sb->min_at = s->u.at_usec;
			if (s->u.at_usec > sb->max_at)
				sb->max_at = s->u.at_usec;
			c->items[k].s = s;
			c->items[k].sbx = (uint32_t)x;
			c->items[k].batch = (uint32_t)i;
			c->items[k].seq = (uint32_t)j;
			k++;
		}
	}
	c->nitems = k;
	qsort(c->items, c->nitems, sizeof(*c->items), ing_item_cmp);
	for (size_t i = 0; i < c->nitems; i++) {
		struct ing_sbx *sb = &c->sbx[c->items[i].sbx];
		if (sb->n == 0)
			sb->first = i;
		sb->n++;
	}
	return METER_OK;
}

/* Makes sure the daily partitions of every sample's UTC day exist, in a
 * short transaction of their own before the ingestion's (DDL there would
 * hold the parent's lock for the whole ingestion). A partition's CREATE
 * TABLE takes samples' ACCESS EXCLUSIVE lock, which waits behind every
 * reader of samples (a pg_dump holds ACCESS SHARE on every table for its
 * whole run), and every write and read of samples queues behind that
 * wait: a dump across UTC midnight stopped all metering until it ended.
 * So the lock is waited for at most 1 s (ING_PART_LOCK_SQL); past it the call
 * goes on without the partitions, its samples of those days kept in
 * samples_default (which a partition takes its rows from when it is made),
 * and no partition is tried again for ING_PART_RETRY_MS. The sweeper makes
 * the next day's ahead (ingest_make_partitions_ahead), so a call seldom
 * makes one. */
static enum meter_rc ing_partitions(struct ing_call *c)
{
	int32_t lo = INT32_MAX, hi = INT32_MIN;
	char d0[64], d1[64];
	const char *params[2] = {d0, d1};
	enum meter_rc rc;
	bool missing = false;

	pthread_mutex_lock(&c->ing->mu);
	if (clock_mono_ms() < c->ing->parts_retry_ms) {
		pthread_mutex_unlock(&c->ing->mu);
		return METER_OK;
	}
	for (size_t i = 0; i < c->nitems; i++) {
		int32_t d = (int32_t)ing_floordiv(c->items[i].s->u.at_usec, ING_DAY_USEC);
		if (parts_has(c->ing, d))
			continue;
		missing = true;
		if (d < lo)
			lo = d;
		if (d > hi)
			hi = d;
	}
	pthread_mutex_unlock(&c->ing->mu);
	if (!missing)
		return METER_OK;
	if (hi - lo >= 1000)
		lo = hi - 999; /* older days fall into samples_default: still stored */
	ing_fmt_day(lo, d0, sizeof(d0));
	ing_fmt_day(hi, d1, sizeof(d1));
	rc = ing_q(c, "sample partitions", "BEGIN", 0, NULL, PGRES_COMMAND_OK, NULL);
	if (rc == METER_OK)
		rc = ing_q(c, "sample partitions", ING_PART_LOCK_SQL, 0, NULL, PGRES_TUPLES_OK,
			   NULL);
	if (rc == METER_OK)
		rc = ing_q(c, "sample partitions",
			   "SELECT meter_ensure_sample_partitions($1::date, $2::date)", 2, params,
			   PGRES_TUPLES_OK, NULL);
	if (rc == METER_OK)
		rc = ing_q(c, "sample partitions", "COMMIT", 0, NULL, PGRES_COMMAND_OK, NULL);
	if (rc != METER_OK) {
		bool waited = strcmp(c->sqlstate, "55P03") == 0;

		if (PQstatus(c->conn) == CONNECTION_OK &&
		    PQtransactionStatus(c->conn) != PQTRANS_IDLE)
			PQclear(PQexec(c->conn, "ROLLBACK"));
		if (!waited)
			return rc;
		log_warn("ingest: the sample partitions of %s to %s wait for a lock on samples (a "
			 "long reader such as pg_dump holds it): their samples go to "
			 "samples_default meanwhile, and the partitions are tried again in %d s",
			 d0, d1, ING_PART_RETRY_MS / 1000);
		pthread_mutex_lock(&c->ing->mu);
		c->ing->parts_retry_ms = clock_mono_ms() + ING_PART_RETRY_MS;
		pthread_mutex_unlock(&c->ing->mu);
		c->err[0] = '\0';
		c->sqlstate[0] = '\0';
		db_util_failed_clear();
		return METER_OK;
	}
	pthread_mutex_lock(&c->ing->mu);
	for (int32_t d = lo; d <= hi; d++)
		parts_add(c->ing, d);
	pthread_mutex_unlock(&c->ing->mu);
	return METER_OK;
}

static const char SQL_BEGIN[] = "BEGIN";

static const char SQL_PRICES[] =
    "SELECT version, (extract(epoch FROM effective_from) * 1000000)::bigint,"
    " cpu_micros_per_vcpu_hour, memory_micros_per_gib_hour, storage_micros_per_gib_hour,"
    " floor_millicores FROM price_book ORDER BY effective_from";

/* Attribution, sizes and zone, with the account's generation of them
 * (sql/0010_ingest_cache.sql) as of the same snapshot. */
static const char SQL_SANDBOXES[] =
    "SELECT sb.sandbox_id, sb.account_id, COALESCE(sb.key_id, ''), sb.vcpus, sb.memory_mib,"
    " sb.storage_mib, COALESCE(k.time_zone, 'UTC'), COALESCE(g.generation, 0),"
    " " ING_CREATED_SQL " FROM unnest($1::text[]) AS q(s)"
    " JOIN sandboxes sb ON sb.sandbox_id = q.s"
    " LEFT JOIN api_keys k ON k.account_id = sb.account_id AND k.key_id = sb.key_id"
    " LEFT JOIN ingest_generation g ON g.account_id = sb.account_id";

/* A sandbox first seen in samples was made at its first sample of the call
 * (or now, for one dated ahead): its created_at is where billing starts. */
static const char SQL_SANDBOXES_CREATE[] =
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, storage_mib,"
    " state, created_at, state_since)"
    " SELECT COALESCE(k.account_id, 'unattributed'), q.s, k.key_id, q.v, q.m, q.st, q.state,"
    "        t.at, t.at"
    " FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[],"
    "             $6::text[], $7::timestamptz[]) AS q(s, kid, v, m, st, state, first)"
    " CROSS JOIN LATERAL (SELECT LEAST(now(), q.first) AS at) t"
    " LEFT JOIN api_keys k ON k.key_id = NULLIF(q.kid, '') AND k.role = 'full'"
    "  AND k.revoked_at IS NULL"
    " ORDER BY q.s"
    " ON CONFLICT DO NOTHING";

/* Attribution, sizes, zone (and their generation) and the collector state
 * of the sandboxes that have a meter row and are not in the cache, with the
 * identity (ctid, xmin) of the row version read.
 * Read without a lock: the meter rows' update is guarded by that identity,
 * so a row another transaction changed meanwhile is not updated, the count
 * comes up short, and the call is retried with SQL_METER_LOCK. Concurrent
 * ingestion of one sandbox is rare (the collector and a push, or two meterd
 * processes), and a row lock costs a write per row on every call. */
#define SQL_METER_READ                                                                             \
	"SELECT sb.sandbox_id, sb.account_id, COALESCE(sb.key_id, ''), sb.vcpus, sb.memory_mib,"   \
	" sb.storage_mib, COALESCE(k.time_zone, 'UTC'),"                                           \
	" m.last_sampled_at,"                                                                      \
	" m.last_state, m.last_cpu_usec, m.last_memory_mib, m.last_storage_mib, m.last_vcpus,"     \
	" m.price_version, m.cpu_rem, m.memory_rem, m.storage_rem, m.cpu_cum_micros,"              \
	" m.memory_cum_micros, m.storage_cum_micros, m.ctid,"                                      \
	" COALESCE(m.day - DATE '1970-01-01', " ING_DAY_NONE_SQL "), m.day_running_usec,"          \
	" m.day_cpu_used_mcus, m.day_cpu_billed_mcus, m.day_total_micros,"                         \
	" COALESCE(m.month - DATE '1970-01-01', " ING_DAY_NONE_SQL "), m.month_total_micros,"      \
	" m.day_ends_at,"                                                                          \
	" m.xmin, COALESCE(g.generation, 0), " ING_CREATED_SQL " FROM unnest($1::text[]) AS q(s)"  \
	" JOIN sandboxes sb ON sb.sandbox_id = q.s"                                                \
	" JOIN sandbox_meter m ON m.account_id = sb.account_id AND m.sandbox_id = sb.sandbox_id"   \
	" LEFT JOIN api_keys k ON k.account_id = sb.account_id AND k.key_id = sb.key_id"           \
	" LEFT JOIN ingest_generation g ON g.account_id = sb.account_id"

/* The same, locking the rows in (account, sandbox) order: after a conflict.
 * The unlocked path's update locks its rows in the order of its plan, so two
 * such calls (or one and meter_dashboard_rebuild) can deadlock; PostgreSQL
 * detects it, and the call that is chosen is retried with this one. */
static const char SQL_METER_LOCK[] = SQL_METER_READ
    " ORDER BY m.account_id COLLATE \"C\", m.sandbox_id COLLATE \"C\" FOR UPDATE OF m";
static const char SQL_METER_UNLOCKED[] = SQL_METER_READ;

/* Events of the call's sandboxes from each sandbox's own start ($3, its
 * ev_from) up to the call's newest sample ($4), with every stop up to it
 * (a stop is final, whenever it came); each sandbox skips those past its
 * own newest sample. A branch for each type (meter_state allows these
 * three), so that each read is a range of the (account, sandbox, type, at)
 * index, not every event of the sandbox: given as a list or a join, the
 * type was left to a filter once the table held many sandboxes
 * (sql/0054). */
#define SQL_EVENTS_OF(type, from)                                                                  \
	"SELECT e.sandbox_id, (extract(epoch FROM e.at) * 1000000)::bigint, e.type, e.event_id"    \
	" FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS q(a, s, f)"                    \
	" JOIN lifecycle_events e ON e.account_id = q.a AND e.sandbox_id = q.s"                    \
	"  AND e.type = '" type "'" from " AND e.at <= $4::timestamptz"
/* clang-format off */
static const char SQL_EVENTS[] =
    SQL_EVENTS_OF("running", " AND e.at >= q.f")
    " UNION ALL " SQL_EVENTS_OF("paused", " AND e.at >= q.f")
    " UNION ALL " SQL_EVENTS_OF("stopped", "")
    " ORDER BY 1, 2, 4";
/* clang-format on */

/* Of each sandbox ($1, $2), the instants after $3 and before $4 where one
 * of its open holds' lease starts or its cover ends (its kept tail's
 * event, else its lease's end, as SQL_HOLDS_OPEN reads it): where
 * ledger_consume cuts a piece, ing_interval_subs cuts it first, so each
 * stretch is priced apart. An index range (holds_open_sandbox_idx) each. */
static const char SQL_HOLD_CUTS[] =
    "SELECT DISTINCT q.s, (extract(epoch FROM c.t) * 1000000)::bigint"
    " FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS q(a, s, f)"
    " JOIN holds ho ON ho.account_id = q.a AND ho.sandbox_id = q.s AND ho.status = 'open'"
    " CROSS JOIN LATERAL (VALUES (ho.lease_starts_at),"
    "  (meter_hold_covers_to(ho.account_id, ho.sandbox_id, ho.lease_starts_at,"
    "                        ho.lease_ends_at, ho.settles_at))) AS c(t)"
    " WHERE c.t > q.f AND c.t < $4::timestamptz"
    " ORDER BY 1, 2";

/* Of each sandbox ($1, $2), its latest running and paused events before
 * $3: the later one's type (a tie in time goes to the one recorded last,
 * as SQL_EVENTS orders them). A range of the (account, sandbox, type, at)
 * index each, read from its end. */
#define SQL_EVENT_BEFORE_OF(type)                                                                  \
	" LEFT JOIN LATERAL (SELECT e.at, e.event_id FROM lifecycle_events e"                      \
	"  WHERE e.account_id = q.a AND e.sandbox_id = q.s AND e.type = '" type "'"                \
	"   AND e.at < q.f ORDER BY e.at DESC LIMIT 1)"
/* clang-format off */
static const char SQL_EVENTS_BEFORE[] =
    "SELECT q.s, CASE WHEN p.at IS NULL OR (r.at, r.event_id) > (p.at, p.event_id)"
    " THEN 'running' ELSE 'paused' END"
    " FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS q(a, s, f)"
    SQL_EVENT_BEFORE_OF("running") " r ON true"
    SQL_EVENT_BEFORE_OF("paused") " p ON true"
    " WHERE r.at IS NOT NULL OR p.at IS NOT NULL";
/* clang-format on */

/* The events that settle holds (meter_event_settle), counted again once
 * the call holds its key-days' ledger rows (ing_events_again): for each
 * sandbox with samples to meter, its pauses from where its events were
 * read up to its newest sample, and its stops up to that sample (a stop
 * is final, whenever it came). Events are only ever added, so another
 * count is one recorded since the read (ing_event_counted, the same test
 * in C). Stops and pauses are counted apart, each a range of the (account,
 * sandbox, type, at) index. */
static const char SQL_EVENTS_AGAIN[] =
    "SELECT (SELECT count(*)"
    "  FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS q(a, s, f, t)"
    "  JOIN lifecycle_events e ON e.account_id = q.a AND e.sandbox_id = q.s"
    "   AND e.type = 'stopped' AND e.at <= q.t)"
    " + (SELECT count(*)"
    "  FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS q(a, s, f, t)"
    "  JOIN lifecycle_events e ON e.account_id = q.a AND e.sandbox_id = q.s"
    "   AND e.type = 'paused' AND e.at >= q.f AND e.at <= q.t)";

static const char SQL_DAYS[] =
    "SELECT q.z, d.day - DATE '1970-01-01',"
    " (extract(epoch FROM meter_day_start(q.z, d.day)) * 1000000)::bigint"
    " FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS q(z, lo, hi)"
    " CROSS JOIN LATERAL (SELECT meter_key_day(q.z, q.lo) AS d0,"
    "                            meter_key_day(q.z, q.hi) AS d1) r"
    " CROSS JOIN LATERAL (SELECT r.d0 + i AS day FROM generate_series(-1, r.d1 - r.d0 + 1) i) d"
    " ORDER BY 1, 2";

/* The row types' oids, which the binary array parameters carry. */
static const char SQL_ROW_TYPES[] =
    "SELECT 'meter_ingest_meter'::regtype::oid, 'meter_ingest_usage'::regtype::oid";

/* The meter rows: $1 is an array of meter_ingest_meter. The update only
 * changes the row versions read: the same xmin, and the same ctid when read
 * in this call (a row from the cache has no ctid; any write to it since the
 * cached version changed xmin). */
static const char SQL_METER_UPDATE[] =
    "UPDATE sandbox_meter AS m SET last_sampled_at = s.at, last_state = s.state,"
    " last_cpu_usec = s.cpu, last_memory_mib = s.mem, last_storage_mib = s.sto,"
    " last_vcpus = s.vcpus, price_version = s.ver, cpu_rem = s.cr, memory_rem = s.mr,"
    " storage_rem = s.sr, cpu_cum_micros = s.cc, memory_cum_micros = s.mc,"
    " storage_cum_micros = s.sc, day = s.d, day_running_usec = s.dru,"
    " day_cpu_used_mcus = s.dcu, day_cpu_billed_mcus = s.dcb, day_total_micros = s.dtm,"
    " month = s.mo, month_total_micros = s.mtm, day_ends_at = s.de, updated_at = now()"
    " FROM unnest($1::meter_ingest_meter[]) AS s"
    " WHERE m.xmin = s.xm AND (s.tid IS NULL OR m.ctid = s.tid) AND m.account_id = s.a"
    " AND m.sandbox_id = s.sb";

static const char SQL_METER_INSERT[] =
    "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
    " last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version, cpu_rem,"
    " memory_rem, storage_rem, cpu_cum_micros, memory_cum_micros, storage_cum_micros, day,"
    " day_running_usec, day_cpu_used_mcus, day_cpu_billed_mcus, day_total_micros, month,"
    " month_total_micros, day_ends_at)"
    " SELECT s.a, s.sb, s.at, s.state, s.cpu, s.mem, s.sto, s.vcpus, s.ver, s.cr, s.mr, s.sr,"
    " s.cc, s.mc, s.sc, s.d, s.dru, s.dcu, s.dcb, s.dtm, s.mo, s.mtm, s.de"
    " FROM unnest($1::meter_ingest_meter[]) AS s"
    " ORDER BY s.a, s.sb ON CONFLICT DO NOTHING";

/* The resumes of the call (ing_write_resumes), sql/0057. */
static const char SQL_PAUSED_RUNNING[] =
    "SELECT meter_outbox_paused_running_at($1::text[], $2::text[], $3::timestamptz[],"
    " $4::timestamptz[])";

static const char SQL_SAMPLES_COPY[] =
    "COPY samples (account_id, sandbox_id, sampled_at, state, cpu_usec, memory_mib,"
    " storage_mib, vcpus, host_id) FROM STDIN (FORMAT binary)";

/* Usage rows: each row of the call is added to its stored row, or
 * inserted, in one INSERT ... ON CONFLICT whose conflicts are found by the
 * primary key's index, one probe a row, whatever the planner makes of the
 * table. It was a plain UPDATE joined to usage_hourly (no conflict
 * machinery: about 2 µs a sample less, BENCHMARKS.md), then an INSERT of
 * the rows it missed; the planner misjudged that join's size (one row, five
 * columns' selectivities multiplied) and, for a call of 20,000 rows in an
 * hour where the account had 185,000, joined through the (account_id, hour)
 * index, comparing every row of the call with every row of the hour: past
 * every statement timeout, at every retry, so the document was never
 * ingested. (An anti-join used before that was seen running for over a
 * minute on calls of 50,000 rows.) The rows of a call are one a key, and
 * the sandboxes' meter rows are locked, so no other writer touches these
 * rows meanwhile. */
#define ING_USAGE_UNNEST " unnest($1::meter_ingest_usage[]) AS s"

static const char SQL_USAGE_UPSERT[] =
    "INSERT INTO usage_hourly AS u (account_id, sandbox_id, hour, price_version, key_id, day,"
    " running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, storage_mibus,"
    " cpu_micros, memory_micros, storage_micros, total_micros, cpu_cum_micros,"
    " memory_cum_micros, storage_cum_micros)"
    " SELECT s.a, s.sb, s.hour, s.ver, s.k, s.day, s.ru, s.pu, s.cu, s.cb, s.mm, s.sm, s.cm,"
    " s.mmi, s.smi, s.tm, s.cc, s.mc, s.sc FROM" ING_USAGE_UNNEST
    " ON CONFLICT ON CONSTRAINT usage_hourly_pkey DO UPDATE SET"
    " running_usec = u.running_usec + EXCLUDED.running_usec,"
    " paused_usec = u.paused_usec + EXCLUDED.paused_usec,"
    " cpu_used_mcus = u.cpu_used_mcus + EXCLUDED.cpu_used_mcus,"
    " cpu_billed_mcus = u.cpu_billed_mcus + EXCLUDED.cpu_billed_mcus,"
    " memory_mibus = u.memory_mibus + EXCLUDED.memory_mibus,"
    " storage_mibus = u.storage_mibus + EXCLUDED.storage_mibus,"
    " cpu_micros = u.cpu_micros + EXCLUDED.cpu_micros,"
    " memory_micros = u.memory_micros + EXCLUDED.memory_micros,"
    " storage_micros = u.storage_micros + EXCLUDED.storage_micros,"
    " total_micros = u.total_micros + EXCLUDED.total_micros,"
    " cpu_cum_micros = EXCLUDED.cpu_cum_micros, memory_cum_micros = EXCLUDED.memory_cum_micros,"
    " storage_cum_micros = EXCLUDED.storage_cum_micros, updated_at = now()";

/* The call's money per account and UTC hour added to the overview's rollup:
 * the sums are made in C (ing_write_account_hourly), so the usage rows are
 * not sent and expanded a second time; rows in (account, hour) order, so
 * concurrent ingestion locks them in one order. */
static const char SQL_ACCOUNT_HOURLY[] =
    "INSERT INTO usage_account_hourly AS h (account_id, hour, total_micros)"
    " SELECT q.a, q.h, q.m FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS q(a, h, m)"
    " ORDER BY q.a, q.h"
    " ON CONFLICT (account_id, hour) DO UPDATE SET"
    " total_micros = h.total_micros + EXCLUDED.total_micros";

/* The ledger: meter_ledger_spend's rules (sql/0056_hold_usage_times.sql) in
 * four statements, the arithmetic in C (ledger_consume), as sql/0060 states it:
 *   1. the key-day rows, created or locked in (account, key, day) order: the
 *      lock order of every writer of holds, each of which takes the rows of
 *      its holds' key-days first; spent grows;
 *   2. the open holds of the spends' sandbox-days, read under those locks
 *      (which cover a hold only when it is under its sandbox's key, as every
 *      hold the service makes is; another is left to the retry);
 *   3. their consumption: each priced piece of usage by the holds whose
 *      lease had started by its end and whose cover (its kept tail's
 *      settles_at, else its lease's end) had not ended by its start, oldest
 *      first, money beyond them added to
 *      the newest of those, each update guarded by the consumption read;
 *   4. held shrinks by what the holds covered.
 * The function itself is the path after a conflict (c->locking). */
static const char SQL_LEDGER[] =
    "SELECT COALESCE(sum(outrun_micros), 0)::bigint"
    " FROM meter_ledger_spend($1::text[], $2::text[], $3::text[], $4::date[],"
    " $5::timestamptz[], $6::timestamptz[], $7::bigint[])";

static const char SQL_LEDGER_SPENT[] =
    "INSERT INTO key_day_ledger AS l (account_id, key_id, day, spent_micros, limit_micros)"
    " SELECT t.a, t.k, t.d, t.m, (SELECT kk.daily_limit_micros FROM api_keys kk"
    "                             WHERE kk.account_id = t.a AND kk.key_id = t.k)"
    " FROM unnest($1::text[], $2::text[], $3::date[], $4::bigint[]) AS t(a, k, d, m)"
    " ORDER BY t.a, t.k, t.d"
    " ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE"
    " SET spent_micros = l.spent_micros + EXCLUDED.spent_micros, updated_at = now()";

/* Ordered in C (by spend, then hold id: ing_hold_cmp). A hold covers usage
 * up to its kept tail's event or, when nothing has settled it, its lease's
 * end (meter_hold_covers_to, sql/0060): usage past the end taken in before
 * the lease-end sweep goes on no hold, as after the sweep. */
static const char SQL_HOLDS_OPEN[] =
    "SELECT q.i - 1, ho.hold_id, ho.amount_micros, ho.consumed_micros, ho.key_id = q.k,"
    " ho.lease_starts_at, meter_hold_covers_to(ho.account_id, ho.sandbox_id,"
    " ho.lease_starts_at, ho.lease_ends_at, ho.settles_at)"
    " FROM unnest($1::text[], $2::text[], $3::date[], $4::text[])"
    " WITH ORDINALITY AS q(a, s, d, k, i)"
    " JOIN holds ho ON ho.account_id = q.a AND ho.sandbox_id = q.s AND ho.day = q.d"
    " WHERE ho.status = 'open'";

static const char SQL_HOLDS_CONSUME[] =
    "UPDATE holds ho SET consumed_micros = ho.consumed_micros + s.add"
    " FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS s(a, id, was, add)"
    " WHERE ho.account_id = s.a AND ho.hold_id = s.id AND ho.status = 'open'"
    " AND ho.consumed_micros = s.was";

static const char SQL_LEDGER_HELD[] =
    "UPDATE key_day_ledger l SET held_micros = l.held_micros - s.c, updated_at = now()"
    " FROM unnest($1::text[], $2::text[], $3::date[], $4::bigint[]) AS s(a, k, d, c)"
    " WHERE l.account_id = s.a AND l.key_id = s.k AND l.day = s.d";

static const char SQL_WATERMARKS[] =
    "INSERT INTO ingest_watermarks AS w (host_id, last_sampled_at, batches)"
    " SELECT h, t, n FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS q(h, t, n)"
    " ORDER BY h"
    " ON CONFLICT (host_id) DO UPDATE SET"
    " last_sampled_at = GREATEST(w.last_sampled_at, EXCLUDED.last_sampled_at),"
    " batches = w.batches + EXCLUDED.batches, updated_at = now()";

/* Reads the price book, oldest version first, and the row types' oids. */
static enum meter_rc ing_load_prices(struct ing_call *c)
{
	PGresult *res;
	enum meter_rc rc;
	int64_t t[2];
	int n;

	rc = ing_q(c, "price book", SQL_PRICES, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	if (n == 0) {
		snprintf(c->err, c->errlen, "price book is empty");
		rc = METER_EINVAL;
		goto out;
	}
	if (!ing_grow(&c->prices, &c->prices_cap, (size_t)n, sizeof(*c->prices))) {
		rc = METER_ENOMEM;
		goto out;
	}
	c->nprices = 0;
	for (int i = 0; i < n; i++) {
		struct ing_price *p = &c->prices[c->nprices++];
		int64_t v;
		if (ing_i64(res, i, 0, &v) != METER_OK || ing_i64(res, i, 1, &p->from_usec) ||
		    ing_i64(res, i, 2, &p->rates.cpu_micros_per_vcpu_hour) ||
		    ing_i64(res, i, 3, &p->rates.memory_micros_per_gib_hour) ||
		    ing_i64(res, i, 4, &p->rates.storage_micros_per_gib_hour) ||
		    ing_i64(res, i, 5, &p->rates.floor_millicores) ||
		    price_rates_validate(&p->rates) != METER_OK) {
			snprintf(c->err, c->errlen, "price book: bad row");
			rc = METER_EINVAL;
			goto out;
		}
		p->version = (int32_t)v;
	}
	PQclear(res);
	rc = ing_q(c, "row types", SQL_ROW_TYPES, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1 || ing_i64(res, 0, 0, &t[0]) != METER_OK ||
	    ing_i64(res, 0, 1, &t[1]) != METER_OK) {
		snprintf(c->err, c->errlen, "row types: bad answer");
		rc = METER_EINVAL;
		goto out;
	}
	c->meter_type = (Oid)t[0];
	c->usage_type = (Oid)t[1];
out:
	PQclear(res);
	return rc;
}

/* Index of zone name in the call's zones, adding it (copied from the shared
 * cache when there) if new; -1 when out of memory or too long. */
static int ing_zone_index(struct ing_call *c, const char *name)
{
	struct ing_zone *z;

	if (strlen(name) >= ING_ZONE_MAX)
		return -1;
	for (size_t i = 0; i < c->nzones; i++)
		if (strcmp(c->zones[i].name, name) == 0)
			return (int)i;
	if (!ing_grow(&c->zones, &c->zcap, c->nzones + 1, sizeof(*c->zones)))
		return -1;
	z = &c->zones[c->nzones];
	memset(z, 0, sizeof(*z));
	snprintf(z->name, sizeof(z->name), "%s", name);
	pthread_mutex_lock(&c->ing->mu);
	for (size_t i = 0; i < c->ing->nzones; i++) {
		const struct ing_zone *s = &c->ing->zones[i];
		if (strcmp(s->name, name) == 0 && s->n > 0) {
			z->start = malloc(s->n * sizeof(*z->start));
			if (z->start) {
				memcpy(z->start, s->start, s->n * sizeof(*z->start));
				z->n = s->n;
				z->d0 = s->d0;
			}
			break;
		}
	}
	pthread_mutex_unlock(&c->ing->mu);
	return (int)c->nzones++;
}

/* Stores a call's zone back into the shared cache. */
static void ing_zone_publish(struct ing_call *c, const struct ing_zone *z)
{
	struct ingest *ing = c->ing;
	struct ing_zone *s = NULL;
	int64_t *copy;

	if (z->n == 0)
		return;
	copy = malloc(z->n * sizeof(*copy));
	if (!copy)
		return;
	memcpy(copy, z->start, z->n * sizeof(*copy));
	pthread_mutex_lock(&ing->mu);
	for (size_t i = 0; i < ing->nzones; i++)
		if (strcmp(ing->zones[i].name, z->name) == 0)
			s = &ing->zones[i];
	if (!s && ing_grow(&ing->zones, &ing->zcap, ing->nzones + 1, sizeof(*ing->zones))) {
		s = &ing->zones[ing->nzones++];
		memset(s, 0, sizeof(*s));
		snprintf(s->name, sizeof(s->name), "%s", z->name);
	}
	if (s && s->n < z->n + 1) {
		free(s->start);
		s->start = copy;
		s->n = z->n;
		s->d0 = z->d0;
		copy = NULL;
	}
	pthread_mutex_unlock(&ing->mu);
	free(copy);
}

/* Day containing t in zone z: *day and the instant the next day starts.
 * false when the cache does not cover t (a bug: ing_load_days covers all).
 * Of days that start at one instant (the first skipped), the last. */
static bool ing_zone_day(const struct ing_zone *z, int64_t t, int32_t *day, int64_t *end)
{
	size_t lo = 0, hi;

	if (z->n < 2 || t < z->start[0] || t >= z->start[z->n - 1])
		return false;
	hi = z->n - 1; /* invariant: start[lo] <= t < start[hi] */
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (z->start[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	*day = z->d0 + (int32_t)lo;
	*end = z->start[lo + 1];
	return true;
}

/* Fills the call's zones so that every instant the call needs is covered,
 * asking PostgreSQL (one statement for every zone) only for what the cache
 * lacks. */
static enum meter_rc ing_load_days(struct ing_call *c)
{
	const char *params[3];
	PGresult *res = NULL;
	enum meter_rc rc = METER_OK;
	size_t nask = 0;
	int n;

	for (size_t i = 0; i < c->nzones; i++)
		c->zones[i].need = false;
	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];
		struct ing_zone *z = &c->zones[sb->zone];
		int64_t lo =
		    sb->had_meter && sb->last.at_usec < sb->min_at ? sb->last.at_usec : sb->min_at;
		if (sb->head_at < lo)
			lo = sb->head_at;
		if (!z->need) {
			z->need = true;
			z->lo = lo;
			z->hi = sb->max_at;
		}
		if (lo < z->lo)
			z->lo = lo;
		if (sb->max_at > z->hi)
			z->hi = sb->max_at;
	}
	arr_open(&c->a1);
	arr_open(&c->a2);
	arr_open(&c->a3);
	for (size_t i = 0; i < c->nzones; i++) {
		struct ing_zone *z = &c->zones[i];
		int64_t lo = z->lo, hi = z->hi;
		if (!z->need || (z->n >= 2 && z->start[0] <= z->lo && z->hi < z->start[z->n - 1]))
			continue;
		/* Extend what is cached when the result stays small. */
		if (z->n >= 2) {
			int64_t ulo = z->start[0] < lo ? z->start[0] : lo;
			int64_t uhi = z->start[z->n - 1] > hi ? z->start[z->n - 1] : hi;
			if ((uhi - ulo) / ING_DAY_USEC < ING_ZONE_DAYS_MAX) {
				lo = ulo;
				hi = uhi;
			}
		}
		arr_text(&c->a1, z->name);
		arr_time(&c->a2, lo);
		arr_time(&c->a3, hi);
		z->n = 0; /* replaced below */
		nask++;
	}
	arr_close(&c->a1);
	arr_close(&c->a2);
	arr_close(&c->a3);
	if (nask == 0)
		return METER_OK;
	if (c->a1.oom || c->a2.oom || c->a3.oom)
		return METER_ENOMEM;
	params[0] = c->a1.p;
	params[1] = c->a2.p;
	params[2] = c->a3.p;
	rc = ing_q(c, "day starts", SQL_DAYS, 3, params, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	/* Rows come grouped by zone, days ascending: one group replaces the
	 * zone's cached days. */
	for (int r = 0; r < n;) {
		const char *name = PQgetvalue(res, r, 0);
		struct ing_zone *z = NULL;
		int end = r + 1; /* row r starts the group */
		int64_t d, start;

		while (end < n && strcmp(PQgetvalue(res, end, 0), name) == 0)
			end++;
		for (size_t i = 0; i < c->nzones; i++)
			if (strcmp(c->zones[i].name, name) == 0)
				z = &c->zones[i];
		if (!z) {
			snprintf(c->err, c->errlen, "day starts: unknown zone");
			rc = METER_EINVAL;
			goto out;
		}
		free(z->start);
		z->n = 0;
		z->start = malloc((size_t)(end - r) * sizeof(*z->start));
		if (!z->start) {
			rc = METER_ENOMEM;
			goto out;
		}
		for (; r < end; r++) {
			if (ing_i64(res, r, 1, &d) != METER_OK ||
			    ing_i64(res, r, 2, &start) != METER_OK) {
				snprintf(c->err, c->errlen, "day starts: bad row");
				rc = METER_EINVAL;
				goto out;
			}
			if (z->n == 0)
				z->d0 = (int32_t)d;
			/* A day a zone skipped (Pacific/Apia's 2011-12-30)
			 * starts as the next one does: a day of no time,
			 * which ing_zone_day never gives. */
			if (d != z->d0 + (int64_t)z->n ||
			    (z->n > 0 && start < z->start[z->n - 1])) {
				snprintf(c->err, c->errlen, "day starts of %s: not consecutive",
					 z->name);
				rc = METER_EINVAL;
				goto out;
			}
			z->start[z->n++] = start;
		}
	}
	for (size_t i = 0; i < c->nzones; i++)
		if (c->zones[i].need)
			ing_zone_publish(c, &c->zones[i]);
out:
	PQclear(res);
	return rc;
}

/* Fills a sandbox's attribution from columns 1-6 of a row (sandboxes and
 * the key's zone), their generation from column gen_col and its
 * created_at from the next one. */
static enum meter_rc ing_take_sandbox(struct ing_call *c, struct ing_sbx *sb, const PGresult *res,
				      int r, int gen_col)
{
	int64_t v;
	int z;

	snprintf(sb->account, sizeof(sb->account), "%s", PQgetvalue(res, r, 1));
	snprintf(sb->key, sizeof(sb->key), "%s", PQgetvalue(res, r, 2));
	if (ing_i64(res, r, 3, &v) != METER_OK || ing_i64(res, r, 4, &sb->row_memory_mib) ||
	    ing_i64(res, r, 5, &sb->row_storage_mib) || ing_i64(res, r, gen_col, &sb->gen) ||
	    ing_i64(res, r, gen_col + 1, &sb->created_usec)) {
		snprintf(c->err, c->errlen, "sandboxes: bad row");
		return METER_EINVAL;
	}
	sb->row_vcpus = (int32_t)v;
	z = ing_zone_index(c, PQgetvalue(res, r, 6));
	if (z < 0)
		return METER_ENOMEM;
	sb->zone = z;
	sb->found = true;
	return METER_OK;
}

/* Reads the sandboxes rows of the call's sandboxes (attribution, sizes,
 * zone); with create, first creates the missing ones. */
static enum meter_rc ing_load_sandboxes(struct ing_call *c, bool only_missing)
{
	const char *params[1];
	PGresult *res = NULL;
	enum meter_rc rc;
	size_t asked = 0;
	int n;

	arr_open(&c->a1);
	for (size_t i = 0; i < c->nsbx; i++) {
		if (!only_missing || !c->sbx[i].found) {
			arr_text(&c->a1, c->sbx[i].id);
			asked++;
		}
	}
	arr_close(&c->a1);
	if (asked == 0)
		return METER_OK;
	if (c->a1.oom)
		return METER_ENOMEM;
	params[0] = c->a1.p;
	rc = ing_q(c, "sandboxes", SQL_SANDBOXES, 1, params, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	for (int r = 0; r < n && rc == METER_OK; r++) {
		long x = ing_find(c, PQgetvalue(res, r, 0));
		if (x >= 0 && !c->sbx[x].found)
			rc = ing_take_sandbox(c, &c->sbx[x], res, r, 7);
	}
	PQclear(res);
	return rc;
}

static enum meter_rc ing_create_sandboxes(struct ing_call *c)
{
	const char *params[7];
	PGresult *res = NULL;
	enum meter_rc rc;
	size_t missing = 0;
	int64_t created;
	char first[64];

	arr_open(&c->a1);
	arr_open(&c->a2);
	arr_open(&c->a3);
	arr_open(&c->a4);
	arr_open(&c->a5);
	arr_open(&c->a6);
	arr_open(&c->a7);
	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];
		if (sb->found)
			continue;
		missing++;
		sb->made = true;
		arr_text(&c->a1, sb->id);
		arr_text(&c->a2, sb->doc_key);
		arr_i64(&c->a3, sb->hint_vcpus);
		arr_i64(&c->a4, sb->hint_memory_mib);
		arr_i64(&c->a5, sb->hint_storage_mib);
		arr_text(&c->a6, sandbox_state_name(sb->hint_state));
		parse_format_time(sb->min_at, first, sizeof(first));
		arr_text(&c->a7, first);
	}
	if (missing == 0)
		return METER_OK;
	arr_close(&c->a1);
	arr_close(&c->a2);
	arr_close(&c->a3);
	arr_close(&c->a4);
	arr_close(&c->a5);
	arr_close(&c->a6);
	arr_close(&c->a7);
	if (c->a1.oom || c->a2.oom || c->a3.oom || c->a4.oom || c->a5.oom || c->a6.oom || c->a7.oom)
		return METER_ENOMEM;
	params[0] = c->a1.p;
	params[1] = c->a2.p;
	params[2] = c->a3.p;
	params[3] = c->a4.p;
	params[4] = c->a5.p;
	params[5] = c->a6.p;
	params[6] = c->a7.p;
	rc = ing_q(c, "create sandboxes", SQL_SANDBOXES_CREATE, 7, params, PGRES_COMMAND_OK, &res);
	if (rc != METER_OK)
		return rc;
	if (parse_int64(PQcmdTuples(res), 0, INT64_MAX, &created) == METER_OK)
		c->st.new_sandboxes += (uint64_t)created;
	PQclear(res);
	rc = ing_load_sandboxes(c, true);
	if (rc != METER_OK)
		return rc;
	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];

		if (!sb->found) {
			snprintf(c->err, c->errlen, "sandbox %.64s: no row after creating it",
				 sb->id);
			return METER_EINVAL;
		}
		/* Its samples named a key_id that is no key that can take a
		 * sandbox (none, a read_only key, which changes nothing, or a
		 * revoked one): metered under 'unattributed', an anomaly (the
		 * agent's or the control plane's mistake, or a host's lie,
		 * kept off every key's limit). */
		if (sb->made && sb->doc_key[0] && !sb->key[0]) {
			sb->unknown_key = true;
			c->st.unknown_keys++;
			c->st.anomalies++;
		}
	}
	return METER_OK;
}

/* Reads the sandbox_meter rows of the call's sandboxes the cache did not
 * give (all of them, locking them in order, when c->locking): their
 * attribution and each one's last sample, version, carries and cumulative
 * money. Sandboxes without a meter row stay !found. */
static enum meter_rc ing_read_meters(struct ing_call *c)
{
	PGresult *res = NULL;
	enum meter_rc rc;
	int n;
	size_t asked = 0;

	static const Oid types[1] = {DB_OID_TEXT_ARR};

	ing_arrays(c, 1, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		if (c->sbx[i].found) /* from the cache */
			continue;
		db_barr_text(&c->arr[0], c->sbx[i].id);
		asked++;
	}
	if (asked == 0)
		return METER_OK;
	/* Binary results: no number formatted and parsed again. */
	rc = ing_qa_fmt(c, c->locking ? "lock sandbox_meter" : "read sandbox_meter",
			c->locking ? SQL_METER_LOCK : SQL_METER_UNLOCKED, 1, 0, NULL, 1,
			PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	for (int r = 0; r < n; r++) {
		long x = ing_find(c, PQgetvalue(res, r, 0));
		struct ing_sbx *sb;
		int64_t v[20], day_end;
		bool bad = false;

		if (x < 0 || c->sbx[x].found)
			continue;
		sb = &c->sbx[x];
		rc = ing_take_sandbox(c, sb, res, r, 30);
		if (rc != METER_OK)
			goto out;
		for (int k = 9; k < 20; k++)
			if (ing_i64(res, r, k, &v[k]) != METER_OK)
				bad = true;
		if (ing_ts(res, r, 7, &v[7]) != METER_OK)
			bad = true;
		if (bad ||
		    sandbox_state_parse(PQgetvalue(res, r, 8), &sb->last.state) != METER_OK) {
			snprintf(c->err, c->errlen, "sandbox_meter: bad row");
			rc = METER_EINVAL;
			goto out;
		}
		sb->last.at_usec = v[7];
		sb->last.cpu_usec = v[9];
		sb->last.memory_mib = v[10];
		sb->last.storage_mib = v[11];
		sb->last.vcpus = (int32_t)v[12];
		sb->version = (int32_t)v[13];
		sb->carry.cpu.rem = v[14];
		sb->carry.memory.rem = v[15];
		sb->carry.storage.rem = v[16];
		sb->cum[0] = v[17];
		sb->cum[1] = v[18];
		sb->cum[2] = v[19];
		/* tid: block (4 bytes), offset (2); xid: 4 bytes, unsigned. */
		if (PQgetlength(res, r, 20) != 6 || PQgetlength(res, r, 29) != 4) {
			snprintf(c->err, c->errlen, "sandbox_meter: bad ctid or xmin");
			rc = METER_EINVAL;
			goto out;
		}
		sb->tid_block = (uint32_t)ing_be(PQgetvalue(res, r, 20), 4);
		sb->tid_offset = (uint16_t)ing_be(PQgetvalue(res, r, 20) + 4, 2);
		sb->xmin = (uint32_t)ing_be(PQgetvalue(res, r, 29), 4);
		for (int k = 0; k < 7; k++)
			if (ing_i64(res, r, 21 + k, &v[k]) != METER_OK)
				bad = true;
		day_end = ING_TIME_NONE;
		if (!PQgetisnull(res, r, 28)) {
			if (ing_ts(res, r, 28, &day_end) != METER_OK)
				bad = true;
		}
		if (bad || v[0] < INT32_MIN || v[0] > INT32_MAX || v[5] < INT32_MIN ||
		    v[5] > INT32_MAX) {
			snprintf(c->err, c->errlen, "sandbox_meter: bad rollup");
			rc = METER_EINVAL;
			goto out;
		}
		sb->roll = (struct ing_roll){.day = (int32_t)v[0],
					     .day_end = day_end,
					     .running_usec = v[1],
					     .cpu_used_mcus = v[2],
					     .cpu_billed_mcus = v[3],
					     .total_micros = v[4],
					     .month = (int32_t)v[5],
					     .month_micros = v[6]};
		sb->had_meter = true;
		sb->has_prev = true;
	}
out:
	PQclear(res);
	return rc;
}

/* ---- the cache of meter rows ------------------------------------------------
 *
 * What the last committed call left in each sandbox's meter row, with that
 * row version's xmin, so that the next call takes it instead of reading the
 * row: the update applies only where xmin is unchanged, so a row another
 * transaction wrote since fails the guard (the call is retried, reading);
 * the sandbox's key, sizes and zone are taken only while their account's
 * ingest_generation is the one they were read under (sql/0010). */

struct ing_cached {
	char id[PARSE_ID_MAX + 1];
	bool valid; /* false: forgotten (the slot keeps its id) */
	char account[PARSE_ID_MAX + 1];
	char key[PARSE_ID_MAX + 1];
	char zone[48]; /* longer names are not cached */
	int64_t gen;
	int32_t row_vcpus;
	int64_t row_memory_mib, row_storage_mib, created_usec;
	struct usage_sample last;
	int32_t version;
	struct usage_carry carry;
	int64_t cum[3];
	struct ing_roll roll;
	uint32_t xmin;
	/* When stored (monotonic): an entry is not used past ING_CACHE_AGE, so
	 * its xmin cannot meet the same number again after a wraparound of
	 * transaction ids (2^32 of them). */
	int64_t stored_usec;
};

static const char SQL_XID[] = "SELECT pg_current_xact_id()::text::bigint,"
			      " (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint";

/* How many of the sandboxes (account, id) still have the meter row version
 * (xmin) the cache gave: those the call did not update, so no update's
 * guard checked it (all their samples were ignored). */
static const char SQL_METER_CHECK[] =
    "SELECT count(*) FROM unnest($1::text[], $2::text[], $3::bigint[]) AS q(a, s, x)"
    " JOIN sandbox_meter m ON m.account_id = q.a AND m.sandbox_id = q.s"
    " AND m.xmin::text::bigint = q.x";

static const char SQL_GENERATIONS[] =
    "SELECT q.a, COALESCE(g.generation, 0) FROM unnest($1::text[]) AS q(a)"
    " LEFT JOIN ingest_generation g ON g.account_id = q.a";

/* The slot of id: its entry's, or the empty one where it goes (lock held,
 * slots allocated). */
static size_t ing_cache_slot(const struct ingest *ing, const char *id)
{
	size_t mask = ing->nslots - 1, i = (size_t)ing_hash(id) & mask;

	while (ing->slots[i] && strcmp(ing->cache[ing->slots[i] - 1].id, id) != 0)
		i = (i + 1) & mask;
	return i;
}

/* id's entry, or NULL (lock held). */
static struct ing_cached *ing_cache_get(const struct ingest *ing, const char *id)
{
	size_t i;

	if (!ing->slots)
		return NULL;
	i = ing_cache_slot(ing, id);
	return ing->slots[i] ? &ing->cache[ing->slots[i] - 1] : NULL;
}

/* Slot of account a in tab (cap a power of two; entries are indices + 1
 * into acc): its own, or the empty one where it goes. */
static size_t ing_acc_slot(const uint32_t *tab, size_t cap, const char *const *acc, const char *a)
{
	size_t h = (size_t)ing_hash(a) & (cap - 1);

	while (tab[h] && strcmp(acc[tab[h] - 1], a) != 0)
		h = (h + 1) & (cap - 1);
	return h;
}

/* The generations of the accounts of c->ctmp[0..n) into cur[0..n) (-1
 * when not answered); METER_OK when read. */
static enum meter_rc ing_cache_generations(struct ing_call *c, size_t n, int64_t *cur)
{
	static const Oid types[1] = {DB_OID_TEXT_ARR};
	size_t cap = 16, nacc = 0;
	const char **acc = malloc(n * sizeof(*acc));
	uint32_t *idx = malloc(n * sizeof(*idx)), *tab;
	int64_t *gen = malloc(n * sizeof(*gen));
	PGresult *res = NULL;
	enum meter_rc rc;
	int rows;

	while (cap < 2 * n)
		cap *= 2;
	tab = calloc(cap, sizeof(*tab));
	if (!acc || !idx || !gen || !tab) {
		rc = METER_ENOMEM;
		goto out;
	}
	ing_arrays(c, 1, types);
	for (size_t i = 0; i < n; i++) {
		const char *a = c->ctmp[i].account;
		size_t h = ing_acc_slot(tab, cap, acc, a);
		if (!tab[h]) {
			acc[nacc] = a;
			gen[nacc] = -1; /* not answered: nothing taken */
			tab[h] = (uint32_t)++nacc;
			db_barr_text(&c->arr[0], a);
		}
		idx[i] = tab[h] - 1;
	}
	rc = ing_qa(c, "ingest_generation", SQL_GENERATIONS, 1, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		goto out;
	rows = PQntuples(res);
	for (int r = 0; r < rows; r++) {
		size_t h = ing_acc_slot(tab, cap, acc, PQgetvalue(res, r, 0));
		if (tab[h] && ing_i64(res, r, 1, &gen[tab[h] - 1]) != METER_OK)
			gen[tab[h] - 1] = -1;
	}
	for (size_t i = 0; i < n; i++)
		cur[i] = gen[idx[i]];
out:
	PQclear(res);
	free(acc);
	free(idx);
	free(gen);
	free(tab);
	return rc;
}

/* With a cache: notes the try's transaction id and its server (a new
 * server empties the cache); unless locking, gives the sandboxes the
 * cache has under their account's current generation their meter row (as
 * ing_read_meters would) and marks them found and cached. */
static enum meter_rc ing_cache_take(struct ing_call *c)
{
	struct ingest *ing = c->ing;
	PGresult *res = NULL;
	int64_t *cur = NULL;
	uint32_t *xs; /* the sandbox of each entry taken */
	const char *zone = NULL;
	size_t n = 0;
	enum meter_rc rc;
	int64_t v, now;
	int z = -1;

	if (ing->opts.cache_sandboxes == 0) /* no cache: nothing to take or keep */
		return METER_OK;
	rc = ing_q(c, "transaction id", SQL_XID, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1 || ing_i64(res, 0, 0, &v) != METER_OK || v < 0 ||
	    ing_i64(res, 0, 1, &c->server_start) != METER_OK) {
		PQclear(res);
		snprintf(c->err, c->errlen, "transaction id: bad answer");
		return METER_EINVAL;
	}
	PQclear(res);
	c->xid = (uint32_t)((uint64_t)v & UINT32_MAX);
	pthread_mutex_lock(&ing->mu);
	if (ing->server_start != c->server_start) {
		if (ing->slots)
			memset(ing->slots, 0, ing->nslots * sizeof(*ing->slots));
		ing->ncache = 0;
		ing->server_start = c->server_start;
	}
	pthread_mutex_unlock(&ing->mu);
	if (c->locking || c->nsbx == 0)
		return METER_OK;
	if (!ing_grow(&c->ctmp, &c->ctmp_cap, c->nsbx, sizeof(*c->ctmp)))
		return METER_ENOMEM;
	xs = malloc(c->nsbx * sizeof(*xs));
	if (!xs)
		return METER_ENOMEM;
	now = clock_mono_usec();
	pthread_mutex_lock(&ing->mu);
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_cached *e = ing_cache_get(ing, c->sbx[i].id);
		if (e && e->valid && now - e->stored_usec < ING_CACHE_AGE) {
			xs[n] = (uint32_t)i;
			c->ctmp[n++] = *e;
		}
	}
	pthread_mutex_unlock(&ing->mu);
	cur = n ? malloc(n * sizeof(*cur)) : NULL;
	if (n && !cur)
		rc = METER_ENOMEM;
	else if (n)
		rc = ing_cache_generations(c, n, cur);
	for (size_t j = 0; rc == METER_OK && j < n; j++) {
		const struct ing_cached *e = &c->ctmp[j];
		struct ing_sbx *sb = &c->sbx[xs[j]];
		if (cur[j] != e->gen)
			continue;
		if (!zone || strcmp(zone, e->zone) != 0) { /* entries mostly share a zone */
			z = ing_zone_index(c, e->zone);
			if (z < 0) {
				rc = METER_ENOMEM;
				break;
			}
			zone = e->zone;
		}
		memcpy(sb->account, e->account, sizeof(sb->account));
		memcpy(sb->key, e->key, sizeof(sb->key));
		sb->zone = z;
		sb->gen = e->gen;
		sb->row_vcpus = e->row_vcpus;
		sb->row_memory_mib = e->row_memory_mib;
		sb->row_storage_mib = e->row_storage_mib;
		sb->created_usec = e->created_usec;
		sb->last = e->last;
		sb->version = e->version;
		sb->carry = e->carry;
		memcpy(sb->cum, e->cum, sizeof(sb->cum));
		sb->roll = e->roll;
		sb->xmin = e->xmin;
		sb->found = sb->had_meter = sb->has_prev = sb->cached = true;
		c->st.cached++;
	}
	free(cur);
	free(xs);
	return rc;
}

/* After a commit: the meter row of each sandbox that has one, as the call
 * left it. The cache starts over when full. */
static void ing_cache_store(struct ing_call *c)
{
	struct ingest *ing = c->ing;
	size_t max = ing->opts.cache_sandboxes;
	int64_t now = clock_mono_usec();

	if (max == 0)
		return;
	pthread_mutex_lock(&ing->mu);
	if (ing->server_start != c->server_start) { /* another server meanwhile */
		pthread_mutex_unlock(&ing->mu);
		return;
	}
	if (!ing->slots) {
		size_t ns = 16;
		while (ns < 2 * max)
			ns *= 2;
		ing->slots = calloc(ns, sizeof(*ing->slots));
		ing->nslots = ing->slots ? ns : 0;
	}
	for (size_t x = 0; ing->slots && x < c->nsbx; x++) {
		const struct ing_sbx *sb = &c->sbx[x];
		const char *zone = c->zones[sb->zone].name;
		struct ing_cached *e;
		size_t i;
		/* A row from the cache that the call did not write stays as it
		 * was, stored when it was. */
		if (!sb->found || (!sb->changed && !sb->had_meter) || (sb->cached && !sb->changed))
			continue;
		i = ing_cache_slot(ing, sb->id);
		if (strlen(zone) >= sizeof(e->zone)) {
			if (ing->slots[i])
				ing->cache[ing->slots[i] - 1].valid = false;
			continue;
		}
		if (!ing->slots[i]) {
			if (ing->ncache >= max) {
				memset(ing->slots, 0, ing->nslots * sizeof(*ing->slots));
				ing->ncache = 0;
				i = ing_cache_slot(ing, sb->id);
			}
			if (!ing_grow(&ing->cache, &ing->cache_cap, ing->ncache + 1,
				      sizeof(*ing->cache)))
				break;
			ing->slots[i] = (uint32_t)++ing->ncache;
			snprintf(ing->cache[ing->ncache - 1].id, sizeof(e->id), "%s", sb->id);
		}
		e = &ing->cache[ing->slots[i] - 1];
		memcpy(e->account, sb->account, sizeof(e->account));
		memcpy(e->key, sb->key, sizeof(e->key));
		memcpy(e->zone, zone, strlen(zone) + 1); /* fits: checked above */
		e->gen = sb->gen;
		e->row_vcpus = sb->row_vcpus;
		e->row_memory_mib = sb->row_memory_mib;
		e->row_storage_mib = sb->row_storage_mib;
		e->created_usec = sb->created_usec;
		e->last = sb->last;
		e->version = sb->version;
		e->carry = sb->carry;
		memcpy(e->cum, sb->cum, sizeof(e->cum));
		e->roll = sb->roll;
		e->xmin = sb->changed ? c->xid : sb->xmin;
		e->stored_usec = now;
		e->valid = true;
	}
	pthread_mutex_unlock(&ing->mu);
}

/* After a failed try: the call's sandboxes are read again next time. */
static void ing_cache_forget(struct ing_call *c)
{
	struct ingest *ing = c->ing;

	pthread_mutex_lock(&ing->mu);
	for (size_t x = 0; x < c->nsbx; x++) {
		struct ing_cached *e = ing_cache_get(ing, c->sbx[x].id);
		if (e)
			e->valid = false;
	}
	pthread_mutex_unlock(&ing->mu);
}

/* Whether an event of sb is one SQL_EVENTS_AGAIN counts. */
static bool ing_event_counted(const struct ing_sbx *sb, enum sandbox_state state, int64_t at)
{
	if (sb->max_at <= sb->ev_from || at > sb->max_at)
		return false;
	return state == SANDBOX_STOPPED || (state == SANDBOX_PAUSED && at >= sb->ev_from);
}

/* Of a sandbox a create check made, metered for the first time, with its
 * events from ever: where its first interval starts, before its first
 * sample. The control plane reports the sandbox running when it starts,
 * so a running event first (a time at or after its create, counting an
 * earlier one as at it) starts billing there, from a CPU counter of 0
 * (ing_sandbox). With any other first event, or none, billing starts at
 * the first sample, and the events before that sample are not used (but
 * for a stop among them, which is final: stop_at). A first sample at or
 * before the create keeps them all: those dated before the create count
 * as at it, at or after that sample, as when they are read again in a
 * later call (ing_load_events reads such a sandbox's events from the
 * start). So each interval is billed the same whether its samples came in
 * one call or in several. */
static void ing_find_head(struct ing_call *c, struct ing_sbx *sb)
{
	size_t k = sb->ev_off, end = sb->ev_off + sb->ev_n;

	if (sb->had_meter || sb->made || sb->min_at <= sb->created_usec)
		return;
	if (k < end && c->events[k].at < sb->min_at && c->events[k].state == SANDBOX_RUNNING) {
		int64_t at =
		    c->events[k].at > sb->created_usec ? c->events[k].at : sb->created_usec;
		if (at < sb->min_at) {
			sb->head_at = at;
			return;
		}
	}
	for (; k < end && c->events[k].at < sb->min_at; k++) {
		if (c->events[k].state == SANDBOX_STOPPED)
			continue;
		sb->has_base = true;
		sb->base_state = c->events[k].state;
	}
	sb->ev_n -= k - sb->ev_off;
	sb->ev_off = sb->ev_pos = k;
}

/* For each sandbox whose samples take their state from the events (a
 * cgroup's) and whose events were read from its last metered sample on:
 * the state its events before that sample give (base_state), the latest
 * running or paused one, as SQL_EVENTS orders them, one recorded since
 * that sample was metered (a pause the control plane reported late)
 * included. With the events read, they are all its events up to its
 * newest sample (ing_state_by_events). */
static enum meter_rc ing_load_bases(struct ing_call *c)
{
	static const Oid types[3] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR};
	PGresult *res = NULL;
	enum meter_rc rc;
	bool any = false;
	int n;

	for (size_t i = 0; i < c->nsbx && !any; i++) {
		const struct ing_sbx *sb = &c->sbx[i];
		any = sb->by_events && sb->had_meter && sb->max_at > sb->ev_from &&
		      sb->ev_from != ING_EVENTS_EVER_USEC;
	}
	if (!any)
		return METER_OK;
	ing_arrays(c, 3, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_sbx *sb = &c->sbx[i];
		if (!sb->by_events || !sb->had_meter || sb->max_at <= sb->ev_from ||
		    sb->ev_from == ING_EVENTS_EVER_USEC)
			continue;
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->id);
		db_barr_ts(&c->arr[2], sb->ev_from);
	}
	rc = ing_qa(c, "lifecycle events before", SQL_EVENTS_BEFORE, 3, 0, NULL, PGRES_TUPLES_OK,
		    &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	for (int r = 0; r < n; r++) {
		long x = ing_find(c, PQgetvalue(res, r, 0));
		enum sandbox_state st;

		if (x < 0)
			continue;
		if (sandbox_state_parse(PQgetvalue(res, r, 1), &st) != METER_OK) {
			snprintf(c->err, c->errlen, "lifecycle_events: bad row");
			rc = METER_EINVAL;
			break;
		}
		c->sbx[x].has_base = true;
		c->sbx[x].base_state = st;
	}
	PQclear(res);
	return rc;
}

/* Reads the lifecycle events after each sandbox's watermark (or its first
 * sample in this call) up to its newest sample. One whose first interval
 * starts before its create reads them however early they are dated: the
 * events before the create count as at it (ing_interval_subs), a pause
 * there included, which an earlier reading of the sandbox running does
 * not undo. So does one a create check made, metered for the first time:
 * its running event may start billing before its first sample
 * (ing_find_head). */
static enum meter_rc ing_load_events(struct ing_call *c)
{
	static const Oid types[3] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR};
	char hi_s[64];
	const char *window[1] = {hi_s};
	PGresult *res = NULL;
	enum meter_rc rc;
	int64_t hi = INT64_MIN;
	bool any = false;
	int n;

	c->nevents = 0;
	c->ev_read = -1;
	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];
		int64_t from = sb->had_meter ? sb->last.at_usec : sb->min_at;
		bool fresh = !sb->had_meter && !sb->made;
		if (fresh && sb->created_usec < from)
			from = sb->created_usec;
		sb->ev_off = sb->ev_n = sb->ev_pos = 0;
		sb->stop_at = sb->head_at = INT64_MAX;
		sb->has_base = false;
		sb->ev_from = from;
		/* Nothing new to meter; but a cgroup's first sample takes
		 * its state from the events before it and at its time. */
		if (sb->max_at <= from && !(fresh && sb->by_events))
			continue;
		/* From the start when the sandbox's metered sample is at its
		 * create (or before): the events before the create count as
		 * at it, and none has been used yet. */
		if (from <= sb->created_usec || fresh)
			sb->ev_from = ING_EVENTS_EVER_USEC;
		any = true;
		if (sb->max_at > hi)
			hi = sb->max_at;
	}
	if (!any)
		return METER_OK;
	ing_arrays(c, 3, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		db_barr_text(&c->arr[0], c->sbx[i].account);
		db_barr_text(&c->arr[1], c->sbx[i].id);
		db_barr_ts(&c->arr[2], c->sbx[i].ev_from);
	}
	parse_format_time(hi, hi_s, sizeof(hi_s));
	rc = ing_qa(c, "lifecycle events", SQL_EVENTS, 3, 1, window, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	c->ev_read = 0;
	if (n > 0 && !ing_grow(&c->events, &c->ev_cap, (size_t)n, sizeof(*c->events))) {
		rc = METER_ENOMEM;
		goto out;
	}
	for (int r = 0; r < n; r++) {
		long x = ing_find(c, PQgetvalue(res, r, 0));
		struct ing_event *e = &c->events[c->nevents];
		struct ing_sbx *sb;
		int64_t from;

		if (x < 0)
			continue;
		if (ing_i64(res, r, 1, &e->at) != METER_OK ||
		    sandbox_state_parse(PQgetvalue(res, r, 2), &e->state) != METER_OK) {
			snprintf(c->err, c->errlen, "lifecycle_events: bad row");
			rc = METER_EINVAL;
			goto out;
		}
		sb = &c->sbx[x];
		from = sb->ev_from;
		if (ing_event_counted(sb, e->state, e->at))
			c->ev_read++;
		if (e->state == SANDBOX_STOPPED && e->at < sb->stop_at)
			sb->stop_at = e->at;
		/* An event at the watermark's sample starts the next interval's
		 * state; one before it was metered already. */
		if (e->at < from || e->at > sb->max_at)
			continue;
		if (sb->ev_n == 0)
			sb->ev_off = sb->ev_pos = c->nevents;
		sb->ev_n++;
		c->nevents++;
	}
	for (size_t i = 0; i < c->nsbx; i++)
		ing_find_head(c, &c->sbx[i]);
	rc = ing_load_bases(c);
out:
	PQclear(res);
	return rc;
}

/* Reads, for each sandbox with a key and usage to meter, the instants
 * inside its metering where one of its open holds' lease starts or its
 * cover ends (SQL_HOLD_CUTS). ledger_consume cuts a piece's money at
 * them by time, floor(what is left × its time / the time left); cut
 * before pricing, each stretch is priced from the cumulative quantities
 * instead, so a hold at its lease's worst case takes no micro of the
 * sub-micro remainder the usage before it carries. A hold made after this
 * reading (a wake's check meanwhile) is cut by time, as before. */
static enum meter_rc ing_load_cuts(struct ing_call *c)
{
	static const Oid types[3] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR};
	char hi_s[64];
	const char *window[1] = {hi_s};
	PGresult *res = NULL;
	enum meter_rc rc;
	int64_t hi = INT64_MIN;
	int n;

	c->ncuts = 0;
	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];
		sb->cut_off = sb->cut_n = 0;
		if (sb->key[0] && sb->max_at > sb->ev_from && sb->max_at > hi)
			hi = sb->max_at;
	}
	if (hi == INT64_MIN)
		return METER_OK;
	ing_arrays(c, 3, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_sbx *sb = &c->sbx[i];
		if (!sb->key[0] || sb->max_at <= sb->ev_from)
			continue;
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->id);
		db_barr_ts(&c->arr[2], sb->ev_from);
	}
	parse_format_time(hi, hi_s, sizeof(hi_s));
	rc = ing_qa(c, "hold instants", SQL_HOLD_CUTS, 3, 1, window, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	if (n > 0 && !ing_grow(&c->cuts, &c->cuts_cap, (size_t)n, sizeof(*c->cuts))) {
		rc = METER_ENOMEM;
		goto out;
	}
	for (int r = 0; r < n; r++) {
		long x = ing_find(c, PQgetvalue(res, r, 0));
		struct ing_sbx *sb;

		if (x < 0)
			continue;
		sb = &c->sbx[x];
		if (ing_i64(res, r, 1, &c->cuts[c->ncuts]) != METER_OK) {
			snprintf(c->err, c->errlen, "hold instants: bad row");
			rc = METER_EINVAL;
			goto out;
		}
		if (sb->cut_n == 0)
			sb->cut_off = c->ncuts;
		sb->cut_n++;
		c->ncuts++;
	}
out:
	PQclear(res);
	return rc;
}

/* Index of the price version in force at t (the last one effective at or
 * before t; the oldest when t precedes them all). */
static size_t ing_version_at(const struct ing_call *c, int64_t t)
{
	size_t lo = 0, hi = c->nprices;

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (c->prices[mid].from_usec <= t)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static bool ing_qty_zero(const struct usage_qty *q)
{
	return q->running_usec == 0 && q->paused_usec == 0 && q->cpu_used_mcus == 0 &&
	       q->cpu_billed_mcus == 0 && q->memory_mibus == 0 && q->storage_mibus == 0;
}

static enum meter_rc ing_add_piece(struct ing_call *c, int64_t a, int64_t b, enum sandbox_state st,
				   size_t vi)
{
	struct ing_piece *p;

	if (!ing_grow(&c->pieces, &c->pieces_cap, c->npieces + 1, sizeof(*c->pieces)))
		return METER_ENOMEM;
	p = &c->pieces[c->npieces++];
	p->a = a;
	p->b = b;
	p->state = st;
	p->vi = vi;
	p->cpu_mcus = 0;
	return METER_OK;
}

/* Adds [a, b) of sb in state st, cut at every price version boundary and
 * every instant of its holds (ing_load_cuts) inside. */
static enum meter_rc ing_add_segment(struct ing_call *c, const struct ing_sbx *sb, int64_t a,
				     int64_t b, enum sandbox_state st)
{
	while (a < b) {
		size_t vi = ing_version_at(c, a);
		int64_t e = b;
		enum meter_rc rc;

		if (vi + 1 < c->nprices && c->prices[vi + 1].from_usec < e)
			e = c->prices[vi + 1].from_usec;
		for (size_t k = sb->cut_off; k < sb->cut_off + sb->cut_n; k++)
			if (c->cuts[k] > a) {
				if (c->cuts[k] < e)
					e = c->cuts[k];
				break;
			}
		rc = ing_add_piece(c, a, e, st, vi);
		if (rc != METER_OK)
			return rc;
		a = e;
	}
	return METER_OK;
}

/* Appends piece pc, whose quantities are *q, to c->subs in sub-pieces of
 * one UTC hour and one local day of zone z: each gets floor(field × its
 * time / the time left) of what is left, so they add up to *q exactly.
 * *q is in 128 bits: a piece of days at the largest sizes passes int64_t
 * as a whole (16 TiB of memory in MiB-µs after about 6.4 days), an hour
 * of it never does. */
static enum meter_rc ing_piece_subs(struct ing_call *c, const struct ing_zone *z,
				    const struct ing_piece *pc, const struct usage_wide *q)
{
	struct usage_wide rest = *q;
	int64_t a = pc->a, b = pc->b;
	enum meter_rc rc;

	for (int64_t t = a; t < b;) {
		int64_t hour = ing_floordiv(t, ING_HOUR_USEC) * ING_HOUR_USEC;
		int64_t e = b, dend;
		int32_t day;
		struct ing_sub *s;

		if (!ing_zone_day(z, t, &day, &dend)) {
			snprintf(c->err, c->errlen, "day of zone %s not loaded", z->name);
			return METER_EINVAL;
		}
		if (hour + ING_HOUR_USEC < e)
			e = hour + ING_HOUR_USEC;
		if (dend < e)
			e = dend;
		if (!ing_grow(&c->subs, &c->subs_cap, c->nsubs + 1, sizeof(*c->subs)))
			return METER_ENOMEM;
		s = &c->subs[c->nsubs++];
		rc = usage_wide_split(&rest, e - t, b - t, &s->q);
		if (rc != METER_OK)
			return rc;
		s->a = t;
		s->b = e;
		s->hour = hour;
		s->day = day;
		s->day_end = dend;
		s->vi = pc->vi;
		t = e;
	}
	return METER_OK;
}

/* The quantities of one interval prev → cur of sb, cut into pieces of one
 * state and one price version (events, versions), then into sub-pieces of
 * one UTC hour and one local day. Fills c->subs; *flags gets USAGE_* bits.
 * METER_ERANGE when a quantity overflows. */
static enum meter_rc ing_interval_subs(struct ing_call *c, struct ing_sbx *sb,
				       const struct usage_sample *prev,
				       const struct usage_sample *cur, unsigned *flags)
{
	struct usage_sample sp, sc;
	const struct ing_zone *z = &c->zones[sb->zone];
	int64_t t, dcpu, wrun = 0, run_before = 0;
	__int128 cpu_before = 0;
	enum sandbox_state st = prev->state;
	unsigned fl = 0;
	enum meter_rc rc;

	c->npieces = 0;
	c->nsubs = 0;
	/* CPU used over the interval, reset and cap applied, in any state. */
	rc = usage_cpu_delta(prev, cur, &dcpu, &fl);
	if (rc != METER_OK)
		return rc;

	/* Segments between the lifecycle events in [prev, cur): an event at
	 * prev's time sets the state the interval starts in (the event is
	 * authoritative over the sample taken as it happened), one at cur's is
	 * left to the next interval. A stop event is final: nothing after the
	 * first one is billed, whatever later samples or events say. Nothing before
	 * the sandbox's create is billed either (an agent's clock behind, a
	 * stale first reading): the interval starts there, and the events
	 * before it count as at it, so an interval that ends by then leaves
	 * them to the next (or one call and several would differ). */
	t = prev->at_usec;
	if (t < sb->created_usec)
		t = sb->created_usec;
	if (sb->stop_at <= t)
		st = SANDBOX_STOPPED;
	while (sb->ev_pos < sb->ev_off + sb->ev_n &&
	       (c->events[sb->ev_pos].at > sb->created_usec ? c->events[sb->ev_pos].at
							    : sb->created_usec) < cur->at_usec) {
		const struct ing_event *e = &c->events[sb->ev_pos++];
		if (sb->stop_at < e->at)
			continue;
		if (e->at <= t) {
			st = sb->stop_at <= e->at ? SANDBOX_STOPPED : e->state;
			continue;
		}
		rc = ing_add_segment(c, sb, t, e->at, st);
		if (rc != METER_OK)
			return rc;
		t = e->at;
		st = e->state;
	}
	if (t < cur->at_usec) {
		rc = ing_add_segment(c, sb, t, cur->at_usec, st);
		if (rc != METER_OK)
			return rc;
	}

	/* CPU to the running pieces, in proportion to their wall time, in
	 * millicore-µs: the unit an hour's or a day's cut takes its share in,
	 * so a price version's or an event's cut is as fine (in whole µs, a
	 * cut at a price change moved up to a CPU-µs to the later version).
	 * floor(dcpu × 1000 × run_before / wrun), without the product's
	 * 2^136: dcpu × run_before = whole × wrun + part. */
	for (size_t i = 0; i < c->npieces; i++)
		if (c->pieces[i].state == SANDBOX_RUNNING)
			wrun += c->pieces[i].b - c->pieces[i].a;
	for (size_t i = 0; i < c->npieces; i++) {
		struct ing_piece *pc = &c->pieces[i];
		__int128 prod, upto;
		if (pc->state != SANDBOX_RUNNING || wrun == 0)
			continue;
		run_before += pc->b - pc->a;
		prod = (__int128)dcpu * run_before;
		upto = prod / wrun * MONEY_MILLICORES_PER_VCPU +
		       prod % wrun * MONEY_MILLICORES_PER_VCPU / wrun;
		pc->cpu_mcus = upto - cpu_before;
		cpu_before = upto;
	}

	/* Each piece: its quantities (its version's floor), then hours and
	 * days. A paused piece is billed for the snapshot size of prev when
	 * prev is paused; one an event paused, for the size the sample after
	 * the pause reports when it is paused (the snapshot is made at the
	 * pause: a running prev has none to report). */
	for (size_t i = 0; i < c->npieces; i++) {
		const struct ing_piece *pc = &c->pieces[i];
		struct usage_wide q;

		memset(&sp, 0, sizeof(sp));
		sp.at_usec = pc->a;
		sp.state = pc->state;
		sp.cpu_usec = 0;
		sp.memory_mib = prev->memory_mib;
		sp.storage_mib = prev->state != SANDBOX_PAUSED && cur->state == SANDBOX_PAUSED
				     ? cur->storage_mib
				     : prev->storage_mib;
		sp.vcpus = prev->vcpus;
		sc = sp;
		sc.at_usec = pc->b;
		rc = usage_interval_wide(&sp, &sc, c->prices[pc->vi].rates.floor_millicores, &q,
					 NULL);
		if (rc != METER_OK)
			return rc;
		if (pc->state == SANDBOX_RUNNING)
			usage_wide_cpu(&q, pc->cpu_mcus, prev->vcpus,
				       c->prices[pc->vi].rates.floor_millicores, &fl);
		rc = ing_piece_subs(c, z, pc, &q);
		if (rc != METER_OK)
			return rc;
	}
	*flags = fl;
	return METER_OK;
}

static enum meter_rc ing_add_row(struct ing_call *c, uint32_t x, const struct ing_sub *s,
				 const struct usage_cost *cost, const int64_t cum[3])
{
	struct ing_usage_row *r = c->nrows ? &c->rows[c->nrows - 1] : NULL;
	enum meter_rc rc;

	if (r && r->sbx == x && r->hour == s->hour && r->day == s->day &&
	    r->version == c->prices[s->vi].version) {
		rc = usage_qty_add(&r->q, &s->q);
		if (rc == METER_OK)
			rc = money_add(r->c.cpu_micros, cost->cpu_micros, &r->c.cpu_micros);
		if (rc == METER_OK)
			rc =
			    money_add(r->c.memory_micros, cost->memory_micros, &r->c.memory_micros);
		if (rc == METER_OK)
			rc = money_add(r->c.storage_micros, cost->storage_micros,
				       &r->c.storage_micros);
		if (rc == METER_OK)
			rc = money_add(r->c.total_micros, cost->total_micros, &r->c.total_micros);
		if (rc != METER_OK)
			return rc;
	} else {
		if (!ing_grow(&c->rows, &c->rows_cap, c->nrows + 1, sizeof(*c->rows)))
			return METER_ENOMEM;
		r = &c->rows[c->nrows++];
		r->sbx = x;
		r->hour = s->hour;
		r->day = s->day;
		r->version = c->prices[s->vi].version;
		r->q = s->q;
		r->c = *cost;
	}
	memcpy(r->cum, cum, sizeof(r->cum));
	return METER_OK;
}

/* Adds sub-piece u of sandbox x, whose money is micros, to the spend of
 * its sandbox-day: the last one when it is of that sandbox-day, else a new
 * one; the piece goes with it. Pieces are not merged: which holds may
 * consume one hangs on its time (ledger_consume), and a piece is at most
 * an hour. ing_price_subs undoes this on failure. */
static enum meter_rc ing_add_spend(struct ing_call *c, uint32_t x, const struct ing_sub *u,
				   int64_t micros)
{
	struct ing_spend *s = c->nspend ? &c->spend[c->nspend - 1] : NULL;
	struct ledger_piece *p;
	enum meter_rc rc;

	if (micros == 0)
		return METER_OK;
	if (!ing_grow(&c->spieces, &c->spieces_cap, c->nspieces + 1, sizeof(*c->spieces)))
		return METER_ENOMEM;
	if (s && s->sbx == x && s->day == u->day) {
		rc = money_add(s->micros, micros, &s->micros);
		if (rc != METER_OK)
			return rc;
	} else {
		if (!ing_grow(&c->spend, &c->spend_cap, c->nspend + 1, sizeof(*c->spend)))
			return METER_ENOMEM;
		s = &c->spend[c->nspend++];
		s->sbx = x;
		s->day = u->day;
		s->micros = micros;
		s->p_off = c->nspieces;
		s->np = 0;
	}
	p = &c->spieces[c->nspieces++];
	p->start_usec = u->a;
	p->end_usec = u->b;
	p->micros = micros;
	s->np++;
	return METER_OK;
}

/* First day of the UTC month of the instant usec, in days since 1970-01-01. */
static int32_t ing_month_of(int64_t usec)
{
	int64_t y, m, d;

	parse_civil_from_days(ing_floordiv(usec, 24 * MONEY_USEC_PER_HOUR), &y, &m, &d);
	return (int32_t)parse_days_from_civil(y, m, 1);
}

/* Adds a priced piece to the rollup: to the day's sums when it is on the
 * rollup's day, starting a new day when it is on a later one (an earlier
 * day's piece, after a key changed its time zone, is not today's); the same
 * for its UTC month. */
static enum meter_rc ing_roll_add(struct ing_roll *r, const struct ing_sub *s,
				  const struct usage_cost *cost)
{
	int32_t month = ing_month_of(s->hour);
	bool bad = false;

	if (s->day > r->day)
		*r = (struct ing_roll){
		    .day = s->day, .month = r->month, .month_micros = r->month_micros};
	if (s->day == r->day) {
		r->day_end = s->day_end;
		bad |= __builtin_add_overflow(r->running_usec, s->q.running_usec, &r->running_usec);
		bad |=
		    __builtin_add_overflow(r->cpu_used_mcus, s->q.cpu_used_mcus, &r->cpu_used_mcus);
		bad |= __builtin_add_overflow(r->cpu_billed_mcus, s->q.cpu_billed_mcus,
					      &r->cpu_billed_mcus);
		bad |= money_add(r->total_micros, cost->total_micros, &r->total_micros) != METER_OK;
	}
	if (month > r->month) {
		r->month = month;
		r->month_micros = 0;
	}
	if (month == r->month)
		bad |= money_add(r->month_micros, cost->total_micros, &r->month_micros) != METER_OK;
	return bad ? METER_ERANGE : METER_OK;
}

/* Prices c->subs in time order on copies of sb's version, carries and
 * cumulative money; commits them to sb and to the call's rows only when
 * every step worked. */
static enum meter_rc ing_price_subs(struct ing_call *c, uint32_t x, int64_t *total)
{
	struct ing_sbx *sb = &c->sbx[x];
	int32_t version = sb->version;
	struct usage_carry carry = sb->carry;
	struct ing_roll roll = sb->roll;
	int64_t cum[3] = {sb->cum[0], sb->cum[1], sb->cum[2]};
	size_t rows0 = c->nrows, spend0 = c->nspend, spieces0 = c->nspieces;
	struct ing_usage_row last_row;
	struct ing_spend last_spend;
	enum meter_rc rc = METER_OK;

	/* The last row and spend may be merged into: keep them to undo. */
	if (rows0)
		last_row = c->rows[rows0 - 1];
	if (spend0)
		last_spend = c->spend[spend0 - 1];
	*total = 0;
	for (size_t i = 0; i < c->nsubs && rc == METER_OK; i++) {
		const struct ing_sub *s = &c->subs[i];
		const struct ing_price *pr = &c->prices[s->vi];
		struct usage_cost cost;

		if (ing_qty_zero(&s->q))
			continue;
		if (pr->version != version) {
			version = pr->version;
			memset(&carry, 0, sizeof(carry));
		}
		rc = usage_price(&pr->rates, &carry, &s->q, &cost);
		if (rc == METER_OK)
			rc = money_add(cum[0], cost.cpu_micros, &cum[0]);
		if (rc == METER_OK)
			rc = money_add(cum[1], cost.memory_micros, &cum[1]);
		if (rc == METER_OK)
			rc = money_add(cum[2], cost.storage_micros, &cum[2]);
		if (rc == METER_OK)
			rc = money_add(*total, cost.total_micros, total);
		if (rc == METER_OK)
			rc = ing_roll_add(&roll, s, &cost);
		if (rc == METER_OK)
			rc = ing_add_row(c, x, s, &cost, cum);
		if (rc == METER_OK && sb->key[0])
			rc = ing_add_spend(c, x, s, cost.total_micros);
	}
	if (rc != METER_OK) {
		c->nrows = rows0;
		if (rows0)
			c->rows[rows0 - 1] = last_row;
		c->nspend = spend0;
		if (spend0)
			c->spend[spend0 - 1] = last_spend;
		c->nspieces = spieces0;
		return rc;
	}
	sb->version = version;
	sb->carry = carry;
	sb->roll = roll;
	memcpy(sb->cum, cum, sizeof(cum));
	return METER_OK;
}

/* Appends one raw sample to the samples COPY buffer. */
static void ing_copy_sample(struct ing_call *c, const struct ing_sbx *sb,
			    const struct usage_sample *u, const char *host_id)
{
	struct db_bin *b = &c->samples;

	db_bin_be16(b, 9);
	db_bin_text(b, sb->account);
	db_bin_text(b, sb->id);
	db_bin_ts(b, u->at_usec);
	db_bin_text(b, sandbox_state_name(u->state));
	db_bin_i64(b, u->cpu_usec);
	db_bin_i64(b, u->memory_mib);
	db_bin_i64(b, u->storage_mib);
	db_bin_i32(b, u->vcpus);
	db_bin_text(b, host_id);
}

/* Of a sample cur of sb whose source does not know the state (a cgroup's):
 * the state the lifecycle events give at its time, an event at that time
 * included (as it sets the state from there on), all of them: those
 * before the ones read (base_state), then the ones read; running when
 * there is none. An event before the sandbox's create counts as at it; a
 * stop is final. Only the events decide it, not the sample before, so it
 * is the same whether the samples come in one call or in several, and
 * whatever another host (an agent) said before. The interval up to cur is
 * billed from the sample before, in its state, as any interval is: a pause
 * recorded after a sample past it was metered makes the next sample
 * paused. */
static void ing_state_by_events(const struct ing_call *c, const struct ing_sbx *sb,
				struct usage_sample *cur)
{
	enum sandbox_state st = sb->has_base ? sb->base_state : SANDBOX_RUNNING;

	for (size_t k = sb->ev_off; k < sb->ev_off + sb->ev_n; k++) {
		int64_t at = c->events[k].at;

		if (at < sb->created_usec)
			at = sb->created_usec;
		if (at > cur->at_usec)
			break;
		st = c->events[k].state;
	}
	if (sb->stop_at <= cur->at_usec)
		st = SANDBOX_STOPPED;
	cur->state = st;
}

/* Records that sample at found sandbox x running after the sample before
 * (before) found it not: a resume for ing_write_resumes. Every one, the
 * one from the meter row's sample to the round's first included: sql/0057
 * reports the first of them that its rule holds for, as rounds of one
 * sample each would (no trigger on the meter row does it any more). */
static enum meter_rc ing_add_resume(struct ing_call *c, uint32_t x, int64_t before, int64_t at)
{
	if (!ing_grow(&c->resumes, &c->resumes_cap, c->nresumes + 1, sizeof(*c->resumes)))
		return METER_ENOMEM;
	c->resumes[c->nresumes++] = (struct ing_resume){.sbx = x, .before = before, .at = at};
	return METER_OK;
}

/* The arithmetic of one sandbox: its samples in time order. */
static enum meter_rc ing_sandbox(struct ing_call *c, uint32_t x)
{
	struct ing_sbx *sb = &c->sbx[x];
	enum meter_rc rc;

	for (size_t i = sb->first; i < sb->first + sb->n; i++) {
		const struct ing_item *it = &c->items[i];
		struct usage_sample cur = it->s->u, head;
		const struct usage_sample *prev = sb->has_prev ? &sb->last : NULL;
		unsigned flags = 0;
		int64_t micros = 0;

		if (cur.vcpus == 0)
			cur.vcpus = sb->row_vcpus;
		if (cur.memory_mib == SAMPLE_UNKNOWN)
			cur.memory_mib = sb->row_memory_mib;
		/* Left out (optional in a document, unknown to a cgroup):
		 * the size last reported, else the record's. */
		if (cur.storage_mib == SAMPLE_UNKNOWN)
			cur.storage_mib = sb->has_prev ? sb->last.storage_mib : sb->row_storage_mib;
		if (sb->has_prev && cur.at_usec <= sb->last.at_usec) {
			c->st.ignored++;
			continue;
		}
		/* Started by a running event before this, its first sample:
		 * billed from there as from a reading of the VM's counter
		 * at 0, at this sample's sizes. */
		if (!prev && sb->head_at < cur.at_usec) {
			head = cur;
			head.at_usec = sb->head_at;
			head.state = SANDBOX_RUNNING;
			head.cpu_usec = 0;
			prev = &head;
		}
		if (it->s->state_from_events)
			ing_state_by_events(c, sb, &cur);
		/* A stopped sample is a reading as any: the interval after it
		 * bills nothing but what an event in it says ran, and a later
		 * sample that finds the VM running again is billed (the
		 * control plane may wake a sandbox it did not stop). Only a
		 * stop event is final (stop_at, ing_interval_subs). */
		if (prev && prev->state != SANDBOX_RUNNING && cur.state == SANDBOX_RUNNING) {
			rc = ing_add_resume(c, x, prev->at_usec, cur.at_usec);
			if (rc != METER_OK)
				return rc;
		}
		if (prev) {
			rc = ing_interval_subs(c, sb, prev, &cur, &flags);
			if (rc == METER_OK)
				rc = ing_price_subs(c, x, &micros);
			if (rc == METER_ERANGE) {
				/* Too large to compute (an hour's money past a
				 * bigint, at prices and sizes near their
				 * limits): start again from this sample. */
				log_error("ingest: sandbox %s: interval %" PRId64 " -> %" PRId64
					  " µs overflows; not billed, re-baselined",
					  sb->id, prev->at_usec, cur.at_usec);
				c->st.overflows++;
				c->st.anomalies++;
			} else if (rc != METER_OK) {
				return rc;
			} else {
				c->st.intervals++;
				/* A statistic: it stops at the largest bigint. */
				if (money_add(c->st.micros, micros, &c->st.micros) != METER_OK)
					c->st.micros = INT64_MAX;
				if (flags & USAGE_COUNTER_RESET) {
					c->st.resets++;
					c->st.anomalies++;
				}
				if (flags & USAGE_CPU_CAPPED) {
					c->st.cpu_capped++;
					c->st.anomalies++;
				}
			}
		}
		ing_copy_sample(c, sb, &cur, c->batches[it->batch].host_id);
		c->batch_accepted[it->batch] = true;
		sb->last = cur;
		sb->has_prev = true;
		sb->changed = true;
		c->st.accepted++;
		if (!sb->key[0])
			c->st.unattributed++;
	}
	return METER_OK;
}

/* The meter row of sb as a meter_ingest_meter row of SQL_METER_*. */
static void ing_meter_row(struct ing_call *c, struct ing_rows *r, const struct ing_sbx *sb)
{

	row_open(r, 25);
	row_text(r, sb->account);
	row_text(r, sb->id);
	row_ts(r, sb->last.at_usec);
	row_text(r, sandbox_state_name(sb->last.state));
	row_i64(r, sb->last.cpu_usec);
	row_i64(r, sb->last.memory_mib);
	row_i64(r, sb->last.storage_mib);
	row_i32(r, sb->last.vcpus);
	row_i32(r, sb->version != ING_VERSION_NONE
		       ? sb->version
		       : c->prices[ing_version_at(c, sb->last.at_usec)].version);
	row_i64(r, sb->carry.cpu.rem);
	row_i64(r, sb->carry.memory.rem);
	row_i64(r, sb->carry.storage.rem);
	row_i64(r, sb->cum[0]);
	row_i64(r, sb->cum[1]);
	row_i64(r, sb->cum[2]);
	if (sb->cached)
		row_null(r, DB_OID_TID);
	else
		row_tid(r, sb->tid_block, sb->tid_offset);
	if (sb->roll.day != ING_DAY_NONE)
		row_date(r, sb->roll.day);
	else
		row_null(r, DB_OID_DATE);
	row_i64(r, sb->roll.running_usec);
	row_i64(r, sb->roll.cpu_used_mcus);
	row_i64(r, sb->roll.cpu_billed_mcus);
	row_i64(r, sb->roll.total_micros);
	if (sb->roll.month != ING_DAY_NONE)
		row_date(r, sb->roll.month);
	else
		row_null(r, DB_OID_DATE);
	row_i64(r, sb->roll.month_micros);
	if (sb->roll.day != ING_DAY_NONE && sb->roll.day_end != ING_TIME_NONE)
		row_ts(r, sb->roll.day_end);
	else
		row_null(r, DB_OID_TIMESTAMPTZ);
	row_xid(r, sb->xmin);
	row_close(r);
}

static void ing_usage_rows(struct ing_call *c);
static enum meter_rc ing_sum_account_hours(struct ing_call *c);
static enum meter_rc ing_group_kdays(struct ing_call *c);

/* The rows of the statements after the samples' COPY, built while the
 * server writes the samples: the meter rows to update and to insert, the
 * usage rows, and the spends grouped by key-day. */
static enum meter_rc ing_build_rows(struct ing_call *c)
{
	enum meter_rc rc;

	for (int pass = 0; pass < 2; pass++) {
		bool inserting = pass == 1;
		rows_start(&c->meter_rows[pass], c->meter_type);
		c->meter_want[pass] = 0;
		for (size_t i = 0; i < c->nsbx; i++) {
			const struct ing_sbx *sb = &c->sbx[i];
			if (!sb->changed || sb->had_meter == inserting)
				continue;
			ing_meter_row(c, &c->meter_rows[pass], sb);
			c->meter_want[pass]++;
		}
	}
	ing_usage_rows(c);
	rc = ing_sum_account_hours(c);
	if (rc == METER_OK && c->nspend > 0 && !c->locking)
		rc = ing_group_kdays(c);
	return rc;
}

/* The sandboxes whose meter row came from the cache and was not written
 * (every sample ignored as a duplicate): their rows must still be the
 * versions cached, else the call decided on stale state; METER_ECONFLICT
 * (retry, reading) when one is not. */
static enum meter_rc ing_check_cached(struct ing_call *c)
{
	static const Oid types[3] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_INT8_ARR};
	PGresult *res = NULL;
	int64_t want = 0, got = -1;
	enum meter_rc rc;

	ing_arrays(c, 3, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_sbx *sb = &c->sbx[i];
		if (!sb->cached || sb->changed)
			continue;
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->id);
		db_barr_i64(&c->arr[2], sb->xmin);
		want++;
	}
	if (want == 0)
		return METER_OK;
	rc = ing_qa(c, "check sandbox_meter", SQL_METER_CHECK, 3, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1 || ing_i64(res, 0, 0, &got) != METER_OK)
		got = -1;
	PQclear(res);
	if (got == want)
		return METER_OK;
	snprintf(c->err, c->errlen, "sandbox_meter: a cached row was changed by another writer");
	c->retry = true;
	return METER_ECONFLICT;
}

/* The call's resumes to sql/0057's rule (running_while_paused): a round
 * that took a sandbox's paused and running samples together reports what
 * rounds of one sample each would, the earliest resume first. Nothing to
 * send, no statement. */
static enum meter_rc ing_write_resumes(struct ing_call *c)
{
	static const Oid types[4] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR,
				     DB_OID_TIMESTAMPTZ_ARR};

	if (c->nresumes == 0)
		return METER_OK;
	ing_arrays(c, 4, types);
	for (size_t i = 0; i < c->nresumes; i++) {
		const struct ing_resume *r = &c->resumes[i];
		db_barr_text(&c->arr[0], c->sbx[r->sbx].account);
		db_barr_text(&c->arr[1], c->sbx[r->sbx].id);
		db_barr_ts(&c->arr[2], r->before);
		db_barr_ts(&c->arr[3], r->at);
	}
	return ing_qa(c, "running_while_paused", SQL_PAUSED_RUNNING, 4, 0, NULL, PGRES_TUPLES_OK,
		      NULL);
}

/* Writes the changed sandbox_meter rows: updates of the row versions read,
 * inserts of new ones; METER_ECONFLICT (retry, locking) when a concurrent
 * transaction changed one of the rows read or created one of the new ones
 * first. */
static enum meter_rc ing_write_meters(struct ing_call *c)
{
	PGresult *res = NULL;
	int64_t want, got;
	enum meter_rc rc;

	for (int pass = 0; pass < 2; pass++) {
		bool inserting = pass == 1;

		want = c->meter_want[pass];
		if (want == 0)
			continue;
		rc = ing_qrows(c, &c->meter_rows[pass],
			       inserting ? "insert sandbox_meter" : "update sandbox_meter",
			       inserting ? SQL_METER_INSERT : SQL_METER_UPDATE, PGRES_COMMAND_OK,
			       &res);
		if (rc != METER_OK)
			return rc;
		if (parse_int64(PQcmdTuples(res), 0, INT64_MAX, &got) != METER_OK)
			got = -1;
		PQclear(res);
		if (got == want)
			continue;
		if (!inserting && c->locking) {
			snprintf(c->err, c->errlen, "sandbox_meter: rows changed under the lock");
			return METER_EINVAL;
		}
		if (!inserting) {
			/* Another transaction metered one of the sandboxes
			 * since they were read: again, locking them. */
			snprintf(c->err, c->errlen,
				 "sandbox_meter: a sandbox was metered concurrently");
			c->retry = true;
			return METER_ECONFLICT;
		}
		snprintf(c->err, c->errlen,
			 "sandbox_meter: a new sandbox was metered concurrently");
		c->retry = true;
		return METER_ECONFLICT;
	}
	return ing_check_cached(c);
}

/* The call's money per account and UTC hour: the same sums as its usage
 * rows (an hour with no money still gets its row, as usage_hourly does),
 * in c->ahour, sorted. */
static enum meter_rc ing_sum_account_hours(struct ing_call *c)
{
	struct ing_ahour *v;
	size_t n = 0;

	c->nahour = 0;
	if (c->nrows == 0)
		return METER_OK;
	if (!ing_grow(&c->ahour, &c->ahour_cap, c->nrows, sizeof(*c->ahour))) {
		snprintf(c->err, c->errlen, "usage_account_hourly: out of memory");
		return METER_ENOMEM;
	}
	v = c->ahour;
	for (size_t i = 0; i < c->nrows; i++)
		v[i] = (struct ing_ahour){c->sbx[c->rows[i].sbx].account, c->rows[i].hour,
					  c->rows[i].c.total_micros};
	qsort(v, c->nrows, sizeof(*v), ing_ahour_cmp);
	for (size_t i = 0; i < c->nrows; i++) {
		if (n > 0 && ing_ahour_cmp(&v[n - 1], &v[i]) == 0) {
			if (money_add(v[n - 1].micros, v[i].micros, &v[n - 1].micros) != METER_OK) {
				snprintf(c->err, c->errlen,
					 "usage_account_hourly: an hour's money overflows");
				return METER_ERANGE;
			}
			continue;
		}
		v[n++] = v[i];
	}
	c->nahour = n;
	return METER_OK;
}

/* Adds the sums of ing_sum_account_hours to usage_account_hourly. */
static enum meter_rc ing_write_account_hourly(struct ing_call *c)
{
	static const Oid types[3] = {DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR, DB_OID_INT8_ARR};

	ing_arrays(c, 3, types);
	for (size_t i = 0; i < c->nahour; i++) {
		db_barr_text(&c->arr[0], c->ahour[i].account);
		db_barr_ts(&c->arr[1], c->ahour[i].hour);
		db_barr_i64(&c->arr[2], c->ahour[i].micros);
	}
	return ing_qa(c, "usage_account_hourly", SQL_ACCOUNT_HOURLY, 3, 0, NULL, PGRES_COMMAND_OK,
		      NULL);
}

/* Adds the call's usage rows to usage_hourly: an UPDATE of the rows that
 * exist, then an INSERT of the others when some did not. */
static void ing_usage_rows(struct ing_call *c)
{
	struct ing_rows *rec = &c->usage_rows;

	rows_start(rec, c->usage_type);
	for (size_t i = 0; i < c->nrows; i++) {
		const struct ing_usage_row *r = &c->rows[i];
		const struct ing_sbx *sb = &c->sbx[r->sbx];
		row_open(rec, 19);
		row_text(rec, sb->account);
		row_text(rec, sb->id);
		row_ts(rec, r->hour);
		row_i32(rec, r->version);
		if (sb->key[0])
			row_text(rec, sb->key);
		else
			row_null(rec, DB_OID_TEXT);
		row_date(rec, r->day);
		row_i64(rec, r->q.running_usec);
		row_i64(rec, r->q.paused_usec);
		row_i64(rec, r->q.cpu_used_mcus);
		row_i64(rec, r->q.cpu_billed_mcus);
		row_i64(rec, r->q.memory_mibus);
		row_i64(rec, r->q.storage_mibus);
		row_i64(rec, r->c.cpu_micros);
		row_i64(rec, r->c.memory_micros);
		row_i64(rec, r->c.storage_micros);
		row_i64(rec, r->c.total_micros);
		row_i64(rec, r->cum[0]);
		row_i64(rec, r->cum[1]);
		row_i64(rec, r->cum[2]);
		row_close(rec);
	}
}

static enum meter_rc ing_write_usage(struct ing_call *c)
{
	enum meter_rc rc;

	if (c->nrows == 0)
		return METER_OK;
	c->st.usage_rows = c->nrows;
	rc = ing_qrows(c, &c->usage_rows, "write usage_hourly", SQL_USAGE_UPSERT, PGRES_COMMAND_OK,
		       NULL);
	if (rc == METER_OK)
		rc = ing_write_account_hourly(c);
	return rc;
}

/* The ledger through meter_ledger_spend (after a conflict): the spends'
 * pieces with their times, one element each. */
static enum meter_rc ing_ledger_function(struct ing_call *c)
{
	static const Oid types[7] = {
	    DB_OID_TEXT_ARR,	    DB_OID_TEXT_ARR,	    DB_OID_TEXT_ARR, DB_OID_DATE_ARR,
	    DB_OID_TIMESTAMPTZ_ARR, DB_OID_TIMESTAMPTZ_ARR, DB_OID_INT8_ARR};
	PGresult *res = NULL;
	enum meter_rc rc;
	int64_t outrun;

	ing_arrays(c, 7, types);
	for (size_t i = 0; i < c->nspend; i++) {
		const struct ing_spend *sp = &c->spend[i];
		const struct ing_sbx *sb = &c->sbx[sp->sbx];
		for (size_t k = sp->p_off; k < sp->p_off + sp->np; k++) {
			const struct ledger_piece *p = &c->spieces[k];
			db_barr_text(&c->arr[0], sb->account);
			db_barr_text(&c->arr[1], sb->key);
			db_barr_text(&c->arr[2], sb->id);
			db_barr_date(&c->arr[3], sp->day);
			db_barr_ts(&c->arr[4], p->start_usec);
			db_barr_ts(&c->arr[5], p->end_usec);
			db_barr_i64(&c->arr[6], p->micros);
		}
	}
	rc = ing_qa(c, "ledger spend", SQL_LEDGER, 7, 0, NULL, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	if (ing_i64(res, 0, 0, &outrun) == METER_OK)
		c->st.outrun_micros = outrun;
	PQclear(res);
	return METER_OK;
}

/* A spend's key-day, for sorting. */
struct ing_kref {
	const char *account, *key;
	int32_t day;
	uint32_t spend;
};

static int ing_kref_cmp(const void *x, const void *y)
{
	const struct ing_kref *a = x, *b = y;
	int r = strcmp(a->account, b->account);

	if (r == 0)
		r = strcmp(a->key, b->key);
	if (r == 0)
		r = (a->day > b->day) - (a->day < b->day);
	return r;
}

/* Groups the spends by key-day: kdays with their spent, each spend's kd. */
static enum meter_rc ing_group_kdays(struct ing_call *c)
{
	struct ing_kref *refs = calloc(c->nspend, sizeof(*refs));

	if (!refs || !ing_grow(&c->kdays, &c->kdays_cap, c->nspend, sizeof(*c->kdays))) {
		free(refs);
		snprintf(c->err, c->errlen, "ledger: out of memory");
		return METER_ENOMEM;
	}
	for (size_t i = 0; i < c->nspend; i++) {
		const struct ing_sbx *sb = &c->sbx[c->spend[i].sbx];
		refs[i] = (struct ing_kref){sb->account, sb->key, c->spend[i].day, (uint32_t)i};
	}
	qsort(refs, c->nspend, sizeof(*refs), ing_kref_cmp);
	c->nkdays = 0;
	for (size_t i = 0; i < c->nspend; i++) {
		struct ing_spend *sp = &c->spend[refs[i].spend];
		struct ing_kday *k = &c->kdays[c->nkdays];
		if (i == 0 || ing_kref_cmp(&refs[i - 1], &refs[i]) != 0) {
			k->spend = refs[i].spend;
			k->spent = k->covered = 0;
			c->nkdays++;
		}
		k = &c->kdays[c->nkdays - 1];
		sp->kd = (uint32_t)(c->nkdays - 1);
		sp->covered = 0;
		if (sp->micros <= 0) { /* ing_add_spend keeps only positive money */
			free(refs);
			snprintf(c->err, c->errlen, "ledger: a spend of %" PRId64 " micros",
				 sp->micros);
			return METER_EINVAL;
		}
		if (money_add(k->spent, sp->micros, &k->spent) != METER_OK) {
			free(refs);
			snprintf(c->err, c->errlen, "ledger: a key-day's spend overflows");
			return METER_ERANGE;
		}
	}
	free(refs);
	return METER_OK;
}

/* Oldest hold first within a spend. */
static int ing_hold_cmp(const void *x, const void *y)
{
	const struct ing_hold *a = x, *b = y;

	if (a->spend != b->spend)
		return a->spend < b->spend ? -1 : 1;
	return (a->h.hold_id > b->h.hold_id) - (a->h.hold_id < b->h.hold_id);
}

/* Reads the open holds of the spends' sandbox-days (ordered by spend, then
 * hold id: oldest first). A hold under another key than its sandbox's (no
 * writer of the service makes one) was not made safe by the ledger rows
 * locked: METER_ECONFLICT, so that the retry spends through
 * meter_ledger_spend, which locks the holds it reads. */
static enum meter_rc ing_read_holds(struct ing_call *c)
{
	static const Oid types[4] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_DATE_ARR,
				     DB_OID_TEXT_ARR};
	PGresult *res = NULL;
	enum meter_rc rc;
	int n;

	ing_arrays(c, 4, types);
	for (size_t i = 0; i < c->nspend; i++) {
		const struct ing_sbx *sb = &c->sbx[c->spend[i].sbx];
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->id);
		db_barr_date(&c->arr[2], c->spend[i].day);
		db_barr_text(&c->arr[3], sb->key);
	}
	/* Binary results: no number formatted and parsed again. */
	rc = ing_qa_fmt(c, "open holds", SQL_HOLDS_OPEN, 4, 0, NULL, 1, PGRES_TUPLES_OK, &res);
	if (rc != METER_OK)
		return rc;
	n = PQntuples(res);
	c->nholds = 0;
	if (!ing_grow(&c->holds, &c->holds_cap, (size_t)n + 1, sizeof(*c->holds))) {
		snprintf(c->err, c->errlen, "open holds: out of memory");
		rc = METER_ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct ing_hold *hh = &c->holds[c->nholds++];
		struct ledger_hold *h = &hh->h;
		int64_t x;
		if (ing_i64(res, i, 0, &x) != METER_OK || x < 0 || (size_t)x >= c->nspend ||
		    ing_i64(res, i, 1, &h->hold_id) != METER_OK ||
		    ing_i64(res, i, 2, &h->amount_micros) != METER_OK ||
		    ing_i64(res, i, 3, &h->consumed_micros) != METER_OK || h->amount_micros < 0 ||
		    h->consumed_micros < 0 || PQgetlength(res, i, 4) != 1 ||
		    ing_ts(res, i, 5, &h->lease_starts_usec) != METER_OK ||
		    (!PQgetisnull(res, i, 6) && ing_ts(res, i, 6, &h->settles_usec) != METER_OK)) {
			snprintf(c->err, c->errlen, "open holds: bad row");
			rc = METER_EINVAL;
			goto out;
		}
		if (PQgetisnull(res, i, 6))
			h->settles_usec = LEDGER_SETTLES_NONE;
		hh->spend = (uint32_t)x;
		h->add_micros = 0;
		if (PQgetvalue(res, i, 4)[0] != 1) { /* boolean: one byte */
			snprintf(c->err, c->errlen,
				 "holds: a hold of sandbox %s is under another key",
				 c->sbx[c->spend[x].sbx].id);
			c->retry = true;
			rc = METER_ECONFLICT;
			goto out;
		}
	}
	qsort(c->holds, c->nholds, sizeof(*c->holds), ing_hold_cmp);
	if (!ing_grow(&c->lholds, &c->lholds_cap, c->nholds + 1, sizeof(*c->lholds))) {
		snprintf(c->err, c->errlen, "open holds: out of memory");
		rc = METER_ENOMEM;
	}
out:
	PQclear(res);
	return rc;
}

/* Spends sandbox-day sp's pieces on its open holds h[0..n) (oldest first)
 * by ledger_consume's rule: sets each one's add and sp->covered. */
static enum meter_rc ing_consume(struct ing_call *c, struct ing_spend *sp, struct ing_hold *h,
				 size_t n)
{
	enum meter_rc rc;

	for (size_t j = 0; j < n; j++)
		c->lholds[j] = h[j].h;
	rc = ledger_consume(&c->spieces[sp->p_off], sp->np, c->lholds, n, &sp->covered);
	for (size_t j = 0; rc == METER_OK && j < n; j++)
		h[j].h.add_micros = c->lholds[j].add_micros;
	return rc;
}

/* The key-days as array parameters (account, key, day, amount): with
 * covered, each one's covered money, those with none left out; else each
 * one's spent. Returns how many. */
static size_t ing_kdays_param(struct ing_call *c, bool covered)
{
	static const Oid types[4] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_DATE_ARR,
				     DB_OID_INT8_ARR};
	size_t n = 0;

	ing_arrays(c, 4, types);
	for (size_t k = 0; k < c->nkdays; k++) {
		const struct ing_kday *d = &c->kdays[k];
		const struct ing_spend *sp = &c->spend[d->spend];
		const struct ing_sbx *sb = &c->sbx[sp->sbx];
		if (covered && d->covered == 0)
			continue;
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->key);
		db_barr_date(&c->arr[2], sp->day);
		db_barr_i64(&c->arr[3], covered ? d->covered : d->spent);
		n++;
	}
	return n;
}

/* Writes the holds' consumption and the key-days' held (steps 3 and 4);
 * METER_ECONFLICT when a hold changed since it was read. */
static enum meter_rc ing_write_holds(struct ing_call *c)
{
	static const Oid htypes[4] = {DB_OID_TEXT_ARR, DB_OID_INT8_ARR, DB_OID_INT8_ARR,
				      DB_OID_INT8_ARR};
	PGresult *res = NULL;
	int64_t want = 0, got;
	enum meter_rc rc;

	ing_arrays(c, 4, htypes);
	for (size_t j = 0; j < c->nholds; j++) {
		const struct ing_hold *h = &c->holds[j];
		if (h->h.add_micros == 0)
			continue;
		db_barr_text(&c->arr[0], c->sbx[c->spend[h->spend].sbx].account);
		db_barr_i64(&c->arr[1], h->h.hold_id);
		db_barr_i64(&c->arr[2], h->h.consumed_micros);
		db_barr_i64(&c->arr[3], h->h.add_micros);
		want++;
	}
	if (want > 0) {
		rc = ing_qa(c, "consume holds", SQL_HOLDS_CONSUME, 4, 0, NULL, PGRES_COMMAND_OK,
			    &res);
		if (rc != METER_OK)
			return rc;
		if (parse_int64(PQcmdTuples(res), 0, INT64_MAX, &got) != METER_OK)
			got = -1;
		PQclear(res);
		if (got != want) {
			snprintf(c->err, c->errlen, "holds: a hold changed under the ledger lock");
			c->retry = true;
			return METER_ECONFLICT;
		}
	}
	if (ing_kdays_param(c, true) == 0)
		return METER_OK;
	return ing_qa(c, "ledger held", SQL_LEDGER_HELD, 4, 0, NULL, PGRES_COMMAND_OK, NULL);
}

/* The call's spend on the key-day ledger and the open holds (see
 * SQL_LEDGER_SPENT). */
static enum meter_rc ing_write_ledger(struct ing_call *c)
{
	enum meter_rc rc;
	int64_t outrun = 0;

	if (c->nspend == 0)
		return METER_OK;
	if (c->locking)
		return ing_ledger_function(c);
	/* ing_build_rows grouped the spends by key-day. */
	ing_kdays_param(c, false);
	rc = ing_qa(c, "ledger spent", SQL_LEDGER_SPENT, 4, 0, NULL, PGRES_COMMAND_OK, NULL);
	if (rc == METER_OK)
		rc = ing_read_holds(c);
	for (size_t j = 0, i = 0; rc == METER_OK && i < c->nspend; i++) {
		struct ing_spend *sp = &c->spend[i];
		size_t lo = j;
		while (j < c->nholds && c->holds[j].spend == i)
			j++;
		rc = ing_consume(c, sp, &c->holds[lo], j - lo);
		if (rc == METER_OK)
			rc = money_add(c->kdays[sp->kd].covered, sp->covered,
				       &c->kdays[sp->kd].covered);
		if (rc == METER_OK)
			rc = money_add(outrun, sp->micros - sp->covered, &outrun);
		if (rc == METER_ERANGE)
			snprintf(c->err, c->errlen,
				 "ledger: a hold's consumption or the outrun overflows");
		else if (rc != METER_OK)
			snprintf(c->err, c->errlen, "ledger: a negative piece or hold");
	}
	if (rc == METER_OK)
		rc = ing_write_holds(c);
	if (rc == METER_OK)
		c->st.outrun_micros = outrun;
	return rc;
}

/* Counts the call's pauses and stops again, now that it holds the ledger
 * rows of every key-day it spends on: one recorded since ing_load_events
 * read them means the usage was worked out without it, and is a conflict
 * (the retry reads it). A pause or stop settles its sandbox's holds under
 * those same rows (meter_event_settle), keeping only the tail up to the
 * sample metered: were the call to go on, it would bill the time after
 * the event as it was before, beyond what the settled hold kept. An event
 * waiting for the rows sees this call's sample once it has them. A pause
 * or stop also takes its sandbox's meter row FOR SHARE before it writes
 * anything (sql/0042), so none comes after this call has updated that
 * row, nor after the retry has locked it before reading the events: the
 * retry meets none it did not read. A running event settles nothing: one
 * recorded meanwhile is taken as coming after the call, as a late one
 * is. */
static enum meter_rc ing_events_again(struct ing_call *c)
{
	static const Oid types[4] = {DB_OID_TEXT_ARR, DB_OID_TEXT_ARR, DB_OID_TIMESTAMPTZ_ARR,
				     DB_OID_TIMESTAMPTZ_ARR};
	PGresult *res;
	enum meter_rc rc;
	int64_t n;

	if (c->nspend == 0 || c->ev_read < 0)
		return METER_OK;
	ing_arrays(c, 4, types);
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_sbx *sb = &c->sbx[i];
		if (sb->max_at <= sb->ev_from)
			continue;
		db_barr_text(&c->arr[0], sb->account);
		db_barr_text(&c->arr[1], sb->id);
		db_barr_ts(&c->arr[2], sb->ev_from);
		db_barr_ts(&c->arr[3], sb->max_at);
	}
	rc = ing_qa(c, "lifecycle events again", SQL_EVENTS_AGAIN, 4, 0, NULL, PGRES_TUPLES_OK,
		    &res);
	if (rc != METER_OK)
		return rc;
	rc = ing_i64(res, 0, 0, &n);
	PQclear(res);
	if (rc != METER_OK) {
		snprintf(c->err, c->errlen, "lifecycle_events: bad count");
		return rc;
	}
	if (n == c->ev_read)
		return METER_OK;
	snprintf(c->err, c->errlen,
		 "lifecycle_events: an event of a metered sandbox was recorded meanwhile");
	c->retry = true;
	return METER_ECONFLICT;
}

static enum meter_rc ing_write_watermarks(struct ing_call *c)
{
	const char *params[3];
	struct ing_host *hosts = NULL;
	size_t nhosts = 0;
	enum meter_rc rc = METER_OK;

	hosts = calloc(c->nbatches ? c->nbatches : 1, sizeof(*hosts));
	if (!hosts)
		return METER_ENOMEM;
	/* Every document moves its host's watermark: one with no sample
	 * taken (no sandbox on the host, or only samples seen before) still
	 * says the host has reported up to its time, which settling a
	 * stopped sandbox's tail relies on (sql/0014 meter_tail_done).
	 * batches counts the documents that brought something. */
	for (size_t i = 0; i < c->nbatches; i++) {
		const struct sample_batch *b = &c->batches[i];
		size_t h;
		for (h = 0; h < nhosts; h++)
			if (strcmp(hosts[h].host_id, b->host_id) == 0)
				break;
		if (h == nhosts) {
			hosts[nhosts].host_id = b->host_id;
			hosts[nhosts].last_at = b->sampled_at_usec;
			nhosts++;
		}
		if (b->sampled_at_usec > hosts[h].last_at)
			hosts[h].last_at = b->sampled_at_usec;
		if (c->batch_accepted && c->batch_accepted[i])
			hosts[h].batches++;
	}
	if (nhosts == 0)
		goto out;
	arr_open(&c->a1);
	arr_open(&c->a2);
	arr_open(&c->a3);
	for (size_t h = 0; h < nhosts; h++) {
		arr_text(&c->a1, hosts[h].host_id);
		arr_time(&c->a2, hosts[h].last_at);
		arr_i64(&c->a3, hosts[h].batches);
	}
	arr_close(&c->a1);
	arr_close(&c->a2);
	arr_close(&c->a3);
	if (c->a1.oom || c->a2.oom || c->a3.oom) {
		rc = METER_ENOMEM;
		goto out;
	}
	params[0] = c->a1.p;
	params[1] = c->a2.p;
	params[2] = c->a3.p;
	rc = ing_q(c, "ingest_watermarks", SQL_WATERMARKS, 3, params, PGRES_COMMAND_OK, NULL);
out:
	free(hosts);
	return rc;
}

/* Resets what one try learnt from the database. */
static void ing_reset_try(struct ing_call *c)
{
	struct ingest_stats keep = c->st;

	for (size_t i = 0; i < c->nsbx; i++) {
		struct ing_sbx *sb = &c->sbx[i];
		sb->found = sb->made = sb->unknown_key = false;
		sb->had_meter = sb->has_prev = sb->changed = sb->cached = false;
		sb->gen = 0;
		sb->version = ING_VERSION_NONE;
		sb->roll = ING_ROLL_NONE;
		memset(&sb->carry, 0, sizeof(sb->carry));
		memset(sb->cum, 0, sizeof(sb->cum));
		memset(&sb->last, 0, sizeof(sb->last));
		sb->account[0] = sb->key[0] = '\0';
	}
	for (size_t i = 0; i < c->nzones; i++)
		free(c->zones[i].start);
	c->nzones = 0;
	c->nrows = c->nspend = c->nspieces = c->nevents = c->nresumes = 0;
	if (c->batch_accepted)
		memset(c->batch_accepted, 0, c->nbatches * sizeof(*c->batch_accepted));
	memset(&c->st, 0, sizeof(c->st));
	c->st.samples = keep.samples;
	c->st.batches = keep.batches;
	c->st.retries = keep.retries;
	c->st.newest_sampled_at_usec = keep.newest_sampled_at_usec;
	c->retry = false;
	c->sqlstate[0] = '\0';
}

/* Adds the time since *mark to *acc and moves the mark. */
static void ing_lap(int64_t *mark, int64_t *acc)
{
	int64_t now = clock_mono_usec();

	*acc += now - *mark;
	*mark = now;
}

/* A call that writes more rows than ING_ROWS_FREE gives each of its
 * statements ING_ROW_USEC more per row than the connection's statement
 * timeout, ING_MORE_MS at most. A long gap is an hourly row for every
 * hour of it (2,000 sandboxes back after 40 days: 1.9 million), which no
 * timeout made for a round of samples covers: such a call failed the same
 * way at every try, and its host's later samples with it, for good. The
 * cap bounds what a document can hold a worker for (an agent's first
 * sample dated 2000 is 236,000 rows a sandbox). */
#define ING_ROWS_FREE 10000
#define ING_ROW_USEC  100
#define ING_MORE_MS   300000

static enum meter_rc ing_more_time(struct ing_call *c)
{
	static const char sql[] =
	    "SELECT set_config('statement_timeout', (s + $1::bigint)::text, true)"
	    " FROM (SELECT setting::bigint AS s FROM pg_settings"
	    "  WHERE name = 'statement_timeout') t WHERE s > 0";
	size_t rows = c->nrows + (size_t)c->st.accepted, more = rows * ING_ROW_USEC / 1000;
	char ms[24];
	const char *params[1] = {ms};

	if (rows <= ING_ROWS_FREE)
		return METER_OK;
	if (more > ING_MORE_MS)
		more = ING_MORE_MS;
	snprintf(ms, sizeof(ms), "%zu", more);
	log_info("ingest: %zu rows to write: %s ms more for each statement", rows, ms);
	if (c->wait_ms > 0)
		c->wait_ms += (int64_t)more; /* the call's own wait follows */
	return ing_q(c, "statement timeout", sql, 1, params, PGRES_TUPLES_OK, NULL);
}

/* One try of the whole transaction. */
/* Runs step fn of a try; a failure that wrote no message of its own is
 * named by the step: "<name>: <what the code means>". */
static enum meter_rc ing_step(struct ing_call *c, const char *name,
			      enum meter_rc (*fn)(struct ing_call *c))
{
	enum meter_rc rc;

	c->err[0] = '\0';
	rc = fn(c);
	if (rc != METER_OK && !c->err[0])
		snprintf(c->err, c->errlen, "%s: %s", name, meter_rc_str(rc));
	return rc;
}

/* The sandboxes rows of the call's sandboxes that have no meter row. */
static enum meter_rc ing_load_missing(struct ing_call *c)
{
	return ing_load_sandboxes(c, true);
}

/* The arithmetic of every sandbox, in C, and the samples' COPY buffer. */
static enum meter_rc ing_compute(struct ing_call *c)
{
	enum meter_rc rc;

	db_bin_reset(&c->samples);
	copy_header(&c->samples);
	c->nresumes = 0;
	for (uint32_t x = 0; x < c->nsbx; x++) {
		rc = ing_sandbox(c, x);
		if (rc != METER_OK)
			return rc;
	}
	copy_trailer(&c->samples);
	return c->samples.oom ? METER_ENOMEM : METER_OK;
}

/* The samples' COPY; the rows of the next statements are built while the
 * server writes them. */
static enum meter_rc ing_write_samples(struct ing_call *c)
{
	enum meter_rc rc = ing_copy_send(c, "copy samples", SQL_SAMPLES_COPY, &c->samples);
	enum meter_rc built = rc == METER_OK ? ing_build_rows(c) : METER_OK;
	enum meter_rc done = ing_copy_result(c, "copy samples");

	if (rc != METER_OK)
		return rc;
	if (done != METER_OK)
		return done;
	return built;
}

static enum meter_rc ing_try(struct ing_call *c)
{
	enum meter_rc rc;
	int64_t mark = clock_mono_usec();

	c->wait_ms = c->wait_base_ms;
	rc = ing_q(c, "begin", SQL_BEGIN, 0, NULL, PGRES_COMMAND_OK, NULL);
	if (rc != METER_OK)
		return rc;
	rc = ing_step(c, "price book", ing_load_prices);
	if (rc == METER_OK)
		rc = ing_step(c, "cache", ing_cache_take);
	if (rc == METER_OK)
		rc = ing_step(c, "sandbox_meter", ing_read_meters);
	if (rc == METER_OK)
		rc = ing_step(c, "sandboxes", ing_load_missing);
	if (rc == METER_OK)
		rc = ing_step(c, "new sandboxes", ing_create_sandboxes);
	if (rc == METER_OK)
		rc = ing_step(c, "lifecycle events", ing_load_events);
	if (rc == METER_OK)
		rc = ing_step(c, "hold instants", ing_load_cuts);
	if (rc == METER_OK)
		rc = ing_step(c, "day starts", ing_load_days);
	if (rc != METER_OK)
		return rc;
	ing_lap(&mark, &c->st.usec_read);
	rc = ing_step(c, "usage", ing_compute);
	if (rc == METER_OK)
		rc = ing_step(c, "statement timeout", ing_more_time);
	if (rc != METER_OK)
		return rc;
	ing_lap(&mark, &c->st.usec_compute);
	if (c->st.accepted > 0) {
		rc = ing_step(c, "samples", ing_write_samples);
		ing_lap(&mark, &c->st.usec_samples);
		if (rc == METER_OK)
			rc = ing_step(c, "running_while_paused", ing_write_resumes);
		if (rc == METER_OK)
			rc = ing_step(c, "sandbox_meter", ing_write_meters);
		if (rc == METER_OK)
			rc = ing_step(c, "usage_hourly", ing_write_usage);
		ing_lap(&mark, &c->st.usec_state);
		if (rc == METER_OK)
			rc = ing_step(c, "ledger", ing_write_ledger);
		if (rc == METER_OK)
			rc = ing_step(c, "lifecycle events", ing_events_again);
		if (rc == METER_OK)
			rc = ing_step(c, "ingest_watermarks", ing_write_watermarks);
		ing_lap(&mark, &c->st.usec_ledger);
		if (rc != METER_OK)
			return rc;
	} else {
		/* Nothing to write: still, what was ignored was decided on the
		 * cached rows. */
		rc = ing_step(c, "sandbox_meter", ing_check_cached);
		if (rc != METER_OK)
			return rc;
	}
	rc = ing_q(c, "commit", "COMMIT", 0, NULL, PGRES_COMMAND_OK, NULL);
	if (rc != METER_OK)
		return rc;
	ing_lap(&mark, &c->st.usec_commit);
	return METER_OK;
}

/* Ends a failed try: rolls back what the connection still has open. */
static void ing_rollback(struct ing_call *c)
{
	PGresult *res;

	if (PQstatus(c->conn) != CONNECTION_OK)
		return;
	if (PQtransactionStatus(c->conn) == PQTRANS_IDLE)
		return;
	res = PQexec(c->conn, "ROLLBACK");
	PQclear(res);
}

static void ing_metrics_describe(void)
{
	metrics_describe("meter_samples_ingested_total", METRICS_COUNTER,
			 "Samples stored and accounted by ingestion.");
	metrics_describe("meter_samples_ignored_total", METRICS_COUNTER,
			 "Samples ignored as duplicates or out of order.");
	metrics_describe("meter_ingest_batches_total", METRICS_COUNTER,
			 "Sample batches (one host's reading each) ingested.");
	metrics_describe("meter_ingest_intervals_total", METRICS_COUNTER,
			 "Sample intervals turned into usage.");
	metrics_describe("meter_ingest_anomalies_total", METRICS_COUNTER,
			 "Anomalies met by ingestion, by kind.");
	metrics_describe("meter_ingest_errors_total", METRICS_COUNTER,
			 "Ingestion calls that failed (nothing written).");
	metrics_describe("meter_ingest_retries_total", METRICS_COUNTER,
			 "Ingestion transactions rolled back and retried (deadlock, race).");
	metrics_describe("meter_ingest_micros_total", METRICS_COUNTER,
			 "Money accounted by ingestion, microdollars.");
	metrics_describe("meter_ingest_lag_seconds", METRICS_GAUGE,
			 "Seconds between the newest ingested batch's sampled_at and its commit.");
	metrics_describe("meter_ingest_unattributed_samples_total", METRICS_COUNTER,
			 "Samples of sandboxes without a key (account 'unattributed').");
	metrics_describe("meter_ingest_new_sandboxes_total", METRICS_COUNTER,
			 "Sandbox records made by ingestion: sandboxes first seen in samples, no "
			 "create check having made them.");
}

/* As ing_partitions, in a transaction of its own with the same 1 s wait:
 * the partitions of the database's UTC today and tomorrow. */
enum meter_rc ingest_make_partitions_ahead(PGconn *conn)
{
	static const char what[] = "sample partitions ahead";
	enum meter_rc rc = db_util_begin(conn);

	if (rc == METER_OK)
		rc = db_util_exec(conn, what, ING_PART_LOCK_SQL, 0, NULL, NULL, NULL);
	if (rc == METER_OK)
		rc = db_util_exec(
		    conn, what,
		    "SELECT meter_ensure_sample_partitions((now() AT TIME ZONE 'UTC')::date,"
		    " (now() AT TIME ZONE 'UTC')::date + 1)",
		    0, NULL, NULL, NULL);
	if (rc == METER_OK)
		rc = db_util_commit(conn);
	if (rc != METER_OK)
		db_util_rollback(conn);
	return rc;
}

/* One line for the call's new sandboxes whose samples named no key, with
 * the first of them: a document of many gives one line, not one each. */
static void ing_log_unknown_keys(const struct ing_call *c)
{
	for (size_t i = 0; i < c->nsbx; i++) {
		const struct ing_sbx *sb = &c->sbx[i];

		if (sb->unknown_key) {
			log_warn("ingest: %" PRIu64
				 " new sandbox(es) named a key_id that is no full, unrevoked key,"
				 " metered under the unattributed account (first: sandbox %s,"
				 " key_id %s)",
				 c->st.unknown_keys, sb->id, sb->doc_key);
			return;
		}
	}
}

static void ing_metrics(const struct ingest_stats *st, enum meter_rc rc)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, ing_metrics_describe);
	if (st->retries)
		metrics_counter_add("meter_ingest_retries_total", NULL, (uint64_t)st->retries);
	if (rc != METER_OK) {
		metrics_counter_add("meter_ingest_errors_total", NULL, 1);
		return;
	}
	metrics_counter_add("meter_samples_ingested_total", NULL, st->accepted);
	metrics_counter_add("meter_samples_ignored_total", NULL, st->ignored);
	metrics_counter_add("meter_ingest_batches_total", NULL, st->batches);
	metrics_counter_add("meter_ingest_intervals_total", NULL, st->intervals);
	metrics_counter_add("meter_ingest_micros_total", NULL, (uint64_t)st->micros);
	metrics_counter_add("meter_ingest_unattributed_samples_total", NULL, st->unattributed);
	metrics_counter_add("meter_ingest_new_sandboxes_total", NULL, st->new_sandboxes);
	metrics_counter_add("meter_ingest_anomalies_total", "kind=\"counter_reset\"", st->resets);
	metrics_counter_add("meter_ingest_anomalies_total", "kind=\"cpu_capped\"", st->cpu_capped);
	metrics_counter_add("meter_ingest_anomalies_total", "kind=\"overflow\"", st->overflows);
	metrics_counter_add("meter_ingest_anomalies_total", "kind=\"unknown_key\"",
			    st->unknown_keys);
	if (st->newest_sampled_at_usec > 0 && st->accepted > 0) {
		int64_t lag = clock_real_usec() - st->newest_sampled_at_usec;

		metrics_gauge_set_fixed("meter_ingest_lag_seconds", NULL, lag > 0 ? lag : 0, 6);
	}
}

static void ing_call_release(struct ing_call *c)
{
	for (size_t i = 0; i < c->nzones; i++)
		free(c->zones[i].start);
	free(c->zones);
	free(c->items);
	free(c->sbx);
	free(c->map);
	free(c->prices);
	free(c->events);
	free(c->cuts);
	free(c->pieces);
	free(c->subs);
	free(c->rows);
	free(c->spend);
	free(c->spieces);
	free(c->kdays);
	free(c->holds);
	free(c->resumes);
	free(c->lholds);
	free(c->batch_accepted);
	free(c->ctmp);
	free(c->ahour);
	for (int i = 0; i < ING_NARR; i++)
		db_bin_release(&c->arr[i].b);
	db_bin_release(&c->meter_rows[0].a.b);
	db_bin_release(&c->meter_rows[1].a.b);
	db_bin_release(&c->usage_rows.a.b);
	db_bin_release(&c->samples);
	db_bin_release(&c->a1);
	db_bin_release(&c->a2);
	db_bin_release(&c->a3);
	db_bin_release(&c->a4);
	db_bin_release(&c->a5);
	db_bin_release(&c->a6);
	db_bin_release(&c->a7);
}

enum meter_rc ingest_batches(struct ingest *ing, PGconn *conn, const struct sample_batch *batches,
			     size_t n, struct ingest_stats *stats, char *err, size_t errlen)
{
	struct ing_call c;
	char dummy[8];
	enum meter_rc rc;

	memset(&c, 0, sizeof(c));
	if (!err || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (!ing || !conn || (n && !batches)) {
		snprintf(err, errlen, "bad arguments");
		return METER_EINVAL;
	}
	c.ing = ing;
	c.conn = conn;
	c.wait_base_ms = ing->opts.statement_timeout_ms > 0
			     ? ing->opts.statement_timeout_ms + DB_UTIL_DEADLINE_SLACK_MS
			     : 0;
	c.wait_ms = c.wait_base_ms;
	c.batches = batches;
	c.nbatches = n;
	c.err = err;
	c.errlen = errlen;
	c.st.batches = n;
	for (size_t i = 0; i < n && !ing->opts.own_readings; i++)
		if (batches[i].sampled_at_usec > c.st.newest_sampled_at_usec)
			c.st.newest_sampled_at_usec = batches[i].sampled_at_usec;
	rc = ing_prepare(&c);
	if (rc == METER_ENOMEM)
		snprintf(err, errlen, "out of memory");
	if (rc == METER_OK && c.nitems == 0 && n > 0) {
		/* No sample: only the hosts' watermarks, in a statement
		 * (so a transaction) of their own. */
		rc = ing_write_watermarks(&c);
		goto out;
	}
	if (rc != METER_OK)
		goto out;
	for (size_t i = 0; i < c.nsbx; i++) {
		c.sbx[i].version = ING_VERSION_NONE;
		c.sbx[i].roll = ING_ROLL_NONE;
	}
	rc = ing_partitions(&c);
	if (rc != METER_OK)
		goto out;
	for (int attempt = 0; attempt < ING_TRIES; attempt++) {
		if (attempt > 0) {
			/* A conflict again is unlikely with the rows locked. */
			c.locking = true;
			ing_reset_try(&c);
			c.st.retries++;
			log_info("ingest: a concurrent writer came first; trying again "
				 "with the sandboxes locked (%s)",
				 err);
			err[0] = '\0'; /* a failure of this try says why itself */
		}
		rc = ing_try(&c);
		if (rc == METER_OK) {
			ing_cache_store(&c);
			break;
		}
		ing_cache_forget(&c);
		ing_rollback(&c);
		if (!c.retry || PQstatus(conn) != CONNECTION_OK)
			break;
	}
out:
	if (rc != METER_OK) {
		/* Bad data from the database side is EINVAL; the rest is EDB. */
		if (rc == METER_EDB && (strncmp(c.sqlstate, "22", 2) == 0 ||
					(strncmp(c.sqlstate, "23", 2) == 0 && !c.retry)))
			rc = METER_EINVAL;
		if (!err[0])
			snprintf(err, errlen, "%s", meter_rc_str(rc));
	}
	if (rc == METER_OK && c.st.unknown_keys > 0)
		ing_log_unknown_keys(&c);
	ing_metrics(&c.st, rc);
	if (rc == METER_OK && stats)
		*stats = c.st;
	ing_call_release(&c);
	return rc;
}

enum meter_rc ingest_drop_old_samples(PGconn *conn, int64_t keep_days, int64_t *dropped, bool *more)
{
	static const char what[] = "sample retention";
	char days[24], batch[24];
	const char *params[2] = {days, batch};
	PGresult *res = NULL;
	enum meter_rc rc;

	*dropped = -1;
	*more = false;
	snprintf(days, sizeof(days), "%lld", (long long)keep_days);
	snprintf(batch, sizeof(batch), "%d", INGEST_RETAIN_BATCH);
	for (int i = 0; i < INGEST_RETAIN_BATCHES; i++) {
		int64_t n = 0;

		rc = db_util_exec(conn, what,
				  "SELECT meter_drop_default_samples("
				  "(now() AT TIME ZONE 'UTC')::date - $1::integer, $2::integer)",
				  2, params, &res, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, 0, 0, &n, NULL);
		PQclear(res);
		res = NULL;
		if (rc != METER_OK)
			return rc;
		*more = n >= INGEST_RETAIN_BATCH;
		if (!*more)
			break;
	}
	rc = db_util_begin(conn);
	if (rc != METER_OK)
		return rc;
	rc = db_util_exec(conn, what, "SET LOCAL lock_timeout = '1s'", 0, NULL, NULL, NULL);
	/* meter_ensure_sample_partitions's lock ("meter_sp"). */
	if (rc == METER_OK)
		rc = db_util_exec(conn, what,
				  "SELECT pg_try_advisory_xact_lock(7882834701841298288)", 0, NULL,
				  &res, NULL);
	if (rc == METER_OK && db_util_bool(res, 0, 0)) {
		PQclear(res);
		res = NULL;
		rc = db_util_exec(conn, what,
				  "SELECT meter_drop_sample_partitions("
				  "(now() AT TIME ZONE 'UTC')::date - $1::integer)",
				  1, params, &res, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, 0, 0, dropped, NULL);
	}
	PQclear(res);
	if (rc == METER_OK)
		rc = db_util_commit(conn);
	if (rc != METER_OK) {
		db_util_rollback(conn);
		*dropped = -1;
	}
	return rc;
}
