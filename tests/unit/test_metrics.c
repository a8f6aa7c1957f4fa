/* Unit: the metrics registry and its Prometheus rendering. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "metrics.h"

#define THREADS 4
#define ADDS	20000

static void *adder(void *arg)
{
	(void)arg;
	for (int i = 0; i < ADDS; i++) {
		metrics_counter_add("t_adds_total", NULL, 1);
		metrics_counter_add("t_adds_total", "kind=\"b\"", 2);
	}
	return NULL;
}

static char *render(void)
{
	char *text = NULL;
	size_t len = 0;

	CHECK_I64(metrics_render(&text, &len), METER_OK);
	CHECK(text != NULL);
	CHECK_I64(text ? strlen(text) : 0, len);
	return text;
}

int main(void)
{
	pthread_t t[THREADS];
	char labels[64] = "";
	char *text;

	/* Counters from several threads at once: nothing lost. */
	for (int i = 0; i < THREADS; i++)
		CHECK_I64(pthread_create(&t[i], NULL, adder, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_I64(metrics_value("t_adds_total", NULL), THREADS * ADDS);
	CHECK_I64(metrics_value("t_adds_total", "kind=\"b\""), 2 * THREADS * ADDS);

	/* Gauges: integer and fixed-point, negative too. */
	metrics_gauge_set("t_gauge", NULL, 7);
	metrics_gauge_add("t_gauge", NULL, -10);
	CHECK_I64(metrics_value("t_gauge", NULL), -3);
	metrics_gauge_set_fixed("t_lag_seconds", NULL, 1500000, 6);
	metrics_gauge_set_fixed("t_neg_seconds", NULL, -250, 3);

	/* Labels are escaped. */
	CHECK_I64(metrics_label(labels, sizeof(labels), "host", "a\"b\\c\nd"), METER_OK);
	CHECK_STR(labels, "host=\"a\\\"b\\\\c\\nd\"");
	CHECK_I64(metrics_label(labels, sizeof(labels), "kind", "x"), METER_OK);
	CHECK_STR(labels, "host=\"a\\\"b\\\\c\\nd\",kind=\"x\"");
	CHECK_I64(metrics_label(labels, 20, "too", "long for the buffer"), METER_ERANGE);
	metrics_counter_add("t_hosts_total", labels, 3);

	/* Bad names are dropped, never fatal. */
	metrics_counter_add("9bad", NULL, 1);
	metrics_counter_add("bad name", NULL, 1);
	CHECK_I64(metrics_value("9bad", NULL), 0);

	metrics_describe("t_adds_total", METRICS_COUNTER, "Adds from threads.");
	text = render();
	CHECK(strstr(text, "# HELP t_adds_total Adds from threads.\n"
			   "# TYPE t_adds_total counter\n"
			   "t_adds_total 80000\n"
			   "t_adds_total{kind=\"b\"} 160000\n") != NULL);
	CHECK(strstr(text, "# TYPE t_gauge gauge\nt_gauge -3\n") != NULL);
	CHECK(strstr(text, "t_lag_seconds 1.500000\n") != NULL);
	CHECK(strstr(text, "t_neg_seconds -0.250\n") != NULL);
	CHECK(strstr(text, "t_hosts_total{host=\"a\\\"b\\\\c\\nd\",kind=\"x\"} 3\n") != NULL);
	CHECK(strstr(text, "9bad") == NULL);
	/* Sorted by name: t_adds < t_gauge < t_hosts < t_lag < t_neg. */
	CHECK(strstr(text, "t_adds_total") < strstr(text, "t_gauge"));
	CHECK(strstr(text, "t_gauge") < strstr(text, "t_hosts_total"));
	CHECK(strstr(text, "t_lag_seconds") < strstr(text, "t_neg_seconds"));
	free(text);

	metrics_reset();
	text = render();
	CHECK_STR(text, "");
	free(text);
	return check_done();
}
