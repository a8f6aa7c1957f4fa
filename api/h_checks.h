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

#include "http.h"

void h_checks_create(struct http_req *req);
void h_checks_wake(struct http_req *req);
void h_sandbox_event(struct http_req *req);

#endif
