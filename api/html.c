/* meter API: HTML and SVG building (see html.h). */
#include "html.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void html_init(struct html *h)
{
	memset(h, 0, sizeof(*h));
}

void html_release(struct html *h)
{
	free(h->buf);
	html_init(h);
}

char *html_steal(struct html *h, size_t *len)
{
	char *b = h->buf;

	*len = h->len;
	html_init(h);
	return b;
}

/* Appends n bytes. */
static void put(struct html *h, const char *s, size_t n)
{
	if (h->failed)
		return;
	if (n > HTML_MAX - h->len) {
		h->failed = true;
		return;
	}
	if (h->len + n + 1 > h->cap) {
		size_t cap = h->cap ? h->cap : 4096;
		char *grown;

		while (cap < h->len + n + 1)
			cap *= 2;
		grown = realloc(h->buf, cap);
		if (!grown) {
			h->failed = true;
			return;
		}
		h->buf = grown;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, s, n);
	h->len += n;
	h->buf[h->len] = '\0';
}

void html_raw(struct html *h, const char *markup)
{
	put(h, markup, strlen(markup));
}

void html_text(struct html *h, const char *text)
{
	const char *run = text;

	for (const char *p = text; *p; p++) {
		const char *rep;

		switch (*p) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&quot;";
			break;
		case '\'':
			rep = "&#39;";
			break;
		default:
			continue;
		}
		put(h, run, (size_t)(p - run));
		html_raw(h, rep);
		run = p + 1;
	}
	html_raw(h, run);
}

void html_printf(struct html *h, const char *fmt, ...)
{
	va_list ap;
	const char *run = fmt;
	char num[32];

	va_start(ap, fmt);
	for (const char *p = fmt; *p; p++) {
		if (*p != '%')
			continue;
		put(h, run, (size_t)(p - run));
		p++;
		if (*p == 's') {
			const char *s = va_arg(ap, const char *);
			html_text(h, s ? s : "");
		} else if (*p == 'd') {
			snprintf(num, sizeof(num), "%d", va_arg(ap, int));
			html_raw(h, num);
		} else if (strncmp(p, "lld", 3) == 0) {
			snprintf(num, sizeof(num), "%lld", va_arg(ap, long long));
			html_raw(h, num);
			p += 2;
		} else if (strncmp(p, "zu", 2) == 0) {
			snprintf(num, sizeof(num), "%zu", va_arg(ap, size_t));
			html_raw(h, num);
			p++;
		} else if (*p == '%') {
			html_raw(h, "%");
		} else {
			h->failed = true; /* a format this function does not know */
			break;
		}
		run = p + 1;
	}
	if (!h->failed)
		html_raw(h, run);
	va_end(ap);
}

void html_url_component(struct html *h, const char *text)
{
	static const char hex[] = "0123456789ABCDEF";
	char enc[3] = {'%', 0, 0};

	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~') {
			put(h, (const char *)p, 1);
			continue;
		}
		enc[1] = hex[*p >> 4];
		enc[2] = hex[*p & 15];
		put(h, enc, 3);
	}
}

void html_dollars(struct html *h, int64_t micros)
{
	char buf[40];
	uint64_t m = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;

	snprintf(buf, sizeof(buf), "%s$%llu.%06llu", micros < 0 ? "-" : "",
		 (unsigned long long)(m / 1000000), (unsigned long long)(m % 1000000));
	html_raw(h, buf);
}

/* The largest value of s, at least 1. */
static int64_t series_max(const struct html_series *s)
{
	int64_t max = 1;

	for (size_t i = 0; i < s->n; i++)
		if (s->values[i] > max)
			max = s->values[i];
	return max;
}

/* y pixel of v in a chart of plot height ph scaled to max (top = 0). */
static int y_of(int64_t v, int64_t max, int ph)
{
	if (v < 0)
		v = 0;
	return ph - (int)((__int128)v * ph / max);
}

