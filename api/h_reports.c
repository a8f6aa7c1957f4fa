/* meter API: GET /v1/reports/usage.{csv,ndjson} and
 * GET /v1/reports/statement.{csv,html} (DESIGN.md §7).
 *
 * Exports stream from the database through a connection of their own (so a
 * long export never holds a request connection of the pool) with constant
 * memory; at most REPORTS_CONCURRENT run at once per process (429 beyond).
 * A key sees its own account; the operator names one with account_id.
 *
 * An export's waiting is never done on a libmicrohttpd thread (those serve
 * every other connection): its handler runs on a read lane's worker (the
 * operator's account look-up, a HEAD's filters), then a producer thread of
 * its own connects, runs the query and formats rows into a bounded buffer,
 * while the request's connection stays parked. The content reader only
 * copies what is ready; when nothing is, it parks the connection
 * (libmicrohttpd's documented pattern for a reader that returns 0 in
 * internal polling mode) and the producer resumes it once it has more. */
#include "h_reports.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "app.h"
#include "auth.h"
#include "clock.h"
#include "db.h"
#include "export.h"
#include "h_util.h"
#include "log.h"
#include "statement.h"

#define REPORTS_CONCURRENT 4
#define STREAM_BUF	   (64 * 1024)
#define DISP_MAX	   160	/* a Content-Disposition line */
#define STOP_WAIT_MS	   3000 /* for producers to finish at shut-down */
#define WATCH_MS	   1000 /* how often a producer looks at its client's progress */

/* One export in flight, shared by its producer thread and libmicrohttpd
 * (the response's content reader). req to disp are set before the producer
 * starts; from cancel to suspended, fields are under lock; refs is under
 * streams_lock. Freed by whichever of the two lets go last. */
