/* meter: webhook delivery (see webhook.h). */
#include "webhook.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "clock.h"
#include "db.h"
#include "db_util.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "schema_gate.h"

struct xfer;

struct webhook {
	struct webhook_options opt;
	char *db_url, *url, *secret;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	char me[33]; /* the deliverer's random id, for webhook_outbox.failed_by */
	pthread_t thread;
	CURLM *multi;	/* the POSTs' connections, kept from round to round */
	struct xfer *x; /* opt.concurrency of them */
};

/* What is not delivered yet: how many, and the age in µs of the oldest
 * (0 when none). The partial index of due events covers it. */
static const char sql_backlog[] =
    "SELECT count(*), COALESCE((EXTRACT(EPOCH FROM clock_timestamp() - min(created_at))"
    " * 1000000)::bigint, 0) FROM webhook_outbox WHERE delivered_at IS NULL";

#define DELIVERIES	    "meter_webhook_deliveries_total"
#define PENDING_EVENTS	    "meter_webhook_pending_events"
#define OLDEST_PENDING_SECS "meter_webhook_oldest_pending_seconds"

/* Takes the most overdue events, at most $2, for WEBHOOK_CLAIM_MS ($1): one statement,
 * but those this process ($3) failed last until WEBHOOK_YIELD_MS ($4) past due
 * (sql/0062: another process's round takes them first);
 * committed when it returns, so no transaction is open during the POST.
 * SKIP LOCKED and the re-check of a row another process claimed meanwhile
 * (its next_attempt_at moved on) give each event to one process at a time.
 * attempts counts the requests begun (a claim given back unused, see
 * claim_came_late, is taken off again). */
static const char sql_claim[] =
    "WITH due AS (SELECT account_id, event_id FROM webhook_outbox"
    " WHERE delivered_at IS NULL AND next_attempt_at <= now()"
    " AND (failed_by IS DISTINCT FROM $3"
    "  OR next_attempt_at <= now() - $4::integer * interval '1 millisecond')"
    " ORDER BY next_attempt_at LIMIT $2::integer FOR UPDATE SKIP LOCKED)"
    " UPDATE webhook_outbox o SET attempts = o.attempts + 1,"
    " next_attempt_at = clock_timestamp() + $1::integer * interval '1 millisecond'"
    " FROM due WHERE o.account_id = due.account_id AND o.event_id = due.event_id"
    " RETURNING o.account_id, o.event_id::text, o.attempts,"
    " jsonb_build_object('event_id', o.event_id::text, 'type', o.type,"
    "  'account_id', o.account_id, 'key_id', o.key_id, 'created_at',"
    "  to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    "  'data', o.payload)::text";

/* Whoever holds the claim, a 2xx is the truth: recorded even if the claim
 * lapsed meanwhile (the statement commits by itself). */
static const char sql_done[] =
    "UPDATE webhook_outbox SET delivered_at = clock_timestamp(), last_error = NULL"
    " WHERE account_id = $1 AND event_id = $2::uuid AND delivered_at IS NULL";

/* Only under the claim made ($3: attempts as it set them), so a failure
 * whose claim lapsed cannot shorten another process's claim. The delay
 * counts from the failed attempt. */
static const char sql_retry[] =
    "UPDATE webhook_outbox"
    " SET next_attempt_at = clock_timestamp() + $4::integer * interval '1 second',"
    " last_error = $5, failed_by = $6"
    " WHERE account_id = $1 AND event_id = $2::uuid AND attempts = $3::integer"
    " AND delivered_at IS NULL";

/* A claim given back unused (see claim_came_late): due again at once. */
static const char sql_unclaim[] =
    "UPDATE webhook_outbox SET attempts = attempts - 1, next_attempt_at = clock_timestamp()"
    " WHERE account_id = $1 AND event_id = $2::uuid AND attempts = $3::integer"
    " AND delivered_at IS NULL";

static bool is_stopping(struct webhook *w)
{
	bool s;

	pthread_mutex_lock(&w->mu);
	s = w->stopping;
	pthread_mutex_unlock(&w->mu);
	return s;
}

