/* meter API: GET /metrics, the Prometheus text exposition (public). */
#ifndef METER_H_METRICS_H
#define METER_H_METRICS_H

#include "http.h"

/* Renders the process-wide registry (meter/metrics.h), after refreshing the
 * gauges that are read rather than counted (database reachability). */
void h_metrics(struct http_req *req);

#endif