struct stream {
	struct stream *prev, *next; /* all streams, under streams_lock */
	pthread_mutex_t lock;
	pthread_cond_t room;	     /* signalled when buf has been taken */
	struct http_req *req;	     /* until the reply is set, then NULL */
	struct MHD_Connection *conn; /* the request's connection */
	struct export_params p;
	const char *db_url; /* borrowed from the configuration */
	char disp[DISP_MAX];
	PGcancel *cancel;
	int sock; /* a copy of its connection's socket (so never another's number), or -1 */
	char buf[STREAM_BUF]; /* ready for the content reader */
	size_t len, off;
	bool done;	/* the producer wrote everything (or failed) */
	bool failed;	/* the output is incomplete */
	bool abort;	/* the transfer is over: client gone or shut-down */
	bool suspended; /* the connection is parked waiting for buf */
	int refs;
	bool slot;	 /* it holds one of the REPORTS_CONCURRENT slots; under streams_lock */
	bool ended;	 /* the content reader gave the end (under lock) */
	uint64_t taken;	 /* bytes the content reader took (under lock) */
	int64_t idle_ms; /* connection_timeout_s: a client taking nothing that long is cut */
	unsigned idle_s; /* the same, for libmicrohttpd, once the export ends */
	char next_buf[STREAM_BUF]; /* the producer's own */
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t streams_gone = PTHREAD_COND_INITIALIZER;
static struct stream *streams_head;
/* Under streams_lock: the slots held (an export holds one from its start
 * until its last byte is handed over or it fails, so a client that asks for
 * one export after another never finds its own last one still running),
 * and the producer threads alive (which close their database connection
 * after that: shut-down waits for them). */
static int exports_running;
static int producers;
static bool reports_stopping; /* under streams_lock */

/* Which account the caller may report on; false after setting a reply. */
static bool report_account(struct http_req *req, char *account, size_t len)
{
	const char *q = http_query(req, "account_id");

	if (q && !parse_is_id(q)) {
		/* Refused as on every route, whoever asks. */
		http_reply_error(req, 400, "invalid_request",
				 "account_id: 1 to 64 characters of A-Z a-z 0-9 _ . -",
				 json_pack("{s:s}", "field", "account_id"));
		return false;
	}
	if (req->auth->kind == AUTH_KEY) {
		if (q && strcmp(q, req->auth->account_id) != 0) {
			/* Another account's id: as if it did not exist. */
			http_reply_error(req, 404, "not_found", "no such account", NULL);
			return false;
		}
		snprintf(account, len, "%s", req->auth->account_id);
		return true;
	}
	if (!q && req->auth->account_id[0]) {
		/* An operator's dashboard session views one account. */
		snprintf(account, len, "%s", req->auth->account_id);
		return true;
	}
	if (!q) {
		http_reply_error(req, 400, "invalid_request",
				 "account_id: required for the operator",
				 json_pack("{s:s}", "field", "account_id"));
		return false;
	}
	snprintf(account, len, "%s", q);
	return true;
}

/* Copies an optional id parameter; false after a 400 reply. */
static bool id_param(struct http_req *req, const char *name, char *out, size_t len)
{
	const char *v = http_query(req, name);
	char msg[128];

	out[0] = '\0';
	if (!v)
		return true;
	if (!parse_is_id(v)) {
		snprintf(msg, sizeof(msg), "%s: 1 to 64 characters of A-Z a-z 0-9 _ . -", name);
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", name));
		return false;
	}
	snprintf(out, len, "%s", v);
	return true;
}

/* A required RFC 3339 time parameter; false after a 400 reply. */
static bool time_param(struct http_req *req, const char *name, int64_t *out)
{
	const char *v = http_query(req, name);
	char msg[160];

	if (v && agent_doc_parse_time(v, out) == METER_OK)
		return true;
	snprintf(msg, sizeof(msg), "%s: %s", name,
		 v ? "not an RFC 3339 time (a whole UTC hour is required)"
		   : "required, an RFC 3339 time on a whole UTC hour");
	http_reply_error(req, 400, "invalid_request", msg, json_pack("{s:s}", "field", name));
	return false;
}

/* Gives back st's export slot, if it still holds it. */
static void stream_slot_free(struct stream *st)
{
	pthread_mutex_lock(&streams_lock);
	if (st->slot) {
		st->slot = false;
		exports_running--;
	}
	pthread_mutex_unlock(&streams_lock);
}

/* Frees st, listed nowhere. */
static void stream_destroy(struct stream *st)
{
	pthread_cond_destroy(&st->room);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

/* A producer counted in producers is gone (or was never started):
 * shut-down may be waiting for the count to reach 0. */
static void producer_gone(void)
{
	pthread_mutex_lock(&streams_lock);
	producers--;
	pthread_cond_broadcast(&streams_gone);
	pthread_mutex_unlock(&streams_lock);
}

/* Drops a reference; the last one frees st. */
static void stream_unref(struct stream *st)
{
	bool last;

	pthread_mutex_lock(&streams_lock);
	last = --st->refs == 0;
	if (last) {
		if (st->prev)
			st->prev->next = st->next;
		else
			streams_head = st->next;
		if (st->next)
			st->next->prev = st->prev;
	}
	pthread_mutex_unlock(&streams_lock);
	if (last)
		stream_destroy(st);
}

/* Wakes the parked connection, if it is. Under st->lock. */
static void stream_wake(struct stream *st)
{
	if (st->suspended && !st->abort) {
		st->suspended = false;
		MHD_resume_connection(st->conn);
	}
}

/* Whether the transfer is over (the client gone, or shut-down). */
static bool stream_aborted(struct stream *st)
{
	bool abort;

	pthread_mutex_lock(&st->lock);
	abort = st->abort;
	pthread_mutex_unlock(&st->lock);
	return abort;
}

/* The content reader (a libmicrohttpd thread): copies what the producer
 * made ready; parks the connection when nothing is, never waits. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	ssize_t ret;
	bool over = false, ended = false;

	/* The first read, on the connection's own thread: its producer
	 * watches the client's progress from now on (stream_watch), not
	 * libmicrohttpd's idle timeout, which counts only the writes the
	 * socket takes, and a client that reads slowly can leave the socket's
	 * buffers (megabytes) full for longer than that while it reads. */
	if (pos == 0 &&
	    MHD_set_connection_option(st->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u) != MHD_YES)
		log_warn("could not hand an export's idle timeout to its producer");
	pthread_mutex_lock(&st->lock);
	if (st->off < st->len) {
		size_t n = st->len - st->off < max ? st->len - st->off : max;

		memcpy(buf, st->buf + st->off, n);
		st->off += n;
		st->taken += n;
		if (st->off == st->len)
			pthread_cond_signal(&st->room);
		ret = (ssize_t)n;
	} else if (st->abort || (st->done && st->failed)) {
		ret = MHD_CONTENT_READER_END_WITH_ERROR;
		over = true;
	} else if (st->done) {
		ret = MHD_CONTENT_READER_END_OF_STREAM;
		over = ended = true;
		st->ended = true;
		pthread_cond_signal(&st->room);
	} else {
		st->suspended = true;
		MHD_suspend_connection(st->conn);
		ret = 0;
	}
	pthread_mutex_unlock(&st->lock);
	/* Before libmicrohttpd sends the end: the client's next export may
	 * follow at once. */
	if (over)
		stream_slot_free(st);
	/* A kept-alive connection waits for its next request as any other
	 * does. */
	if (ended && MHD_set_connection_option(st->conn, MHD_CONNECTION_OPTION_TIMEOUT,
					       st->idle_s) != MHD_YES)
		log_warn("could not set a connection's idle timeout back");
	return ret;
}

/* What a producer last saw of its client's progress. */
struct progress {
	uint64_t taken; /* st->taken */
	int outq;	/* bytes the socket had not sent yet, -1 unknown */
	int64_t since;	/* clock_mono_ms() of the last progress seen */
};

/* Waits (under st->lock) up to WATCH_MS for st->room, then looks at the
 * client's progress: a byte taken by the content reader, fewer bytes
 * waiting in the socket, or the connection parked for the producer (not
 * the client's doing) is progress. A client that made none for idle_ms is
 * cut: the socket is shut down (libmicrohttpd then closes the connection
 * and lets go of the response: stream_free), the transfer aborted, and
 * true. While abort is false the response, and so the connection and its
 * socket, are alive (stream_free sets abort under the lock first). */
static bool stream_watch(struct stream *st, struct progress *pg)
{
	struct timespec until = clock_mono_after_ms(WATCH_MS);
	const union MHD_ConnectionInfo *ci;
	int64_t now;
	int outq = -1;

	if (pthread_cond_clockwait(&st->room, &st->lock, CLOCK_MONOTONIC, &until) == 0 || st->abort)
		return false;
	now = clock_mono_ms();
	ci = MHD_get_connection_info(st->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ioctl(ci->connect_fd, SIOCOUTQ, &outq) != 0)
		outq = -1;
	if (st->taken != pg->taken || st->suspended || (outq >= 0 && outq < pg->outq)) {
		pg->taken = st->taken;
		pg->since = now;
	}
	pg->outq = outq;
	if (now - pg->since < st->idle_ms)
		return false;
	st->abort = true;
	if (ci && shutdown(ci->connect_fd, SHUT_RDWR) != 0)
		log_warn("could not cut a stalled export's connection: %s", strerror(errno));
	return true;
}

/* The response is gone (sent, or the connection closed): the producer
 * stops at its next step. */
static void stream_free(void *cls)
{
	struct stream *st = cls;

	pthread_mutex_lock(&st->lock);
	st->abort = true;
	st->suspended = false;
	pthread_cond_signal(&st->room);
	pthread_mutex_unlock(&st->lock);
	stream_slot_free(st);
	stream_unref(st);
}

/* Sets the reply of the parked request and wakes it, unless shut-down
 * already answered it. Takes resp (may be NULL: then an error reply, for
 * why: 500 when memory ran out, else the database's). */
static void stream_reply(struct stream *st, struct MHD_Response *resp, enum meter_rc why)
{
	pthread_mutex_lock(&st->lock);
	if (st->req) {
		if (resp)
			http_reply_response(st->req, 200, resp);
		else if (why == METER_ENOMEM)
			http_reply_error(st->req, 500, "internal", "internal error", NULL);
		else if (!hutil_reply_db_cause(st->req, st->p.lock_timeout_ms, "retry"))
			http_reply_error(st->req, 503, "metering_unavailable",
					 "the database is unreachable", NULL);
		resp = NULL;
		st->req = NULL;
		MHD_resume_connection(st->conn);
	}
	pthread_mutex_unlock(&st->lock);
	if (resp)
		MHD_destroy_response(resp); /* drops the response's reference */
}

/* The export's key and sandbox filters, on the producer's connection (not
 * an HTTP thread's: they never wait on the database): true when each
 * names one of the account's; else the parked request is answered (404,
 * or 503 when the look-up failed) and false. */
static bool stream_filters_known(struct stream *st, PGconn *conn)
{
	const char *what = NULL;
	enum meter_rc rc =
	    hutil_filters_lookup(conn, st->p.account_id, st->p.key_id, st->p.sandbox_id, &what);

	if (rc == METER_OK)
		return true;
	if (rc != METER_ENOTFOUND) {
		stream_reply(st, NULL, rc);
		return false;
	}
	pthread_mutex_lock(&st->lock);
	if (st->req) {
		http_reply_error(st->req, 404, "not_found", what, NULL);
		st->req = NULL;
		MHD_resume_connection(st->conn);
	}
	pthread_mutex_unlock(&st->lock);
	return false;
}

/* The headers an export's answer carries, GET or HEAD. */
static void export_headers(struct MHD_Response *resp, enum export_format format, const char *disp)
{
	if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				    format == EXPORT_CSV ? "text/csv; charset=utf-8"
							 : "application/x-ndjson") != MHD_YES ||
	    MHD_add_response_header(resp, "Content-Disposition", disp) != MHD_YES)
		log_warn("could not add export headers");
}