int64_t webhook_retry_delay_s(int64_t attempts)
{
	int64_t d = 1;

	for (int64_t i = 1; i < attempts && d < WEBHOOK_RETRY_MAX_S; i++)
		d *= 2;
	return d > WEBHOOK_RETRY_MAX_S ? WEBHOOK_RETRY_MAX_S : d;
}

enum meter_rc webhook_sign(const char *secret, int64_t t, const char *body, size_t len, char *hex)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char prefix[32];
	int plen = snprintf(prefix, sizeof(prefix), "%lld.", (long long)t);
	char *msg;

	if (plen < 0)
		return METER_EIO;
	msg = malloc((size_t)plen + len + 1);
	if (!msg)
		return METER_ENOMEM;
	memcpy(msg, prefix, (size_t)plen);
	memcpy(msg + plen, body, len);
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg,
		  (size_t)plen + len, md, &mdlen) ||
	    mdlen != 32) {
		free(msg);
		return METER_EIO;
	}
	free(msg);
	keys_hex(md, mdlen, hex);
	return METER_OK;
}

/* One event's POST of a round. */
struct xfer {
	CURL *c; /* kept from round to round (reset before each POST) */
	struct curl_slist *hdrs;
	const char *acc, *id, *body; /* the claim's, borrowed from its result */
	int64_t attempts;
	size_t got;	  /* the answer's body bytes taken */
	int64_t first_ms; /* clock_mono_ms() when its 2xx status was seen; 0 before */
	bool sent;	  /* added to the round's transfers */
	bool done;	  /* ended, with result */
	CURLcode result;
	char why[200]; /* why it failed, when it did before it was sent */
};

/* The answer's body, which nothing reads. A 2xx answer with a short body is
 * taken whole, so that its connection is kept for the next POST; one whose
 * body is long, or not all there WEBHOOK_BODY_MS after its status (slow,
 * or stalled), is cut, and the connection with it: the 2xx status line is
 * the receiver's word that it has the event, and a slow body must not
 * hold the round. Other answers are read to their end (within
 * WEBHOOK_TIMEOUT_MS). True when x's transfer is to be cut now. */
static bool body_cut(struct xfer *x, size_t more)
{
	long code = 0;

	if (curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code < 200 ||
	    code >= 300)
		return false;
	if (x->first_ms == 0)
		x->first_ms = clock_mono_ms();
	return clock_mono_ms() - x->first_ms > WEBHOOK_BODY_MS || x->got + more > WEBHOOK_BODY_MAX;
}

static size_t take_body(char *data, size_t size, size_t n, void *userdata)
{
	struct xfer *x = userdata;

	(void)data;
	if (body_cut(x, size * n))
		return 0;
	x->got += size * n;
	return size * n;
}

/* Called while the transfer runs, each turn of post_round's loop (at least
 * every 100 ms) as well: cuts a 2xx answer's body that has stalled. */
static int watch_body(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		      curl_off_t ulnow)
{
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return body_cut(userdata, 0) ? 1 : 0;
}

/* Sets x's handle up to POST its event, signed now. False (x->why says
 * why) when it cannot be. */
static bool xfer_prepare(struct webhook *w, struct xfer *x)
{
	struct curl_slist *h;
	char line[256], sig[65];
	int64_t t = (int64_t)time(NULL);
	CURL *c = x->c;

	curl_easy_reset(c); /* the options; its connections stay in the multi handle */
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	x->got = 0;
	x->first_ms = 0;
	if (webhook_sign(w->secret, t, x->body, strlen(x->body), sig) != METER_OK) {
		snprintf(x->why, sizeof(x->why), "cannot sign");
		return false;
	}
	h = curl_slist_append(x->hdrs, "Content-Type: application/json");
	x->hdrs = h ? h : x->hdrs;
	snprintf(line, sizeof(line), "Meter-Event-Id: %s", x->id);
	h = curl_slist_append(x->hdrs, line);
	x->hdrs = h ? h : x->hdrs;
	snprintf(line, sizeof(line), "Meter-Signature: t=%lld,v1=%s", (long long)t, sig);
	h = curl_slist_append(x->hdrs, line);
	x->hdrs = h ? h : x->hdrs;
	h = curl_slist_append(x->hdrs, "Expect:");
	x->hdrs = h ? h : x->hdrs;
	if (!h) {
		snprintf(x->why, sizeof(x->why), "out of memory");
		return false;
	}
	if (curl_easy_setopt(c, CURLOPT_URL, w->url) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_POSTFIELDS, x->body) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->body)) !=
		CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->hdrs) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)WEBHOOK_TIMEOUT_MS) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take_body) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_WRITEDATA, x) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, watch_body) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) != CURLE_OK ||
	    curl_easy_setopt(c, CURLOPT_PRIVATE, x) != CURLE_OK) {
		snprintf(x->why, sizeof(x->why), "curl set-up failed");
		return false;
	}
	return true;
}

