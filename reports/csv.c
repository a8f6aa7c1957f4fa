/* meter reports: CSV fields (see csv.h). */
#include "csv.h"

#include <stdbool.h>
#include <string.h>

enum meter_rc csv_put_field(char *buf, size_t cap, size_t *used, const char *field, size_t len)
{
	bool quote = false;
	size_t need = len, at = *used;

	for (size_t i = 0; i < len; i++) {
		char c = field[i];
		if (c == ',' || c == '"' || c == '\r' || c == '\n')
			quote = true;
		if (c == '"')
			need++;
	}
	if (quote)
		need += 2;
	if (need > cap - at)
		return METER_ERANGE;
	if (!quote) {
		memcpy(buf + at, field, len);
		*used = at + len;
		return METER_OK;
	}
	buf[at++] = '"';
	for (size_t i = 0; i < len; i++) {
		if (field[i] == '"')
			buf[at++] = '"';
		buf[at++] = field[i];
	}
	buf[at++] = '"';
	*used = at;
	return METER_OK;
}

enum meter_rc csv_split(char *rec, size_t len, char **fields, size_t max, size_t *n)
{
	size_t r = 0, w = 0, count = 0;

	for (;;) {
		char *start = rec + w;

		if (count == max)
			return METER_ERANGE;
		if (r < len && rec[r] == '"') {
			r++;
			for (;;) {
				if (r >= len)
					return METER_EINVAL; /* unterminated */
				if (rec[r] == '"') {
					if (r + 1 < len && rec[r + 1] == '"') {
						rec[w++] = '"';
						r += 2;
						continue;
					}
					r++;
					break;
				}
				rec[w++] = rec[r++];
			}
			if (r < len && rec[r] != ',')
				return METER_EINVAL; /* text after the closing quote */
		} else {
			while (r < len && rec[r] != ',') {
				if (rec[r] == '"')
					return METER_EINVAL;
				rec[w++] = rec[r++];
			}
		}
		fields[count++] = start;
		if (r >= len) {
			rec[w] = '\0';
			break;
		}
		rec[w++] = '\0'; /* the comma becomes the terminator */
		r++;
	}
	*n = count;
	return METER_OK;
}
