/* meter: a process-wide registry of counters and gauges, rendered in the
 * Prometheus text exposition format (version 0.0.4) by GET /metrics.
 *
 * A series is a metric name plus an optional label set. labels is the text
 * between the braces, already escaped, e.g. `host="h1",kind="reset"` (build
 * it with metrics_label); NULL or "" means no labels. A series is created on
 * first use and lives until metrics_reset(). Values are 64-bit integers
 * updated atomically; every function is thread-safe. A gauge may be given
 * decimals so that an integer in smaller units renders as a fraction (ingest
 * lag kept in µs renders in seconds): no floating point anywhere.
 *
 * Bounds: names are 1-100 characters of [A-Za-z0-9_:] not starting with a
 * digit, labels at most METRICS_LABELS_MAX bytes, at most METRICS_SERIES_MAX
 * series: past these, updates are dropped (logged once), never fatal. */
#ifndef METER_METRICS_H
#define METER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"

#define METRICS_LABELS_MAX 512
#define METRICS_SERIES_MAX 20000

enum metrics_kind { METRICS_COUNTER, METRICS_GAUGE };

/* Sets the HELP text (static or long-lived string, borrowed) and kind of a
 * metric family. Optional: an undescribed family renders without HELP and
 * with the kind of its first update. */
void metrics_describe(const char *name, enum metrics_kind kind, const char *help);

/* Adds n to a counter. */
void metrics_counter_add(const char *name, const char *labels, uint64_t n);

/* Sets a gauge to v (rendered as an integer). */
void metrics_gauge_set(const char *name, const char *labels, int64_t v);

/* Sets a gauge to v / 10^decimals (0 <= decimals <= 9), rendered exactly as
 * a decimal fraction: metrics_gauge_set_fixed("lag_seconds", NULL, 1500000, 6)
 * renders 1.500000. */
void metrics_gauge_set_fixed(const char *name, const char *labels, int64_t v, int decimals);

/* Adds delta to a gauge (integer rendering unless set_fixed set decimals). */
void metrics_gauge_add(const char *name, const char *labels, int64_t delta);

/* Current value of a series (0 when it does not exist); for tests. */
int64_t metrics_value(const char *name, const char *labels);

/* Appends name="value" (value escaped: \ " and newline), preceded by a comma
 * when buf is not empty, to the NUL-terminated buf of size len. Returns
 * METER_ERANGE (buf unchanged) when it does not fit. */
METER_MUSTCHECK enum meter_rc metrics_label(char *buf, size_t len, const char *name,
					    const char *value);

/* Renders every series, sorted by name then labels, with # HELP and # TYPE
 * lines. On METER_OK *out is a new NUL-terminated buffer (free()) of *len
 * bytes. */
METER_MUSTCHECK enum meter_rc metrics_render(char **out, size_t *len);

/* Forgets every series and description (tests). Not concurrent with updates. */
void metrics_reset(void);

#endif