/* POSTs the round's n events at once, over the multi handle's connections
 * (kept from round to round), until each has its answer or its
 * WEBHOOK_TIMEOUT_MS has run out. */
static void post_round(struct webhook *w, struct xfer *x, int n)
{
	CURLMsg *msg;
	int left, running = 0;

	for (int i = 0; i < n; i++) {
		x[i].sent = x[i].done = false;
		x[i].why[0] = '\0';
		if (!xfer_prepare(w, &x[i]))
			continue;
		if (curl_multi_add_handle(w->multi, x[i].c) != CURLM_OK) {
			snprintf(x[i].why, sizeof(x[i].why), "curl set-up failed");
			continue;
		}
		x[i].sent = true;
	}
	/* Each transfer ends within its timeout, so the loop does too. */
	while (curl_multi_perform(w->multi, &running) == CURLM_OK && running > 0)
		if (curl_multi_poll(w->multi, NULL, 0, 100, NULL) != CURLM_OK)
			break;
	while ((msg = curl_multi_info_read(w->multi, &left)) != NULL) {
		char *priv = NULL;

		if (msg->msg == CURLMSG_DONE &&
		    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv) == CURLE_OK &&
		    priv) {
			struct xfer *d = (struct xfer *)(void *)priv;

			d->done = true;
			d->result = msg->data.result;
		}
	}
	for (int i = 0; i < n; i++)
		if (x[i].sent)
			(void)curl_multi_remove_handle(w->multi, x[i].c);
}

/* True when a claim asked for at sent_ms (clock_mono_ms()) came back too late for
 * a POST started now to end within it. The claim runs until at least
 * sent_ms + WEBHOOK_CLAIM_MS (the database set it after we asked), and the
 * POST takes at most WEBHOOK_TIMEOUT_MS; a second to spare for signing and
 * the like. Then no other process can send the event while this one does. */
static bool claim_came_late(int64_t sent_ms)
{
	return clock_mono_ms() - sent_ms > WEBHOOK_CLAIM_MS - WEBHOOK_TIMEOUT_MS - 1000;
}

/* x's HTTP status (0 when it has none). A 2xx status line is the
 * receiver's word that it has the event, whatever becomes of the body
 * after it (cut by take_body, slow, or the connection lost). */
static long answer_code(const struct xfer *x)
{
	long code = 0;

	if (x->sent && x->done &&
	    curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK)
		code = 0;
	return code;
}

static bool answer_ok(const struct xfer *x)
{
	long code = answer_code(x);

	return x->sent && x->done && code >= 200 && code < 300;
}

/* Records x's answer: delivered after a 2xx, else its next attempt's time
 * and me, the deliverer that failed it. False when the database failed.
 * Each statement may be run again (a record whose connection was lost
 * may have committed): it sets what it sets, not more of it. */
static bool record(PGconn *conn, const struct xfer *x, const char *me)
{
	char attempts_s[24], delay_s[24];
	long code = answer_code(x);

	if (answer_ok(x)) {
		const char *p[2] = {x->acc, x->id};

		if (db_util_exec(conn, "webhook delivered", sql_done, 2, p, NULL, NULL) != METER_OK)
			return false;
		log_info("webhook: event %s delivered", x->id);
		return true;
	}
	{
		char reason[200];
		const char *p[6] = {x->acc, x->id, attempts_s, delay_s, reason, me};
		PGresult *rr = NULL;

		if (!x->sent)
			snprintf(reason, sizeof(reason), "%s", x->why);
		else if (!x->done)
			snprintf(reason, sizeof(reason), "no answer");
		else if (x->result != CURLE_OK)
			snprintf(reason, sizeof(reason), "%s", curl_easy_strerror(x->result));
		else
			snprintf(reason, sizeof(reason), "HTTP status %ld", code);
		db_util_i64_param(x->attempts, attempts_s, sizeof(attempts_s));
		db_util_i64_param(webhook_retry_delay_s(x->attempts), delay_s, sizeof(delay_s));
		if (db_util_exec(conn, "webhook retry", sql_retry, 6, p, &rr, NULL) != METER_OK)
			return false;
		if (strcmp(PQcmdTuples(rr), "0") != 0)
			log_warn("webhook: event %s not delivered (%s); retry in %s s", x->id,
				 reason, delay_s);
		else
			/* This process was stopped past its claim: another
			 * has the event now (or has delivered it). */
			log_warn("webhook: event %s not delivered (%s), and its claim had lapsed;"
				 " left to the process that holds it now",
				 x->id, reason);
		PQclear(rr);
	}
	return true;
}

