/* meter: one-line structured logging to stderr.
 *
 * Each call writes one line "ts=... level=... msg" atomically (a single
 * write), so lines from several threads never interleave. Secrets must never
 * be passed here. */
#ifndef METER_LOG_H
#define METER_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Lines below level are dropped. Default LOG_INFO. */
void log_set_level(enum log_level level);
/* Parses "debug", "info", "warn", "error"; returns -1 when unknown. */
int log_level_parse(const char *s);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
