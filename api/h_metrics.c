/* meter API: GET /metrics (see h_metrics.h). */
#include "h_metrics.h"

#include <stdlib.h>

#include "app.h"
#include "checks.h"
#include "dbpool.h"
#include "metrics.h"
#include "schema_gate.h"

void h_metrics(struct http_req *req)
{
	char *text = NULL;
	size_t len = 0;

	metrics_describe("meter_db_up", METRICS_GAUGE,
			 "1 when the last attempt to reach the database from the request pool "
			 "worked.");
	metrics_gauge_set("meter_db_up", NULL, db_pool_up(req->app->pool) ? 1 : 0);
	metrics_describe("meter_checks_db_up", METRICS_GAUGE,
			 "0 while the check engine's own connection cannot reach the database "
			 "(its last attempt failed, the log says why) and checks are answered "
			 "503; 1 otherwise.");
	metrics_gauge_set("meter_checks_db_up", NULL,
			  checks_engine_db_down(req->app->checks) ? 0 : 1);
	metrics_describe("meter_schema_current", METRICS_GAUGE,
			 "1 when the database's schema, as last read, is the one this meterd's "
			 "migrations make; 0 while it is not, and requests that need the "
			 "database are answered 503.");
	metrics_gauge_set("meter_schema_current", NULL, schema_gate_open(NULL, 0) ? 1 : 0);
	metrics_describe("meter_http_answers_held_bytes", METRICS_GAUGE,
			 "Bytes of built answers not yet sent (their clients have not read them); "
			 "those over 64 KiB may hold answers_memory_mib together.");
	metrics_gauge_set("meter_http_answers_held_bytes", NULL, http_answers_held());
	metrics_describe(
	    "meter_http_answers_building_bytes", METRICS_GAUGE,
	    "Bytes counted for answers being built whole (statements, usage items), which "
	    "answers_memory_mib bounds together with the large answers held.");
	metrics_gauge_set("meter_http_answers_building_bytes", NULL, http_answers_building());
	if (metrics_render(&text, &len) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return;
	}
	http_reply_owned(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
