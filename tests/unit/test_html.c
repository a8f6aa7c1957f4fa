/* Unit tests of page building: escaping, exact dollars, charts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "html.h"

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

static void test_escaping(void)
{
	struct html h;

	html_init(&h);
	html_text(&h, "<script>alert('x')</script> & \"q\"");
	CHECK_STR(h.buf, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
	html_release(&h);

	html_init(&h);
	html_printf(&h, "<td>%s</td><td>%d %lld %zu 100%%</td>", "<b>", -5, (long long)-7,
		    (size_t)9);
	CHECK_STR(h.buf, "<td>&lt;b&gt;</td><td>-5 -7 9 100%</td>");
	html_release(&h);

	html_init(&h);
	html_url_component(&h, "a b&c=d/é");
	CHECK_STR(h.buf, "a%20b%26c%3Dd%2F%C3%A9");
	html_release(&h);
}

static void test_dollars(void)
{
	struct html h;

	html_init(&h);
	html_dollars(&h, 31250);
	html_raw(&h, " ");
	html_dollars(&h, 0);
	html_raw(&h, " ");
	html_dollars(&h, -1);
	html_raw(&h, " ");
	html_dollars(&h, 1234567890123);
	html_raw(&h, " ");
	html_dollars(&h, INT64_MIN);
	CHECK_STR(h.buf, "$0.031250 $0.000000 -$0.000001 $1234567.890123 -$9223372036854.775808");
	html_release(&h);
}

static void test_charts(void)
{
	int64_t v[4] = {0, 50, 100, 25};
	struct html_series s = {v, 4};
	struct html h;
	size_t len;
	char *page;

	html_init(&h);
	html_bar_chart(&h, "spend <per> hour", &s, 400, 116, true);
	CHECK_I64(count(h.buf, "<rect class=\"bar\""), 4);
	/* The tallest bar fills the plot (100 px); the half bar 50 px. */
	CHECK(strstr(h.buf, "height=\"100\"") != NULL);
	CHECK(strstr(h.buf, "height=\"50\"") != NULL);
	CHECK(strstr(h.buf, "<title>spend &lt;per&gt; hour</title>") != NULL);
	CHECK(strstr(h.buf, "max $0.000100") != NULL);
	html_release(&h);

	html_init(&h);
	html_line_chart(&h, "cpu", &s, 50, "floor 50 m", 301, 116);
	CHECK(strstr(h.buf, "points=\"0,100 100,") != NULL);
	CHECK(strstr(h.buf, "class=\"floor\"") != NULL);
	CHECK(strstr(h.buf, ">floor 50 m<") != NULL);
	html_release(&h);

	/* An empty series and a huge value do not break anything. */
	html_init(&h);
	s.n = 0;
	html_bar_chart(&h, "none", &s, 100, 50, false);
	v[0] = INT64_MAX;
	s.n = 1;
	html_line_chart(&h, "big", &s, 50, "f", 100, 50);
	html_gauge(&h, 30, 20, 100);
	CHECK(strstr(h.buf, "class=\"spent\" x=\"0\" y=\"0\" width=\"180\"") != NULL);
	CHECK(strstr(h.buf, "class=\"held\" x=\"180\" y=\"0\" width=\"120\"") != NULL);
	html_gauge(&h, 30, 20, -1);
	CHECK(!h.failed);
	page = html_steal(&h, &len);
	CHECK(page != NULL && len == strlen(page));
	free(page);
}

int main(void)
{
	test_escaping();
	test_dollars();
	test_charts();
	return check_done();
}
