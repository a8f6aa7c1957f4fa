/* meter: the check engine (see checks.h). */
#include "checks.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "check_answer.h"
#include "check_facts.h"
#include "clock.h"
#include "db.h"
#include "db_checks.h"
#include "db_util.h"
#include "ingest.h"
#include "keys.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "schema_gate.h"

#define BACKOFF_MIN_MS	   100
#define BACKOFF_MAX_MS	   5000
#define BATCH_ATTEMPTS	   8 /* redo of a batch that met a concurrent writer */
#define TZ_CACHE	   64
#define SWEEP_INTERVAL_MS  1000
#define SWEEP_MAX	   100 /* holds a sweep settles at once: it holds their ledger rows meanwhile */
#define SWEEP_REST_MAX_MS  1000		 /* the longest rest after a whole sweep */
#define SWEEP_READ_ONLY_MS 30000	 /* between sweeps of a database that takes no writes */
#define RETAIN_EVERY_MS	   (3600 * 1000) /* the samples' retention, once an hour */
#define RETAIN_RETRY_MS	   (60 * 1000)	 /* ... or a minute after it could not be done */
#define SEEN_EVERY_MS	   10000	 /* a sweeper's settings recorded again (sql/0063) */
#define SEEN_SECOND_MS	   2000		 /* ... the first time again, this soon */
#define SEEN_LAPSE_S	   900		 /* ... and in force this long after the last time */
#define FAST_ATTEMPTS	   2		 /* a fast batch decided again on the figures it met */
#define PIPELINE_MAX	   2 /* fast batches in flight on one connection (see batcher_may_send) */
#define CHECK_BATCHES	   "meter_check_batches_total" /* counter, by path */
/* Price-book versions read for this long ahead of a batch, so that the
 * engine knows them for any lease it may decide later. */
#define PRICES_AHEAD_USEC ((CHECKS_LEASE_SECONDS_MAX + INT64_C(3600)) * 1000000)

/* One queued check and, while its batch runs, its decision. */
struct item {
	struct item *next;
	struct checks_request rq;
	checks_done_fn done;
	void *arg;
	/* Decision. */
	char idem[PARSE_ID_MAX + 1];
	char sha_hex[65];
	unsigned status; /* 0 = undecided */
	char *body;	 /* owned JSON text */
	bool replayed;
	bool allowed;
	bool pending;  /* read, needs the ledger */
	bool r_listed; /* refused: its idempotency key is in the DB_R_* arrays */
	bool kept;     /* refused (402) under a key of the caller's own: stored */
	int64_t vcpus, memory_mib;
	int64_t lease_max_micros;
	int64_t lease_end_usec;
	int nparts;
	struct ledger_part parts[LEDGER_PARTS_MAX];
	int row[LEDGER_PARTS_MAX]; /* index of each part's key-day in the batch */
	char days[LEDGER_PARTS_MAX][11];
	/* An allowed create's answer as its sandbox row keeps it (sql/0025). */
	char numbers[CHECK_ANSWER_NUMBERS_MAX];
};

/* Day starts of one time zone around "now", from PostgreSQL. */
struct tz_entry {
	char tz[PARSE_ID_MAX + 1];
	char days[LEDGER_BOUNDS][11];
	int64_t bounds[LEDGER_BOUNDS];
};

/* One batcher thread and its own connection: while one batcher waits for
 * its COMMIT, another reads and decides the next batch, so a hot key's
 * batches follow each other with no round trip between them. */
struct batcher {
	struct checks_engine *e;
	pthread_t thread;
	bool started;
	PGconn *conn;
};

struct checks_engine {
	struct checks_options opt;
	char *url;
	pthread_mutex_t mu;
	pthread_cond_t work_cv;	 /* the queue has items, or stopping */
	pthread_cond_t sweep_cv; /* stopping (the sweeper's sleep) */
	struct item *head, *tail;
	size_t queued;
	int idle; /* batchers waiting on work_cv */
	bool stopping;
	bool joined;
	/* Backoff while the database is unreachable (under mu). */
	bool down;
	int64_t connected_ms; /* the last connection made (monotonic), 0 once down */
	int64_t next_attempt_ms;
	int failures;
	unsigned seed;
	struct batcher *batchers;
	int nbatchers;
	struct check_facts *facts; /* what the batches read and wrote */
	int32_t engine_id;	   /* random: the fast batches' tickets are (engine_id, n) */
	int32_t ticket;		   /* the last ticket given (under the facts' lock) */
	/* Day starts of the time zones met, shared by the batchers. */
	pthread_mutex_t tz_mu;
	struct tz_entry tzc[TZ_CACHE];
	int tzc_n, tzc_next;
	pthread_t sweeper;
	bool sweeper_started;
	/* The sweep settings in force on the database (sql/0063): the
	 * sweeper's random id there, and the grace it last read, which the
	 * events settle with too (this process's own until then). */
	char sweeper_id[33];
	atomic_int_least64_t grace_in_force;
};

int64_t checks_clock_usec(int64_t clock_offset_s)
{
	return clock_real_usec() + clock_offset_s * INT64_C(1000000);
}

int64_t checks_now_usec(const struct checks_engine *e)
{
	return checks_clock_usec(e->opt.clock_offset_s);
}

/* Answers ------------------------------------------------------------------ */

/* Sets it's answer to status with text (stolen; NULL: out of memory). */
static void set_answer_text(struct item *it, unsigned status, char *text)
{
	free(it->body);
	it->body = text;
	it->status = it->body ? status : 500;
}

/* Sets it's answer to status with body (stolen, serialised compactly). */
static void set_answer(struct item *it, unsigned status, json_t *body)
{
	set_answer_text(it, status,
			body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL);
	json_decref(body);
}

