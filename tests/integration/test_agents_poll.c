/* Polling real HTTP agents on 127.0.0.1 (libmicrohttpd servers in this
 * process): good ones, a SLOW one answering after 3× the timeout, a DEAD port,
 * malformed JSON, a bad document, huge bodies (with and without a length)
 * and HTTP 500. One round returns on time with the good documents and counts
 * each failure on its host; failed hosts wait out their backoff and are then
 * polled again; the slow host's document comes through once it is fast.
 * Then many hosts on one server in parallel, and the URL list parsers. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "check.h"
#include "source_agents.h"

#define TIMEOUT_MS 500

enum kind { GOOD, SLOW, MALFORMED, BAD_DOC, HUGE_LENGTH, HUGE_CHUNKED, STATUS_500, FLEET };

struct agent {
	enum kind kind;
	const char *host_id;
	struct MHD_Daemon *d;
	int port;
	atomic_int slow;     /* SLOW: answer after 3× the timeout while set */
	atomic_int requests; /* requests seen */
};

static char *huge_body; /* AGENT_DOC_MAX_BYTES + 1 spaces */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleeps ms milliseconds (none when ms <= 0). */
static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
			      .tv_nsec = (long)(ms % 1000) * 1000000};

	if (ms <= 0)
		return;
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* A good two-sandbox document of host_id, stamped now. */
static char *good_doc(const char *host_id)
{
	char at[40], *text = NULL;

	agent_doc_format_time(real_usec(), at, sizeof(at));
	if (asprintf(&text,
		     "{\"host_id\":\"%s\",\"sampled_at\":\"%s\",\"sandboxes\":["
		     "{\"sandbox_id\":\"%s-a\",\"key_id\":\"k1\",\"state\":\"running\",\"vcpus\":2,"
		     "\"memory_mib\":4096,\"cpu_usec\":1000},"
		     "{\"sandbox_id\":\"%s-b\",\"state\":\"paused\",\"vcpus\":1,"
		     "\"memory_mib\":1024,\"storage_mib\":512,\"cpu_usec\":7}]}",
		     host_id, at, host_id, host_id) < 0)
		return NULL;
	return text;
}

static ssize_t chunked_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	if (pos > (uint64_t)AGENT_DOC_MAX_BYTES + 65536)
		return MHD_CONTENT_READER_END_OF_STREAM;
	memset(buf, ' ', max);
	return (ssize_t)max;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *text)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **state)
{
	struct agent *a = cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char host[32];
	unsigned idx;
	int used = 0;

	(void)version;
	(void)upload;
	(void)upload_size;
	if (!*state) {
		*state = a; /* headers seen; answer on the next call */
		return MHD_YES;
	}
	if (strcmp(method, "GET") != 0)
		return reply(c, 405, strdup("{}"));
	atomic_fetch_add(&a->requests, 1);
	switch (a->kind) {
	case GOOD:
		break;
	case SLOW:
		if (atomic_load(&a->slow))
			sleep_ms(3 * TIMEOUT_MS);
		break;
	case MALFORMED:
		return reply(c, 200, strdup("{\"host_id\":\"bad\",\"sampled_at\":"));
	case BAD_DOC:
		return reply(c, 200,
			     strdup("{\"host_id\":\"h\",\"sampled_at\":\"2026-11-30T00:00:00Z\","
				    "\"sandboxes\":[{\"sandbox_id\":\"s\",\"state\":\"running\","
				    "\"vcpus\":-1,\"memory_mib\":1,\"cpu_usec\":1}]}"));
	case HUGE_LENGTH:
		r = MHD_create_response_from_buffer((size_t)AGENT_DOC_MAX_BYTES + 1, huge_body,
						    MHD_RESPMEM_PERSISTENT);
		ret = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return ret;
	case HUGE_CHUNKED:
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, chunked_reader, NULL,
						      NULL);
		ret = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return ret;
	case STATUS_500:
		return reply(c, 500, strdup("{\"error\":\"internal\"}"));
	case FLEET:
		/* /hosts/h<N>/v1/usage */
		if (sscanf(url, "/hosts/h%u/v1/usage%n", &idx, &used) != 1 ||
		    (size_t)used != strlen(url))
			return reply(c, 404, strdup("{}"));
		snprintf(host, sizeof(host), "h%u", idx);
		return reply(c, 200, good_doc(host));
	}
	if (strcmp(url, "/v1/usage") != 0)
		return reply(c, 404, strdup("{}"));
	return reply(c, 200, good_doc(a->host_id));
}