/* The producer: connects, starts the export, answers the parked request,
 * then fills the buffer whenever the content reader has emptied it. */
static void *stream_produce(void *arg)
{
	struct stream *st = arg;
	struct export_cursor *cur = NULL;
	struct MHD_Response *resp;
	struct progress pg = {.outq = -1};
	PGconn *conn = NULL;
	enum meter_rc why;
	char err[512];

	why = db_connect(st->db_url, &conn, err, sizeof(err));
	if (why != METER_OK) {
		log_warn("export could not start: %s", err);
		stream_reply(st, NULL, why);
		goto out;
	}
	/* Cancellable from here on, its look-ups and first query too: a stop
	 * that came before is seen here, one after cancels what runs. */
	pthread_mutex_lock(&st->lock);
	st->cancel = PQgetCancel(conn);
	st->sock = fcntl(PQsocket(conn), F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&st->lock);
	if (stream_aborted(st) || !stream_filters_known(st, conn))
		goto out;
	why = export_open(conn, &st->p, &cur, err, sizeof(err));
	if (why != METER_OK) {
		if (stream_aborted(st))
			log_info("export stopped before it started: %s", err);
		else
			log_warn("export could not start: %s", err);
		stream_reply(st, NULL, why);
		goto out;
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, st,
						 stream_free);
	if (!resp) {
		stream_reply(st, NULL, METER_ENOMEM);
		goto out;
	}
	pthread_mutex_lock(&streams_lock);
	st->refs++; /* the response's */
	pthread_mutex_unlock(&streams_lock);
	export_headers(resp, st->p.format, st->disp);
	stream_reply(st, resp, METER_OK);
	pg.since = clock_mono_ms();
	for (;;) {
		size_t n = 0;
		enum meter_rc rc = export_next(cur, st->next_buf, sizeof(st->next_buf), &n);
		bool finished;

		pthread_mutex_lock(&st->lock);
		while (!st->abort && st->off < st->len)
			if (stream_watch(st, &pg))
				log_info("export cut: its client took nothing for %lld ms",
					 (long long)st->idle_ms);
		if (rc != METER_OK) {
			if (!st->abort)
				log_warn("export failed mid-stream; the transfer is aborted");
			st->failed = true;
			st->done = true;
		} else if (n == 0) {
			st->done = true;
		} else if (!st->abort) {
			memcpy(st->buf, st->next_buf, n);
			st->len = n;
			st->off = 0;
		}
		stream_wake(st);
		finished = st->done || st->abort;
		/* All is made: watched until its end is handed over. */
		while (st->done && !st->abort && !st->ended)
			if (stream_watch(st, &pg))
				log_info("export cut: its client took nothing for %lld ms",
					 (long long)st->idle_ms);
		pthread_mutex_unlock(&st->lock);
		if (finished)
			break;
	}
out:
	/* Answered with an error, or the client gone: the slot is free now. */
	stream_slot_free(st);
	export_close(cur);
	pthread_mutex_lock(&st->lock);
	if (st->cancel)
		PQfreeCancel(st->cancel);
	st->cancel = NULL;
	if (st->sock >= 0)
		close(st->sock);
	st->sock = -1;
	pthread_mutex_unlock(&st->lock);
	if (conn)
		PQfinish(conn);
	stream_unref(st);
	/* This thread's OpenSSL state (libpq's authentication uses it) is freed
	 * now, not by the thread's exit: shut-down waits for producers only,
	 * and the process may end while a detached thread is exiting. */
	OPENSSL_thread_stop();
	producer_gone();
	return NULL;
}