/* An error answer {"error":{"code","message",...extra}}; extra stolen. */
static void set_error(struct item *it, unsigned status, const char *code, const char *message,
		      json_t *extra)
{
	json_t *err = json_pack("{s:s,s:s}", "code", code, "message", message);

	if (err && extra)
		json_object_update(err, extra);
	json_decref(extra);
	set_answer(it, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

/* 409: its idempotency key holds the answer to other parameters; other is
 * the sandbox that answer was for, when known. A wake sent without a key
 * has its sandbox id for one, so another sandbox's wake sent with that id
 * as its key holds it: the message says so, since the caller sent no key
 * and could not tell from the code alone. */
static void set_idem_conflict(struct item *it, const char *other)
{
	char msg[256];

	if (it->rq.op == CHECKS_WAKE && other && strcmp(it->idem, it->rq.sandbox_id) == 0 &&
	    strcmp(other, it->rq.sandbox_id) != 0)
		snprintf(msg, sizeof(msg),
			 "a wake sent without an idempotency key has its sandbox id for one, and a"
			 " wake of sandbox %s was sent with this key: send an idempotency_key of"
			 " your own",
			 other);
	else
		snprintf(msg, sizeof(msg), "idempotency key already used with other parameters");
	set_error(it, 409, "idempotency_conflict", msg,
		  json_pack("{s:s}", "idempotency_key", it->idem));
}

/* The sandbox_id of a stored answer (an allowed check's), or NULL. Its
 * text is the stored body's, valid until j is released. */
static const char *answer_sandbox(const char *body, json_t **j)
{
	*j = body ? json_loads(body, 0, NULL) : NULL;
	return json_string_value(json_object_get(*j, "sandbox_id"));
}

static json_t *limit_json(const struct ledger_day *d)
{
	return d->has_limit ? json_integer(d->limit_micros) : json_null();
}

static void set_unavailable(struct item *it, const char *why)
{
	set_error(it, 503, "metering_unavailable", why, NULL);
}

/* The database takes no writes (SQLSTATE 25006: a standby, or
 * default_transaction_read_only on): the item's transaction was refused
 * whole, so nothing of it was held. */
static void set_read_only(struct item *it)
{
	set_error(it, 503, "metering_unavailable",
		  "the metering database takes no writes (a standby, or"
		  " default_transaction_read_only on), so nothing was held: send the check"
		  " again once it does",
		  json_pack("{s:s}", "reason", "read_only_database"));
}

/* The database cancelled the item's batch at its statement (or lock)
 * timeout, a ledger row held by a slow writer: nothing of it was kept.
 * Said as every other route says it, with the reason and the timeout. */
static void set_timed_out(struct item *it, const char *sqlstate, int64_t timeout_ms)
{
	bool lock = strcmp(sqlstate, "55P03") == 0;
	char msg[200];

	snprintf(msg, sizeof(msg),
		 "the metering database did not answer within the %s timeout (%lld ms), and "
		 "nothing was held: send the check again",
		 lock ? "lock" : "statement", (long long)timeout_ms);
	set_error(it, 503, "metering_unavailable", msg,
		  json_pack("{s:s,s:I}", "reason", lock ? "lock_timeout" : "statement_timeout",
			    "timeout_ms", (json_int_t)timeout_ms));
}

/* The database lacked the resources to decide the item (disk full, out
 * of memory: SQLSTATE class 53), decided alone: it was not decided now
 * (its transaction rolled back), to be sent again as any check's 503. */
static void set_short(struct item *it, const char *sqlstate)
{
	char msg[240];

	snprintf(msg, sizeof(msg),
		 "the metering database is short of resources (disk space, memory or the like;"
		 " SQLSTATE %s), so this check was not decided now: send the same request again"
		 " later",
		 sqlstate);
	set_error(it, 503, "metering_unavailable", msg,
		  json_pack("{s:s,s:s}", "reason", "insufficient_resources", "sqlstate", sqlstate));
}

/* A batch of items[0..n) committed: when one was allowed and held anew
 * (not a replay), the database took a check's writes, which ends a
 * shortage of its resources (db_util_wrote). Looked at only while one
 * is known: a batch's items are not walked otherwise. */
static void note_held(struct item *const *items, size_t n)
{
	if (!db_util_short_known())
		return;
	for (size_t i = 0; i < n; i++)
		if (items[i]->allowed && !items[i]->replayed) {
			db_util_wrote();
			return;
		}
}

/* The connection broke while the item's batch was in the database: it
 * may have committed, its hold in place. Not a refusal: the caller learns
 * the decision by sending the check again with the same idempotency key
 * (the stored answer if it committed, else a new decision). */
static void set_in_doubt(struct item *it)
{
	set_error(it, 503, "metering_unavailable",
		  "the connection to the metering database broke while this check was being"
		  " decided: it may have been allowed and held; send it again with the same"
		  " idempotency key to learn its answer",
		  json_pack("{s:s}", "reason", "outcome_unknown"));
}

/* Calls the item's callback and frees it. */
static void finish(struct item *it)
{
	struct checks_answer a;
	static const char fallback[] =
	    "{\"error\":{\"code\":\"metering_unavailable\",\"message\":\"no answer\"}}";

	if (!it->status || !it->body) {
		a.status = 503;
		a.body = fallback;
	} else {
		a.status = it->status;
		a.body = it->body;
	}
	a.replayed = it->replayed;
	it->done(it->arg, &a);
	free(it->body);
	free(it);
}

/* Request identity ---------------------------------------------------------- */

/* SHA-256 (hex) of the check's canonical parameters (everything but the
 * idempotency key). */
static void request_hash(const struct checks_request *rq, char *hex)
{
	char canon[512];
	unsigned char md[KEYS_HASH_LEN];
	int n;

	if (rq->op == CHECKS_CREATE) {
		char maxc[24] = "-";
		if (rq->has_max_cost)
			snprintf(maxc, sizeof(maxc), "%lld", (long long)rq->max_cost_micros);
		n = snprintf(canon, sizeof(canon), "create\n%s\n%s\n%lld\n%lld\n%lld\n%s",
			     rq->key_id, rq->sandbox_id, (long long)rq->vcpus,
			     (long long)rq->memory_mib, (long long)rq->lease_seconds, maxc);
	} else {
		n = snprintf(canon, sizeof(canon), "wake\n%s\n%lld", rq->sandbox_id,
			     (long long)rq->lease_seconds);
	}
	if (n < 0 || (size_t)n >= sizeof(canon) || keys_sha256(canon, (size_t)n, md) != METER_OK) {
		/* Cannot happen with OpenSSL working; an empty hash never matches. */
		hex[0] = '\0';
		return;
	}
	keys_hex(md, sizeof(md), hex);
}

/* Time zones ------------------------------------------------------------------ */

/* True with *out filled when the day starts of tz around now are known. */
static bool tz_known(struct checks_engine *e, const char *tz, int64_t now, struct tz_entry *out)
{
	bool found = false;

	pthread_mutex_lock(&e->tz_mu);
	for (int i = 0; i < e->tzc_n && !found; i++) {
		const struct tz_entry *t = &e->tzc[i];
		if (strcmp(t->tz, tz) == 0 && t->bounds[0] <= now && now < t->bounds[1]) {
			if (out)
				*out = *t;
			found = true;
		}
	}
	pthread_mutex_unlock(&e->tz_mu);
	return found;
}

/* The day starts of tz around now into *out: known, or fetched (inside
 * the batch's transaction, on bt's connection) and remembered. METER_OK,
 * or the failure. */
static enum meter_rc tz_days(struct batcher *bt, const char *tz, int64_t now, int64_t deadline,
			     char *sqlstate, struct tz_entry *out)
{
	struct checks_engine *e = bt->e;
	enum meter_rc rc;

	if (tz_known(e, tz, now, out))
		return METER_OK;
	if (!bt->conn)
		return METER_EDB;
	rc = db_checks_days(bt->conn, tz, now, out->days, out->bounds, deadline, sqlstate);
	if (rc != METER_OK)
		return rc;
	if (!(out->bounds[0] <= now && now < out->bounds[1]))
		return METER_EDB;
	snprintf(out->tz, sizeof(out->tz), "%s", tz);
	pthread_mutex_lock(&e->tz_mu);
	e->tzc[e->tzc_next] = *out;
	e->tzc_next = (e->tzc_next + 1) % TZ_CACHE;
	if (e->tzc_n < TZ_CACHE)
		e->tzc_n++;
	pthread_mutex_unlock(&e->tz_mu);
	return METER_OK;
}

/* The price rates that bound a lease [start, end): the largest of each rate
 * over the versions in force at some time in it (prices[0] is in force at
 * start). */
static struct price_rates lease_rates(const struct db_price_version *prices, int n, int64_t end)
{
	struct price_rates r = prices[0].rates;

	for (int i = 1; i < n && prices[i].from_usec < end; i++) {
		const struct price_rates *p = &prices[i].rates;
		if (p->cpu_micros_per_vcpu_hour > r.cpu_micros_per_vcpu_hour)
			r.cpu_micros_per_vcpu_hour = p->cpu_micros_per_vcpu_hour;
		if (p->memory_micros_per_gib_hour > r.memory_micros_per_gib_hour)
			r.memory_micros_per_gib_hour = p->memory_micros_per_gib_hour;
		if (p->storage_micros_per_gib_hour > r.storage_micros_per_gib_hour)
			r.storage_micros_per_gib_hour = p->storage_micros_per_gib_hour;
		if (p->floor_millicores > r.floor_millicores)
			r.floor_millicores = p->floor_millicores;
	}
	return r;
}

/* The batch ----------------------------------------------------------------- */

struct batch {
	struct item **items;
	size_t n;
	struct db_check_in *in;
	struct db_check_read *rd;
	struct db_ledger_row *rows;
	size_t nrows;
	struct db_price_version prices[DB_CHECKS_PRICES_MAX];
	int nprices;
	int64_t price_version; /* the newest version of the price book */
	struct db_arr arrs[DB_BATCH_NARR];
	int64_t now;
};

/* Forgets a previous attempt's decisions. */
static void batch_reset(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		free(it->body);
		it->body = NULL;
		it->status = 0;
		it->replayed = false;
		it->allowed = false;
		it->pending = false;
		it->r_listed = false;
		it->kept = false;
		it->nparts = 0;
	}
	db_check_read_release(b->rd, b->n);
	for (int i = 0; i < DB_BATCH_NARR; i++)
		db_arr_release(&b->arrs[i]);
	b->nrows = 0;
}

/* Index of key-day (account, key, day) in b->rows, added when new. */
static int batch_row(struct batch *b, const struct db_check_read *r, const char *day)
{
	for (size_t i = 0; i < b->nrows; i++) {
		const struct db_ledger_row *x = &b->rows[i];
		if (strcmp(x->day, day) == 0 && strcmp(x->key_id, r->key_id) == 0 &&
		    strcmp(x->account_id, r->account_id) == 0)
			return (int)i;
	}
	b->rows[b->nrows] = (struct db_ledger_row){
	    .account_id = r->account_id,
	    .key_id = r->key_id,
	    .day = day,
	    .has_limit = r->has_limit,
	    .limit_micros = r->limit_micros,
	    .time_zone = r->time_zone,
	};
	return (int)b->nrows++;
}

/* True when it's idempotency key is the caller's own, not the default (its
 * sandbox id): a refusal under it is stored and replayed like an allowed
 * answer, since the key names this attempt. A default key names the
 * sandbox, so a refusal under it is decided again on a retry: stored, it
 * would refuse that sandbox for good. */
static bool key_own(const struct item *it)
{
	return strcmp(it->idem, it->rq.sandbox_id) != 0;
}

/* Decides what can be decided from the reads alone (unknown key or
 * sandbox, stored answers, max cost) and prepares the ledger parts of the
 * rest. METER_OK, or the database's error. */
static enum meter_rc batch_prepare(struct batcher *e, struct batch *b, int64_t deadline,
				   char *sqlstate)
{
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		const struct checks_request *rq = &it->rq;
		struct db_check_read *r = &b->rd[i];
		struct tz_entry tzd;
		const struct tz_entry *tz = &tzd;
		struct price_rates rates;
		enum meter_rc rc = METER_OK;
		char msg[160];

		if (rq->op == CHECKS_CREATE) {
			if (!r->key_exists) {
				set_error(it, 404, "key_not_found", "no such key",
					  json_pack("{s:s}", "key_id", rq->key_id));
				continue;
			}
			it->vcpus = rq->vcpus;
			it->memory_mib = rq->memory_mib;
		} else {
			if (!r->sb_exists || !r->sb_has_key || !r->key_exists) {
				set_error(it, 404, "sandbox_not_found", "no such sandbox",
					  json_pack("{s:s}", "sandbox_id", rq->sandbox_id));
				continue;
			}
			it->vcpus = r->sb_vcpus;
			it->memory_mib = r->sb_memory_mib;
		}
		if (r->idem_exists && !r->idem_stale) {
			if (strcmp(r->idem_sha_hex, it->sha_hex) != 0 || !r->idem_response) {
				json_t *stored;

				set_idem_conflict(it, answer_sandbox(r->idem_response, &stored));
				json_decref(stored);
				continue;
			}
			it->status = (unsigned)r->idem_status;
			it->body = strdup(r->idem_response);
			it->replayed = true;
			if (!it->body)
				it->status = 0;
			continue;
		}
		/* After the replay: a retry of a check answered before the
		 * key was revoked gets that answer (its hold stands). */
		if (r->key_revoked) {
			set_error(it, 403, "key_revoked", "the key is revoked",
				  json_pack("{s:s}", "key_id", r->key_id));
			continue;
		}
		/* A read_only key changes nothing: no sandbox is created or
		 * woken on it (a sandbox metering found under one, too). */
		if (r->key_read_only) {
			set_error(it, 403, "read_only_key",
				  rq->op == CHECKS_CREATE
				      ? "a read_only key cannot create sandboxes"
				      : "the sandbox's key is read_only: it cannot be woken",
				  json_pack("{s:s}", "key_id", r->key_id));
			continue;
		}
		if (rq->op == CHECKS_CREATE && r->sb_exists) {
			set_error(it, 409, "sandbox_exists", "a sandbox with this id exists",
				  json_pack("{s:s}", "sandbox_id", rq->sandbox_id));
			continue;
		}
		if (rq->op == CHECKS_WAKE && strcmp(r->sb_state, "stopped") == 0) {
			set_error(it, 409, "sandbox_stopped", "the sandbox is stopped",
				  json_pack("{s:s}", "sandbox_id", rq->sandbox_id));
			continue;
		}
		it->lease_end_usec = b->now + rq->lease_seconds * INT64_C(1000000);
		rates = lease_rates(b->prices, b->nprices, it->lease_end_usec);
		if (usage_lease_max_cost_usec(&rates, it->vcpus, it->memory_mib,
					      rq->lease_seconds * INT64_C(1000000),
					      &it->lease_max_micros) != METER_OK) {
			set_error(it, 400, "invalid_request", "lease worst case out of range",
				  NULL);
			continue;
		}
		if (rq->op == CHECKS_CREATE && rq->has_max_cost &&
		    !ledger_max_cost_ok(it->lease_max_micros, rq->max_cost_micros)) {
			snprintf(
			    msg, sizeof(msg),
			    "the first lease may cost up to %lld micros, more than max_cost_micros",
			    (long long)it->lease_max_micros);
			set_error(it, 402, "max_cost_exceeded", msg,
				  json_pack("{s:I,s:I}", "lease_max_cost_micros",
					    (json_int_t)it->lease_max_micros, "max_cost_micros",
					    (json_int_t)rq->max_cost_micros));
			it->kept = key_own(it) && it->status == 402;
			continue;
		}
		rc = tz_days(e, r->time_zone, b->now, deadline, sqlstate, &tzd);
		if (rc != METER_OK)
			return rc;
		if (ledger_split(&rates, it->vcpus, it->memory_mib, b->now, it->lease_end_usec,
				 tz->bounds, LEDGER_BOUNDS, it->parts, &it->nparts) != METER_OK) {
			/* The database's day starts, not the request, are
			 * at fault (the lease's length is checked before). */
			log_error("checks: the lease of sandbox %s cannot be split into the "
				  "days of zone %s",
				  rq->sandbox_id, r->time_zone);
			set_error(it, 500, "internal", "internal error", NULL);
			continue;
		}
		for (int p = 0; p < it->nparts; p++) {
			memcpy(it->days[p], tz->days[it->parts[p].day_index], 11);
			it->row[p] = batch_row(b, r, it->days[p]);
		}
		it->pending = true;
	}
	return METER_OK;
}

