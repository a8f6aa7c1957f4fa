/* meter API: the read-only dashboard under /dashboard/ (DESIGN.md §6).
 *
 * Server-rendered HTML with inline SVG charts and one small stylesheet; no
 * JavaScript. Every value is escaped (html.h) and every page is sent with a
 * Content-Security-Policy that allows nothing but our own stylesheet. The
 * only forms sign in and out: nothing on any page writes. */
#ifndef METER_DASHBOARD_H
#define METER_DASHBOARD_H

#include "http.h"

void h_dash_root(struct http_req *req);	   /* GET /dashboard: to /dashboard/ */
void h_dash_style(struct http_req *req);   /* GET /dashboard/style.css */
void h_dash_favicon(struct http_req *req); /* GET /favicon.ico: 204, no icon */
void h_dash_sign_in_form(struct http_req *req);
void h_dash_sign_in(struct http_req *req);  /* POST: key in the form body */
void h_dash_sign_out(struct http_req *req); /* POST */
void h_dash_overview(struct http_req *req);
void h_dash_sandboxes(struct http_req *req);
void h_dash_sandbox(struct http_req *req);
void h_dash_keys(struct http_req *req);
void h_dash_exports(struct http_req *req);

#endif
