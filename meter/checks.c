/* meter: the check engine (see checks.h). */
#include "checks.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "clock.h"
#include "db.h"
#include "db_checks.h"
#include "ledger.h"
#include "log.h"

#define BACKOFF_MIN_MS	  100
#define BACKOFF_MAX_MS	  5000
#define BATCH_ATTEMPTS	  8    /* redo of a batch that met a concurrent writer */
#define DEADLINE_SLACK_MS 2000 /* beyond the statement timeout */
#define TZ_CACHE	  64
#define SWEEP_INTERVAL_MS 1000
#define SWEEP_MAX	  1000

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
	bool pending; /* read, needs the ledger */
	int64_t vcpus, memory_mib;
	int64_t lease_max_micros;
	int64_t lease_end_usec;
	int nparts;
	struct ledger_part parts[LEDGER_PARTS_MAX];
	int row[LEDGER_PARTS_MAX]; /* index of each part's key-day in the batch */
	char days[LEDGER_PARTS_MAX][11];
};

/* Day starts of one time zone around "now", from PostgreSQL. */
struct tz_entry {
	char tz[PARSE_ID_MAX + 1];
	char days[LEDGER_BOUNDS][11];
	int64_t bounds[LEDGER_BOUNDS];
};

struct checks_engine {
	struct checks_options opt;
	char *url;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct item *head, *tail;
	size_t queued;
	bool stopping;
	bool joined;
	/* Backoff while the database is unreachable (under mu). */
	bool down;
	int64_t next_attempt_ms;
	int failures;
	unsigned seed;
	pthread_t batcher;
	pthread_t sweeper;
	bool sweeper_started;
	/* Batcher-only state. */
	PGconn *conn;
	struct tz_entry tzc[TZ_CACHE];
	int tzc_n, tzc_next;
};

int64_t checks_clock_usec(int64_t clock_offset_s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + clock_offset_s * INT64_C(1000000);
}

int64_t checks_now_usec(const struct checks_engine *e)
{
	return checks_clock_usec(e->opt.clock_offset_s);
}

/* Answers ------------------------------------------------------------------ */

