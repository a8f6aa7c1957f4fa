/* meter API: the control plane's routes (see h_checks.h). */
#include "h_checks.h"

#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "checks.h"
#include "db_checks.h"
#include "h_util.h"
#include "log.h"

/* An optional (or required) id member copied into out. */
static bool body_id(struct http_req *req, json_t *body, const char *name, bool required, char *out)
{
	const char *s = NULL;
	char msg[160];

	out[0] = '\0';
	if (!hutil_body_str(req, body, name, PARSE_ID_MAX, required, &s))
		return false;
	if (!s)
		return true;
	if (!parse_is_id(s)) {
		snprintf(msg, sizeof(msg), "%s must be 1 to 64 characters of A-Z a-z 0-9 _ . -",
			 name);
		hutil_bad(req, name, msg);
		return false;
	}
	snprintf(out, PARSE_ID_MAX + 1, "%s", s);
	return true;
}

/* The engine's answer: set the reply and wake the parked connection.
 * Runs on the batcher thread (or the handler's, for an immediate 503). */
static void check_done(void *arg, const struct checks_answer *a)
{
	struct http_req *req = arg;

	http_reply_text(req, a->status, "application/json", a->body, strlen(a->body));
	if (a->replayed && req->resp &&
	    MHD_add_response_header(req->resp, "Idempotent-Replayed", "true") != MHD_YES)
		log_warn("could not add Idempotent-Replayed");
	MHD_resume_connection(req->conn);
}

/* Called by the server once the connection is parked: only now may the
 * engine answer (a resume before the suspend would be lost). */
static void check_submit(struct http_req *req)
{
	struct checks_request *rq = req->handler_ctx;

	req->handler_ctx = NULL;
	checks_submit(req->app->checks, rq, check_done, req);
	free(rq);
}

/* Parks req and hands rq (stolen) to the engine. */
static void check_park(struct http_req *req, struct checks_request *rq)
{
	if (!req->app->checks) {
		free(rq);
		http_reply_error(req, 503, "metering_unavailable", "checks are not enabled", NULL);
		return;
	}
	req->handler_ctx = rq;
	req->on_suspended = check_submit;
	req->suspended = true;
}

bool h_checks_create_parse(struct http_req *req, json_t *body, struct checks_request *rq)
{
	static const char *const allowed[] = {
	    "key_id",	     "sandbox_id",	"vcpus",	   "memory_mib",
	    "lease_seconds", "max_cost_micros", "idempotency_key", NULL};
	bool is_null = false, present = false;

	memset(rq, 0, sizeof(*rq));
	rq->op = CHECKS_CREATE;
	if (!hutil_body_allowed(req, body, allowed) ||
	    !body_id(req, body, "key_id", true, rq->key_id) ||
	    !body_id(req, body, "sandbox_id", true, rq->sandbox_id) ||
	    !hutil_body_int(req, body, "vcpus", 1, CHECKS_VCPUS_MAX, true, false, &rq->vcpus, NULL,
			    NULL) ||
	    !hutil_body_int(req, body, "memory_mib", 1, CHECKS_MEMORY_MIB_MAX, true, false,
			    &rq->memory_mib, NULL, NULL) ||
	    !hutil_body_int(req, body, "lease_seconds", 1, CHECKS_LEASE_SECONDS_MAX, true, false,
			    &rq->lease_seconds, NULL, NULL) ||
	    !hutil_body_int(req, body, "max_cost_micros", 0, INT64_MAX, false, true,
			    &rq->max_cost_micros, &is_null, &present) ||
	    !body_id(req, body, "idempotency_key", false, rq->idempotency_key))
		return false;
	/* "." and ".." are ids (metering may meet a sandbox so named, and
	 * reads take them), but no new sandbox is named so: a URL library
	 * drops them from a path, so the sandbox's routes could not be
	 * reached, and no cgroup directory can have those names. */
	if (strcmp(rq->sandbox_id, ".") == 0 || strcmp(rq->sandbox_id, "..") == 0) {
		hutil_bad(req, "sandbox_id",
			  "sandbox_id must not be \".\" or \"..\": a URL's path cannot carry it");
		return false;
	}
	rq->has_max_cost = present && !is_null;
	return true;
}

/* Reads a check's body with parse and hands it to the engine. */
static void check_read(struct http_req *req,
		       bool (*parse)(struct http_req *, json_t *, struct checks_request *))
{
	json_t *body = http_json_body(req);
	struct checks_request *rq = calloc(1, sizeof(*rq));

	if (!body || !rq) {
		if (!rq && body)
			http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		goto out;
	}
	if (!parse(req, body, rq))
		goto out;
	check_park(req, rq);
	rq = NULL;
out:
	free(rq);
	json_decref(body);
}