/* Sleeps ms unless stopped; true when stopping. */
static bool nap(struct webhook *w, int64_t ms)
{
	struct timespec until = clock_mono_after_ms(ms);
	bool stop;

	pthread_mutex_lock(&w->mu);
	while (!w->stopping)
		if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT)
			break;
	stop = w->stopping;
	pthread_mutex_unlock(&w->mu);
	return stop;
}

/* Connects *conn (NULL) and sets its timeouts: false when either failed. */
static bool session_open(struct webhook *w, PGconn **conn)
{
	char err[256];

	if (db_connect(w->db_url, conn, err, sizeof(err)) != METER_OK)
		return false;
	if (db_util_session_timeouts(*conn, "webhook session", w->opt.statement_timeout_ms,
				     db_util_idle_tx_ms(w->opt.statement_timeout_ms)) != METER_OK) {
		PQfinish(*conn);
		*conn = NULL;
		return false;
	}
	return true;
}

/* Replaces the lost *conn with a new session, trying every
 * WEBHOOK_AGAIN_MS until deadline_ms (clock_mono_ms()) or a stop: false
 * then, with *conn NULL. */
static bool session_again(struct webhook *w, PGconn **conn, int64_t deadline_ms)
{
	PQfinish(*conn);
	*conn = NULL;
	for (;;) {
		if (is_stopping(w) || clock_mono_ms() >= deadline_ms)
			return false;
		if (session_open(w, conn)) {
			log_info("webhook: connected again to record the answers of a round");
			return true;
		}
		if (nap(w, WEBHOOK_AGAIN_MS))
			return false;
	}
}

/* Claims the most overdue events, up to opt.concurrency, POSTs them at
 * once and records each answer: each step its own committed statement,
 * none open during the POSTs, so a crash or a failed statement loses at
 * most the records of the events in flight (each sent again once its
 * claim lapses: at least once). A connection lost during the POSTs (the
 * server restarted) is made again to record their answers, for as long
 * as their claims last: the receiver has them, and a record lost would
 * have each sent again. Returns the number claimed and recorded (0 when
 * none is due), -1 when the database failed (the caller backs off, and
 * reconnects if it must; *conn may be NULL then). */
