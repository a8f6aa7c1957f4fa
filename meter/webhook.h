/* meter: delivery of the control plane's webhook (DESIGN.md §4).
 *
 * Triggers of sql/0005_checks.sql put events in webhook_outbox whoever
 * writes the ledger or the holds: spend_limit_crossed (a key-day's metered
 * spend reached its limit; once per key-day) and hold_outrun (a hold's
 * consumption went past its amount; once per hold). The lease-end sweeper
 * (meter/checks.c, sql/0013) adds hold_outrun for a sandbox still running
 * lease_grace_s after its lease ended, once per lease. A deliverer thread
 * claims due events with FOR UPDATE SKIP LOCKED (several meterd processes
 * share the work, never the same event at once), POSTs each as JSON
 *
 *   {"event_id":"<uuid>","type":"...","account_id":"...","key_id":"...",
 *    "created_at":"<RFC 3339>","data":{...}}
 *
 * with headers Meter-Event-Id: <uuid> and
 *   Meter-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 * and sets delivered_at in the same transaction after a 2xx answer. Any
 * other answer (or none within 5 s) is retried after 1, 2, 4, ... seconds
 * (at most an hour apart). Delivery is at least once: a crash between the
 * 2xx and the commit sends the event again, so receivers deduplicate by
 * Meter-Event-Id. */
#ifndef METER_WEBHOOK_H
#define METER_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"

#define WEBHOOK_TIMEOUT_MS  5000
#define WEBHOOK_RETRY_MAX_S 3600

struct webhook_options {
	const char *database_url; /* borrowed for the deliverer's life */
	const char *url;	  /* the control plane's endpoint; borrowed */
	const char *secret;	  /* HMAC key; borrowed; may be "" (unsigned v1 of "") */
	int64_t statement_timeout_ms;
	int64_t poll_ms; /* how often due events are looked for */
};

struct webhook;

/* Starts the deliverer thread. On METER_OK *out is new; webhook_stop()
 * frees it. */
METER_MUSTCHECK enum meter_rc webhook_start(const struct webhook_options *opt,
					    struct webhook **out);

/* Stops the thread after the delivery in flight and frees w (NULL fine). */
void webhook_stop(struct webhook *w);

/* The v1 signature: lower-case hex HMAC-SHA256(secret, "<t>.<body>") into
 * hex (65 bytes). METER_ENOMEM / METER_EIO when the digest fails. */
METER_MUSTCHECK enum meter_rc webhook_sign(const char *secret, int64_t t, const char *body,
					   size_t len, char *hex);

/* Seconds before attempt number attempts + 1, after attempts failures
 * (>= 1): 1, 2, 4, ... capped at WEBHOOK_RETRY_MAX_S. */
int64_t webhook_retry_delay_s(int64_t attempts);

#endif