/* True when it's answer is kept on the sandbox row it makes: a create
 * under the default key (the sandbox id, sql/0017). Every other answer is
 * kept in idempotency_keys, so the two are separate key spaces: a create
 * of s2 under the explicit key "s1" is not the default key of s1's create,
 * in one batch as across batches (the database reads each in its own). */
static bool key_on_sandbox(const struct item *it)
{
	return it->rq.op == CHECKS_CREATE && strcmp(it->idem, it->rq.sandbox_id) == 0;
}

/* An earlier check of this batch under the same idempotency key whose answer
 * is stored (allowed, or a refusal kept), or NULL. */
static const struct item *batch_same_key(const struct batch *b, size_t upto,
					 const struct db_check_read *r, const struct item *it)
{
	for (size_t j = 0; j < upto; j++) {
		const struct item *o = b->items[j];
		if ((o->allowed || o->kept) && o->rq.op == it->rq.op &&
		    strcmp(o->idem, it->idem) == 0 && key_on_sandbox(o) == key_on_sandbox(it) &&
		    strcmp(b->rd[j].account_id, r->account_id) == 0)
			return o;
	}
	return NULL;
}

/* True when an earlier allowed create of this batch made this sandbox. */
static bool batch_created(const struct batch *b, size_t upto, const char *sandbox_id)
{
	for (size_t j = 0; j < upto; j++) {
		const struct item *o = b->items[j];
		if (o->allowed && o->rq.op == CHECKS_CREATE &&
		    strcmp(o->rq.sandbox_id, sandbox_id) == 0)
			return true;
	}
	return false;
}

/* Sets its allowed answer (ledger figures after its holds) and, for a
 * create, the answer's numbers its sandbox row keeps. False when out of
 * memory. Its strings are ids (meter_id: the parser's and the database's
 * rule), days and times, none of which needs escaping. */
static bool set_allowed(const struct batch *b, struct item *it, const struct db_check_read *r)
{
	struct check_answer a = {.sandbox_id = it->rq.sandbox_id,
				 .key_id = r->key_id,
				 .lease_max_cost_micros = it->lease_max_micros,
				 .nparts = it->nparts};
	char start[40], end[40];

	agent_doc_format_time(b->now, start, sizeof(start));
	agent_doc_format_time(it->lease_end_usec, end, sizeof(end));
	a.lease_starts_at = start;
	a.lease_ends_at = end;
	for (int p = 0; p < it->nparts && p < LEDGER_PARTS_MAX; p++)
		a.parts[p] = (struct check_answer_part){.day = it->days[p],
							.hold_micros = it->parts[p].micros,
							.figures = b->rows[it->row[p]].state};
	set_answer_text(it, 200, check_answer_allowed(&a));
	return it->status == 200 &&
	       (it->rq.op != CHECKS_CREATE ||
		check_answer_numbers(&a, b->now, it->lease_end_usec, it->numbers));
}

/* Adds item i's answer (allowed, or a kept refusal) to the answers the
 * batch stores in idempotency_keys. */
static void batch_store_answer(struct batch *b, size_t i)
{
	struct item *it = b->items[i];
	struct db_arr *a = b->arrs;

	db_arr_str(&a[DB_I_ACCOUNT], b->rd[i].account_id);
	db_arr_str(&a[DB_I_OP], it->rq.op == CHECKS_CREATE ? "create" : "wake");
	db_arr_str(&a[DB_I_KEY], it->idem);
	db_arr_str(&a[DB_I_SHA], it->sha_hex);
	db_arr_i64(&a[DB_I_STATUS], it->status);
	db_arr_str(&a[DB_I_RESPONSE], it->body);
}

/* Adds the writes of an allowed check to the batch's arrays. */
static void batch_write(struct batch *b, size_t i)
{
	struct item *it = b->items[i];
	const struct db_check_read *r = &b->rd[i];
	struct db_arr *a = b->arrs;
	const char *op = it->rq.op == CHECKS_CREATE ? "create" : "wake";

	if (r->idem_exists && r->idem_stale) {
		db_arr_str(&a[DB_X_ACCOUNT], r->account_id);
		db_arr_str(&a[DB_X_OP], op);
		db_arr_str(&a[DB_X_KEY], it->idem);
		db_arr_str(&a[DB_X_XMIN], r->idem_xmin);
	}
	/* A create's answer under the default key (the sandbox id) is kept on
	 * the sandbox row it makes (sql/0017), as its numbers (sql/0025);
	 * every other in a row of its own. */
	if (!key_on_sandbox(it))
		batch_store_answer(b, i);
	if (it->rq.op == CHECKS_CREATE) {
		bool default_key = key_on_sandbox(it);

		db_arr_str(&a[DB_C_SHA], default_key ? it->sha_hex : NULL);
		db_arr_str(&a[DB_C_ANSWER], default_key ? it->numbers : NULL);
		db_arr_str(&a[DB_C_ACCOUNT], r->account_id);
		db_arr_str(&a[DB_C_SANDBOX], it->rq.sandbox_id);
		db_arr_str(&a[DB_C_KEY], r->key_id);
		db_arr_i64(&a[DB_C_VCPUS], it->vcpus);
		db_arr_i64(&a[DB_C_MEMORY], it->memory_mib);
		if (it->rq.has_max_cost)
			db_arr_i64(&a[DB_C_MAX_COST], it->rq.max_cost_micros);
		else
			db_arr_null(&a[DB_C_MAX_COST]);
		db_arr_time(&a[DB_C_LEASE_END], it->lease_end_usec);
	} else {
		/* Two wakes of one sandbox in a batch: one row update, the
		 * later lease end. */
		bool seen = false;
		for (size_t j = 0; j < i; j++) {
			const struct item *o = b->items[j];
			if (o->allowed && o->rq.op == CHECKS_WAKE &&
			    strcmp(o->rq.sandbox_id, it->rq.sandbox_id) == 0)
				seen = true;
		}
		if (!seen) {
			int64_t end = it->lease_end_usec;
			for (size_t j = i + 1; j < b->n; j++) {
				const struct item *o = b->items[j];
				if (o->allowed && o->rq.op == CHECKS_WAKE &&
				    strcmp(o->rq.sandbox_id, it->rq.sandbox_id) == 0 &&
				    o->lease_end_usec > end)
					end = o->lease_end_usec;
			}
			db_arr_str(&a[DB_W_ACCOUNT], r->account_id);
			db_arr_str(&a[DB_W_SANDBOX], it->rq.sandbox_id);
			db_arr_time(&a[DB_W_LEASE_END], end);
		}
	}
	for (int p = 0; p < it->nparts; p++) {
		db_arr_str(&a[DB_H_ACCOUNT], r->account_id);
		db_arr_str(&a[DB_H_KEY], r->key_id);
		db_arr_str(&a[DB_H_SANDBOX], it->rq.sandbox_id);
		db_arr_str(&a[DB_H_DAY], it->days[p]);
		db_arr_i64(&a[DB_H_AMOUNT], it->parts[p].micros);
		db_arr_time(&a[DB_H_LEASE_END], it->lease_end_usec);
	}
}

/* it is a retry of same, an earlier check of the batch under the same
 * idempotency key: same's answer, replayed, or 409 when their parameters
 * differ. */
static void answer_as_retry(struct item *it, const struct item *same)
{
	it->kept = false;
	if (strcmp(same->sha_hex, it->sha_hex) != 0) {
		set_idem_conflict(it, same->rq.sandbox_id);
		return;
	}
	/* An allowed or kept item has its answer: one that could not be
	 * built was undone (allowed = false) below, and a refusal without
	 * its text is not kept. */
	assert(same->body);
	free(it->body);
	it->body = strdup(same->body);
	it->status = it->body ? same->status : 0;
	it->replayed = true;
}

/* Decides the pending checks in arrival order against the locked ledger. */
static void batch_decide(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		const struct db_check_read *r = &b->rd[i];
		struct ledger_day *days[LEDGER_PARTS_MAX] = {NULL};
		int64_t amounts[LEDGER_PARTS_MAX] = {0};
		const struct item *same;
		int failed = 0;

		if (!it->pending) {
			/* Refused before the ledger (max_cost_exceeded) and
			 * kept: a retry of an earlier check of the batch under
			 * the same key gets that one's answer instead. */
			if (it->kept && (same = batch_same_key(b, i, r, it)) != NULL)
				answer_as_retry(it, same);
			continue;
		}
		it->pending = false;
		same = batch_same_key(b, i, r, it);
		if (same) {
			answer_as_retry(it, same);
			continue;
		}
		if (it->rq.op == CHECKS_CREATE && batch_created(b, i, it->rq.sandbox_id)) {
			set_error(it, 409, "sandbox_exists", "a sandbox with this id exists",
				  json_pack("{s:s}", "sandbox_id", it->rq.sandbox_id));
			continue;
		}
		const int nparts = it->nparts;
		for (int p = 0; p < nparts; p++) {
			days[p] = &b->rows[it->row[p]].state;
			amounts[p] = it->parts[p].micros;
		}
		if (!ledger_place(days, amounts, nparts, &failed)) {
			const struct ledger_day *d = days[failed];
			/* Without a limit only a held total past what 64 bits
			 * keep refuses (ledger_place). */
			set_error(it, 402, "spending_limit_reached",
				  d->has_limit ? "the key's daily spending limit would be exceeded"
					       : "the key has no daily limit, but the day's held"
						 " total would pass the largest amount kept"
						 " (9223372036854775807 micros)",
				  json_pack("{s:s,s:I,s:I,s:o,s:I,s:I}", "day", it->days[failed],
					    "day_spent_micros", (json_int_t)d->spent_micros,
					    "day_held_micros", (json_int_t)d->held_micros,
					    "daily_limit_micros", limit_json(d),
					    "lease_max_cost_micros",
					    (json_int_t)it->lease_max_micros, "hold_micros",
					    (json_int_t)amounts[failed]));
			if (key_own(it)) {
				/* Stored (batch_store_answer): its insert fails on an
				 * answer its first attempt stored meanwhile,
				 * and the batch is decided again. */
				it->kept = it->status == 402;
				continue;
			}
			/* Unless its first attempt answered meanwhile (see
			 * db_checks_apply). */
			db_arr_str(&b->arrs[DB_R_ACCOUNT], r->account_id);
			db_arr_str(&b->arrs[DB_R_OP],
				   it->rq.op == CHECKS_CREATE ? "create" : "wake");
			db_arr_str(&b->arrs[DB_R_KEY], it->idem);
			db_arr_str(&b->arrs[DB_R_XMIN], r->idem_exists ? r->idem_xmin : NULL);
			it->r_listed = true;
			continue;
		}
		it->allowed = true;
		if (!set_allowed(b, it, r)) {
			/* Could not build the answer: undo, answer 503. */
			for (int p = 0; p < nparts; p++)
				days[p]->held_micros -= amounts[p];
			it->allowed = false;
			set_unavailable(it, "out of memory");
		}
	}
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i]->allowed)
			batch_write(b, i);
		else if (b->items[i]->kept)
			batch_store_answer(b, i);
	/* Ledger rows: the new held and the key's current limit. */
	for (size_t i = 0; i < b->nrows; i++) {
		const struct db_ledger_row *lr = &b->rows[i];
		db_arr_str(&b->arrs[DB_L_ACCOUNT], lr->account_id);
		db_arr_str(&b->arrs[DB_L_KEY], lr->key_id);
		db_arr_str(&b->arrs[DB_L_DAY], lr->day);
		db_arr_i64(&b->arrs[DB_L_HELD], lr->state.held_micros);
		if (lr->has_limit)
			db_arr_i64(&b->arrs[DB_L_LIMIT], lr->limit_micros);
		else
			db_arr_null(&b->arrs[DB_L_LIMIT]);
	}
}