/* Called by the server once the connection is parked: start the producer
 * (only now, so its resume cannot come before the suspend). */
static void stream_start(struct http_req *req)
{
	struct stream *st = req->handler_ctx;
	pthread_attr_t attr;
	pthread_t th;
	bool stopping;
	int r;

	req->handler_ctx = NULL;
	/* Listed only now, this request's last use by the worker that hands
	 * it over: shut-down answers the listed ones' requests (and wakes
	 * their connections, whose requests are then freed), and must never
	 * do so while a worker still reads one. Once shut-down has begun, no
	 * producer starts: the request is answered here. */
	pthread_mutex_lock(&streams_lock);
	stopping = reports_stopping;
	if (!stopping) {
		st->next = streams_head;
		if (st->next)
			st->next->prev = st;
		streams_head = st;
	}
	pthread_mutex_unlock(&streams_lock);
	if (stopping) {
		http_reply_error(req, 503, "metering_unavailable", "the service is stopping", NULL);
		MHD_resume_connection(st->conn); /* req is libmicrohttpd's again */
		stream_slot_free(st);
		producer_gone();
		stream_destroy(st);
		return;
	}
	r = pthread_attr_init(&attr);
	if (r == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		r = pthread_create(&th, &attr, stream_produce, st);
		pthread_attr_destroy(&attr);
	}
	if (r == 0)
		return;
	/* The process's thread limit, not a fault: said so, to be retried. */
	log_warn("export could not start: no thread (%s)", strerror(r));
	pthread_mutex_lock(&st->lock);
	if (st->req) {
		http_reply_error(
		    st->req, 503, "metering_unavailable",
		    "no thread could be started for the export now (the process's thread"
		    " limit): retry shortly",
		    NULL);
		if (st->req->resp &&
		    MHD_add_response_header(st->req->resp, MHD_HTTP_HEADER_RETRY_AFTER, "1") !=
			MHD_YES)
			log_warn("could not add Retry-After");
		st->req = NULL;
		MHD_resume_connection(st->conn);
	}
	pthread_mutex_unlock(&st->lock);
	stream_slot_free(st);
	producer_gone();
	stream_unref(st);
}