static int deliver_round(struct webhook *w, PGconn **connp)
{
	PGconn *conn = *connp;
	PGresult *res = NULL;
	char claim_ms[24], limit[24], yield_ms[24];
	int64_t sent_ms = clock_mono_ms();
	int n, ret = -1;

	db_util_i64_param(WEBHOOK_CLAIM_MS, claim_ms, sizeof(claim_ms));
	db_util_i64_param(w->opt.concurrency, limit, sizeof(limit));
	db_util_i64_param(WEBHOOK_YIELD_MS, yield_ms, sizeof(yield_ms));
	{
		const char *p[4] = {claim_ms, limit, w->me, yield_ms};
		if (db_util_exec(conn, "claim webhook events", sql_claim, 4, p, &res, NULL) !=
		    METER_OK)
			goto out;
	}
	n = PQntuples(res);
	if (n > w->opt.concurrency)
		n = (int)w->opt.concurrency;
	for (int i = 0; i < n; i++) {
		w->x[i].acc = PQgetvalue(res, i, 0);
		w->x[i].id = PQgetvalue(res, i, 1);
		w->x[i].body = PQgetvalue(res, i, 3);
		if (db_util_i64(res, i, 2, &w->x[i].attempts, NULL) != METER_OK)
			goto out;
	}
	if (n > 0 && claim_came_late(sent_ms)) {
		for (int i = 0; i < n; i++) {
			char attempts_s[24];
			const char *p[3] = {w->x[i].acc, w->x[i].id, attempts_s};

			db_util_i64_param(w->x[i].attempts, attempts_s, sizeof(attempts_s));
			if (db_util_exec(conn, "webhook unclaim", sql_unclaim, 3, p, NULL, NULL) !=
			    METER_OK)
				break;
			log_warn("webhook: claim of event %s came back too late; not sent",
				 w->x[i].id);
		}
		goto out; /* the database is slow: back off */
	}
	post_round(w, w->x, n);
	ret = n;
	/* Counted as the receiver answered, whether or not the database then
	 * records it (if not, the event is sent again once its claim lapses,
	 * and counted again). */
	for (int i = 0; i < n; i++)
		metrics_counter_add(
		    DELIVERIES,
		    answer_ok(&w->x[i]) ? "outcome=\"delivered\"" : "outcome=\"failed\"", 1);
	/* Each answer recorded by itself: a statement that fails (a lock
	 * timeout, say) leaves only its own event to be sent again. One whose
	 * connection was lost is recorded again on a new one. */
	for (int i = 0; i < n; i++) {
		if (PQstatus(conn) != CONNECTION_OK) {
			if (!session_again(w, connp, sent_ms + WEBHOOK_CLAIM_MS)) {
				ret = -1;
				break;
			}
			conn = *connp;
		}
		if (!record(conn, &w->x[i], w->me)) {
			if (PQstatus(conn) != CONNECTION_OK)
				i--; /* on the new connection */
			else
				ret = -1;
		}
	}
out:
	PQclear(res);
	return ret;
}

/* Counts what is not delivered yet into the gauges, at most every
 * WEBHOOK_BACKLOG_MS (*last_ms: clock_mono_ms() of the last count, 0 before the
 * first). A failure leaves the gauges as they were; a lost connection is
 * left to the caller to make again (in a process with no URL, this count
 * is the only statement that finds it lost). */
static void count_backlog(PGconn *conn, int64_t *last_ms)
{
	PGresult *res = NULL;
	int64_t pending, oldest_us;

	if (*last_ms != 0 && clock_mono_ms() - *last_ms < WEBHOOK_BACKLOG_MS)
		return;
	*last_ms = clock_mono_ms();
	if (db_util_exec(conn, "count webhook backlog", sql_backlog, 0, NULL, &res, NULL) ==
		METER_OK &&
	    PQntuples(res) == 1 && db_util_i64(res, 0, 0, &pending, NULL) == METER_OK &&
	    db_util_i64(res, 0, 1, &oldest_us, NULL) == METER_OK) {
		metrics_gauge_set(PENDING_EVENTS, NULL, pending);
		metrics_gauge_set_fixed(OLDEST_PENDING_SECS, NULL, oldest_us, 6);
	}
	PQclear(res);
}

