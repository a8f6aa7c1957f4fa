/* meter API: report exports (see h_reports.c). */
#ifndef METER_H_REPORTS_H
#define METER_H_REPORTS_H

#include "http.h"

void h_report_usage_csv(struct http_req *req);
void h_report_usage_ndjson(struct http_req *req);
void h_report_statement_csv(struct http_req *req);
void h_report_statement_html(struct http_req *req);

/* Before the server stops: answers exports still starting with 503, ends
 * those streaming (their connections are resumed, none stays parked) and
 * waits a little for their producer threads. New exports get 503. */
void h_reports_stop(void);

#endif
