/* meter API: sandboxes with their usage and cost (read routes). */
#ifndef METER_H_SANDBOXES_H
#define METER_H_SANDBOXES_H

#include "http.h"

/* GET /v1/sandboxes?state&key_id&sort=id|created|cost&limit&cursor&from&to
 * [&account_id] -> {items:[sandbox...], next_cursor} */
void h_sandboxes_list(struct http_req *req);

/* GET /v1/sandboxes/{id}?from&to -> sandbox with its cost breakdown over
 * the range and its open holds now (held_micros, open_holds, holds) */
void h_sandbox_get(struct http_req *req);

/* GET /v1/sandboxes/{id}/usage?from&to&window=hour|day
 * -> {sandbox_id, from, to, window, time_zone, usage, cost, items:[...]} */
void h_sandbox_usage(struct http_req *req);

#endif