/* The content of a HEAD answer: none. */
static ssize_t head_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	(void)pos;
	(void)buf;
	(void)max;
	return MHD_CONTENT_READER_END_OF_STREAM;
}

/* HEAD on an export: its headers, with no export run. A GET's length is
 * not known before it has run, so the answer says none: of unknown size,
 * without chunks (libmicrohttpd 0.9.75 ends a chunked answer to HEAD with
 * an empty chunk, a body HEAD must not have) and so closing the
 * connection after it; a buffer would claim Content-Length: 0. */
static void export_head(struct http_req *req, enum export_format format, const char *disp)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, head_read, NULL, NULL);

	if (!resp || MHD_set_response_options(resp, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT,
					      MHD_RO_END) != MHD_YES) {
		if (resp)
			MHD_destroy_response(resp);
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return;
	}
	export_headers(resp, format, disp);
	http_reply_response(req, 200, resp);
}

/* Starts a streamed usage export in format; every failure before the first
 * byte is a proper error reply. */
static void usage_export(struct http_req *req, enum export_format format)
{
	static const char *const allowed[] = {"from",	    "to",	  "granularity", "key_id",
					      "sandbox_id", "account_id", NULL};
	struct export_params p;
	struct stream *st = NULL;
	const char *g = http_query(req, "granularity");
	char err[512], from[32], to[32], disp[DISP_MAX];
	bool busy, head, stopping;

	memset(&p, 0, sizeof(p));
	p.format = format;
	p.lock_timeout_ms = req->app->cfg->db_statement_timeout_ms;
	if (!http_query_allowed(req, allowed) ||
	    !report_account(req, p.account_id, sizeof(p.account_id)) ||
	    !id_param(req, "key_id", p.key_id, sizeof(p.key_id)) ||
	    !id_param(req, "sandbox_id", p.sandbox_id, sizeof(p.sandbox_id)) ||
	    !time_param(req, "from", &p.from_usec) || !time_param(req, "to", &p.to_usec))
		return;
	if (!g || strcmp(g, "hour") == 0) {
		p.granularity = EXPORT_HOUR;
	} else if (strcmp(g, "day") == 0) {
		p.granularity = EXPORT_DAY;
	} else {
		http_reply_error(req, 400, "invalid_request", "granularity: hour or day",
				 json_pack("{s:s}", "field", "granularity"));
		return;
	}
	if (export_params_check(&p, err, sizeof(err)) != METER_OK) {
		char field[32];
		size_t flen = strcspn(err, ":");
		snprintf(field, sizeof(field), "%.*s", (int)(flen < 31 ? flen : 31), err);
		http_reply_error(req, 400, "invalid_request", err,
				 json_pack("{s:s}", "field", field));
		return;
	}
	/* An export's end shows only in its chunked framing: a stream the
	 * database broke off ends without its last chunk, which a client
	 * sees. HTTP/1.0 has no chunks, so a cut export would end as a
	 * whole one does, at the close: refused, before any row is read. */
	if (req->version && strcmp(req->version, MHD_HTTP_VERSION_1_0) == 0) {
		http_reply_error(req, 426, "upgrade_required",
				 "exports are sent in chunks so that one cut short shows: send the "
				 "request as HTTP/1.1 (behind a proxy, have it speak HTTP/1.1 to "
				 "this service)",
				 NULL);
		if (req->resp && MHD_add_response_header(req->resp, MHD_HTTP_HEADER_UPGRADE,
							 "HTTP/1.1") != MHD_YES)
			log_warn("could not add Upgrade");
		return;
	}
	/* The account here, on the read lane's worker (the operator's
	 * look-up); a GET's key and sandbox filters on the producer's
	 * connection (stream_filters_known), a HEAD's here, as it runs no
	 * producer. */
	head = strcmp(req->method, "HEAD") == 0;
	if (!hutil_filters_known(req, NULL, p.account_id, head ? p.key_id : NULL,
				 head ? p.sandbox_id : NULL))
		return;
	agent_doc_format_time(p.from_usec, from, sizeof(from));
	agent_doc_format_time(p.to_usec, to, sizeof(to));
	snprintf(disp, sizeof(disp), "attachment; filename=\"usage-%s-%.10s-%.10s.%s\"",
		 p.account_id, from, to, format == EXPORT_CSV ? "csv" : "ndjson");
	if (!head) {
		st = calloc(1, sizeof(*st));
		if (!st || pthread_mutex_init(&st->lock, NULL) != 0) {
			free(st);
			http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
			return;
		}
		if (pthread_cond_init(&st->room, NULL) != 0) {
			pthread_mutex_destroy(&st->lock);
			free(st);
			http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
			return;
		}
	}
	pthread_mutex_lock(&streams_lock);
	stopping = reports_stopping;
	busy = stopping || exports_running >= REPORTS_CONCURRENT;
	if (!busy && st) {
		/* Counted now, listed for shut-down only by stream_start. */
		exports_running++;
		producers++;
		st->slot = true;
		st->refs = 1; /* the producer's */
		st->sock = -1;
	}
	pthread_mutex_unlock(&streams_lock);
	if (busy) {
		if (st)
			stream_destroy(st);
		if (stopping)
			http_reply_error(req, 503, "metering_unavailable",
					 "the service is stopping", NULL);
		else {
			http_reply_error(req, 429, "too_many_exports",
					 "too many exports are running; retry shortly", NULL);
			if (req->resp &&
			    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_RETRY_AFTER, "1") !=
				MHD_YES)
				log_warn("could not add Retry-After");
		}
		return;
	}
	if (head) {
		export_head(req, format, disp);
		return;
	}
	st->req = req;
	st->conn = req->conn;
	st->p = p;
	st->db_url = req->app->cfg->database_url;
	st->idle_ms = req->app->cfg->connection_timeout_s * 1000;
	st->idle_s = (unsigned)req->app->cfg->connection_timeout_s;
	snprintf(st->disp, sizeof(st->disp), "%s", disp);
	req->handler_ctx = st;
	req->on_suspended = stream_start;
	req->suspended = true;
}