static int start_agent(struct agent *a, enum kind kind, const char *host_id)
{
	struct sockaddr_in sa;
	const union MHD_DaemonInfo *info;

	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->host_id = host_id;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = 0;
	a->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
				NULL, NULL, on_request, a, MHD_OPTION_SOCK_ADDR, &sa,
				MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
	if (!a->d)
		return -1;
	info = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
	a->port = info ? info->port : 0;
	return a->port > 0 ? 0 : -1;
}

/* A port nothing listens on: bound by a server that is then stopped. */
static int dead_port(void)
{
	struct agent a;
	int port;

	if (start_agent(&a, GOOD, "dead") != 0)
		return -1;
	port = a.port;
	MHD_stop_daemon(a.d);
	return port;
}

static size_t find_batch(struct sample_batch *b, size_t n, const char *host_id)
{
	size_t found = 0;

	for (size_t i = 0; i < n; i++)
		if (strcmp(b[i].host_id, host_id) == 0)
			found++;
	return found;
}

static void release_batches(struct sample_batch *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sample_batch_release(&b[i]);
	free(b);
}

enum { A_GOOD1, A_GOOD2, A_SLOW, A_MALFORMED, A_BAD_DOC, A_HUGE_LEN, A_HUGE_CHUNKED, A_500, NA };

static void test_round_failures(void)
{
	static const enum kind kinds[NA] = {GOOD,    GOOD,	  SLOW,		MALFORMED,
					    BAD_DOC, HUGE_LENGTH, HUGE_CHUNKED, STATUS_500};
	static const char *const ids[NA] = {"good1",  "good2",	 "slow",      "malformed",
					    "baddoc", "hugelen", "hugechunk", "err500"};
	struct agent agents[NA];
	char urls_text[NA + 1][64];
	const char *urls[NA + 1];
	struct agent_poller_opts o;
	struct agent_poller *p;
	struct agent_round_stats st;
	struct sample_batch *batches = NULL;
	size_t nb = 0;
	int64_t t0, t1, elapsed;
	int dead;

	for (int i = 0; i < NA; i++) {
		CHECK(start_agent(&agents[i], kinds[i], ids[i]) == 0);
		snprintf(urls_text[i], sizeof(urls_text[i]), "http://127.0.0.1:%d", agents[i].port);
		urls[i] = urls_text[i];
	}
	atomic_store(&agents[A_SLOW].slow, 1);
	dead = dead_port();
	CHECK(dead > 0);
	snprintf(urls_text[NA], sizeof(urls_text[NA]), "http://127.0.0.1:%d", dead);
	urls[NA] = urls_text[NA];

	agent_poller_opts_init(&o);
	CHECK_I64(o.timeout_ms, 2000);
	CHECK_I64(o.backoff_base_ms, 1000);
	CHECK_I64(o.backoff_max_ms, 60000);
	CHECK_I64(o.max_parallel, 256);
	o.timeout_ms = TIMEOUT_MS;
	/* A first backoff of 1 to 2 s: longer than round 1 may take (under
	 * 1 s, checked), so round 2 finds every failed host still waiting
	 * however late in round 1 it failed. */
	o.backoff_base_ms = 2000;
	o.backoff_max_ms = 8000;
	p = agent_poller_new(urls, NA + 1, &o);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_I64(agent_poller_hosts(p), NA + 1);
	CHECK_STR(agent_poller_host_url(p, A_SLOW), urls[A_SLOW]);
	CHECK(agent_poller_host_url(p, NA + 1) == NULL);

	/* Round 1: everything polled; the slow host times out, the round does
	 * not wait for its answer (1.5 s away). */
	t0 = mono_ms();
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	t1 = mono_ms(); /* every failure of round 1 came before this */
	elapsed = t1 - t0;
	printf("round 1: %" PRId64 " ms, polled %" PRIu64 " ok %" PRIu64 " failed %" PRIu64
	       " skipped %" PRIu64 "\n",
	       elapsed, st.polled, st.ok, st.failed, st.skipped);
	CHECK(elapsed >= TIMEOUT_MS - 50 && elapsed < 1000);
	CHECK_I64(st.polled, NA + 1);
	CHECK_I64(st.ok, 2);
	CHECK_I64(st.failed, NA + 1 - 2);
	CHECK_I64(st.skipped, 0);
	CHECK_I64(nb, 2);
	CHECK_I64(find_batch(batches, nb, "good1"), 1);
	CHECK_I64(find_batch(batches, nb, "good2"), 1);
	for (size_t i = 0; i < nb; i++) {
		CHECK_I64(batches[i].n, 2);
		if (batches[i].n == 2) {
			CHECK_I64(batches[i].items[0].u.cpu_usec, 1000);
			CHECK_STR(batches[i].items[0].key_id, "k1");
			CHECK_I64(batches[i].items[1].u.storage_mib, 512);
		}
	}
	for (size_t i = 0; i < NA + 1; i++)
		CHECK_I64(agent_poller_host_errors(p, i), i == A_GOOD1 || i == A_GOOD2 ? 0 : 1);
	/* The huge body with a length was refused before it was read. */
	CHECK_I64(atomic_load(&agents[A_HUGE_LEN].requests), 1);

	/* Round 2, at once: the failed hosts are in backoff. */
	t0 = mono_ms();
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	elapsed = mono_ms() - t0;
	CHECK(elapsed < 300);
	CHECK_I64(st.polled, 2);
	CHECK_I64(st.ok, 2);
	CHECK_I64(st.skipped, NA + 1 - 2);
	CHECK_I64(nb, 4);
	CHECK_I64(atomic_load(&agents[A_MALFORMED].requests), 1);
	CHECK_I64(atomic_load(&agents[A_500].requests), 1);

	/* The slow host turns fast; after the first backoff (at most 2 s from
	 * round 1's end) every host is polled again and the slow host's
	 * document comes through. */
	atomic_store(&agents[A_SLOW].slow, 0);
	sleep_ms(t1 + 2100 - mono_ms());
	t0 = mono_ms(); /* no host of round 3 fails before this */
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	t1 = mono_ms(); /* nor after this */
	CHECK_I64(st.polled, NA + 1);
	CHECK_I64(st.ok, 3);
	CHECK_I64(st.failed, NA + 1 - 3);
	CHECK_I64(st.skipped, 0);
	CHECK_I64(find_batch(batches, nb, "slow"), 1);
	CHECK_I64(agent_poller_host_errors(p, A_SLOW), 1);
	CHECK_I64(agent_poller_host_errors(p, A_MALFORMED), 2);
	CHECK_I64(agent_poller_host_errors(p, NA), 2);
	CHECK_I64(atomic_load(&agents[A_MALFORMED].requests), 2);

	/* Round 4, at once: the recovered slow host is due, the others wait
	 * (second backoff: 2 to 4 s). */
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	CHECK_I64(st.polled, 3);
	CHECK_I64(st.ok, 3);
	CHECK_I64(st.skipped, NA + 1 - 3);
	/* Still waiting: at least 2 s from each host's failure in round 3,
	 * which came no sooner than round 3's start (a round lasts as long as
	 * its slowest host, so a fixed sleep after round 4 could pass that). */
	sleep_ms(t0 + 1700 - mono_ms());
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	CHECK_I64(st.skipped, NA + 1 - 3);
	/* Due: at most 4 s from each failure, all in by round 3's end. */
	sleep_ms(t1 + 4100 - mono_ms());
	CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	CHECK_I64(st.polled, NA + 1);
	CHECK_I64(find_batch(batches, nb, "slow"), 4);
	CHECK_I64(find_batch(batches, nb, "good1"), 6);
	CHECK_I64(agent_poller_host_errors(p, A_HUGE_CHUNKED), 3);
	CHECK_I64(agent_poller_host_errors(p, A_BAD_DOC), 3);

	release_batches(batches, nb);
	agent_poller_free(p);
	for (int i = 0; i < NA; i++)
		MHD_stop_daemon(agents[i].d);
}

