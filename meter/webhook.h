/* meter: delivery of the control plane's webhook (DESIGN.md §4).
 *
 * Triggers of sql/0005_checks.sql put events in webhook_outbox whoever
 * writes the ledger or the holds: spend_limit_crossed (a key-day's metered
 * spend reached its limit; once per crossing, sql/0028: the limit raised
 * and reached again is a new event, more spend over the same limit is
 * not) and hold_outrun (a hold's consumption went past its amount; once
 * per hold). The lease-end sweeper (meter/checks.c, sql/0013) adds
 * hold_outrun for a sandbox still running lease_grace_s after its lease
 * ended, once per lease. A deliverer thread works in rounds: it claims
 * the most overdue events, at most webhook_options.concurrency (attempts +
 * 1, next_attempt_at moved WEBHOOK_CLAIM_MS on; FOR UPDATE SKIP LOCKED,
 * committed at once, so several meterd processes share the work and no two
 * send one event at the same time), and POSTs them at once, over
 * connections kept from round to round (libcurl's multi interface), each
 * as JSON
 *
 *   {"event_id":"<uuid>","type":"...","account_id":"...","key_id":"...",
 *    "created_at":"<RFC 3339>","data":{...}}
 *
 * with headers Meter-Event-Id: <uuid> and
 *   Meter-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 * and then commits each outcome by itself: delivered_at after a 2xx answer;
 * any other answer (or none within WEBHOOK_TIMEOUT_MS) is retried after
 * 1, 2, 4, ... seconds (at most an hour apart, counted from the failed
 * attempt), first by another process than the one that failed it
 * (WEBHOOK_YIELD_MS). No transaction is open during a POST; a session lost
 * during the POSTs is made again to record their answers while their
 * claims last (every WEBHOOK_AGAIN_MS). Delivery is at least
 * once: if meterd dies or the database fails between a 2xx answer and the
 * commit of delivered_at, the events in flight (never one already
 * recorded as delivered) are sent again with the same event ids once
 * their claims lapse (WEBHOOK_CLAIM_MS after they were claimed), by this or
 * another process, so receivers deduplicate by Meter-Event-Id.
 *
 * /metrics: meter_webhook_deliveries_total{outcome="delivered"|"failed"}
 * counts this process's POSTs by their outcome; every WEBHOOK_BACKLOG_MS
 * the thread also sets meter_webhook_pending_events and
 * meter_webhook_oldest_pending_seconds from the outbox (every process's
 * events, so each process shows the same figures): what an operator
 * alerts on when the control plane stops taking events, which are kept
 * and retried until it does. A process without a URL runs the thread to
 * count only: the backlog shows there too, and grows while no process
 * has a URL. */
#ifndef METER_WEBHOOK_H
#define METER_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"

#define WEBHOOK_TIMEOUT_MS 5000 /* a whole POST, connecting included */
/* A 2xx answer's body is read (so its connection is kept) while it is at
 * most this long and comes within WEBHOOK_BODY_MS of its first bytes. */
#define WEBHOOK_BODY_MAX    4096
#define WEBHOOK_BODY_MS	    100
#define WEBHOOK_RETRY_MAX_S 3600
/* How long a claimed event is left to its process: more than a POST, with
 * room to record its answer. */
#define WEBHOOK_CLAIM_MS 15000
/* How long past an event's retry time the process that failed it waits
 * before claiming it again (webhook_outbox.failed_by, sql/0062): more than
 * a poll of another process's deliverer, so that one takes it first. */
#define WEBHOOK_YIELD_MS 700
/* How often a deliverer whose connection was lost during a round's POSTs
 * tries to connect again to record their answers, while their claims last. */
#define WEBHOOK_AGAIN_MS 200
/* How often the deliverer counts what is not delivered yet, for /metrics
 * (meter_webhook_pending_events, meter_webhook_oldest_pending_seconds). */
#define WEBHOOK_BACKLOG_MS 5000

struct webhook_options {
	const char *database_url; /* borrowed for the deliverer's life */
	const char *url;	  /* the control plane's endpoint, "" to only count; borrowed */
	const char *secret;	  /* HMAC key; borrowed; may be "" (unsigned v1 of "") */
	int64_t statement_timeout_ms;
	int64_t poll_ms;     /* how often due events are looked for */
	int64_t concurrency; /* events POSTed at once (<= 0: 1) */
};

struct webhook;

/* Starts the deliverer thread. On METER_OK *out is new; webhook_stop()
 * frees it. */
METER_MUSTCHECK enum meter_rc webhook_start(const struct webhook_options *opt,
					    struct webhook **out);

/* Stops the thread after the round in flight (its answers recorded) and
 * frees w (NULL fine). What is not claimed yet stays due. */
void webhook_stop(struct webhook *w);

/* The v1 signature: lower-case hex HMAC-SHA256(secret, "<t>.<body>") into
 * hex (65 bytes). METER_ENOMEM / METER_EIO when the digest fails. */
METER_MUSTCHECK enum meter_rc webhook_sign(const char *secret, int64_t t, const char *body,
					   size_t len, char *hex);

/* Seconds before attempt number attempts + 1, after attempts failures
 * (>= 1): 1, 2, 4, ... capped at WEBHOOK_RETRY_MAX_S. */
int64_t webhook_retry_delay_s(int64_t attempts);

#endif
