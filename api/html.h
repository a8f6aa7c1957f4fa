/* meter API: building HTML pages safely.
 *
 * A growing buffer (capped, like curl's dynbuf) where text from data is
 * always written through the escaping functions: html_text() escapes & < >
 * " ', so a sandbox id like "<script>" shows as text. Raw markup goes in
 * only through html_raw() with literals from our own code. Charts are inline
 * SVG with integer coordinates (no floating point anywhere). */
#ifndef METER_HTML_H
#define METER_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTML_MAX (8 * 1024 * 1024) /* a page larger than this is an error */

struct html {
	char *buf; /* owned, NUL-terminated */
	size_t len;
	size_t cap;
	bool failed; /* out of memory or over HTML_MAX: the page is unusable */
};

void html_init(struct html *h);
void html_release(struct html *h);
/* Gives up the buffer (caller frees); the html is empty again. */
char *html_steal(struct html *h, size_t *len);

/* Appends markup from our own code, unescaped. */
void html_raw(struct html *h, const char *markup);
/* Appends text, escaped for element content and attribute values. */
void html_text(struct html *h, const char *text);
/* printf into the page; every %s argument is escaped. Only %s, %d, %lld,
 * %zu and %% are understood (enough for pages, and nothing unescaped can
 * slip through a format). */
void html_printf(struct html *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a query-string component, percent-encoded (for hrefs). */
void html_url_component(struct html *h, const char *text);

/* Writes µ$ as exact dollars: "$0.031250". */
void html_dollars(struct html *h, int64_t micros);

/* One series for a chart: values[i] >= 0 at x position i. */
struct html_series {
	const int64_t *values;
	size_t n;
};

/* A bar chart of values (e.g. µ$ per hour), width × height pixels, with a
 * title for screen readers, the maximum labelled as dollars when
 * dollars is true. */
void html_bar_chart(struct html *h, const char *title, const struct html_series *s, int width,
		    int height, bool dollars);

/* A line chart of values with a dashed horizontal reference line at
 * reference (e.g. CPU used in millicores against the 50-millicore floor). */
void html_line_chart(struct html *h, const char *title, const struct html_series *s,
		     int64_t reference, const char *reference_label, int width, int height);

/* A horizontal gauge: spent and held against limit (limit < 0: no limit). */
void html_gauge(struct html *h, int64_t spent, int64_t held, int64_t limit);

#endif