/* Many hosts on one server, at most 16 transfers at once: all read. */
static void test_fleet(void)
{
	enum { HOSTS = 300 };
	struct agent fleet;
	static char text[HOSTS][64];
	const char *urls[HOSTS];
	struct agent_poller_opts o;
	struct agent_poller *p;
	struct agent_round_stats st;
	struct sample_batch *batches = NULL;
	size_t nb = 0;

	CHECK(start_agent(&fleet, FLEET, NULL) == 0);
	for (int i = 0; i < HOSTS; i++) {
		snprintf(text[i], sizeof(text[i]), "http://127.0.0.1:%d/hosts/h%d/", fleet.port, i);
		urls[i] = text[i];
	}
	agent_poller_opts_init(&o);
	o.max_parallel = 16;
	p = agent_poller_new(urls, HOSTS, &o);
	CHECK(p != NULL);
	if (!p)
		return;
	for (int round = 0; round < 2; round++) {
		CHECK(agent_poller_round(p, &batches, &nb, &st) == METER_OK);
		CHECK_I64(st.ok, HOSTS);
		CHECK_I64(st.failed, 0);
	}
	CHECK_I64(nb, 2 * HOSTS);
	CHECK_I64(find_batch(batches, nb, "h0"), 2);
	CHECK_I64(find_batch(batches, nb, "h299"), 2);
	release_batches(batches, nb);
	agent_poller_free(p);

	/* No hosts at all: a round does nothing. */
	p = agent_poller_new(NULL, 0, NULL);
	CHECK(p != NULL);
	batches = NULL;
	nb = 0;
	CHECK(p && agent_poller_round(p, &batches, &nb, &st) == METER_OK);
	CHECK_I64(nb, 0);
	CHECK_I64(st.polled, 0);
	agent_poller_free(p);
	MHD_stop_daemon(fleet.d);
}