static void *deliver_main(void *arg)
{
	struct webhook *w = arg;
	PGconn *conn = NULL;
	int64_t backoff = 0, counted_ms = 0;
	int failures = 0;
	bool read_only = false; /* said so in the log */

	while (!nap(w, backoff > 0 ? backoff : w->opt.poll_ms)) {
		bool refused;
		int n;

		if (!conn && !session_open(w, &conn)) {
			backoff = backoff ? (backoff * 2 > 5000 ? 5000 : backoff * 2) : 200;
			continue;
		}
		backoff = 0;
		if (!schema_gate_open(NULL, 0))
			continue;	/* on a schema not this binary's (schema_gate.h) */
		db_util_failed_clear(); /* what this turn's statements meet */
		do {
			count_backlog(conn, &counted_ms);
			/* Without a URL this process only counts (its events
			 * wait for a process that has one). */
			n = w->url[0] ? deliver_round(w, &conn) : 0;
		} while (n > 0 && !is_stopping(w) &&
			 schema_gate_open(NULL, 0)); /* nor past the gate's closing */
		/* A database that takes no writes (a standby, or
		 * default_transaction_read_only on) refuses every claim; a
		 * session made while it did keeps that for life, so it is made
		 * again for the next try, as the request pool's and the
		 * check engine's are: once it takes writes, delivery goes on. */
		refused = db_util_read_only(db_util_failed_state());
		if (refused && !read_only)
			log_warn("webhook: the database takes no writes (a standby?): events wait"
				 " until it does");
		else if (!refused && read_only && n >= 0)
			log_info("webhook: the database takes writes again: delivery goes on");
		if (refused || n >= 0)
			read_only = refused;
		if (n >= 0 && conn && PQstatus(conn) == CONNECTION_OK && !refused) {
			failures = 0;
			continue;
		}
		/* A statement failed (an event claimed and not recorded is
		 * sent again once its claim lapses: at least once), or the
		 * connection was lost (a restart: with no URL, only the count
		 * sees it, and the gauges would stay as they were for good):
		 * wait longer each time, never spin, and connect again. */
		backoff = failures < 5 ? (int64_t)200 << failures : 5000;
		failures++;
		if (!conn || PQstatus(conn) != CONNECTION_OK || refused) {
			PQfinish(conn);
			conn = NULL;
			counted_ms = 0; /* counted again once connected */
		}
	}
	if (conn)
		PQfinish(conn);
	return NULL;
}

static void free_transfers(struct webhook *w)
{
	for (int64_t i = 0; w->x && i < w->opt.concurrency; i++) {
		curl_easy_cleanup(w->x[i].c);
		curl_slist_free_all(w->x[i].hdrs);
	}
	free(w->x);
	if (w->multi)
		curl_multi_cleanup(w->multi);
}

enum meter_rc webhook_start(const struct webhook_options *opt, struct webhook **out)
{
	struct webhook *w = calloc(1, sizeof(*w));

	if (!w)
		return METER_ENOMEM;
	w->opt = *opt;
	if (w->opt.poll_ms <= 0)
		w->opt.poll_ms = 500;
	{
		unsigned char r[16];

		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			free(w);
			return METER_EIO;
		}
		keys_hex(r, sizeof(r), w->me);
	}
	metrics_describe(DELIVERIES, METRICS_COUNTER,
			 "Webhook delivery attempts by this process, by outcome: delivered (a 2xx "
			 "answer) or failed (any other answer or none; retried). An attempt "
			 "libcurl sends again on a new connection, after a kept one closed "
			 "unanswered, counts once.");
	/* Both series from the start, at 0, with a URL or without. */
	metrics_counter_add(DELIVERIES, "outcome=\"delivered\"", 0);
	metrics_counter_add(DELIVERIES, "outcome=\"failed\"", 0);
	metrics_describe(PENDING_EVENTS, METRICS_GAUGE,
			 "Webhook events not delivered yet, of every process (counted every 5 s).");
	metrics_describe(OLDEST_PENDING_SECS, METRICS_GAUGE,
			 "Age of the oldest webhook event not delivered yet, 0 when none (counted "
			 "every 5 s).");
	w->db_url = strdup(opt->database_url);
	w->url = strdup(opt->url);
	w->secret = strdup(opt->secret ? opt->secret : "");
	if (!w->db_url || !w->url || !w->secret)
		goto fail;
	if (w->opt.concurrency <= 0)
		w->opt.concurrency = 1;
	if (w->url[0]) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			goto fail;
		w->multi = curl_multi_init();
		w->x = calloc((size_t)w->opt.concurrency, sizeof(*w->x));
		if (!w->multi || !w->x)
			goto fail;
		for (int64_t i = 0; i < w->opt.concurrency; i++)
			if (!(w->x[i].c = curl_easy_init()))
				goto fail;
	}
	if (clock_mono_cond_init(&w->cv) != 0)
		goto fail;
	pthread_mutex_init(&w->mu, NULL);
	if (pthread_create(&w->thread, NULL, deliver_main, w) != 0) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		goto fail;
	}
	*out = w;
	return METER_OK;
fail:
	free_transfers(w);
	free(w->db_url);
	free(w->url);
	free(w->secret);
	free(w);
	return METER_ENOMEM;
}

void webhook_stop(struct webhook *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stopping = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free_transfers(w);
	free(w->db_url);
	free(w->url);
	free(w->secret);
	free(w);
}