/* Connection and backoff -------------------------------------------------------- */

/* Closes the batcher's connection. lost (why, for the log): it was
 * connected and broke, or is dropped for being in no state to reuse, so
 * the next check connects at once: the server that ended one session (a
 * terminated backend, an idle-in-transaction timeout) is most likely there
 * for the next. NULL: a connection could not be made, and checks fail
 * closed for a backoff, 100 ms doubling to 5 s, before the next try; why
 * (libpq's message, or NULL) goes in the warning of the outage's first. */
static void conn_drop(struct batcher *bt, const char *lost, const char *why)
{
	struct checks_engine *e = bt->e;

	if (bt->conn)
		PQfinish(bt->conn);
	bt->conn = NULL;
	pthread_mutex_lock(&e->mu);
	e->connected_ms = 0;
	if (lost && !e->down) {
		log_info("checks: database connection closed (%s); connecting again", lost);
		e->next_attempt_ms = 0;
	} else {
		int64_t delay = BACKOFF_MIN_MS;

		if (!e->down)
			log_warn("checks: database connection lost%s%s%s; checks fail closed until"
				 " it is back",
				 why ? " (" : "", why ? why : "", why ? ")" : "");
		e->down = true;
		for (int i = 0; i < e->failures && delay < BACKOFF_MAX_MS; i++)
			delay *= 2;
		if (delay > BACKOFF_MAX_MS)
			delay = BACKOFF_MAX_MS;
		delay = delay * 3 / 4 + rand_r(&e->seed) % (delay / 4 + 1);
		e->next_attempt_ms = clock_mono_ms() + delay;
		e->failures++;
	}
	pthread_mutex_unlock(&e->mu);
}

/* Makes sure the batcher has a connection; false (after backoff
 * bookkeeping) when the database cannot be reached now. idle: nothing is
 * in flight on it, so a connection the server closed while it was idle (a
 * restart, which libpq sees only once it reads) is found by reading what
 * came, and replaced at once: no check was sent on it, so none fails. */
static bool conn_ensure(struct batcher *bt, bool idle)
{
	struct checks_engine *e = bt->e;
	char err[256];
	PGconn *conn = NULL;

	if (bt->conn && PQstatus(bt->conn) == CONNECTION_OK) {
		if (!idle || !db_idle_closed(bt->conn))
			return true;
		log_info("checks: the database closed the idle connection; connecting again");
		PQfinish(bt->conn);
		bt->conn = NULL;
	}
	if (bt->conn)
		conn_drop(bt, "broken", NULL);
	pthread_mutex_lock(&e->mu);
	if (e->down && clock_mono_ms() < e->next_attempt_ms) {
		pthread_mutex_unlock(&e->mu);
		return false;
	}
	pthread_mutex_unlock(&e->mu);
	if (db_connect(e->url, &conn, err, sizeof(err)) != METER_OK ||
	    db_checks_session(conn, e->opt.statement_timeout_ms) != METER_OK) {
		if (conn)
			PQfinish(conn);
		log_debug("checks: cannot connect: %s", err);
		/* The first failure says why, at warn. */
		conn_drop(bt, NULL, err[0] ? err : "its session could not be set up");
		return false;
	}
	bt->conn = conn;
	pthread_mutex_lock(&e->mu);
	if (e->down)
		log_info("checks: database connected");
	e->down = false;
	e->connected_ms = clock_mono_ms();
	e->failures = 0;
	pthread_mutex_unlock(&e->mu);
	return true;
}

void checks_engine_db_back(struct checks_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	if (e->down) {
		e->next_attempt_ms = 0;
		pthread_cond_broadcast(&e->work_cv); /* an idle batcher connects now */
	}
	pthread_mutex_unlock(&e->mu);
}

bool checks_engine_db_down(struct checks_engine *e)
{
	bool down;

	if (!e)
		return false;
	pthread_mutex_lock(&e->mu);
	down = e->down;
	pthread_mutex_unlock(&e->mu);
	return down;
}

int64_t checks_engine_connected_ms(struct checks_engine *e)
{
	int64_t at;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->mu);
	at = e->connected_ms;
	pthread_mutex_unlock(&e->mu);
	return at;
}

int64_t checks_engine_grace_s(struct checks_engine *e, int64_t own)
{
	return e ? atomic_load(&e->grace_in_force) : own;
}

/* Facts ---------------------------------------------------------------------- */

/* What a committed classic batch read and wrote, for the fast path: the
 * price book, its keys (a revoked one forgotten) and its ledger rows as
 * written. */
static void batch_learn(struct checks_engine *e, const struct batch *b)
{
	int64_t until = b->now + PRICES_AHEAD_USEC;

	/* Versions past the last one read are unknown when the read was cut. */
	if (b->nprices == DB_CHECKS_PRICES_MAX)
		until = b->prices[DB_CHECKS_PRICES_MAX - 1].from_usec;
	check_facts_prices_put(e->facts, b->prices, b->nprices, b->price_version, b->now, until);
	for (size_t i = 0; i < b->n; i++) {
		const struct db_check_read *r = &b->rd[i];
		struct check_key_fact k = {.has_limit = r->has_limit,
					   .limit_micros = r->limit_micros};

		if (!r->key_exists)
			continue;
		if (r->key_revoked || r->key_read_only) {
			/* Never decided on the fast path: refused above. */
			check_facts_key_forget(e->facts, r->key_id);
			continue;
		}
		/* The key's limit as the ledger rows had it after the locks. */
		for (size_t j = 0; j < b->nrows; j++)
			if (strcmp(b->rows[j].key_id, r->key_id) == 0) {
				k.has_limit = b->rows[j].has_limit;
				k.limit_micros = b->rows[j].limit_micros;
				break;
			}
		snprintf(k.account_id, sizeof(k.account_id), "%s", r->account_id);
		snprintf(k.time_zone, sizeof(k.time_zone), "%s", r->time_zone);
		check_facts_key_put(e->facts, r->key_id, &k);
	}
}

/* A classic batch's attempt on its ledger rows begins (begin) or ends
 * (committed: the rows as it wrote them). */
static void batch_classic_rows(struct checks_engine *e, const struct batch *b, bool begin,
			       bool committed)
{
	for (size_t j = 0; j < b->nrows; j++) {
		const struct db_ledger_row *lr = &b->rows[j];

		if (begin)
			check_facts_row_classic_begin(e->facts, lr->account_id, lr->key_id,
						      lr->day);
		else
			check_facts_row_classic_end(e->facts, lr->account_id, lr->key_id, lr->day,
						    committed ? &lr->state : NULL);
	}
}

/* The fast path --------------------------------------------------------------- */

/* Scratch of one fast batch, sized for n items. */
struct fast_scratch {
	struct db_fast_ticket ticket;
	struct ledger_day *expect; /* per ledger row: the figures assumed */
	int64_t *delta;		   /* per ledger row: the held added */
	struct db_fast_key *keys;
	size_t nkeys;
	struct db_ledger_row *differ;
	char (*differ_day)[11];
	char (*differ_ids)[2][PARSE_ID_MAX + 1];
};

/* Fills b->rd from the facts for the items of b (creates), and b->prices:
 * false when something is not known, or not in a way this batcher can
 * use without asking the database. */
static bool fast_facts(struct batcher *bt, struct batch *b)
{
	struct checks_engine *e = bt->e;
	int64_t end = b->now;

	for (size_t i = 0; i < b->n; i++) {
		const struct checks_request *rq = &b->items[i]->rq;
		struct db_check_read *r = &b->rd[i];
		struct check_key_fact k;

		if (rq->op != CHECKS_CREATE || !check_facts_key_get(e->facts, rq->key_id, &k) ||
		    !tz_known(e, k.time_zone, b->now, NULL))
			return false;
		memset(r, 0, sizeof(*r));
		r->key_exists = true;
		snprintf(r->account_id, sizeof(r->account_id), "%s", k.account_id);
		snprintf(r->key_id, sizeof(r->key_id), "%s", rq->key_id);
		snprintf(r->time_zone, sizeof(r->time_zone), "%s", k.time_zone);
		r->has_limit = k.has_limit;
		r->limit_micros = k.limit_micros;
		if (b->now + rq->lease_seconds * INT64_C(1000000) > end)
			end = b->now + rq->lease_seconds * INT64_C(1000000);
	}
	return check_facts_prices_get(e->facts, b->now, end, b->prices, &b->nprices,
				      &b->price_version);
}

/* Decides b on the facts' figures and reserves its held on them. False
 * (nothing reserved) when a ledger row is not known. A row a classic
 * batch is deciding on is waited for (up to deadline_ms), not guessed. */
