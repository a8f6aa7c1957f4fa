/* meter API: report exports (see h_reports.c). */
#ifndef METER_H_REPORTS_H
#define METER_H_REPORTS_H

#include "http.h"

void h_report_usage_csv(struct http_req *req);
void h_report_usage_ndjson(struct http_req *req);
void h_report_statement_csv(struct http_req *req);
void h_report_statement_html(struct http_req *req);

#endif