void h_checks_create(struct http_req *req)
{
	check_read(req, h_checks_create_parse);
}

bool h_checks_wake_parse(struct http_req *req, json_t *body, struct checks_request *rq)
{
	static const char *const allowed[] = {"sandbox_id", "lease_seconds", "idempotency_key",
					      NULL};

	memset(rq, 0, sizeof(*rq));
	rq->op = CHECKS_WAKE;
	return hutil_body_allowed(req, body, allowed) &&
	       body_id(req, body, "sandbox_id", true, rq->sandbox_id) &&
	       hutil_body_int(req, body, "lease_seconds", 1, CHECKS_LEASE_SECONDS_MAX, true, false,
			      &rq->lease_seconds, NULL, NULL) &&
	       body_id(req, body, "idempotency_key", false, rq->idempotency_key);
}

void h_checks_wake(struct http_req *req)
{
	check_read(req, h_checks_wake_parse);
}

/* How far ahead of the check engine's clock an event may be (as a sample
 * may be ahead of the real one). */
#define EVENT_FUTURE_MAX_USEC (INT64_C(600) * 1000000)

bool h_sandbox_event_parse(struct http_req *req, json_t *body, int64_t now_usec, const char **type,
			   int64_t *at_usec)
{
	static const char *const allowed[] = {"type", "at", NULL};
	static const char *const types[] = {"running", "paused", "stopped", NULL};
	const char *type_s = NULL, *at_s = NULL;
	size_t t;

	if (!hutil_body_allowed(req, body, allowed) ||
	    !hutil_body_str(req, body, "type", 16, true, &type_s) ||
	    !hutil_body_str(req, body, "at", 64, true, &at_s))
		return false;
	for (t = 0; types[t]; t++)
		if (strcmp(types[t], type_s) == 0)
			break;
	if (!types[t]) {
		hutil_bad(req, "type", "type must be running, paused or stopped");
		return false;
	}
	if (hutil_time_parse(at_s, at_usec) != METER_OK) {
		hutil_bad(req, "at",
			  "at must be an RFC 3339 time in the years 1970 to 9999, e.g. "
			  "2026-11-30T01:02:03.250Z");
		return false;
	}
	/* As for samples: a pause or stop keeps its tail's hold until then. */
	if (*at_usec > now_usec + EVENT_FUTURE_MAX_USEC) {
		hutil_bad(req, "at", "at is more than 10 minutes ahead of the current time");
		return false;
	}
	*type = types[t];
	return true;
}

void h_sandbox_event(struct http_req *req)
{
	json_t *body = http_json_body(req);
	const char *type = NULL;
	struct db_event_result ev;
	PGconn *conn = NULL;
	int64_t at = 0;
	enum meter_rc rc;
	char at_out[HUTIL_TIME_MAX], since_out[HUTIL_TIME_MAX];

	if (!body)
		return;
	/* The check engine's clock: the one holds and leases are timed by. */
	if (!h_sandbox_event_parse(req, body, checks_clock_usec(req->app->cfg->clock_offset_s),
				   &type, &at))
		goto out;
	if (!hutil_db_acquire(req, &conn))
		goto out;
	/* The grace in force on the database, as the sweepers' (sql/0063). */
	rc = db_checks_event(conn, req->params[0], type, at,
			     checks_engine_grace_s(req->app->checks, req->app->cfg->lease_grace_s),
			     &ev);
	if (rc == METER_ENOTFOUND) {
		http_reply_error(req, 404, "sandbox_not_found", "no such sandbox",
				 json_pack("{s:s}", "sandbox_id", req->params[0]));
		goto out;
	}
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "sandbox event");
		goto out;
	}
	hutil_time_format(at, at_out, sizeof(at_out));
	hutil_time_format(ev.state_since_usec, since_out, sizeof(since_out));
	http_reply_json(req, 200,
			json_pack("{s:s,s:s,s:s,s:b,s:s,s:s,s:I,s:I,s:I}", "sandbox_id",
				  req->params[0], "type", type, "at", at_out, "recorded",
				  ev.recorded, "state", ev.state, "state_since", since_out,
				  "holds_settled", (json_int_t)ev.holds_settled, "released_micros",
				  (json_int_t)ev.released_micros, "tail_held_micros",
				  (json_int_t)ev.tail_held_micros));
out:
	hutil_db_release(req, conn);
	json_decref(body);
}