static bool fast_decide(struct checks_engine *e, struct batch *b, struct fast_scratch *x,
			int64_t deadline_ms)
{
	int64_t now_ms = clock_mono_ms();

	check_facts_lock(e->facts);
	for (size_t j = 0; j < b->nrows; j++) {
		struct db_ledger_row *lr = &b->rows[j];
		enum check_facts_predict p = check_facts_row_predict_locked(
		    e->facts, lr->account_id, lr->key_id, lr->day, now_ms, &x->expect[j]);

		if (p == CHECK_FACTS_BUSY) {
			if (!check_facts_wait_locked(e->facts, deadline_ms) &&
			    clock_mono_ms() >= deadline_ms) {
				check_facts_unlock(e->facts);
				return false;
			}
			now_ms = clock_mono_ms();
			j = (size_t)-1; /* every row again: they may have moved */
			continue;
		}
		if (p != CHECK_FACTS_KNOWN) {
			check_facts_unlock(e->facts);
			return false;
		}
		/* As the classic path: the key's limit applies (and is written
		 * to the row); the row is expected to hold its own. */
		lr->found = true;
		lr->state = x->expect[j];
		lr->state.has_limit = lr->has_limit;
		lr->state.limit_micros = lr->has_limit ? lr->limit_micros : 0;
	}
	batch_decide(b);
	/* A refusal to store goes the classic way, which locks the ledger rows
	 * before it writes: the same refusal sent to another process at once
	 * (a retry) then waits for this one's row and replays its answer. A
	 * fast batch writes before it locks, and the two would wait for each
	 * other until PostgreSQL broke the tie (deadlock_timeout), with each
	 * process's other checks queued behind them. Refusals are rare where
	 * speed matters: a key at its limit is refused whatever the path. */
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i]->kept) {
			check_facts_unlock(e->facts);
			return false;
		}
	/* Tickets are positive int32: 1 .. 2^31 - 1, then round again. */
	e->ticket = e->ticket % INT32_MAX + 1;
	x->ticket = (struct db_fast_ticket){.engine = e->engine_id, .ticket = e->ticket};
	for (size_t j = 0; j < b->nrows; j++) {
		x->delta[j] = b->rows[j].state.held_micros - x->expect[j].held_micros;
		check_facts_row_reserve_locked(e->facts, b->rows[j].account_id, b->rows[j].key_id,
					       b->rows[j].day, x->delta[j], x->ticket.ticket,
					       x->ticket.after, &x->ticket.nafter);
	}
	check_facts_unlock(e->facts);
	/* Every other refusal too: an earlier attempt of a check may have been
	 * allowed (the batch read no stored answer). And every refused
	 * create's sandbox id: the batch read no sandbox either, and one that
	 * exists, made however and in whatever account, is 409 sandbox_exists
	 * on the classic path whatever the create's figures (sql/0032). */
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		const struct db_check_read *r = &b->rd[i];

		if (it->allowed || it->replayed || !it->status)
			continue;
		if (!it->r_listed) {
			db_arr_str(&b->arrs[DB_R_ACCOUNT], r->account_id);
			db_arr_str(&b->arrs[DB_R_OP], "create");
			db_arr_str(&b->arrs[DB_R_KEY], it->idem);
			db_arr_null(&b->arrs[DB_R_XMIN]);
			it->r_listed = true;
		}
		if (!key_on_sandbox(it)) {
			db_arr_str(&b->arrs[DB_R_ACCOUNT], r->account_id);
			db_arr_str(&b->arrs[DB_R_OP], "create");
			db_arr_str(&b->arrs[DB_R_KEY], it->rq.sandbox_id);
			db_arr_null(&b->arrs[DB_R_XMIN]);
		}
	}
	/* The keys assumed, once each. */
	x->nkeys = 0;
	for (size_t i = 0; i < b->n; i++) {
		const struct db_check_read *r = &b->rd[i];
		bool seen = false;

		for (size_t k = 0; k < x->nkeys && !seen; k++)
			seen = strcmp(x->keys[k].key_id, r->key_id) == 0;
		if (!seen)
			x->keys[x->nkeys++] = (struct db_fast_key){.account_id = r->account_id,
								   .key_id = r->key_id,
								   .has_limit = r->has_limit,
								   .limit_micros = r->limit_micros,
								   .time_zone = r->time_zone};
	}
	return true;
}

/* A fast batch: decided on the facts and sent on the batcher's pipeline,
 * its answer not read yet. */
struct flight {
	struct item **items; /* owned array, borrowed items */
	size_t n;
	int attempts;
	bool reserved; /* its held is reserved on the facts' rows */
	int64_t deadline_ms;
	/* Its statement's result read (db_checks_fast_executed): decided
	 * in the database, the commit still to come; what it said. */
	bool executed;
	enum meter_rc exec_rc;
	size_t ndiffer;
	char sqlstate[6];
	struct batch b;
	struct fast_scratch x;
};

static void flight_free(struct flight *f)
{
	if (!f)
		return;
	db_check_read_release(f->b.rd, f->n);
	for (int i = 0; i < DB_BATCH_NARR; i++)
		db_arr_release(&f->b.arrs[i]);
	free(f->b.rd);
	free(f->b.rows);
	free(f->x.expect);
	free(f->x.delta);
	free(f->x.keys);
	free(f->x.differ);
	free(f->x.differ_day);
	free(f->x.differ_ids);
	free(f->items);
	free(f);
}

/* A flight for items[0..n) (copied), or NULL when out of memory. */
static struct flight *flight_new(struct item **items, size_t n)
{
	struct flight *f = calloc(1, sizeof(*f));
	size_t nrows_max = n * LEDGER_PARTS_MAX;

	if (!f)
		return NULL;
	f->n = n;
	f->items = calloc(n, sizeof(struct item *));
	f->b.rd = calloc(n, sizeof(*f->b.rd));
	f->b.rows = calloc(nrows_max, sizeof(*f->b.rows));
	f->x.expect = calloc(nrows_max, sizeof(*f->x.expect));
	f->x.delta = calloc(nrows_max, sizeof(*f->x.delta));
	f->x.keys = calloc(n, sizeof(*f->x.keys));
	f->x.differ = calloc(nrows_max, sizeof(*f->x.differ));
	f->x.differ_day = calloc(nrows_max, sizeof(*f->x.differ_day));
	f->x.differ_ids = calloc(nrows_max, sizeof(*f->x.differ_ids));
	db_checks_arrs_init(f->b.arrs);
	if (!f->items || !f->b.rd || !f->b.rows || !f->x.expect || !f->x.delta || !f->x.keys ||
	    !f->x.differ || !f->x.differ_day || !f->x.differ_ids) {
		flight_free(f);
		return NULL;
	}
	memcpy(f->items, items, n * sizeof(struct item *));
	f->b.items = f->items;
	f->b.n = n;
	return f;
}

/* Gives back what f reserved on its rows (if it still holds it):
 * committed or not. */
static void flight_release(struct checks_engine *e, struct flight *f, bool committed)
{
	if (!f->reserved)
		return;
	f->reserved = false;
	for (size_t j = 0; j < f->b.nrows; j++)
		check_facts_row_release(e->facts, f->b.rows[j].account_id, f->b.rows[j].key_id,
					f->b.rows[j].day, f->x.delta[j], f->x.ticket.ticket,
					committed);
}

enum launch {
	LAUNCH_SENT,	/* in flight */
	LAUNCH_CLASSIC, /* not decidable on the facts: nothing reserved or sent */
	LAUNCH_BROKEN,	/* could not be sent: the connection is gone */
};

/* Decides f on the facts and sends it. */
static enum launch flight_launch(struct batcher *bt, struct flight *f)
{
	struct checks_engine *e = bt->e;
	char sqlstate[6] = "";

	batch_reset(&f->b);
	f->b.now = checks_now_usec(e);
	f->attempts++;
	f->executed = false;
	f->exec_rc = METER_OK;
	f->ndiffer = 0;
	f->sqlstate[0] = '\0';
	if (!fast_facts(bt, &f->b) || batch_prepare(bt, &f->b, 0, sqlstate) != METER_OK ||
	    !fast_decide(e, &f->b, &f->x, clock_mono_ms() + e->opt.statement_timeout_ms))
		return LAUNCH_CLASSIC;
	f->reserved = true;
	f->deadline_ms = clock_mono_ms() + e->opt.statement_timeout_ms + DB_UTIL_DEADLINE_SLACK_MS;
	if (db_checks_fast_send(bt->conn, f->b.now, f->b.price_version, &f->x.ticket, f->x.expect,
				f->b.nrows, f->x.keys, f->x.nkeys, f->b.arrs) != METER_OK) {
		flight_release(e, f, false);
		return LAUNCH_BROKEN;
	}
	return LAUNCH_SENT;
}

enum landing {
	LAND_DONE,    /* every item has its answer */
	LAND_AGAIN,   /* other figures than expected: decide again (facts refreshed) */
	LAND_CLASSIC, /* read and decide on the classic path */
	LAND_BROKEN,  /* the connection failed or timed out: outcome unknown */
};

/* Reads the result of f's statement (f the oldest flight not executed),
 * which comes before its commit. */
static void flight_execute(struct batcher *bt, struct flight *f)
{
	if (f->executed)
		return;
	f->exec_rc =
	    db_checks_fast_executed(bt->conn, f->b.nrows, f->x.differ, &f->ndiffer, f->x.differ_day,
				    f->x.differ_ids, f->deadline_ms, f->sqlstate);
	f->executed = true;
}

/* True when f's statement wrote its batch, which its sync then commits:
 * the next batch, decided on what f leaves, may go. */
static bool flight_wrote(const struct flight *f)
{
	return f->executed && f->exec_rc == METER_OK && f->ndiffer == 0;
}

/* Reads the answer to f, the oldest flight: its statement's result if not
 * read yet, then its sync. */
static enum landing flight_land(struct batcher *bt, struct flight *f)
{
	struct checks_engine *e = bt->e;
	char *sqlstate = f->sqlstate;
	size_t ndiffer;
	enum meter_rc rc;

	flight_execute(bt, f);
	rc = f->exec_rc;
	ndiffer = f->ndiffer;
	if (rc != METER_EIO) {
		char synced_state[6] = "";
		enum meter_rc synced =
		    db_checks_fast_synced(bt->conn, f->deadline_ms, synced_state);

		if (synced == METER_EIO || (rc == METER_OK && synced != METER_OK)) {
			rc = synced;
			ndiffer = 0;
			memcpy(f->sqlstate, synced_state, sizeof(synced_state));
		}
	}
	flight_release(e, f, rc == METER_OK && ndiffer == 0);
	if (rc == METER_OK && ndiffer == 0) {
		metrics_counter_add(CHECK_BATCHES, "path=\"fast\"", 1);
		note_held(f->items, f->n);
		return LAND_DONE;
	}
	if (rc == METER_OK) {
		metrics_counter_add(CHECK_BATCHES, "path=\"fast_differed\"", 1);
		/* Other figures than expected: nothing written. */
		for (size_t j = 0; j < ndiffer; j++) {
			const struct db_ledger_row *d = &f->x.differ[j];

			if (d->found)
				check_facts_row_put(e->facts, d->account_id, d->key_id, d->day,
						    &d->state, true, clock_mono_ms());
			else
				check_facts_row_forget(e->facts, d->account_id, d->key_id, d->day);
		}
		log_debug("checks: fast batch of %zu met %zu ledger rows not as expected", f->n,
			  ndiffer);
		return f->attempts < FAST_ATTEMPTS ? LAND_AGAIN : LAND_CLASSIC;
	}
	if (rc == METER_EIO || PQstatus(bt->conn) != CONNECTION_OK)
		return LAND_BROKEN;
	if (db_checks_timed_out(sqlstate)) {
		/* A ledger row held by a slow writer: the database's, as on
		 * the classic path; reading it all again would wait as long
		 * again while every other key's checks queue behind it. */
		log_error("checks: fast batch of %zu failed (SQLSTATE %s)", f->n, sqlstate);
		batch_reset(&f->b);
		for (size_t i = 0; i < f->n; i++)
			set_timed_out(f->items[i], sqlstate, e->opt.statement_timeout_ms);
		return LAND_DONE;
	}
	/* Something else than assumed (MTR01: a key, the price book, a
	 * sandbox or stored answer), or an error: the classic path reads
	 * everything and decides again, or fails as it will. */
	log_debug("checks: fast batch of %zu goes the classic way (SQLSTATE %s)", f->n,
		  sqlstate[0] ? sqlstate : "none");
	return LAND_CLASSIC;
}