void html_bar_chart(struct html *h, const char *title, const struct html_series *s, int width,
		    int height, bool dollars)
{
	int64_t max = series_max(s);
	int ph = height - 16;

	html_printf(
	    h,
	    "<svg class=\"chart\" role=\"img\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\""
	    " xmlns=\"http://www.w3.org/2000/svg\"><title>%s</title>",
	    width, height, width, height, title);
	for (size_t i = 0; i < s->n; i++) {
		int x0 = (int)((int64_t)i * width / (int64_t)s->n);
		int x1 = (int)((int64_t)(i + 1) * width / (int64_t)s->n);
		int y = y_of(s->values[i], max, ph);
		int w = x1 - x0 > 1 ? x1 - x0 - 1 : 1;

		html_printf(h, "<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\">",
			    x0, y, w, ph - y);
		html_raw(h, "<title>");
		if (dollars)
			html_dollars(h, s->values[i]);
		else
			html_printf(h, "%lld", (long long)s->values[i]);
		html_raw(h, "</title></rect>");
	}
	html_printf(h, "<line class=\"axis\" x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", ph, width,
		    ph);
	html_printf(h, "<text class=\"label\" x=\"2\" y=\"%d\">max ", height - 3);
	if (dollars)
		html_dollars(h, max);
	else
		html_printf(h, "%lld", (long long)max);
	html_raw(h, "</text></svg>");
}

void html_line_chart(struct html *h, const char *title, const struct html_series *s,
		     int64_t reference, const char *reference_label, int width, int height)
{
	int64_t max = series_max(s);
	int ph = height - 16, ry;

	if (reference * 5 / 4 > max)
		max = reference * 5 / 4 + 1;
	html_printf(
	    h,
	    "<svg class=\"chart\" role=\"img\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\""
	    " xmlns=\"http://www.w3.org/2000/svg\"><title>%s</title><polyline class=\"line\""
	    " points=\"",
	    width, height, width, height, title);
	for (size_t i = 0; i < s->n; i++) {
		int x = s->n > 1 ? (int)((int64_t)i * (width - 1) / (int64_t)(s->n - 1)) : 0;
		html_printf(h, "%s%d,%d", i ? " " : "", x, y_of(s->values[i], max, ph));
	}
	ry = y_of(reference, max, ph);
	html_printf(h,
		    "\"/><line class=\"floor\" x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
		    "<text class=\"label\" x=\"2\" y=\"%d\">%s</text>",
		    ry, width, ry, ry > 12 ? ry - 3 : ry + 12, reference_label);
	html_printf(h,
		    "<line class=\"axis\" x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
		    "<text class=\"label\" x=\"2\" y=\"%d\">max %lld</text></svg>",
		    ph, width, ph, height - 3, (long long)max);
}

void html_gauge(struct html *h, int64_t spent, int64_t held, int64_t limit)
{
	const int width = 600;
	/* Each figure fits a bigint, their sum need not (a key with no limit
	 * can hold up to the largest). */
	__int128 total = (__int128)spent + held;
	__int128 scale = limit > 0 ? limit : (total > 0 ? total : 1);
	int ws, wh;

	if (total > scale)
		scale = total;
	ws = (int)((__int128)spent * width / scale);
	wh = (int)((__int128)held * width / scale);
	html_printf(h,
		    "<svg class=\"gauge\" role=\"img\" width=\"%d\" height=\"24\" viewBox=\"0 0 %d "
		    "24\" xmlns=\"http://www.w3.org/2000/svg\"><title>spent and held against the "
		    "daily limit</title><rect class=\"track\" x=\"0\" y=\"0\" width=\"%d\" "
		    "height=\"24\"/><rect class=\"spent\" x=\"0\" y=\"0\" width=\"%d\" "
		    "height=\"24\"/><rect class=\"held\" x=\"%d\" y=\"0\" width=\"%d\" "
		    "height=\"24\"/>",
		    width, width, width, ws, ws, wh);
	if (limit > 0)
		html_printf(h, "<line class=\"limit\" x1=\"%d\" y1=\"0\" x2=\"%d\" y2=\"24\"/>",
			    (int)((__int128)limit * width / scale) - 1,
			    (int)((__int128)limit * width / scale) - 1);
	html_raw(h, "</svg>");
}