/* Sets it's answer to status with body (stolen, serialised compactly). */
static void set_answer(struct item *it, unsigned status, json_t *body)
{
	free(it->body);
	it->body = body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(body);
	it->status = it->body ? status : 500;
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

static json_t *limit_json(const struct ledger_day *d)
{
	return d->has_limit ? json_integer(d->limit_micros) : json_null();
}

static void set_unavailable(struct item *it, const char *why)
{
	set_error(it, 503, "metering_unavailable", why, NULL);
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
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
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
	if (n < 0 || !EVP_Digest(canon, (size_t)n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) {
		/* Cannot happen with OpenSSL working; an empty hash never matches. */
		hex[0] = '\0';
		return;
	}
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Time zones ------------------------------------------------------------------ */

/* The cached day starts of tz around now, or fetched (inside the batch's
 * transaction) and cached. NULL with *rc set on failure. */
static const struct tz_entry *tz_days(struct checks_engine *e, const char *tz, int64_t now,
				      int64_t deadline, char *sqlstate, enum meter_rc *rc)
{
	struct tz_entry *t;

	for (int i = 0; i < e->tzc_n; i++) {
		t = &e->tzc[i];
		if (strcmp(t->tz, tz) == 0 && t->bounds[0] <= now && now < t->bounds[1])
			return t;
	}
	t = &e->tzc[e->tzc_next];
	e->tzc_next = (e->tzc_next + 1) % TZ_CACHE;
	if (e->tzc_n < TZ_CACHE)
		e->tzc_n++;
	t->tz[0] = '\0';
	*rc = db_checks_days(e->conn, tz, now, t->days, t->bounds, deadline, sqlstate);
	if (*rc != METER_OK)
		return NULL;
	if (!(t->bounds[0] <= now && now < t->bounds[1])) {
		*rc = METER_EDB;
		return NULL;
	}
	snprintf(t->tz, sizeof(t->tz), "%s", tz);
	return t;
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
		it->nparts = 0;
	}
	db_check_read_release(b->rd, b->n);
	for (int i = 0; i < DB_BATCH_NARR; i++) {
		db_arr_release(&b->arrs[i]);
		db_arr_init(&b->arrs[i]);
	}
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
	};
	return (int)b->nrows++;
}

/* Decides what can be decided from the reads alone (unknown key or
 * sandbox, stored answers, max cost) and prepares the ledger parts of the
 * rest. METER_OK, or the database's error. */
static enum meter_rc batch_prepare(struct checks_engine *e, struct batch *b, int64_t deadline,
				   char *sqlstate)
{
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		const struct checks_request *rq = &it->rq;
		struct db_check_read *r = &b->rd[i];
		const struct tz_entry *tz;
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
				set_error(it, 409, "idempotency_conflict",
					  "idempotency key already used with other parameters",
					  json_pack("{s:s}", "idempotency_key", it->idem));
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
			continue;
		}
		tz = tz_days(e, r->time_zone, b->now, deadline, sqlstate, &rc);
		if (!tz)
			return rc;
		if (ledger_split(&rates, it->vcpus, it->memory_mib, b->now, it->lease_end_usec,
				 tz->bounds, LEDGER_BOUNDS, it->parts, &it->nparts) != METER_OK) {
			set_error(it, 400, "invalid_request", "lease cannot be split into days",
				  NULL);
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

/* An earlier allowed check of this batch under the same idempotency key, or
 * NULL. */
static const struct item *batch_same_key(const struct batch *b, size_t upto,
					 const struct db_check_read *r, const struct item *it)
{
	for (size_t j = 0; j < upto; j++) {
		const struct item *o = b->items[j];
		if (o->allowed && o->rq.op == it->rq.op && strcmp(o->idem, it->idem) == 0 &&
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

/* The allowed answer of it (ledger figures after its holds). */
static json_t *allowed_body(const struct batch *b, const struct item *it,
			    const struct db_check_read *r)
{
	const struct ledger_day *d0 = &b->rows[it->row[0]].state;
	json_t *parts = json_array();
	char start[40], end[40];
	int64_t hold = 0;

	agent_doc_format_time(b->now, start, sizeof(start));
	agent_doc_format_time(it->lease_end_usec, end, sizeof(end));
	for (int p = 0; p < it->nparts; p++) {
		const struct ledger_day *d = &b->rows[it->row[p]].state;
		hold += it->parts[p].micros;
		json_array_append_new(parts,
				      json_pack("{s:s,s:I,s:I,s:I,s:o}", "day", it->days[p],
						"hold_micros", (json_int_t)it->parts[p].micros,
						"day_spent_micros", (json_int_t)d->spent_micros,
						"day_held_micros", (json_int_t)d->held_micros,
						"daily_limit_micros", limit_json(d)));
	}
	return json_pack("{s:b,s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:o,s:s,s:s,s:o}", "allowed", 1,
			 "sandbox_id", it->rq.sandbox_id, "key_id", r->key_id, "hold_micros",
			 (json_int_t)hold, "lease_max_cost_micros",
			 (json_int_t)it->lease_max_micros, "day", it->days[0], "day_spent_micros",
			 (json_int_t)d0->spent_micros, "day_held_micros",
			 (json_int_t)d0->held_micros, "daily_limit_micros", limit_json(d0),
			 "lease_starts_at", start, "lease_ends_at", end, "parts", parts);
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
	db_arr_str(&a[DB_I_ACCOUNT], r->account_id);
	db_arr_str(&a[DB_I_OP], op);
	db_arr_str(&a[DB_I_KEY], it->idem);
	db_arr_str(&a[DB_I_SHA], it->sha_hex);
	db_arr_i64(&a[DB_I_STATUS], it->status);
	db_arr_str(&a[DB_I_RESPONSE], it->body);
	if (it->rq.op == CHECKS_CREATE) {
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

/* Decides the pending checks in arrival order against the locked ledger. */
static void batch_decide(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct item *it = b->items[i];
		const struct db_check_read *r = &b->rd[i];
		struct ledger_day *days[LEDGER_PARTS_MAX];
		int64_t amounts[LEDGER_PARTS_MAX];
		const struct item *same;
		int failed = 0;

		if (!it->pending)
			continue;
		it->pending = false;
		same = batch_same_key(b, i, r, it);
		if (same) {
			if (strcmp(same->sha_hex, it->sha_hex) != 0) {
				set_error(it, 409, "idempotency_conflict",
					  "idempotency key already used with other parameters",
					  json_pack("{s:s}", "idempotency_key", it->idem));
			} else {
				it->status = same->status;
				/* An allowed item has its answer: one that could
				 * not be built was undone (allowed = false) below. */
				assert(same->body);
				it->body = strdup(same->body);
				it->replayed = true;
				if (!it->body)
					it->status = 0;
			}
			continue;
		}
		if (it->rq.op == CHECKS_CREATE && batch_created(b, i, it->rq.sandbox_id)) {
			set_error(it, 409, "sandbox_exists", "a sandbox with this id exists",
				  json_pack("{s:s}", "sandbox_id", it->rq.sandbox_id));
			continue;
		}
		for (int p = 0; p < it->nparts; p++) {
			days[p] = &b->rows[it->row[p]].state;
			amounts[p] = it->parts[p].micros;
		}
		if (!ledger_place(days, amounts, it->nparts, &failed)) {
			const struct ledger_day *d = days[failed];
			set_error(it, 402, "spending_limit_reached",
				  "the key's daily spending limit would be exceeded",
				  json_pack("{s:s,s:I,s:I,s:o,s:I,s:I}", "day", it->days[failed],
					    "day_spent_micros", (json_int_t)d->spent_micros,
					    "day_held_micros", (json_int_t)d->held_micros,
					    "daily_limit_micros", limit_json(d),
					    "lease_max_cost_micros",
					    (json_int_t)it->lease_max_micros, "hold_micros",
					    (json_int_t)amounts[failed]));
			/* Unless its first attempt answered meanwhile (see
			 * db_checks_apply). */
			db_arr_str(&b->arrs[DB_R_ACCOUNT], r->account_id);
			db_arr_str(&b->arrs[DB_R_OP],
				   it->rq.op == CHECKS_CREATE ? "create" : "wake");
			db_arr_str(&b->arrs[DB_R_KEY], it->idem);
			db_arr_str(&b->arrs[DB_R_XMIN], r->idem_exists ? r->idem_xmin : NULL);
			continue;
		}
		it->allowed = true;
		set_answer(it, 200, allowed_body(b, it, r));
		if (it->status != 200) {
			/* Could not build the answer: undo, answer 503. */
			for (int p = 0; p < it->nparts; p++)
				days[p]->held_micros -= amounts[p];
			it->allowed = false;
			set_unavailable(it, "out of memory");
		}
	}
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i]->allowed)
			batch_write(b, i);
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

static void conn_drop(struct checks_engine *e)
{
	if (e->conn)
		PQfinish(e->conn);
	e->conn = NULL;
	pthread_mutex_lock(&e->mu);
	if (!e->down)
		log_warn("checks: database connection lost; checks fail closed until it is back");
	e->down = true;
	{
		int64_t delay = BACKOFF_MIN_MS;
		for (int i = 0; i < e->failures && delay < BACKOFF_MAX_MS; i++)
			delay *= 2;
		if (delay > BACKOFF_MAX_MS)
			delay = BACKOFF_MAX_MS;
		delay = delay * 3 / 4 + rand_r(&e->seed) % (delay / 4 + 1);
		e->next_attempt_ms = clock_mono_ms() + delay;
	}
	e->failures++;
	pthread_mutex_unlock(&e->mu);
}

/* Makes sure the batcher has a connection; false (after backoff
 * bookkeeping) when the database cannot be reached now. */
static bool conn_ensure(struct checks_engine *e)
{
	char err[256];
	PGconn *conn = NULL;

	if (e->conn && PQstatus(e->conn) == CONNECTION_OK)
		return true;
	if (e->conn)
		conn_drop(e);
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
		conn_drop(e);
		return false;
	}
	e->conn = conn;
	pthread_mutex_lock(&e->mu);
	if (e->down)
		log_info("checks: database connected");
	e->down = false;
	e->failures = 0;
	pthread_mutex_unlock(&e->mu);
	return true;
}

/* Runs one batch of n >= 1 items to its answers (every item gets a status).
 * A poisoned batch reruns each item as a batch of one, which is never
 * poisoned: the recursion is one level deep. */
/* NOLINTNEXTLINE(misc-no-recursion) */
static void batch_run(struct checks_engine *e, struct item **items, size_t n)
{
	struct batch b = {.items = items, .n = n};
	char sqlstate[6] = "";
	enum meter_rc rc = METER_EDB;
	int64_t max_lease = 0;
	bool poison = false;

	assert(n > 0);
	b.in = calloc(n, sizeof(*b.in));
	b.rd = calloc(n, sizeof(*b.rd));
	b.rows = calloc(n * LEDGER_PARTS_MAX, sizeof(*b.rows));
	for (int i = 0; i < DB_BATCH_NARR; i++)
		db_arr_init(&b.arrs[i]);
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
		if (it->rq.lease_seconds > max_lease)
			max_lease = it->rq.lease_seconds;
	}
	for (int attempt = 0; attempt < BATCH_ATTEMPTS; attempt++) {
		int64_t deadline;

		batch_reset(&b);
		if (!conn_ensure(e)) {
			rc = METER_EDB;
			break;
		}
		deadline = clock_mono_ms() + e->opt.statement_timeout_ms + DEADLINE_SLACK_MS;
		b.now = checks_now_usec(e);
		rc = db_checks_read(e->conn, b.in, n, b.now, b.now + max_lease * INT64_C(1000000),
				    b.rd, b.prices, &b.nprices, deadline, sqlstate);
		if (rc == METER_OK)
			rc = batch_prepare(e, &b, deadline, sqlstate);
		if (rc == METER_OK && b.nrows > 0)
			rc = db_checks_lock(e->conn, b.rows, b.nrows, deadline, sqlstate);
		if (rc == METER_OK) {
			batch_decide(&b);
			rc = db_checks_apply(e->conn, b.now, b.arrs, deadline, sqlstate);
		}
		if (rc == METER_OK)
			break;
		if (rc == METER_EIO || !e->conn || PQstatus(e->conn) != CONNECTION_OK) {
			/* The server stopped answering: whether a COMMIT in flight
			 * landed is unknown; a retry with the same idempotency key
			 * gets the stored answer if it did. */
			conn_drop(e);
			rc = METER_EDB;
			break;
		}
		db_checks_rollback(e->conn);
		if (!db_checks_retryable(sqlstate)) {
			log_error("checks: batch of %zu failed (SQLSTATE %s)", n,
				  sqlstate[0] ? sqlstate : "none");
			/* A statement timeout (a ledger row held by a slow
			 * writer) is the database's, not one check's: rerun
			 * one by one, each would wait as long again while
			 * every other key's checks queue behind them. */
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
				batch_run(e, &items[i], 1);
		} else {
			for (size_t i = 0; i < n; i++)
				set_unavailable(items[i], "the metering database is unreachable");
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

static void *batcher_main(void *arg)
{
	struct checks_engine *e = arg;
	struct item **items = calloc((size_t)e->opt.batch_max, sizeof(struct item *));

	for (;;) {
		size_t n = 0;
		bool stop;

		pthread_mutex_lock(&e->mu);
		while (!e->head && !e->stopping)
			pthread_cond_wait(&e->cv, &e->mu);
		stop = e->stopping;
		while (e->head && n < (size_t)e->opt.batch_max && items) {
			items[n++] = e->head;
			e->head = e->head->next;
			e->queued--;
		}
		if (!e->head)
			e->tail = NULL;
		pthread_mutex_unlock(&e->mu);
		if (!items) {
			log_error("checks: out of memory; the engine stops");
			pthread_mutex_lock(&e->mu);
			e->stopping = true;
			pthread_mutex_unlock(&e->mu);
			stop = true;
		}
		if (stop) {
			/* Shutting down: answer what is queued, decide nothing new. */
			for (size_t i = 0; i < n; i++) {
				set_unavailable(items[i], "the service is shutting down");
				finish(items[i]);
			}
			pthread_mutex_lock(&e->mu);
			if (!e->head) {
				pthread_mutex_unlock(&e->mu);
				break;
			}
			pthread_mutex_unlock(&e->mu);
			continue;
		}
		{
			int64_t t0 = clock_mono_ms();
			batch_run(e, items, n);
			log_debug("checks: batch of %zu decided in %lld ms", n,
				  (long long)(clock_mono_ms() - t0));
		}
		for (size_t i = 0; i < n; i++)
			finish(items[i]);
	}
	free(items);
	if (e->conn)
		PQfinish(e->conn);
	e->conn = NULL;
	return NULL;
}

/* Every SWEEP_INTERVAL_MS: settles the holds of leases that ended without
 * an event as an event at the lease end would (sql/0015); closes the holds
 * kept for an unmetered tail, once metered (or lease_grace_s after the
 * event or lease end when no sample will come: sql/0014's
 * meter_tail_done); then sends hold_outrun for the ended leases whose
 * sandbox is still running on them lease_grace_s after their end. */
static void *sweeper_main(void *arg)
{
	struct checks_engine *e = arg;
	PGconn *conn = NULL;
	int64_t next_connect = 0;
	int failures = 0;

	for (;;) {
		struct timespec until;
		char err[256];

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)SWEEP_INTERVAL_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&e->mu);
		while (!e->stopping) {
			if (pthread_cond_timedwait(&e->cv, &e->mu, &until) == ETIMEDOUT)
				break;
		}
		if (e->stopping) {
			pthread_mutex_unlock(&e->mu);
			break;
		}
		pthread_mutex_unlock(&e->mu);
		if (!conn && clock_mono_ms() >= next_connect) {
			if (db_connect(e->url, &conn, err, sizeof(err)) != METER_OK) {
				int64_t delay = BACKOFF_MIN_MS << (failures < 6 ? failures : 6);
				next_connect = clock_mono_ms() +
					       (delay > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay);
				failures++;
				conn = NULL;
			} else {
				failures = 0;
			}
		}
		if (!conn)
			continue;
		/* Each step again while it took a whole SWEEP_MAX. */
		for (int step = 0; step < 3 && PQstatus(conn) == CONNECTION_OK; step++) {
			static const char *const what[] = {"holds settled at lease end",
							   "settling holds closed",
							   "leases past their end looked at"};
			int64_t n = 0, now, grace = e->opt.lease_grace_s;
			enum meter_rc rc;

			do {
				now = checks_now_usec(e);
				rc = step == 0 ? db_checks_expire(conn, now, SWEEP_MAX, &n)
				     : step == 1
					 ? db_checks_settle(conn, now, grace, SWEEP_MAX, &n)
					 : db_checks_outrun(conn, now, grace, SWEEP_MAX, &n);
				if (rc == METER_OK && n > 0)
					log_debug("checks: %lld %s", (long long)n, what[step]);
			} while (rc == METER_OK && n >= SWEEP_MAX);
		}
		if (PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
		}
	}
	if (conn)
		PQfinish(conn);
	return NULL;
}

enum meter_rc checks_engine_start(const struct checks_options *opt, struct checks_engine **out)
{
	struct checks_engine *e = calloc(1, sizeof(*e));

	if (!e)
		return METER_ENOMEM;
	e->opt = *opt;
	if (e->opt.batch_max < 1)
		e->opt.batch_max = CHECKS_BATCH_MAX_DEFAULT;
	e->url = strdup(opt->database_url ? opt->database_url : "");
	if (!e->url) {
		free(e);
		return METER_ENOMEM;
	}
	e->seed = (unsigned)clock_mono_ms();
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	if (pthread_create(&e->batcher, NULL, batcher_main, e) != 0) {
		pthread_mutex_destroy(&e->mu);
		pthread_cond_destroy(&e->cv);
		free(e->url);
		free(e);
		return METER_ENOMEM;
	}
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
		pthread_cond_broadcast(&e->cv);
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
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	if (joined)
		return;
	pthread_join(e->batcher, NULL);
	if (e->sweeper_started)
		pthread_join(e->sweeper, NULL);
}

void checks_engine_free(struct checks_engine *e)
{
	if (!e)
		return;
	checks_engine_stop(e);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e->url);
	free(e);
}