/* Runs one batch of n >= 1 items to its answers (every item gets a status).
 * A poisoned batch reruns each item as a batch of one, which is never
 * poisoned: the recursion is one level deep. */
/* NOLINTNEXTLINE(misc-no-recursion) */
static void batch_run(struct batcher *bt, struct item **items, size_t n)
{
	struct checks_engine *e = bt->e;
	struct batch b = {.items = items, .n = n};
	char sqlstate[6] = "";
	enum meter_rc rc = METER_EDB;
	bool poison = false, in_doubt = false, redone = false;

	assert(n > 0);
	b.in = calloc(n, sizeof(*b.in));
	b.rd = calloc(n, sizeof(*b.rd));
	b.rows = calloc(n * LEDGER_PARTS_MAX, sizeof(*b.rows));
	db_checks_arrs_init(b.arrs);
	if (!b.in || !b.rd || !b.rows) {
		for (size_t i = 0; i < n; i++)
			set_unavailable(items[i], "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct item *it = items[i];
		b.in[i] = (struct db_check_in){.wake = it->rq.op == CHECKS_WAKE,
					       .key_id = it->rq.key_id,
					       .sandbox_id = it->rq.sandbox_id,
					       .idem = it->idem};
	}
	for (int attempt = 0; attempt < BATCH_ATTEMPTS; attempt++) {
		int64_t deadline;
		bool applying = false; /* the writes and COMMIT sent */

		batch_reset(&b);
		if (!conn_ensure(bt, true)) {
			rc = METER_EDB;
			sqlstate[0] = '\0'; /* not the last attempt's: unreachable */
			break;
		}
		deadline =
		    clock_mono_ms() + e->opt.statement_timeout_ms + DB_UTIL_DEADLINE_SLACK_MS;
		b.now = checks_now_usec(e);
		rc = db_checks_read(bt->conn, b.in, n, b.now, b.now + PRICES_AHEAD_USEC, b.rd,
				    b.prices, &b.nprices, &b.price_version, deadline, sqlstate);
		if (rc == METER_OK)
			rc = batch_prepare(bt, &b, deadline, sqlstate);
		if (rc == METER_OK) {
			batch_classic_rows(e, &b, true, false);
			if (b.nrows > 0)
				rc = db_checks_lock(bt->conn, b.rows, b.nrows, deadline, sqlstate);
			if (rc == METER_OK) {
				batch_decide(&b);
				applying = true;
				rc = db_checks_apply(bt->conn, b.now, b.arrs, deadline, sqlstate);
			}
			batch_classic_rows(e, &b, false, rc == METER_OK);
		}
		if (rc == METER_OK) {
			batch_learn(e, &b);
			metrics_counter_add(CHECK_BATCHES, "path=\"classic\"", 1);
			note_held(items, n);
			break;
		}
		if (rc == METER_EIO || !bt->conn || PQstatus(bt->conn) != CONNECTION_OK ||
		    db_checks_session_ended(sqlstate)) {
			/* The server stopped answering: whether a COMMIT in flight
			 * landed is unknown; a retry with the same idempotency key
			 * gets the stored answer if it did. Before the writes were
			 * sent, nothing can have landed, nor from a transaction
			 * refused for taking no writes: a session the server
			 * ended so (not one that reached the deadline, which
			 * would only wait as long again) is decided again, once,
			 * on a new connection. */
			bool timed_out = clock_mono_ms() >= deadline;

			conn_drop(bt, "broken", NULL);
			rc = METER_EDB;
			in_doubt = applying && !db_util_read_only(sqlstate);
			if (!in_doubt && !timed_out && !redone) {
				log_debug("checks: batch of %zu decided again on a new connection",
					  n);
				redone = true;
				continue;
			}
			break;
		}
		db_checks_rollback(bt->conn);
		if (!db_checks_retryable(sqlstate)) {
			/* The database's lack of resources: said, but at most
			 * every DB_SHORT_LOG_MS, since every batch meets it. */
			if (db_util_short_of_resources(sqlstate)) {
				char what[64];

				snprintf(what, sizeof(what), "checks: batch of %zu", n);
				db_util_short_note(sqlstate);
				db_util_log_short(what, sqlstate, "refused");
			} else {
				log_error("checks: batch of %zu failed (SQLSTATE %s)", n,
					  sqlstate[0] ? sqlstate : "none");
			}
			/* A statement timeout (a ledger row held by a slow
			 * writer) is the database's, not one check's: rerun
			 * one by one, each would wait as long again while
			 * every other key's checks queue behind them. The
			 * lack of resources is rerun so, though: a check
			 * that writes nothing (a replay, a refusal) is still
			 * answered on its own. */
			poison = n > 1 && !db_checks_timed_out(sqlstate);
			break;
		}
		log_debug("checks: batch of %zu redone (SQLSTATE %s)", n, sqlstate);
	}
	if (rc != METER_OK) {
		batch_reset(&b);
		if (poison) {
			/* One bad check must not fail its neighbours: decide
			 * each alone. */
			for (size_t i = 0; i < n; i++)
				batch_run(bt, &items[i], 1);
		} else {
			for (size_t i = 0; i < n; i++)
				if (in_doubt)
					set_in_doubt(items[i]);
				else if (db_checks_timed_out(sqlstate))
					set_timed_out(items[i], sqlstate,
						      e->opt.statement_timeout_ms);
				else if (db_util_short_of_resources(sqlstate))
					set_short(items[i], sqlstate);
				else if (db_util_read_only(sqlstate))
					set_read_only(items[i]);
				else
					set_unavailable(items[i],
							"the metering database is unreachable");
		}
	}
out:
	db_check_read_release(b.rd, n);
	for (int i = 0; i < DB_BATCH_NARR; i++)
		db_arr_release(&b.arrs[i]);
	free(b.in);
	free(b.rd);
	free(b.rows);
}

/* Threads -------------------------------------------------------------------------- */

/* The batcher's work between two takes from the queue: the fast batches
 * in flight on its pipeline, oldest first, and the items bound for the
 * classic path or for another fast attempt. */
struct batcher_work {
	struct flight *flights[PIPELINE_MAX];
	int nflights;
	struct item **classic; /* room for every item the batcher holds */
	size_t nclassic;
	struct flight *again[PIPELINE_MAX]; /* decide again once none is in flight */
	int nagain;
};

/* Answers and frees what items[0..n) hold: the answer each has. */
static void finish_all(struct item **items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		finish(items[i]);
}

/* The connection failed with flights in flight: whether they committed is
 * unknown, so they answer 503 (a retry with the same idempotency key gets
 * the stored answer if one did). */
static void batcher_broken(struct batcher *bt, struct batcher_work *w)
{
	for (int i = 0; i < w->nflights; i++) {
		struct flight *f = w->flights[i];

		flight_release(bt->e, f, false);
		batch_reset(&f->b);
		for (size_t j = 0; j < f->n; j++)
			set_in_doubt(f->items[j]);
		finish_all(f->items, f->n);
		flight_free(f);
	}
	w->nflights = 0;
	if (bt->conn)
		conn_drop(bt, "broken with batches in flight", NULL);
}

/* Moves f's items to the classic path and frees f. */
static void flight_to_classic(struct batcher_work *w, struct flight *f)
{
	batch_reset(&f->b);
	memcpy(w->classic + w->nclassic, f->items, f->n * sizeof(struct item *));
	w->nclassic += f->n;
	flight_free(f);
}

/* Launches f, or hands its items on. */
static void batcher_launch(struct batcher *bt, struct batcher_work *w, struct flight *f)
{
	if (!conn_ensure(bt, w->nflights == 0)) {
		for (size_t j = 0; j < f->n; j++)
			set_unavailable(f->items[j], "the metering database is unreachable");
		finish_all(f->items, f->n);
		flight_free(f);
		return;
	}
	switch (flight_launch(bt, f)) {
	case LAUNCH_SENT:
		w->flights[w->nflights++] = f;
		return;
	case LAUNCH_CLASSIC:
		flight_to_classic(w, f);
		return;
	case LAUNCH_BROKEN:
		w->flights[w->nflights++] = f; /* answered 503 with the others */
		batcher_broken(bt, w);
		return;
	}
}

/* Reads the answer to the oldest flight and acts on it. */
static void batcher_land(struct batcher *bt, struct batcher_work *w)
{
	struct flight *f = w->flights[0];

	memmove(w->flights, w->flights + 1, (size_t)(w->nflights - 1) * sizeof(struct flight *));
	w->nflights--;
	switch (flight_land(bt, f)) {
	case LAND_DONE:
		finish_all(f->items, f->n);
		flight_free(f);
		return;
	case LAND_AGAIN:
		w->again[w->nagain++] = f;
		return;
	case LAND_CLASSIC:
		flight_to_classic(w, f);
		return;
	case LAND_BROKEN:
		w->flights[w->nflights++] = f;
		batcher_broken(bt, w);
		return;
	}
}

/* True when a new fast batch may be sent: none in flight, or one whose
 * statement wrote its batch and whose commit is under way (the
 * database's flush of the WAL, during which the next batch reaches it).
 * A batch sent any earlier would wait in the database behind a whole
 * batch, and the checks that come meanwhile a whole batch more. */
static bool batcher_may_send(const struct batcher_work *w)
{
	return w->nflights == 0 || (w->nflights == 1 && flight_wrote(w->flights[0]));
}

/* Reads what comes next on the pipeline: the oldest flight's statement
 * result when it has not come, else its sync (and lands it). */
static void batcher_step(struct batcher *bt, struct batcher_work *w)
{
	if (!w->flights[0]->executed)
		flight_execute(bt, w->flights[0]);
	else
		batcher_land(bt, w);
}

/* True when the queue has checks waiting. */
static bool queue_waiting(struct checks_engine *e)
{
	bool waiting;

	pthread_mutex_lock(&e->mu);
	waiting = e->head != NULL;
	pthread_mutex_unlock(&e->mu);
	return waiting;
}

/* The batcher: takes what is queued (up to batch_max) whenever a fast
 * batch can be sent, sends the creates of known keys as a fast batch on
 * its pipeline (when the batch ahead has written and is committing, see
 * batcher_may_send; each decided on what the ones before it will leave),
 * and runs the rest on the classic path once nothing is in flight. */
static void *batcher_main(void *arg)
{
	struct batcher *bt = arg;
	struct checks_engine *e = bt->e;
	size_t cap = (size_t)e->opt.batch_max;
	struct item **items = calloc(cap, sizeof(struct item *));
	struct batcher_work w = {.classic =
				     calloc(cap * (2 * PIPELINE_MAX + 1), sizeof(struct item *))};

	/* Connected at once, not at the first check: a server with few
	 * connection slots left gives them to the first to ask, and the
	 * request pool's workers, connecting as requests come, took them all
	 * before the first check (every check then 503 while reads were
	 * served). Not reached, the backoff goes on as for a lost one. Only
	 * on a schema this binary's (meterd reads it before it starts the
	 * engine): elsewhere the batch statements cannot be prepared. */
	if (schema_gate_open(NULL, 0))
		(void)conn_ensure(bt, true);
	for (;;) {
		size_t n = 0, nf = 0;
		bool stop;
		struct check_key_fact k;

		pthread_mutex_lock(&e->mu);
		while (!e->head && w.nflights == 0 && !e->stopping) {
			/* With the database down and no check coming, the
			 * batcher without a connection tries again when its
			 * backoff ends, so the engine is back (and says so:
			 * meter_checks_db_up) before the next check. */
			if (e->down && !bt->conn) {
				int64_t wait = e->next_attempt_ms - clock_mono_ms();
				struct timespec until;

				if (wait <= 0) {
					pthread_mutex_unlock(&e->mu);
					(void)conn_ensure(bt, true);
					pthread_mutex_lock(&e->mu);
					continue;
				}
				until = clock_mono_after_ms(wait);
				e->idle++;
				(void)pthread_cond_timedwait(&e->work_cv, &e->mu, &until);
				e->idle--;
				continue;
			}
			e->idle++;
			pthread_cond_wait(&e->work_cv, &e->mu);
			e->idle--;
		}
		stop = e->stopping;
		while (e->head && n < cap && items && w.classic &&
		       (stop || (batcher_may_send(&w) && w.nagain == 0 && w.nclassic == 0))) {
			items[n++] = e->head;
			e->head = e->head->next;
			e->queued--;
		}
		if (!e->head)
			e->tail = NULL;
		pthread_mutex_unlock(&e->mu);
		if (!items || !w.classic) {
			log_error("checks: out of memory; the engine stops");
			pthread_mutex_lock(&e->mu);
			e->stopping = true;
			pthread_mutex_unlock(&e->mu);
			stop = true;
		}
		if (stop) {
			/* Shutting down: the flights' answers are real; what is
			 * queued or waiting is answered 503, nothing new decided. */
			while (w.nflights > 0)
				batcher_land(bt, &w);
			for (int i = 0; i < w.nagain; i++)
				flight_to_classic(&w, w.again[i]);
			w.nagain = 0;
			for (size_t i = 0; i < n; i++)
				w.classic[w.nclassic++] = items[i];
			for (size_t i = 0; i < w.nclassic; i++)
				set_unavailable(w.classic[i], "the service is shutting down");
			finish_all(w.classic, w.nclassic);
			w.nclassic = 0;
			pthread_mutex_lock(&e->mu);
			if (!e->head) {
				pthread_mutex_unlock(&e->mu);
				break;
			}
			pthread_mutex_unlock(&e->mu);
			continue;
		}
		/* Creates of keys the engine knows take the fast path; the
		 * rest, and a fast batch that cannot be, the classic one. */
		for (size_t i = 0; i < n; i++) {
			if (items[i]->rq.op == CHECKS_CREATE &&
			    check_facts_key_get(e->facts, items[i]->rq.key_id, &k))
				items[nf++] = items[i];
			else
				w.classic[w.nclassic++] = items[i];
		}
		if (nf > 0) {
			struct flight *f = flight_new(items, nf);

			if (f) {
				batcher_launch(bt, &w, f);
			} else {
				memcpy(w.classic + w.nclassic, items, nf * sizeof(struct item *));
				w.nclassic += nf;
			}
		}
		/* Read the pipeline until the next batch may go and checks
		 * wait for it; to its end when nothing is queued, or when the
		 * classic path or another attempt waits for it to be empty. */
		while (w.nflights > 0 && !(batcher_may_send(&w) && w.nclassic == 0 &&
					   w.nagain == 0 && queue_waiting(e)))
			batcher_step(bt, &w);
		if (w.nflights > 0)
			continue;
		for (int i = 0; i < w.nagain; i++)
			batcher_launch(bt, &w, w.again[i]);
		w.nagain = 0;
		if (w.nflights > 0)
			continue;
		if (w.nclassic > 0) {
			int64_t t0 = clock_mono_ms();

			if (bt->conn && !db_checks_fast_idle(bt->conn))
				conn_drop(bt, "not idle before a classic batch", NULL);
			batch_run(bt, w.classic, w.nclassic);
			log_debug("checks: classic batch of %zu decided in %lld ms", w.nclassic,
				  (long long)(clock_mono_ms() - t0));
			finish_all(w.classic, w.nclassic);
			w.nclassic = 0;
		}
	}
	free(items);
	free(w.classic);
	if (bt->conn)
		PQfinish(bt->conn);
	bt->conn = NULL;
	return NULL;
}

/* Waits ms (less once the engine stops): false when it is stopping. */
static bool sweeper_pause(struct checks_engine *e, int64_t ms)
{
	struct timespec until = clock_mono_after_ms(ms);
	bool stopping;

	pthread_mutex_lock(&e->mu);
	while (!e->stopping) {
		if (pthread_cond_timedwait(&e->sweep_cv, &e->mu, &until) == ETIMEDOUT)
			break;
	}
	stopping = e->stopping;
	pthread_mutex_unlock(&e->mu);
	return !stopping;
}

/* Meters the stretch from the last sample to the stop of the sandboxes
 * whose stop no sample will meter (sql/0048), with ing: a stopped reading
 * at each stop. *n gets how many. */
static enum meter_rc sweep_stop_tails(PGconn *conn, struct ingest *ing, struct sample_batch *b,
				      int64_t now, int64_t grace, int64_t *n)
{
	struct ingest_stats st;
	char err[256];
	enum meter_rc rc = db_checks_stop_tails(conn, now, grace, SWEEP_MAX, b);

	*n = (int64_t)b->n;
	if (rc != METER_OK || b->n == 0)
		return rc;
	rc = ingest_batches(ing, conn, b, 1, &st, err, sizeof(err));
	if (rc != METER_OK)
		log_error("checks: the stretches to %zu stops not metered: %s", b->n, err);
	return rc;
}

/* What the sweeper knows of the sweep settings in force (sql/0063). */
struct sweep_seen {
	int64_t next_ms;   /* the next record due (clock_mono_ms) */
	int records;	   /* made so far */
	int64_t retention; /* sample_retention_days in force, -1 until known */
};

/* Every SEEN_EVERY_MS (the second time after SEEN_SECOND_MS): records this
 * sweeper's settings on the database and reads those in force there, the
 * most cautious of every running process's: the grace into
 * e->grace_in_force, the retention into ss->retention. A change from this
 * process's own is logged. On failure the last known stay, and it is tried
 * again at the next sweep. */
static void sweeper_seen(struct checks_engine *e, PGconn *conn, struct sweep_seen *ss)
{
	int64_t grace, days, was = atomic_load(&e->grace_in_force), now = clock_mono_ms();

	if (now < ss->next_ms)
		return;
	if (db_checks_sweeper_seen(conn, e->sweeper_id, e->opt.lease_grace_s,
				   e->opt.sample_retention_days, SEEN_LAPSE_S, &grace,
				   &days) != METER_OK) {
		ss->next_ms = now + SWEEP_INTERVAL_MS; /* once a sweep, not each step */
		return;
	}
	ss->records++;
	ss->next_ms = now + (ss->records == 1 ? SEEN_SECOND_MS : SEEN_EVERY_MS);
	if (grace != was)
		log_info("checks: lease_grace_s in force is %lld s (this process's: %lld s), the "
			 "largest of the meterd processes on the database",
			 (long long)grace, (long long)e->opt.lease_grace_s);
	if (ss->retention >= 0 ? days != ss->retention : days != e->opt.sample_retention_days)
		log_info("checks: sample_retention_days in force is %lld (this process's: %lld; 0: "
			 "for ever), the longest of the meterd processes on the database",
			 (long long)days, (long long)e->opt.sample_retention_days);
	atomic_store(&e->grace_in_force, grace);
	ss->retention = days;
}

/* Every SWEEP_INTERVAL_MS: meters the stretch to a stop no sample will
 * meter (sweep_stop_tails), before its tail hold is closed; settles the
 * holds of leases that ended without
 * an event as an event at the lease end would (sql/0015); closes the holds
 * kept for an unmetered tail, once metered (or lease_grace_s after the
 * event or lease end when no sample will come: sql/0014's
 * meter_tail_done); then sends hold_outrun for the ended leases whose
 * sandbox is still running on them lease_grace_s after their end. And,
 * once it is connected and then every hour, drops the raw samples past
 * sample_retention_days (ingest_drop_old_samples). */
static void *sweeper_main(void *arg)
{
	struct checks_engine *e = arg;
	PGconn *conn = NULL;
	int64_t next_connect = 0, next_retain = 0, next_ahead = 0;
	struct sweep_seen ss = {.retention = -1};
	int failures = 0;
	bool read_only = false;
	struct ingest_opts io;
	struct ingest *ing;
	struct sample_batch tails;

	ingest_opts_init(&io);
	io.cache_sandboxes = 0;
	io.statement_timeout_ms = e->opt.statement_timeout_ms;
	io.own_readings = true;
	ing = ingest_new(&io);
	if (!ing)
		log_error("checks: out of memory: stops' tails will not be metered");
	sample_batch_init(&tails);
	for (;;) {
		char err[256];

		if (!sweeper_pause(e, SWEEP_INTERVAL_MS))
			break;
		if (!conn && clock_mono_ms() >= next_connect) {
			/* The statement timeout the server keeps, as on every
			 * other connection: past meterd's deadline (2 s more) a
			 * sweep that the server stopped answering is given up,
			 * and must not go on there without a limit. */
			if (db_connect(e->url, &conn, err, sizeof(err)) != METER_OK ||
			    db_util_session_timeouts(
				conn, "sweeper session", e->opt.statement_timeout_ms,
				db_util_idle_tx_ms(e->opt.statement_timeout_ms)) != METER_OK) {
				int64_t delay = BACKOFF_MIN_MS << (failures < 6 ? failures : 6);
				next_connect = clock_mono_ms() +
					       (delay > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay);
				failures++;
				PQfinish(conn);
				conn = NULL;
			} else {
				failures = 0;
			}
		}
		/* Nothing swept on a schema not this binary's (schema_gate.h):
		 * its statements would fail there every second, or do what
		 * they were not written for. */
		if (!conn || !schema_gate_open(NULL, 0))
			continue;
		/* The four steps in turn (a stop's stretch metered before
		 * the settling step closes its hold), each again while it took a whole
		 * SWEEP_MAX, until the engine stops (what is left is due at the
		 * next start): a hot key's ended leases kept SIGTERM waiting
		 * for minutes. In turn, not each to its end: a step with much
		 * to do (a burst's closings) does not hold the others (the
		 * leases that ended, whose budget their keys' checks wait for)
		 * back until it is done. A sweep holds the ledger rows of its
		 * holds (waiting for them behind the check batches on them)
		 * until it commits: after a whole one, the sweeper rests as
		 * long as it took, so the checks of a key with many ended
		 * leases get its row at least half the time. */
		db_util_failed_clear();
		{
			static const char *const what[] = {
			    "stops' stretches found to meter", "holds settled at lease end",
			    "settling holds closed", "leases past their end looked at"};
			bool more[4], settled;

			/* The steps wait for a second record of the settings,
			 * 2 s after the first: processes started together (all
			 * of them after an upgrade) see each other's first. */
			sweeper_seen(e, conn, &ss);
			settled = ss.records >= 2;
			more[0] = ing != NULL && settled;
			more[1] = more[2] = more[3] = settled;

			/* Nor past the gate's closing while there is more. */
			for (int step = 0;
			     (more[0] || more[1] || more[2] || more[3]) &&
			     PQstatus(conn) == CONNECTION_OK && schema_gate_open(NULL, 0);
			     step = (step + 1) % 4) {
				int64_t n = 0, now, took, grace;
				enum meter_rc rc;

				if (!more[step])
					continue;
				sweeper_seen(e, conn, &ss);
				grace = atomic_load(&e->grace_in_force);
				took = clock_mono_ms();
				now = checks_now_usec(e);
				rc = step == 0 ? sweep_stop_tails(conn, ing, &tails, now, grace, &n)
				     : step == 1 ? db_checks_expire(conn, now, SWEEP_MAX, &n)
				     : step == 2
					 ? db_checks_settle(conn, now, grace, SWEEP_MAX, &n)
					 : db_checks_outrun(conn, now, grace, SWEEP_MAX, &n);
				took = clock_mono_ms() - took;
				if (rc == METER_OK && n > 0)
					log_debug("checks: %lld %s in %lld ms", (long long)n,
						  what[step], (long long)took);
				more[step] = rc == METER_OK && n >= SWEEP_MAX;
				if (more[step] &&
				    !sweeper_pause(e, took < SWEEP_REST_MAX_MS ? took
									       : SWEEP_REST_MAX_MS))
					break;
			}
		}
		/* A database that takes no writes (a standby, or one whose
		 * default_transaction_read_only is on: /readyz says 503) fails
		 * every step, each logged: not every second, but every
		 * SWEEP_READ_ONLY_MS, and said once. */
		if (db_util_read_only(db_util_failed_state())) {
			if (!read_only)
				log_warn("checks: the database takes no writes (a standby?): the "
					 "sweeper tries again every %d s",
					 SWEEP_READ_ONLY_MS / 1000);
			read_only = true;
			/* Made again for the next try: a session made while the
			 * database's default_transaction_read_only was on keeps
			 * it for life. */
			PQfinish(conn);
			conn = NULL;
			if (!sweeper_pause(e, SWEEP_READ_ONLY_MS))
				break;
			continue;
		}
		if (read_only)
			log_info("checks: the database takes writes again: the sweeper runs");
		read_only = false;
		/* With the retention in force (another process may keep
		 * samples longer), once recorded twice, as the tails. */
		if (ss.retention > 0 && ss.records >= 2 && PQstatus(conn) == CONNECTION_OK &&
		    clock_mono_ms() >= next_retain) {
			int64_t dropped;
			bool more;
			enum meter_rc rc =
			    ingest_drop_old_samples(conn, ss.retention, &dropped, &more);

			/* Again in a minute while old rows are left. */
			next_retain = clock_mono_ms() + (rc == METER_OK && dropped >= 0 && !more
							     ? RETAIN_EVERY_MS
							     : RETAIN_RETRY_MS);
			if (dropped > 0)
				log_info("samples: %lld daily partitions of days more than %lld "
					 "before today dropped (sample_retention_days)",
					 (long long)dropped, (long long)ss.retention);
		}
		/* Today's and tomorrow's samples partitions, once an hour (a
		 * minute after a try that could not have samples' lock), so
		 * that ingestion seldom has to make one itself: a reader such
		 * as pg_dump across midnight holds that lock off for its whole
		 * run (ingest.c's ing_partitions). */
		if (PQstatus(conn) == CONNECTION_OK && clock_mono_ms() >= next_ahead)
			next_ahead =
			    clock_mono_ms() + (ingest_make_partitions_ahead(conn) == METER_OK
						   ? RETAIN_EVERY_MS
						   : RETAIN_RETRY_MS);
		if (PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
		}
	}
	/* Its settings no longer in force: a process that stops cleanly
	 * leaves the others its say at once, not 15 minutes later. */
	if (conn && ss.records > 0 && PQstatus(conn) == CONNECTION_OK &&
	    db_checks_sweeper_gone(conn, e->sweeper_id) != METER_OK)
		log_warn("checks: this process's sweep settings stay in force on the database "
			 "for %d s",
			 SEEN_LAPSE_S);
	if (conn)
		PQfinish(conn);
	sample_batch_release(&tails);
	ingest_free(ing);
	return NULL;
}

/* The engine's locks and conditions, in the order checks_engine_start
 * makes them: engine_release() undoes the first `made` of them. */
enum { ENGINE_SYNC_ALL = 4 };

/* Frees what checks_engine_start made (its threads are joined or were
 * never started). */
static void engine_release(struct checks_engine *e, int made)
{
	if (made > 3)
		pthread_cond_destroy(&e->sweep_cv);
	if (made > 2)
		pthread_cond_destroy(&e->work_cv);
	if (made > 1)
		pthread_mutex_destroy(&e->tz_mu);
	if (made > 0)
		pthread_mutex_destroy(&e->mu);
	check_facts_free(e->facts);
	free(e->batchers);
	free(e->url);
	free(e);
}

enum meter_rc checks_engine_start(const struct checks_options *opt, struct checks_engine **out)
{
	struct checks_engine *e = calloc(1, sizeof(*e));
	int made;

	if (!e)
		return METER_ENOMEM;
	metrics_describe(
	    CHECK_BATCHES, METRICS_COUNTER,
	    "Check batches, by path: fast (decided on what the engine knew, one round"
	    " trip, committed), fast_differed (a ledger row was not as expected: nothing"
	    " written, decided again), classic (read, lock, decide, write; committed).");
	/* Each series from the start, at 0: a rate or an alert on one sees
	 * a value rather than no series. */
	metrics_counter_add(CHECK_BATCHES, "path=\"fast\"", 0);
	metrics_counter_add(CHECK_BATCHES, "path=\"fast_differed\"", 0);
	metrics_counter_add(CHECK_BATCHES, "path=\"classic\"", 0);
	e->opt = *opt;
	if (e->opt.batch_max < 1)
		e->opt.batch_max = CHECKS_BATCH_MAX_DEFAULT;
	e->url = strdup(opt->database_url ? opt->database_url : "");
	if (!e->url) {
		engine_release(e, 0);
		return METER_ENOMEM;
	}
	if (e->opt.batchers < 1)
		e->opt.batchers = CHECKS_BATCHERS_DEFAULT;
	e->batchers = calloc((size_t)e->opt.batchers, sizeof(*e->batchers));
	if (!e->batchers || check_facts_new(&e->facts) != METER_OK) {
		engine_release(e, 0);
		return METER_ENOMEM;
	}
	e->seed = (unsigned)clock_mono_ms();
	{
		uint32_t r = 0;

		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
			r = (uint32_t)clock_mono_ms() ^ (uint32_t)getpid();
		e->engine_id = (int32_t)(r & 0x7fffffff);
	}
	{
		unsigned char r[16];

		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			engine_release(e, 0);
			return METER_EIO;
		}
		keys_hex(r, sizeof(r), e->sweeper_id);
	}
	atomic_init(&e->grace_in_force, e->opt.lease_grace_s);
	/* sweep_cv is sweeper_pause()'s, work_cv the batchers' (timed while
	 * the database is down), both on CLOCK_MONOTONIC. */
	made = pthread_mutex_init(&e->mu, NULL) != 0	  ? 0
	       : pthread_mutex_init(&e->tz_mu, NULL) != 0 ? 1
	       : clock_mono_cond_init(&e->work_cv) != 0	  ? 2
	       : clock_mono_cond_init(&e->sweep_cv) != 0  ? 3
							  : ENGINE_SYNC_ALL;
	if (made < ENGINE_SYNC_ALL) {
		log_error("checks: cannot make the engine's locks and conditions");
		engine_release(e, made);
		return METER_ENOMEM;
	}
	for (int i = 0; i < e->opt.batchers; i++) {
		struct batcher *bt = &e->batchers[i];

		bt->e = e;
		if (pthread_create(&bt->thread, NULL, batcher_main, bt) != 0)
			break;
		bt->started = true;
		e->nbatchers++;
	}
	if (e->nbatchers == 0) {
		engine_release(e, ENGINE_SYNC_ALL);
		return METER_ENOMEM;
	}
	if (e->nbatchers < e->opt.batchers)
		log_error("checks: only %d of %d batchers started", e->nbatchers, e->opt.batchers);
	if (opt->sweeper) {
		if (pthread_create(&e->sweeper, NULL, sweeper_main, e) == 0)
			e->sweeper_started = true;
		else
			log_error("checks: cannot start the lease-end sweeper");
	}
	*out = e;
	return METER_OK;
}

