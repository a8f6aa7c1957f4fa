/* meterctl simulate, run as a user runs it (the binary from METER_BIN_DIR):
 * - server mode: every host answers a document agent_doc_parse accepts, with
 *   the right host, sandboxes and keys; the URL file; 404/405/400;
 * - determinism: two simulators with the same seed give byte-identical
 *   documents at the same instants, asked in opposite orders; a different
 *   seed differs; a sandbox's data does not depend on the fleet's size;
 * - the model over simulated days: cpu_usec never decreases except at a
 *   reset (and then restarts near 0), never grows faster than its vCPUs,
 *   paused and stopped sandboxes' CPU does not grow, a sandbox is stopped
 *   before it is replaced; idle dominates, bursts, pauses, stops and resets
 *   all happen;
 * - the clock: speed 0 stands still, speed 1440 runs a day a minute;
 * - push mode into an in-process receiver: the same seed twice gives the
 *   same bodies; a receiver answering 503 for a while, or not listening
 *   yet, still gets every document exactly once accepted and in order; 401
 *   is fatal; SIGTERM, --duration-s and bad arguments. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "check.h"

#define START	   "2026-11-20T00:00:00Z"
#define START_USEC INT64_C(1795132800000000)
#define SEC	   INT64_C(1000000)

static char meterctl[1024];

/* Field by field: the struct has padding, which memcmp would compare. */
static bool same_sample(const struct usage_sample *a, const struct usage_sample *b)
{
	return a->at_usec == b->at_usec && a->state == b->state && a->cpu_usec == b->cpu_usec &&
	       a->memory_mib == b->memory_mib && a->storage_mib == b->storage_mib &&
	       a->vcpus == b->vcpus;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
			      .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* ---- child processes ---------------------------------------------------- */

struct child {
	pid_t pid;
	int out; /* its stdout */
	int err; /* its stderr */
	char line[1024];
};

/* Starts meterctl simulate with args (NULL-terminated). */
static bool child_start(struct child *c, const char *const *args)
{
	const char *argv[64];
	int out[2], err[2];
	size_t n = 0;

	memset(c, 0, sizeof(*c));
	argv[n++] = meterctl;
	argv[n++] = "simulate";
	for (; *args && n < 62; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (pipe(out) != 0 || pipe(err) != 0)
		return false;
	c->pid = fork();
	if (c->pid < 0)
		return false;
	if (c->pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]);
		close(err[0]);
		close(out[1]);
		close(err[1]);
		execv(meterctl, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	c->out = out[0];
	c->err = err[0];
	return true;
}

/* Reads fd until EOF or timeout into buf (NUL-terminated); bytes read. */
static size_t read_all(int fd, char *buf, size_t cap, int64_t timeout_ms)
{
	int64_t end = mono_ms() + timeout_ms;
	size_t len = 0;

	while (len + 1 < cap) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = end - mono_ms();
		ssize_t got;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		got = read(fd, buf + len, cap - 1 - len);
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	buf[len] = '\0';
	return len;
}

/* The child's first line of stdout into c->line; false after timeout_ms. */
static bool child_line(struct child *c, int64_t timeout_ms)
{
	int64_t end = mono_ms() + timeout_ms;
	size_t len = 0;

	while (len + 1 < sizeof(c->line)) {
		struct pollfd p = {.fd = c->out, .events = POLLIN};
		int64_t left = end - mono_ms();

		if (left <= 0 || poll(&p, 1, (int)left) <= 0 || read(c->out, &c->line[len], 1) != 1)
			break;
		if (c->line[len] == '\n') {
			c->line[len] = '\0';
			return true;
		}
		len++;
	}
	c->line[len] = '\0';
	return false;
}

/* Waits up to timeout_ms for the child; its exit status, or -1 (then it is
 * killed). */
static int child_wait(struct child *c, int64_t timeout_ms)
{
	int64_t end = mono_ms() + timeout_ms;
	int status = 0;

	for (;;) {
		pid_t r = waitpid(c->pid, &status, WNOHANG);

		if (r == c->pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (mono_ms() > end) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
			return -1;
		}
		sleep_ms(20);
	}
}

static void child_close(struct child *c)
{
	close(c->out);
	close(c->err);
}

/* SIGTERM, then the exit status. */
static int child_stop(struct child *c)
{
	int status;

	kill(c->pid, SIGTERM);
	status = child_wait(c, 5000);
	child_close(c);
	return status;
}

/* A server-mode simulator; its base URL "http://127.0.0.1:PORT" in base. */
static bool start_server(struct child *c, const char *const *args, char *base, size_t baselen)
{
	const char *p;

	if (!child_start(c, args) || !child_line(c, 10000)) {
		fprintf(stderr, "simulator did not start: \"%s\"\n", c->line);
		return false;
	}
	p = strstr(c->line, "listening on http://127.0.0.1:");
	if (!p)
		return false;
	p += strlen("listening on ");
	snprintf(base, baselen, "%.*s", (int)strcspn(p, ","), p);
	return true;
}

/* ---- HTTP --------------------------------------------------------------- */

struct body {
	char *text;
	size_t len;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct body *b = userdata;
	size_t n = size * nmemb;
	char *grown = realloc(b->text, b->len + n + 1);

	if (!grown)
		return 0;
	b->text = grown;
	memcpy(b->text + b->len, data, n);
	b->len += n;
	b->text[b->len] = '\0';
	return n;
}

static CURL *http;

/* GET url; the status, the body in *b (new, free b->text). */
static long get(const char *url, struct body *b)
{
	long status = 0;

	b->text = NULL;
	b->len = 0;
	curl_easy_setopt(http, CURLOPT_URL, url);
	curl_easy_setopt(http, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(http, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(http, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(http, CURLOPT_TIMEOUT_MS, 10000L);
	if (curl_easy_perform(http) != CURLE_OK)
		return -1;
	curl_easy_getinfo(http, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

/* GET base/hosts/h<host>/v1/usage[?at=T]. */
static long get_doc(const char *base, int host, int64_t at, struct body *b)
{
	char url[512], t[40];

	if (at) {
		agent_doc_format_time(at, t, sizeof(t));
		snprintf(url, sizeof(url), "%s/hosts/h%d/v1/usage?at=%s", base, host, t);
	} else {
		snprintf(url, sizeof(url), "%s/hosts/h%d/v1/usage", base, host);
	}
	return get(url, b);
}

/* Parses a document; the future check is relaxed to one day after at. */
static bool parse_doc(const struct body *b, int64_t at, struct sample_batch *out)
{
	char err[256];

	if (agent_doc_parse(b->text, b->len, at + 86400 * SEC, out, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "document rejected: %s\n", err);
		return false;
	}
	return true;
}

/* ---- server mode -------------------------------------------------------- */

static void test_server_basics(void)
{
	char base[128], want[1024], urls[4096], urls_path[64];
	const char *args[] = {"--hosts",   "3",	       "--sandboxes-per-host",
			      "5",	   "--listen", "127.0.0.1:0",
			      "--seed",	   "11",       "--start",
			      START,	   "--speed",  "60",
			      "--key-ids", "ka,kb",    "--urls-file",
			      urls_path,   NULL};
	struct child c;
	struct body b;
	FILE *f;
	size_t n;

	snprintf(urls_path, sizeof(urls_path), "/tmp/meter-sim-urls-%d", (int)getpid());
	unlink(urls_path);
	CHECK(start_server(&c, args, base, sizeof(base)));
	f = fopen(urls_path, "r");
	CHECK(f != NULL);
	n = f ? fread(urls, 1, sizeof(urls) - 1, f) : 0;
	urls[n] = '\0';
	if (f)
		fclose(f);
	snprintf(want, sizeof(want), "%s/hosts/h0\n%s/hosts/h1\n%s/hosts/h2\n", base, base, base);
	CHECK_STR(urls, want);
	unlink(urls_path);

	for (int h = 0; h < 3; h++) {
		struct sample_batch d;
		char id[16];

		CHECK_I64(get_doc(base, h, 0, &b), 200);
		sample_batch_init(&d);
		CHECK(b.text && parse_doc(&b, START_USEC, &d));
		snprintf(id, sizeof(id), "h%d", h);
		CHECK_STR(d.host_id, id);
		CHECK_I64(d.n, 5);
		/* speed 60 since launch, a few seconds at most */
		CHECK(d.sampled_at_usec >= START_USEC &&
		      d.sampled_at_usec < START_USEC + 60 * 60 * SEC);
		for (size_t j = 0; j < d.n; j++) {
			char prefix[32];

			CHECK_STR(d.items[j].key_id, (h * 5 + (int)j) % 2 ? "kb" : "ka");
			snprintf(prefix, sizeof(prefix), "sbx-h%d-%zu-g", h, j);
			CHECK(strncmp(d.items[j].sandbox_id, prefix, strlen(prefix)) == 0);
		}
		sample_batch_release(&d);
		free(b.text);
	}
	{
		static const char *const bad[] = {"/hosts/h3/v1/usage",
						  "/hosts/h01/v1/usage",
						  "/hosts/h/v1/usage",
						  "/hosts/h1/v1/usage/",
						  "/hosts/h-1/v1/usage",
						  "/v1/usage",
						  "/"};
		char url[256];

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(url, sizeof(url), "%s%s", base, bad[i]);
			CHECK_I64(get(url, &b), 404);
			free(b.text);
		}
		snprintf(url, sizeof(url), "%s/hosts/h1/v1/usage?at=yesterday", base);
		CHECK_I64(get(url, &b), 400);
		free(b.text);
		snprintf(url, sizeof(url), "%s/hosts/h1/v1/usage?at=1999-01-01T00:00:00Z", base);
		CHECK_I64(get(url, &b), 400);
		free(b.text);
		snprintf(url, sizeof(url), "%s/hosts/h1/v1/usage", base);
		curl_easy_setopt(http, CURLOPT_POSTFIELDS, "{}");
		curl_easy_setopt(http, CURLOPT_URL, url);
		b.text = NULL;
		b.len = 0;
		curl_easy_setopt(http, CURLOPT_WRITEDATA, &b);
		CHECK(curl_easy_perform(http) == CURLE_OK);
		{
			long status = 0;

			curl_easy_getinfo(http, CURLINFO_RESPONSE_CODE, &status);
			CHECK_I64(status, 405);
		}
		free(b.text);
	}
	CHECK_I64(child_stop(&c), 0);
}

/* Per-sandbox-slot tracking over a time series. */
struct track {
	char id[PARSE_ID_MAX + 1];
	struct usage_sample u;
	bool have;
};

struct tally {
	long samples, running, paused, stopped, resets, replaced;
	long running_intervals, idle_intervals, burst_intervals;
	long bad;
};

static void bad(struct tally *t, const char *what, const char *id, int64_t at)
{
	char when[40];

	agent_doc_format_time(at, when, sizeof(when));
	if (t->bad++ < 10)
		fprintf(stderr, "%s: %s at %s\n", id, what, when);
}

/* Checks the model's rules between the previous sample of a slot and s. */
static void observe(struct tally *t, struct track *tr, const struct meter_sample *s,
		    int64_t step_usec)
{
	const struct usage_sample *p = &tr->u, *c = &s->u;
	int64_t dt = c->at_usec - p->at_usec;
	int64_t cap_usec = (int64_t)c->vcpus * dt; /* vCPU-µs possible in dt */

	t->samples++;
	if (c->state == SANDBOX_RUNNING)
		t->running++;
	else if (c->state == SANDBOX_PAUSED)
		t->paused++;
	else
		t->stopped++;
	if ((c->state == SANDBOX_PAUSED) != (c->storage_mib > 0))
		bad(t, "storage_mib set unless paused", s->sandbox_id, c->at_usec);
	if (!(c->vcpus == 1 || c->vcpus == 2 || c->vcpus == 4 || c->vcpus == 8) ||
	    c->memory_mib < 1024 || c->memory_mib > 16384)
		bad(t, "size out of the model", s->sandbox_id, c->at_usec);
	if (!tr->have)
		goto keep;
	if (strcmp(tr->id, s->sandbox_id) != 0) {
		/* Replaced: the old one was seen stopped first (its stopped tail
		 * lasts at least a slot), the new one just booted. */
		t->replaced++;
		if (step_usec <= 60 * SEC && p->state != SANDBOX_STOPPED)
			bad(t, "replaced without being stopped", tr->id, c->at_usec);
		if (c->cpu_usec > cap_usec)
			bad(t, "a new sandbox's counter is not near 0", s->sandbox_id, c->at_usec);
		goto keep;
	}
	if (c->vcpus != p->vcpus || c->memory_mib != p->memory_mib)
		bad(t, "size changed", s->sandbox_id, c->at_usec);
	if (p->state == SANDBOX_STOPPED && c->state != SANDBOX_STOPPED)
		bad(t, "woke from stopped", s->sandbox_id, c->at_usec);
	if (c->cpu_usec < p->cpu_usec) {
		t->resets++;
		if (c->cpu_usec > cap_usec)
			bad(t, "counter reset not to near 0", s->sandbox_id, c->at_usec);
		goto keep;
	}
	if (c->cpu_usec - p->cpu_usec > cap_usec)
		bad(t, "CPU grew faster than its vCPUs", s->sandbox_id, c->at_usec);
	if ((p->state == SANDBOX_PAUSED && c->state == SANDBOX_PAUSED) ||
	    (p->state == SANDBOX_STOPPED)) {
		if (c->cpu_usec != p->cpu_usec)
			bad(t, "CPU grew while paused or stopped", s->sandbox_id, c->at_usec);
	}
	if (p->state == SANDBOX_RUNNING && c->state == SANDBOX_RUNNING && dt > 0) {
		int64_t mc = (c->cpu_usec - p->cpu_usec) * 1000 / dt;

		t->running_intervals++;
		if (mc <= 20)
			t->idle_intervals++;
		if (mc >= (int64_t)c->vcpus * 900)
			t->burst_intervals++;
	}
keep:
	memcpy(tr->id, s->sandbox_id, sizeof(tr->id));
	tr->u = *c;
	tr->have = true;
}

/* Walks hosts 0..2 of base over [from, from + span) by step, checking the
 * model's rules; returns the tally. */
static struct tally walk(const char *base, int64_t from, int64_t span, int64_t step)
{
	struct track tr[3][5];
	struct tally t;
	int64_t t0 = mono_ms();

	memset(tr, 0, sizeof(tr));
	memset(&t, 0, sizeof(t));
	for (int64_t at = from; at < from + span; at += step) {
		for (int h = 0; h < 3; h++) {
			struct sample_batch d;
			struct body b;

			sample_batch_init(&d);
			if (get_doc(base, h, at, &b) != 200 || !parse_doc(&b, at, &d) || d.n != 5 ||
			    d.sampled_at_usec != at) {
				t.bad++;
				free(b.text);
				sample_batch_release(&d);
				continue;
			}
			for (size_t j = 0; j < 5; j++)
				observe(&t, &tr[h][j], &d.items[j], step);
			free(b.text);
			sample_batch_release(&d);
		}
	}
	printf("walk %" PRId64 " s by %" PRId64 " s (%" PRId64
	       " ms): %ld samples, %ld running, %ld paused, %ld "
	       "stopped, %ld resets, %ld replaced; %ld of %ld running intervals idle, %ld bursts\n",
	       span / SEC, step / SEC, mono_ms() - t0, t.samples, t.running, t.paused, t.stopped,
	       t.resets, t.replaced, t.idle_intervals, t.running_intervals, t.burst_intervals);
	return t;
}

static void test_model_and_determinism(void)
{
	const char *a_args[] = {"--hosts", "3",	       "--sandboxes-per-host",
				"5",	   "--listen", "127.0.0.1:0",
				"--seed",  "42",       "--start",
				START,	   NULL};
	const char *c_args[] = {"--hosts", "2",	       "--sandboxes-per-host",
				"3",	   "--listen", "127.0.0.1:0",
				"--seed",  "42",       "--start",
				START,	   NULL};
	const char *d_args[] = {"--hosts", "3",	       "--sandboxes-per-host",
				"5",	   "--listen", "127.0.0.1:0",
				"--seed",  "43",       "--start",
				START,	   NULL};
	enum { NT = 40 };
	char base_a[128], base_b[128], base_c[128], base_d[128];
	struct child a, b, c, d;
	int64_t instants[NT];
	struct tally t;
	long differ = 0;

	CHECK(start_server(&a, a_args, base_a, sizeof(base_a)));
	CHECK(start_server(&b, a_args, base_b, sizeof(base_b)));
	CHECK(start_server(&c, c_args, base_c, sizeof(base_c)));
	CHECK(start_server(&d, d_args, base_d, sizeof(base_d)));

	/* Instants over three days, some within the same minute. */
	for (int i = 0; i < NT; i++)
		instants[i] = START_USEC + (int64_t)i * 6491 * SEC + (i % 3) * 17 * SEC + i;
	/* A ascending, B descending: the same bytes. */
	for (int i = 0; i < NT; i++) {
		for (int h = 0; h < 3; h++) {
			struct body x;

			CHECK_I64(get_doc(base_a, h, instants[i], &x), 200);
			free(x.text);
		}
	}
	for (int i = NT - 1; i >= 0; i--) {
		for (int h = 0; h < 3; h++) {
			struct body x, y, z;

			CHECK_I64(get_doc(base_b, h, instants[i], &y), 200);
			CHECK_I64(get_doc(base_a, h, instants[i], &x), 200);
			CHECK(x.text && y.text && x.len == y.len &&
			      memcmp(x.text, y.text, x.len) == 0);
			CHECK_I64(get_doc(base_d, h, instants[i], &z), 200);
			if (!z.text || !x.text || strcmp(x.text, z.text) != 0)
				differ++;
			/* A smaller fleet with the same seed: the same sandboxes. */
			if (h < 2) {
				struct sample_batch dx, dc;
				struct body w;

				sample_batch_init(&dx);
				sample_batch_init(&dc);
				CHECK_I64(get_doc(base_c, h, instants[i], &w), 200);
				CHECK(parse_doc(&x, instants[i], &dx) &&
				      parse_doc(&w, instants[i], &dc));
				CHECK_I64(dc.n, 3);
				for (size_t j = 0; j < dc.n && j < dx.n; j++) {
					CHECK_STR(dc.items[j].sandbox_id, dx.items[j].sandbox_id);
					CHECK(same_sample(&dc.items[j].u, &dx.items[j].u));
				}
				sample_batch_release(&dx);
				sample_batch_release(&dc);
				free(w.text);
			}
			free(x.text);
			free(y.text);
			free(z.text);
		}
	}
	CHECK_I64(differ, NT * 3);

	/* Six hours every 7 s: every rule, and the frozen CPU of pauses. */
	t = walk(base_a, START_USEC + 3 * 3600 * SEC, 6 * 3600 * SEC, 7 * SEC);
	CHECK_I64(t.bad, 0);
	CHECK(t.samples == 3 * 5 * (6 * 3600 / 7 + 1));
	CHECK(t.paused > 0 && t.stopped > 0 && t.replaced > 0);
	/* Three days every 67 s: resets, and the shape of the load. */
	t = walk(base_b, START_USEC, 3 * 86400 * SEC, 67 * SEC);
	CHECK_I64(t.bad, 0);
	CHECK(t.running > t.paused && t.paused > 0 && t.stopped > 0);
	CHECK(t.resets > 0 && t.replaced > 0 && t.burst_intervals > 0);
	CHECK(t.idle_intervals * 2 > t.running_intervals);

	/* Both again, after all that: still the same bytes. */
	for (int i = 0; i < NT; i += 7) {
		struct body x, y;

		CHECK_I64(get_doc(base_a, 1, instants[i], &x), 200);
		CHECK_I64(get_doc(base_b, 1, instants[i], &y), 200);
		CHECK(x.text && y.text && strcmp(x.text, y.text) == 0);
		free(x.text);
		free(y.text);
	}
	CHECK_I64(child_stop(&a), 0);
	CHECK_I64(child_stop(&b), 0);
	CHECK_I64(child_stop(&c), 0);
	CHECK_I64(child_stop(&d), 0);
}

static int64_t doc_time(const char *base)
{
	struct sample_batch d;
	struct body b;
	int64_t at = -1;

	sample_batch_init(&d);
	if (get_doc(base, 0, 0, &b) == 200 && parse_doc(&b, INT64_C(4102444800000000), &d))
		at = d.sampled_at_usec;
	free(b.text);
	sample_batch_release(&d);
	return at;
}

static void test_clock(void)
{
	const char *frozen[] = {"--hosts", "1",	       "--sandboxes-per-host",
				"2",	   "--listen", "127.0.0.1:0",
				"--start", START,      "--speed",
				"0",	   NULL};
	const char *fast[] = {"--hosts",
			      "1",
			      "--sandboxes-per-host",
			      "2",
			      "--listen",
			      "127.0.0.1:0",
			      "--start",
			      START,
			      "--speed",
			      "1440",
			      "--duration-s",
			      "2",
			      NULL};
	char base[128];
	struct child c;
	int64_t t1, t2, w1, w2, t0;

	CHECK(start_server(&c, frozen, base, sizeof(base)));
	t1 = doc_time(base);
	sleep_ms(300);
	t2 = doc_time(base);
	CHECK_I64(t1, START_USEC);
	CHECK_I64(t2, START_USEC);
	CHECK_I64(child_stop(&c), 0);

	t0 = mono_ms();
	CHECK(start_server(&c, fast, base, sizeof(base)));
	w1 = mono_ms();
	t1 = doc_time(base);
	sleep_ms(500);
	w2 = mono_ms();
	t2 = doc_time(base);
	/* 1440 simulated seconds per second: within the measuring slack. */
	CHECK(t2 - t1 >= (w2 - w1 - 60) * 1440 * 1000 && t2 - t1 <= (w2 - w1 + 60) * 1440 * 1000);
	/* --duration-s 2: it stops by itself. */
	CHECK_I64(child_wait(&c, 5000), 0);
	CHECK(mono_ms() - t0 >= 1900);
	child_close(&c);
}

static void test_bad_arguments(void)
{
	static const char *const cases[][12] = {
	    {NULL},
	    {"--hosts", "2", NULL},
	    {"--hosts", "0", "--sandboxes-per-host", "1", "--listen", "127.0.0.1:0", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "x", "--listen", "127.0.0.1:0", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "100001", "--listen", "127.0.0.1:0", NULL},
	    {"--hosts", "100000", "--sandboxes-per-host", "100", "--listen", "127.0.0.1:0", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "nohost", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--push",
	     "http://127.0.0.1:1/v1/samples", "--token", "t", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--push", "http://127.0.0.1:1/x", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--push", "ftp://x", "--token", "t",
	     NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--start",
	     "yesterday", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--speed",
	     "-1", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--key-ids",
	     "a,,b", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--bogus", "1",
	     NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--steps", "3",
	     NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", NULL},
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--push", "http://127.0.0.1:1/x",
	     "--token", "a b", NULL},
	    /* Each option once, as every meterctl command takes it. */
	    {"--hosts", "2", "--sandboxes-per-host", "2", "--listen", "127.0.0.1:0", "--seed", "1",
	     "--seed", "2", NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[4096], err[4096];
		struct child c;
		int status, lines = 0;

		CHECK(child_start(&c, cases[i]));
		status = child_wait(&c, 5000);
		read_all(c.out, out, sizeof(out), 1000);
		read_all(c.err, err, sizeof(err), 1000);
		child_close(&c);
		for (char *p = err; *p; p++)
			lines += *p == '\n';
		if (status != 2 || lines != 1 || out[0])
			fprintf(stderr, "bad-argument case %zu: status %d, stderr \"%s\"\n", i,
				status, err);
		CHECK_I64(status, 2);
		CHECK_I64(lines, 1);
		CHECK_STR(out, "");
	}
}

/* ---- push mode ---------------------------------------------------------- */

enum recv_mode { RECV_OK, RECV_503_FIRST, RECV_401 };

struct receiver {
	struct MHD_Daemon *d;
	int port;
	enum recv_mode mode;
	int fail_first;
	pthread_mutex_t lock;
	int requests;
	char *accepted[256]; /* bodies answered 2xx, in order */
	int naccepted;
	bool auth_ok;
};

struct upload {
	char *text;
	size_t len;
};

static enum MHD_Result recv_request(void *cls, struct MHD_Connection *c, const char *url,
				    const char *method, const char *version, const char *data,
				    size_t *size, void **state)
{
	struct receiver *r = cls;
	struct upload *u = *state;
	struct MHD_Response *resp;
	const char *auth;
	unsigned status = 200;
	enum MHD_Result ret;

	(void)version;
	if (!u) {
		u = calloc(1, sizeof(*u));
		*state = u;
		return u ? MHD_YES : MHD_NO;
	}
	if (*size) {
		char *grown = realloc(u->text, u->len + *size + 1);

		if (!grown)
			return MHD_NO;
		u->text = grown;
		memcpy(u->text + u->len, data, *size);
		u->len += *size;
		u->text[u->len] = '\0';
		*size = 0;
		return MHD_YES;
	}
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	pthread_mutex_lock(&r->lock);
	r->requests++;
	if (!auth || strcmp(auth, "Bearer tok-123") != 0 || strcmp(method, "POST") != 0 ||
	    strcmp(url, "/v1/samples") != 0)
		r->auth_ok = false;
	if (r->mode == RECV_401)
		status = 401;
	else if (r->mode == RECV_503_FIRST && r->requests <= r->fail_first)
		status = 503;
	if (status == 200 && r->naccepted < 256) {
		r->accepted[r->naccepted++] = u->text;
		u->text = NULL;
	}
	pthread_mutex_unlock(&r->lock);
	resp = MHD_create_response_from_buffer(
	    status == 401 ? strlen("{\"error\":{\"code\":\"unauthorized\"}}") : 2,
	    (void *)(status == 401 ? "{\"error\":{\"code\":\"unauthorized\"}}" : "{}"),
	    MHD_RESPMEM_PERSISTENT);
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void recv_done(void *cls, struct MHD_Connection *c, void **state,
		      enum MHD_RequestTerminationCode code)
{
	struct upload *u = *state;

	(void)cls;
	(void)c;
	(void)code;
	if (u) {
		free(u->text);
		free(u);
		*state = NULL;
	}
}

static bool recv_start(struct receiver *r, enum recv_mode mode, int fail_first, int port)
{
	struct sockaddr_in sa;
	const union MHD_DaemonInfo *info;

	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	r->mode = mode;
	r->fail_first = fail_first;
	r->auth_ok = true;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	r->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL,
				recv_request, r, MHD_OPTION_SOCK_ADDR, &sa,
				MHD_OPTION_NOTIFY_COMPLETED, recv_done, r, MHD_OPTION_END);
	if (!r->d)
		return false;
	info = MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
	r->port = info ? info->port : 0;
	return r->port > 0;
}

static void recv_stop(struct receiver *r)
{
	if (r->d)
		MHD_stop_daemon(r->d);
	for (int i = 0; i < r->naccepted; i++)
		free(r->accepted[i]);
	pthread_mutex_destroy(&r->lock);
}

/* Runs a push of 3 hosts × 4 sandboxes, 4 steps, into port; the status. */
static int push(int port, const char *speed, struct child *c, char *err, size_t errlen)
{
	char url[128];
	const char *args[] = {"--push",
			      url,
			      "--token",
			      "tok-123",
			      "--hosts",
			      "3",
			      "--sandboxes-per-host",
			      "4",
			      "--seed",
			      "5",
			      "--start",
			      START,
			      "--speed",
			      speed,
			      "--steps",
			      "4",
			      "--key-ids",
			      "k1,k2,k3",
			      NULL};
	char out[4096];
	int status;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/samples", port);
	if (!child_start(c, args))
		return -1;
	status = child_wait(c, 30000);
	read_all(c->out, out, sizeof(out), 1000);
	read_all(c->err, err, errlen, 1000);
	child_close(c);
	return status;
}

static void test_push(void)
{
	struct receiver r1, r2, r3, r4, r5;
	struct child c;
	char err[4096];
	int64_t t0;
	int port;

	/* Two runs, the same bodies. */
	CHECK(recv_start(&r1, RECV_OK, 0, 0));
	CHECK_I64(push(r1.port, "0", &c, err, sizeof(err)), 0);
	CHECK(recv_start(&r2, RECV_OK, 0, 0));
	CHECK_I64(push(r2.port, "0", &c, err, sizeof(err)), 0);
	CHECK_I64(r1.naccepted, 12);
	CHECK_I64(r2.naccepted, 12);
	CHECK(r1.auth_ok && r2.auth_ok);
	for (int i = 0; i < r1.naccepted && i < r2.naccepted; i++) {
		struct sample_batch d;
		struct body b = {.text = r1.accepted[i], .len = strlen(r1.accepted[i])};
		char host[8];

		CHECK_STR(r1.accepted[i], r2.accepted[i]);
		sample_batch_init(&d);
		CHECK(parse_doc(&b, START_USEC, &d));
		snprintf(host, sizeof(host), "h%d", i % 3);
		CHECK_STR(d.host_id, host);
		CHECK_I64(d.sampled_at_usec, START_USEC + (i / 3) * 10 * SEC);
		CHECK_I64(d.n, 4);
		for (size_t j = 0; j < d.n; j++) {
			static const char *const keys[] = {"k1", "k2", "k3"};

			CHECK_STR(d.items[j].key_id, keys[((size_t)(i % 3) * 4 + j) % 3]);
		}
		sample_batch_release(&d);
	}

	/* 503 for the first 5 requests: every document, once, in order;
	 * why it retried said once. */
	CHECK(recv_start(&r3, RECV_503_FIRST, 5, 0));
	CHECK_I64(push(r3.port, "0", &c, err, sizeof(err)), 0);
	CHECK_I64(r3.requests, 12 + 5);
	CHECK_I64(r3.naccepted, 12);
	CHECK(strstr(err, "answered HTTP 503, retrying: {}") != NULL);
	CHECK(strchr(err, '\n') == err + strlen(err) - 1);
	for (int i = 0; i < r3.naccepted && i < r1.naccepted; i++)
		CHECK_STR(r3.accepted[i], r1.accepted[i]);

	/* Nobody listening at first: the receiver comes up later and still
	 * gets everything. Paced: 4 steps of 10 s at speed 50 = 0.6 s. */
	CHECK(recv_start(&r4, RECV_OK, 0, 0));
	port = r4.port;
	recv_stop(&r4);
	{
		char url[128];
		const char *args[] = {"--push",
				      url,
				      "--token",
				      "tok-123",
				      "--hosts",
				      "3",
				      "--sandboxes-per-host",
				      "4",
				      "--seed",
				      "5",
				      "--start",
				      START,
				      "--speed",
				      "50",
				      "--steps",
				      "4",
				      "--key-ids",
				      "k1,k2,k3",
				      NULL};

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/samples", port);
		t0 = mono_ms();
		CHECK(child_start(&c, args));
		sleep_ms(400);
		CHECK(recv_start(&r4, RECV_OK, 0, port));
		CHECK_I64(child_wait(&c, 30000), 0);
		CHECK(mono_ms() - t0 >= 600);
		child_close(&c);
		CHECK_I64(r4.naccepted, 12);
		for (int i = 0; i < r4.naccepted && i < r1.naccepted; i++)
			CHECK_STR(r4.accepted[i], r1.accepted[i]);
	}

	/* 401: fatal, one line. */
	CHECK(recv_start(&r5, RECV_401, 0, 0));
	CHECK_I64(push(r5.port, "0", &c, err, sizeof(err)), 1);
	CHECK(strstr(err, "HTTP 401") != NULL);
	CHECK(strchr(err, '\n') == err + strlen(err) - 1);
	CHECK_I64(r5.requests, 1);

	/* SIGTERM while retrying against a receiver that is down. */
	{
		char url[128];
		const char *args[] = {
		    "--push", url,	 "--token", "t", "--hosts", "1", "--sandboxes-per-host",
		    "1",      "--start", START,	    NULL};
		int status;

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/samples", port);
		recv_stop(&r4);
		r4.d = NULL;
		r4.naccepted = 0;
		CHECK(child_start(&c, args));
		CHECK(child_line(&c, 5000));
		CHECK(strstr(c.line, "simulate: pushing 1 hosts") != NULL);
		sleep_ms(300);
		t0 = mono_ms();
		status = child_stop(&c);
		CHECK_I64(status, 0);
		CHECK(mono_ms() - t0 < 3000);
	}
	/* --duration-s ending a run of --steps before they were all pushed
	 * (nobody listening): a run that did not do its work, status 1; a
	 * run of no --steps that it ends is done (test_clock). */
	{
		char url[128];
		const char *args[] = {
		    "--push",  url,   "--token", "t", "--hosts", "1", "--sandboxes-per-host", "1",
		    "--start", START, "--speed", "0", "--steps", "2", "--duration-s",	      "1",
		    NULL};

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/samples", port);
		CHECK(child_start(&c, args));
		CHECK_I64(child_wait(&c, 10000), 1);
		read_all(c.err, err, sizeof(err), 1000);
		child_close(&c);
		CHECK(strstr(err, "--duration-s ended the run with 0 of 2 steps pushed") != NULL);
		/* Why it retried, said once for all its retries. */
		CHECK(strstr(err, "failed, retrying: ") != NULL);
		CHECK(strstr(err, "retrying") == strstr(err, "retrying: "));
		CHECK(strstr(strstr(err, "retrying: ") + 1, "retrying") == NULL);
	}
	recv_stop(&r1);
	recv_stop(&r2);
	recv_stop(&r3);
	recv_stop(&r5);
}

int main(void)
{
	const char *dir = getenv("METER_BIN_DIR");

	if (!dir) {
		fprintf(stderr, "METER_BIN_DIR is not set\n");
		return 1;
	}
	snprintf(meterctl, sizeof(meterctl), "%s/meterctl", dir);
	signal(SIGPIPE, SIG_IGN);
	CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
	http = curl_easy_init();
	CHECK(http != NULL);
	test_server_basics();
	test_model_and_determinism();
	test_clock();
	test_bad_arguments();
	test_push();
	curl_easy_cleanup(http);
	curl_global_cleanup();
	return check_done();
}