void h_reports_stop(void)
{
	struct timespec until;

	pthread_mutex_lock(&streams_lock);
	reports_stopping = true;
	for (struct stream *st = streams_head; st; st = st->next) {
		pthread_mutex_lock(&st->lock);
		if (st->req) {
			http_reply_error(st->req, 503, "metering_unavailable",
					 "the service is stopping", NULL);
			st->req = NULL;
			MHD_resume_connection(st->conn);
		}
		stream_wake(st);
		st->abort = true;
		pthread_cond_signal(&st->room);
		/* Its query is cancelled and its connection cut: the producer
		 * ends at once, however the server answers (a stopped one,
		 * never). */
		db_cancel_now(st->cancel, st->sock);
		st->cancel = NULL;
		pthread_mutex_unlock(&st->lock);
	}
	/* On the monotonic clock (streams_gone is initialised statically, so
	 * the wait names its clock): a step of the wall clock neither cuts
	 * the wait short nor stretches it. */
	until = clock_mono_after_ms(STOP_WAIT_MS);
	while (producers > 0)
		if (pthread_cond_clockwait(&streams_gone, &streams_lock, CLOCK_MONOTONIC, &until) !=
		    0)
			break;
	if (producers > 0)
		log_warn("%d exports still stopping", producers);
	pthread_mutex_unlock(&streams_lock);
}