static void test_url_lists(void)
{
	static const char *const bad[] = {
	    "",
	    "http://a,,http://b",
	    "http://a,",
	    "ftp://a",
	    "http://",
	    "127.0.0.1:9000",
	    "http://a b",
	    "http://a,http://a/",
	    "http://\xc3\xa9",
	    "http://a/h1?token=s3cret",
	    "http://a/h1#part",
	};
	char err[512];
	char **urls = NULL;
	size_t n = 0;
	char path[] = "/tmp/meter-agents-XXXXXX";
	FILE *f;
	int fd;

	CHECK(agent_urls_split(" http://127.0.0.1:9000/hosts/h1/ , https://x.example/a", &urls, &n,
			       err, sizeof(err)) == METER_OK);
	CHECK_I64(n, 2);
	if (n == 2) {
		CHECK_STR(urls[0], "http://127.0.0.1:9000/hosts/h1");
		CHECK_STR(urls[1], "https://x.example/a");
		CHECK(urls[2] == NULL);
	}
	agent_urls_free(urls);
	{
		/* Credentials in a URL never reach labels or log lines. */
		static const char *const cred[] = {"http://user:s3cret@127.0.0.1:9/h1/",
						   "https://tok@x.example:8443?q=a@b",
						   "http://h/p@q",
						   "http://u:p%23w@[::1]:8080/x",
						   "http://u:p#w@h/",
						   "http://h/h2?token=s3cret#f"};
		struct agent_poller *p = agent_poller_new(cred, 6, NULL);
		CHECK(p != NULL);
		if (p) {
			CHECK_STR(agent_poller_host_url(p, 0), "http://127.0.0.1:9/h1");
			CHECK_STR(agent_poller_host_url(p, 1), "https://x.example:8443/");
			CHECK_STR(agent_poller_host_url(p, 2), "http://h/p@q");
			CHECK_STR(agent_poller_host_url(p, 3), "http://[::1]:8080/x");
			/* Host "u", port "p": not a URL libcurl reads; not shown. */
			CHECK_STR(agent_poller_host_url(p, 4),
				  "(agent 4: a URL that cannot be parsed)");
			CHECK_STR(agent_poller_host_url(p, 5), "http://h/h2");
		}
		agent_poller_free(p);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		urls = NULL;
		err[0] = '\0';
		CHECK(agent_urls_split(bad[i], &urls, &n, err, sizeof(err)) != METER_OK);
		CHECK(urls == NULL && err[0] != '\0');
	}

	fd = mkstemp(path);
	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("# the fleet\n\nhttp://127.0.0.1:1/hosts/h0\r\n  http://127.0.0.1:1/hosts/h1  \n"
	      "   # indented comment\nhttp://127.0.0.1:1/hosts/h2",
	      f);
	CHECK(fclose(f) == 0);
	urls = NULL;
	CHECK(agent_urls_load_file(path, &urls, &n, err, sizeof(err)) == METER_OK);
	CHECK_I64(n, 3);
	if (n == 3) {
		CHECK_STR(urls[0], "http://127.0.0.1:1/hosts/h0");
		CHECK_STR(urls[2], "http://127.0.0.1:1/hosts/h2");
	}
	agent_urls_free(urls);

	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("http://127.0.0.1:1/hosts/h0\nnot a url\n", f);
	CHECK(fclose(f) == 0);
	urls = NULL;
	CHECK(agent_urls_load_file(path, &urls, &n, err, sizeof(err)) == METER_EINVAL);
	CHECK(strstr(err, ":2: ") != NULL);
	CHECK(urls == NULL);

	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("# nothing\n\n", f);
	CHECK(fclose(f) == 0);
	CHECK(agent_urls_load_file(path, &urls, &n, err, sizeof(err)) == METER_EINVAL);
	CHECK(strstr(err, "no agent URLs") != NULL);
	unlink(path);
	CHECK(agent_urls_load_file(path, &urls, &n, err, sizeof(err)) == METER_EIO);
}

int main(void)
{
	CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
	huge_body = malloc((size_t)AGENT_DOC_MAX_BYTES + 1);
	CHECK(huge_body != NULL);
	if (!huge_body)
		return check_done();
	memset(huge_body, ' ', (size_t)AGENT_DOC_MAX_BYTES + 1);
	test_round_failures();
	test_fleet();
	test_url_lists();
	free(huge_body);
	curl_global_cleanup();
	return check_done();
}
