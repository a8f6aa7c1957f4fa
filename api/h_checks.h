/* meter API: the control plane's routes (DESIGN.md §4-§5).
 *
 *   POST /v1/checks/create  {key_id, sandbox_id, vcpus, memory_mib, lease_seconds,
 *                            max_cost_micros?, idempotency_key?}
 *   POST /v1/checks/wake    {sandbox_id, lease_seconds, idempotency_key?}
 *   POST /v1/sandboxes/{sandbox_id}/events  {type: running|paused|stopped, at}
 *
 * Checks are validated here and decided by the check engine (meter/checks.h)
 * in group-committed batches: the handler parks (suspends) its connection
 * and the engine's answer resumes it. Ranges: vcpus 1..1024, memory_mib
 * 1..16,777,216, lease_seconds 1..86,400, max_cost_micros >= 0; ids 1-64
 * characters of A-Z a-z 0-9 _ . -. A replayed answer carries the header
 * Idempotent-Replayed: true. */
#ifndef METER_H_CHECKS_H
#define METER_H_CHECKS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "checks.h"
#include "http.h"

void h_checks_create(struct http_req *req);
void h_checks_wake(struct http_req *req);
void h_sandbox_event(struct http_req *req);

/* The body parsers of the routes above (no I/O; the fuzzers call them too).
 * body: the request's JSON object, borrowed. true when valid, with every
 * field in range; false after setting a 400 invalid_request reply on req.
 * The create and wake parsers fill *rq whole (op included). The event
 * parser gives *type as a static string (running, paused, stopped) and
 * *at_usec in UTC µs, refusing a time over 10 minutes after now_usec. */
bool h_checks_create_parse(struct http_req *req, json_t *body, struct checks_request *rq);
bool h_checks_wake_parse(struct http_req *req, json_t *body, struct checks_request *rq);
bool h_sandbox_event_parse(struct http_req *req, json_t *body, int64_t now_usec, const char **type,
			   int64_t *at_usec);

#endif