void h_report_usage_csv(struct http_req *req)
{
	usage_export(req, EXPORT_CSV);
}

void h_report_usage_ndjson(struct http_req *req)
{
	usage_export(req, EXPORT_NDJSON);
}

/* statement_memory's charge: the lines count as the request's answer
 * being built. */
static bool statement_charge(void *ctx, int64_t delta)
{
	return http_answer_grow(ctx, delta);
}

/* The statement of a month, built whole: its lines and then its text are
 * counted with the large answers (answers_memory_mib) as they grow, so
 * that statements built at once cannot take more memory than that
 * together; one that would is answered 503, to be asked again. */
static void statement_reply(struct http_req *req, bool html)
{
	const struct statement_memory memory = {.charge = statement_charge, .ctx = req};
	static const char *const allowed[] = {"month", "account_id", NULL};
	char account[PARSE_ID_MAX + 1], err[512];
	const char *m = http_query(req, "month");
	struct statement s;
	PGconn *conn = NULL;
	FILE *mem;
	bool ok;
	int year, month;
	enum meter_rc rc;

	if (!http_query_allowed(req, allowed) || !report_account(req, account, sizeof(account)))
		return;
	if (statement_parse_month(m, &year, &month) != METER_OK) {
		http_reply_error(req, 400, "invalid_request",
				 "month must be a month from 2000-01 to 9999-12, as YYYY-MM",
				 json_pack("{s:s}", "field", "month"));
		return;
	}
	if (db_pool_acquire(req->app->pool, 2000, &conn) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	rc = statement_build_counted(conn, account, year, month, &memory, &s, err, sizeof(err));
	db_pool_release(req->app->pool, conn, rc == METER_EDB && db_conn_failed(conn));
	if (rc == METER_ENOTFOUND) {
		http_reply_error(req, 404, "not_found", "no such account", NULL);
		return;
	}
	if (rc == METER_ENOMEM && req->building_refused) {
		http_reply_answers_full(req);
		return;
	}
	if (rc == METER_ENOMEM) {
		log_error("request %s: statement: out of memory", req->request_id);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		return;
	}
	if (rc != METER_OK) {
		log_warn("statement failed: %s", err);
		if (!hutil_reply_db_cause(req, req->app->cfg->db_statement_timeout_ms, "retry"))
			http_reply_error(req, 503, "metering_unavailable",
					 "the database is unreachable", NULL);
		return;
	}
	mem = http_answer_stream(req);
	if (!mem) {
		statement_release(&s);
		log_error("request %s: statement: out of memory", req->request_id);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		return;
	}
	ok = (html ? statement_write_html(&s, mem) : statement_write_csv(&s, mem)) == METER_OK;
	statement_release(&s);
	/* A statement cut short is never sent: its last flush is checked
	 * there too. */
	http_reply_stream(req, 200, html ? "text/html; charset=utf-8" : "text/csv; charset=utf-8",
			  mem, ok);
	/* The CSV is a file to keep: named by its account and month, as an
	 * export is. */
	if (!html && req->resp && req->status == 200) {
		char disp[DISP_MAX];

		snprintf(disp, sizeof(disp), "attachment; filename=\"statement-%s-%04d-%02d.csv\"",
			 account, year, month);
		if (MHD_add_response_header(req->resp, "Content-Disposition", disp) != MHD_YES)
			log_warn("could not add Content-Disposition");
	}
	/* The printable page: its inline stylesheet and nothing else, never
	 * framed (it shows money, opened with the dashboard's session). */
	if (html && req->resp && req->status == 200 &&
	    (MHD_add_response_header(req->resp, "Content-Security-Policy",
				     "default-src 'none'; style-src 'unsafe-inline'; "
				     "frame-ancestors 'none'") != MHD_YES ||
	     MHD_add_response_header(req->resp, "X-Content-Type-Options", "nosniff") != MHD_YES ||
	     MHD_add_response_header(req->resp, "X-Frame-Options", "DENY") != MHD_YES))
		log_warn("could not add the statement page's headers");
}

void h_report_statement_csv(struct http_req *req)
{
	statement_reply(req, false);
}

void h_report_statement_html(struct http_req *req)
{
	statement_reply(req, true);
}
