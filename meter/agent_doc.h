/* meter: the host-agent usage document (DESIGN.md §3), as served by
 * GET {agent}/v1/usage and accepted by POST /v1/samples:
 *
 * {"host_id":"h1","sampled_at":"2026-11-30T01:02:03.456789Z","sandboxes":[
 *   {"sandbox_id":"sbx_1","key_id":"key_1","state":"running","vcpus":2,
 *    "memory_mib":4096,"storage_mib":5120,"cpu_usec":123456789}]}
 *
 * key_id and storage_mib are optional (storage_mib left out or null is
 * SAMPLE_UNKNOWN: ingestion keeps the size last reported); every
 * other field is required. Unknown fields, wrong types, negative or absurd
 * numbers (vcpus > 1024, memory or storage > 16 TiB, cpu_usec > 2^62,
 * sampled_at before 2000 or more than 10 minutes ahead of now), bad ids, a
 * sandbox listed twice, or more than SAMPLE_BATCH_MAX sandboxes reject the
 * whole document. */
#ifndef METER_AGENT_DOC_H
#define METER_AGENT_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"
#include "sample.h"

#define AGENT_DOC_MAX_BYTES (32 * 1024 * 1024) /* a document larger than this is refused */

/* Parses text (len bytes, need not be NUL-terminated) into out, which must be
 * empty (sample_batch_init). now_usec is the current UTC time, for the
 * future-time check. Every item gets u.at_usec = the document's sampled_at.
 * On failure out is left empty and err holds one line naming the field
 * ("sandboxes[3].vcpus: must be 1 to 1024"). */
METER_MUSTCHECK enum meter_rc agent_doc_parse(const char *text, size_t len, int64_t now_usec,
					      struct sample_batch *out, char *err, size_t errlen);

/* agent_doc_parse from one jansson tree of the whole text: the same answer
 * and error, in about 8 times the text's size where agent_doc_parse
 * takes about the batch's. What agent_doc_parse falls back to for a text
 * it cannot read a sandbox at a time (not JSON; a root that is not an
 * object, or has an array besides its sandboxes, or none); tests hold the
 * two equal. */
METER_MUSTCHECK enum meter_rc agent_doc_parse_whole(const char *text, size_t len, int64_t now_usec,
						    struct sample_batch *out, char *err,
						    size_t errlen);

/* Formats at_usec as RFC 3339 UTC with microseconds ("...T01:02:03.456789Z")
 * into buf (at least 32 bytes). */
void agent_doc_format_time(int64_t at_usec, char *buf, size_t buflen);

/* Parses an RFC 3339 time with a 'Z' or numeric offset and up to 6 fraction
 * digits into UTC µs since the epoch. METER_EINVAL when malformed. */
METER_MUSTCHECK enum meter_rc agent_doc_parse_time(const char *s, int64_t *at_usec);

#endif
