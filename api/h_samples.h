/* meter API: POST /v1/samples, push ingestion of a host agent document
 * (DESIGN.md §3). Roles: control plane, operator. */
#ifndef METER_H_SAMPLES_H
#define METER_H_SAMPLES_H

#include "http.h"

/* Body cap of the route: a document for hundreds (up to 100,000) of
 * sandboxes is far above the API's usual 64 KiB. */
#define H_SAMPLES_MAX_BODY (16 * 1024 * 1024)

/* Parses the document (agent_doc_parse) and ingests it synchronously on a
 * pooled connection, in one transaction (ingest_batches).
 * 200 {"accepted":N,"ignored":M,"anomalies":K}; 400 invalid_request naming
 * the field of a bad document; 503 metering_unavailable when the database
 * cannot be reached (nothing was written: the sender retries; a retry of a
 * document that was ingested changes nothing). */
void h_samples_push(struct http_req *req);

#endif