void checks_submit(struct checks_engine *e, const struct checks_request *rq, checks_done_fn done,
		   void *arg)
{
	struct item *it = calloc(1, sizeof(*it));
	const char *why = NULL;

	if (!it) {
		static const char body[] =
		    "{\"error\":{\"code\":\"metering_unavailable\",\"message\":\"out of memory\"}}";
		struct checks_answer a = {.status = 503, .body = body};
		done(arg, &a);
		return;
	}
	it->rq = *rq;
	it->done = done;
	it->arg = arg;
	snprintf(it->idem, sizeof(it->idem), "%s",
		 rq->idempotency_key[0] ? rq->idempotency_key : rq->sandbox_id);
	request_hash(rq, it->sha_hex);
	pthread_mutex_lock(&e->mu);
	if (e->stopping)
		why = "the service is shutting down";
	else if (e->down && clock_mono_ms() < e->next_attempt_ms)
		why = "the metering database is unreachable";
	if (!why) {
		if (e->tail)
			e->tail->next = it;
		else
			e->head = it;
		e->tail = it;
		e->queued++;
		/* One idle batcher takes the queue; a busy one takes it next. */
		if (e->idle > 0)
			pthread_cond_signal(&e->work_cv);
	}
	pthread_mutex_unlock(&e->mu);
	if (why) {
		set_unavailable(it, why);
		finish(it);
	}
}

void checks_engine_stop(struct checks_engine *e)
{
	bool joined;

	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stopping = true;
	joined = e->joined;
	e->joined = true;
	pthread_cond_broadcast(&e->work_cv);
	pthread_cond_broadcast(&e->sweep_cv);
	pthread_mutex_unlock(&e->mu);
	if (joined)
		return;
	for (int i = 0; i < e->opt.batchers; i++)
		if (e->batchers[i].started)
			pthread_join(e->batchers[i].thread, NULL);
	if (e->sweeper_started)
		pthread_join(e->sweeper, NULL);
}

void checks_engine_free(struct checks_engine *e)
{
	if (!e)
		return;
	checks_engine_stop(e);
	engine_release(e, ENGINE_SYNC_ALL);
}
