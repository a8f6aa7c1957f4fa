/* meter API: POST /v1/samples (see h_samples.h). */
#include "h_samples.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "app.h"
#include "clock.h"
#include "dbpool.h"
#include "h_util.h"
#include "ingest.h"
#include "log.h"
#include "sample.h"

#define SAMPLES_POOL_WAIT_MS 5000

/* One ingest object for every request of the process: its caches (day
 * starts per zone, sample partitions, meter rows) are shared and locked
 * inside. Made by the first request, with the configuration's cache size. */
static struct ingest *samples_ing;
static pthread_mutex_t samples_mu = PTHREAD_MUTEX_INITIALIZER;

/* The process's ingest object; NULL when out of memory. */
static struct ingest *samples_ingest(const struct meter_config *cfg)
{
	struct ingest *ing;

	pthread_mutex_lock(&samples_mu);
	if (!samples_ing) {
		struct ingest_opts o;
		ingest_opts_init(&o);
		o.cache_sandboxes = (size_t)cfg->ingest_cache_sandboxes;
		o.statement_timeout_ms = cfg->db_statement_timeout_ms; /* the request pool's */
		samples_ing = ingest_new(&o);
	}
	ing = samples_ing;
	pthread_mutex_unlock(&samples_mu);
	return ing;
}

/* 400 invalid_request with the field named by err ("field: reason"). */
static void samples_bad(struct http_req *req, const char *err)
{
	const char *colon = strstr(err, ": ");
	char field[128];

	if (colon && (size_t)(colon - err) < sizeof(field)) {
		memcpy(field, err, (size_t)(colon - err));
		field[colon - err] = '\0';
	} else {
		snprintf(field, sizeof(field), "body");
	}
	http_reply_error(req, 400, "invalid_request", err, json_pack("{s:s}", "field", field));
}

void h_samples_push(struct http_req *req)
{
	struct sample_batch b;
	struct ingest_stats st;
	struct ingest *ing;
	char err[512];
	PGconn *conn = NULL;
	enum meter_rc rc;

	sample_batch_init(&b);
	if (!req->body || req->body_len == 0) {
		samples_bad(req, "body: a JSON agent document is required");
		return;
	}
	rc = agent_doc_parse(req->body, req->body_len, clock_real_usec(), &b, err, sizeof(err));
	if (rc == METER_ENOMEM) {
		/* Not the document's fault: a 400 would have it dropped. */
		log_error("request %s: samples: %s", req->request_id, err);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		goto out;
	}
	if (rc != METER_OK) {
		samples_bad(req, err);
		goto out;
	}
	ing = samples_ingest(req->app->cfg);
	if (!ing) {
		log_error("request %s: samples: out of memory", req->request_id);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		goto out;
	}
	if (db_pool_acquire(req->app->pool, SAMPLES_POOL_WAIT_MS, &conn) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "database unreachable", NULL);
		goto out;
	}
	rc = ingest_batches(ing, conn, &b, 1, &st, err, sizeof(err));
	db_pool_release(req->app->pool, conn, db_conn_failed(conn));
	switch (rc) {
	case METER_OK:
		http_reply_json(req, 200,
				json_pack("{s:I,s:I,s:I}", "accepted", (json_int_t)st.accepted,
					  "ignored", (json_int_t)st.ignored, "anomalies",
					  (json_int_t)st.anomalies));
		break;
	case METER_ECONFLICT:
		log_warn("samples: document of host %s not ingested: %s", b.host_id, err);
		http_reply_error(
		    req, 503, "metering_unavailable",
		    "the document's sandboxes changed under it at every try (lifecycle "
		    "events, another writer): nothing of it was ingested; send it again",
		    json_pack("{s:s}", "reason", "contention"));
		break;
	case METER_ENOMEM:
		/* Nothing was written; the service's fault, not the document's. */
		log_error("request %s: samples: document of host %s not ingested: %s",
			  req->request_id, b.host_id, err);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		break;
	case METER_EINVAL:
	case METER_ERANGE:
		log_warn("samples: document of host %s refused: %s", b.host_id, err);
		http_reply_error(req, 400, "invalid_request", err,
				 json_pack("{s:s}", "field", "sandboxes"));
		break;
	default:
		log_warn("samples: document of host %s not ingested: %s", b.host_id, err);
		if (!hutil_reply_db_cause(req, req->app->cfg->db_statement_timeout_ms,
					  "nothing of the document was ingested; send it again"))
			http_reply_error(req, 503, "metering_unavailable",
					 "metering database unavailable", NULL);
		break;
	}
out:
	sample_batch_release(&b);
}
