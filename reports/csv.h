/* meter reports: CSV (RFC 4180) fields in and out.
 *
 * Fields containing a comma, a double quote, CR or LF are quoted, with
 * quotes doubled; records end with CRLF. */
#ifndef METER_CSV_H
#define METER_CSV_H

#include <stddef.h>

#include "rc.h"

#define CSV_FIELDS_MAX 32

/* Appends field (len bytes) to buf at *used, quoted when it needs it.
 * METER_ERANGE when it does not fit in cap (then *used is unchanged). */
METER_MUSTCHECK enum meter_rc csv_put_field(char *buf, size_t cap, size_t *used, const char *field,
					    size_t len);

/* Splits one record (len bytes without its line ending; rec must have room
 * for len + 1 bytes) into at most max fields, in
 * place: fields[i] point into rec, NUL-terminated, quotes removed.
 * *n gets the count. METER_EINVAL for a malformed record (a stray quote,
 * an unterminated quoted field), METER_ERANGE for more than max fields. */
METER_MUSTCHECK enum meter_rc csv_split(char *rec, size_t len, char **fields, size_t max,
					size_t *n);

#endif
