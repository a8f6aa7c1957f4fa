/* Load on one real meterd over loopback (bounded in count and time):
 *
 *   0. meterd starts under a soft open-file limit of 512 and raises its own
 *      so its connection limit fits;
 *   1. baseline: the latency of a client asking for a key (authentication,
 *      a database read), PROBES times, half on new connections and half on
 *      kept-alive ones;
 *   2. HELD keep-alive connections are opened and kept in use (each asks
 *      for /healthz again every second or so), slow clients trickle a
 *      header or a body a byte a second (slowloris), others connect and
 *      send nothing or half a header, and some start the body of a GET
 *      refused before it (no credentials): those are answered and closed
 *      at once, never left reading a body nobody will use; the same probe
 *      must then stay within its normal latency (p99 <= max(5 x baseline
 *      p99, 50 ms));
 *   3. the server's peak memory (VmHWM) stays within a per-connection
 *      budget over its idle size;
 *   4. the server times out what is idle (silent, stalled, and the held
 *      connections once they stop) after connection_timeout_s, and what is
 *      slow (tricklers, never idle) after request_timeout_s;
 *   5. large exports started and read slowly meanwhile: other clients are
 *      still served (p99 as above, and none waits behind an export's
 *      query), one more export gets 429 too_many_exports, and once the
 *      readers stall their slots are freed by the idle timeout;
 *   6. stopping meterd while exports are starting is a clean exit.
 *
 * The figures (connections held, p50/p99 before and during, peak RSS) are
 * printed for the README. LOAD_DEBUG=1 prints the slowest probes too. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "rawhttp.h"

#define HELD		    1000 /* keep-alive connections held at once */
#define SLOW_HEADERS	    40	 /* clients trickling a header */
#define SLOW_BODIES	    40	 /* clients trickling a body */
#define SLOW_REFUSALS	    10	 /* clients trickling the body of a refused GET */
#define SILENT		    20	 /* clients that connect and send nothing */
#define STALLED		    20	 /* clients that send half a header, then nothing */
#define SLOW_TOTAL	    (SLOW_HEADERS + SLOW_BODIES + SLOW_REFUSALS + SILENT + STALLED)
#define PROBES		    300
#define CONN_TIMEOUT_S	    5  /* meterd --connection-timeout-s */
#define REQUEST_TIMEOUT_S   10 /* meterd --request-timeout-s */
#define STR_(x)		    #x
#define STR(x)		    STR_(x)
#define CONN_TIMEOUT_ARG    STR(CONN_TIMEOUT_S)
#define REQUEST_TIMEOUT_ARG STR(REQUEST_TIMEOUT_S)
#define TRICKLE_MS	    1000
#define SLACK_MS	    2500 /* timers of the server and of this test */
#define IO_TIMEOUT_MS	    10000
#define EXPORT_READERS	    4 /* REPORTS_CONCURRENT in api/h_reports.c */
#define EXPORT_SANDBOXES    100
#define EXPORT_HOURS	    720
#define LATENCY_FLOOR_US    50000

static struct apitest t;
static int port;
static char acc[65], key_id[65], tok_full[APITEST_TOKEN_MAX];
static char probe_req[512];
static size_t probe_len;

/* The slow clients, watched by one thread. */
enum slow_kind { SLOW_HEADER, SLOW_BODY, SLOW_REFUSED, SLOW_SILENT, SLOW_STALLED };
struct slow {
	int fd;
	enum slow_kind kind;
	long long opened_ms;
	long long last_sent_ms;
	_Atomic long long closed_ms; /* 0 while open; the main thread watches it */
	size_t got;		     /* response bytes received before the close */
};
static struct slow slows[SLOW_TOTAL];
static atomic_int slow_mode; /* 0: trickle, 1: only watch, 2: return */

/* The held connections, kept busy by one thread. */
static int held[HELD];
static long long held_last_ms[HELD];
static atomic_bool keep_stop;
static atomic_int keep_rounds, keep_failures;

static long long t_start_ms;

/* Notes the start of a phase, with the seconds since the test began. */
static void phase(const char *what)
{
	printf("load: [%5.1f s] %s\n", (rawhttp_now_ms() - t_start_ms) / 1000.0, what);
	fflush(stdout);
}

static const char healthz_req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of n sorted values. */
static long long pct(const long long *v, int n, int p)
{
	int i = (n * p + 99) / 100 - 1;

	return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* Open file descriptors of pid, or -1. */
static int proc_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Keep-alive probe connections: a client that keeps its connection (as
 * the control plane does) is served by the server thread that accepted it,
 * so it also sees that thread being busy with something else. */
#define PROBE_KEEPALIVE 8
static int probe_conns[PROBE_KEEPALIVE] = {-1, -1, -1, -1, -1, -1, -1, -1};
static char probe_ka_req[512];
static size_t probe_ka_len;

/* One probe: even numbers on a new connection, odd ones on a kept-alive
 * one. Returns its latency in µs, or -1 when it did not get a 200. */
static long long probe_one(int i)
{
	struct rawhttp_resp r = {0};
	long long t0 = rawhttp_now_usec(), lat;
	int ok;

	if (i % 2 == 0) {
		ok = rawhttp_request(port, probe_req, probe_len, IO_TIMEOUT_MS, &r) == 0 &&
		     r.status == 200;
	} else {
		int *fd = &probe_conns[(i / 2) % PROBE_KEEPALIVE];

		if (*fd < 0)
			*fd = rawhttp_connect(port);
		ok = *fd >= 0 &&
		     rawhttp_send(*fd, probe_ka_req, probe_ka_len, IO_TIMEOUT_MS) == 0 &&
		     rawhttp_read(*fd, IO_TIMEOUT_MS, 65536, &r) == 0 && r.status == 200;
		if (*fd >= 0 && (!ok || r.closed)) {
			close(*fd);
			*fd = -1;
		}
	}
	lat = rawhttp_now_usec() - t0;
	if (!ok)
		fprintf(stderr, "probe %d: status %d\n", i, r.status);
	rawhttp_resp_release(&r);
	return ok ? lat : -1;
}

/* Closes the kept-alive probe connections (before they would time out). */
static void probe_close(void)
{
	for (int i = 0; i < PROBE_KEEPALIVE; i++) {
		if (probe_conns[i] >= 0)
			close(probe_conns[i]);
		probe_conns[i] = -1;
	}
}

/* Runs n probes, latencies in µs into lat (sorted on return). Returns the
 * number that did not get a 200. */
static int probe_run(int n, long long *lat)
{
	int bad = 0;

	for (int i = 0; i < n; i++) {
		lat[i] = probe_one(i);
		if (lat[i] < 0) {
			bad++;
			lat[i] = IO_TIMEOUT_MS * 1000LL;
		}
	}
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_ll);
	if (getenv("LOAD_DEBUG") && n > 12) {
		fprintf(stderr, "probe latencies (us), slowest:");
		for (int i = n - 12; i < n; i++)
			fprintf(stderr, " %lld", lat[i]);
		fprintf(stderr, "\n");
	}
	return bad;
}

/* One round over the held connections: a request on each, sent in
 * batches of HELD_BATCH and then answered (a client with many connections
 * keeps several requests in flight). Returns how many failed (those are
 * closed); records when each was last answered. */
#define HELD_BATCH 50
static int held_round(void)
{
	int failed = 0;

	for (int b = 0; b < HELD; b += HELD_BATCH) {
		int e = b + HELD_BATCH < HELD ? b + HELD_BATCH : HELD;

		for (int i = b; i < e; i++)
			if (held[i] >= 0 &&
			    rawhttp_send(held[i], healthz_req, sizeof(healthz_req) - 1,
					 IO_TIMEOUT_MS) != 0) {
				close(held[i]);
				held[i] = -1;
			}
		for (int i = b; i < e; i++) {
			struct rawhttp_resp r;

			if (held[i] < 0) {
				failed++;
				continue;
			}
			if (rawhttp_read(held[i], IO_TIMEOUT_MS, 65536, &r) == 0 &&
			    r.status == 200 && !r.closed) {
				held_last_ms[i] = rawhttp_now_ms();
			} else {
				failed++;
				close(held[i]);
				held[i] = -1;
			}
			rawhttp_resp_release(&r);
		}
	}
	return failed;
}

/* Keeps every held connection in use: a round every second or so, well
 * within the idle timeout. */
static void *keeper(void *arg)
{
	(void)arg;
	while (!atomic_load(&keep_stop)) {
		struct timespec pause = {.tv_sec = 1};

		atomic_fetch_add(&keep_failures, held_round());
		atomic_fetch_add(&keep_rounds, 1);
		nanosleep(&pause, NULL);
	}
	return NULL;
}

/* Opens slow client i of kind k and sends what it sends at once. */
static int slow_open(int i, enum slow_kind k)
{
	char head[512];
	int n = 0;

	slows[i].kind = k;
	slows[i].fd = rawhttp_connect(port);
	slows[i].opened_ms = slows[i].last_sent_ms = rawhttp_now_ms();
	if (slows[i].fd < 0)
		return -1;
	switch (k) {
	case SLOW_HEADER:
		n = snprintf(head, sizeof(head),
			     "GET /v1/keys/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", key_id);
		break;
	case SLOW_BODY:
		n = snprintf(head, sizeof(head),
			     "PUT /v1/keys/%s/limits HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			     "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
			     "Content-Length: 4000\r\n\r\n{\"time_zone\":\"",
			     key_id, tok_full);
		break;
	case SLOW_REFUSED:
		/* No credentials: 401 is decided before the body comes. */
		n = snprintf(head, sizeof(head),
			     "GET /v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			     "Content-Length: 4000\r\n\r\n{");
		break;
	case SLOW_STALLED:
		n = snprintf(head, sizeof(head), "GET /v1/keys HTTP/1.1\r\nHo");
		break;
	case SLOW_SILENT:
		return 0;
	}
	return rawhttp_send(slows[i].fd, head, (size_t)n, IO_TIMEOUT_MS);
}

/* Notes a slow client the server closed. */
static void slow_closed(struct slow *s)
{
	s->closed_ms = rawhttp_now_ms();
	close(s->fd);
	s->fd = -1;
}

/* Trickles a byte a second into the header and body tricklers (until
 * told to stop) and notes when the server closes any slow client. */
static void *trickler(void *arg)
{
	struct pollfd pfd[SLOW_TOTAL];

	(void)arg;
	for (;;) {
		int n = 0, idx[SLOW_TOTAL];
		long long now = rawhttp_now_ms();

		for (int i = 0; i < SLOW_TOTAL; i++) {
			if (slows[i].fd < 0)
				continue;
			if (slows[i].kind <= SLOW_REFUSED && atomic_load(&slow_mode) == 0 &&
			    now - slows[i].last_sent_ms >= TRICKLE_MS) {
				if (send(slows[i].fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
					slows[i].last_sent_ms = now;
				} else if (errno != EAGAIN) {
					slow_closed(&slows[i]);
					continue;
				}
			}
			pfd[n].fd = slows[i].fd;
			pfd[n].events = POLLIN;
			pfd[n].revents = 0;
			idx[n++] = i;
		}
		if (n == 0)
			break;
		if (poll(pfd, (nfds_t)n, 100) < 0 && errno != EINTR)
			break;
		for (int j = 0; j < n; j++) {
			struct slow *s = &slows[idx[j]];
			char buf[4096];
			ssize_t got;

			if (!pfd[j].revents)
				continue;
			got = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got > 0)
				s->got += (size_t)got;
			else if (got == 0 || (errno != EAGAIN && errno != EINTR))
				slow_closed(s);
		}
		if (atomic_load(&slow_mode) == 2)
			break;
	}
	return NULL;
}

/* Sets this process's soft open-file limit (meterd inherits it). */
static int set_nofile(rlim_t soft)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || soft > rl.rlim_max)
		return -1;
	rl.rlim_cur = soft;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

/* The soft "Max open files" of pid, or -1. */
static long long proc_nofile(pid_t pid)
{
	char path[64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Max open files", 14) == 0)
			v = strtoll(line + 14, NULL, 10);
	fclose(f);
	return v;
}

/* Raises this process's open-file limit. */
static int raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return -1;
	if (rl.rlim_cur >= want)
		return 0;
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
		return -1;
	return 0;
}

/* Usage rows enough for an export of several megabytes: EXPORT_SANDBOXES
 * sandboxes of the key, each with EXPORT_HOURS hours from 2026-01-01. */
static void export_data(void)
{
	char sql[2048];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " SELECT '%s', 'sbx_' || i, '%s', 1, 512, 'running'"
		 " FROM generate_series(1, %d) i",
		 acc, key_id, EXPORT_SANDBOXES);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	/* The rows are consistent by construction: skip the per-row foreign
	 * key triggers, which would make this the slowest part of the test. */
	CHECK_STR(testdb_exec_state(t.db.conn, "SET session_replication_role = replica"), "00000");
	snprintf(sql, sizeof(sql),
		 "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id,"
		 " day, running_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, cpu_micros,"
		 " memory_micros, total_micros, cpu_cum_micros, memory_cum_micros)"
		 " SELECT '%s', 'sbx_' || s, timestamptz '2026-01-01 00:00:00+00' + h * interval"
		 " '1 hour', 1, '%s', ((timestamptz '2026-01-01 00:00:00+00' + h * interval"
		 " '1 hour') AT TIME ZONE 'UTC')::date, 3600000000, 1000000, 1000000, 1000000, 1,"
		 " 2, 3, 1, 2 FROM generate_series(1, %d) s, generate_series(0, %d) h",
		 acc, key_id, EXPORT_SANDBOXES, EXPORT_HOURS - 1);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	CHECK_STR(testdb_exec_state(t.db.conn, "RESET session_replication_role"), "00000");
}

/* Sends an export request of the whole range on a new connection with a
 * small receive buffer (64 KiB) and reads only the response head. Returns the
 * socket (the body left unread) and the status in *status, or -1. */
static int export_open(int *status)
{
	char req[1024], head[8192];
	size_t got = 0;
	int fd, n, small = 65536;
	long long deadline = rawhttp_now_ms() + IO_TIMEOUT_MS;

	*status = 0;
	fd = rawhttp_connect(port);
	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) != 0) {
		close(fd);
		return -1;
	}
	n = snprintf(req, sizeof(req),
		     "GET /v1/reports/usage.csv?from=2026-01-01T00:00:00Z&to=2026-01-31T00:00:00Z"
		     " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n",
		     tok_full);
	if (rawhttp_send(fd, req, (size_t)n, IO_TIMEOUT_MS) != 0) {
		close(fd);
		return -1;
	}
	while (got < sizeof(head) - 1 && rawhttp_now_ms() < deadline) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t r;

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		/* A byte at a time: the body stays in the socket. */
		r = recv(fd, head + got, 1, 0);
		if (r <= 0)
			break;
		got++;
		head[got] = '\0';
		if (got >= 4 && memcmp(head + got - 4, "\r\n\r\n", 4) == 0) {
			if (strncmp(head, "HTTP/1.1 ", 9) == 0)
				*status = (int)strtol(head + 9, NULL, 10);
			return fd;
		}
	}
	close(fd);
	return -1;
}

/* The slow export readers: 64 KiB every 200 ms each (320 KiB/s, while
 * the export is several megabytes) while export_mode is 0. */
static atomic_int readers[EXPORT_READERS]; /* -1: none */
static atomic_int export_mode;		   /* 0: read slowly, 1: stop reading (stall), 2: return */
static atomic_llong export_bytes;

static void *export_reader(void *arg)
{
	(void)arg;
	while (atomic_load(&export_mode) != 2) {
		struct timespec pause = {.tv_nsec = 200 * 1000000L};

		for (int i = 0; i < EXPORT_READERS && atomic_load(&export_mode) == 0; i++) {
			char buf[65536];
			ssize_t n;

			int fd = atomic_load(&readers[i]);

			if (fd < 0)
				continue;
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n > 0)
				atomic_fetch_add(&export_bytes, n);
		}
		nanosleep(&pause, NULL);
	}
	return NULL;
}

/* A one-day export on a new connection: its status (200, 429...), and for
 * a 429 the error code in code (64 bytes). */
static int export_small(char *code)
{
	char req[1024];
	struct rawhttp_resp r;
	int n, st;

	code[0] = '\0';
	n = snprintf(
	    req, sizeof(req),
	    "GET /v1/reports/usage.ndjson?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"
	    " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	    "Connection: close\r\n\r\n",
	    tok_full);
	rawhttp_request(port, req, (size_t)n, IO_TIMEOUT_MS, &r);
	st = r.status;
	if (st != 200 && r.body) {
		json_t *j = json_loads(r.body, 0, NULL);
		const char *c =
		    json_string_value(json_object_get(json_object_get(j, "error"), "code"));
		char after[16];

		snprintf(code, 64, "%s", c ? c : "");
		json_decref(j);
		/* A refusal for want of a slot says when to come back. */
		if (st == 429)
			CHECK_STR(rawhttp_header(&r, "Retry-After", after, sizeof(after)), "1");
	}
	if (st == 200 && r.body_len == 0)
		st = -1; /* a day of 100 sandboxes is never empty */
	rawhttp_resp_release(&r);
	return st;
}

/* Opens the export readers one after the other (each waits for its
 * response head), while the main thread measures other clients. */
static atomic_int readers_opened = -1; /* -1 while opening, then how many got 200 */

static void *export_opener(void *arg)
{
	int ok = 0;

	(void)arg;
	for (int i = 0; i < EXPORT_READERS; i++) {
		long long t1 = rawhttp_now_usec();
		int st;

		readers[i] = export_open(&st);
		if (getenv("LOAD_DEBUG"))
			fprintf(stderr, "export %d: head after %lld us\n", i,
				rawhttp_now_usec() - t1);
		ok += readers[i] >= 0 && st == 200;
	}
	atomic_store(&readers_opened, ok);
	return NULL;
}

/* Phase 5: slow readers of a large export, started while other clients
 * are being served: an export's query and its rows are work of its own,
 * never of the threads that serve everyone. */
static void test_export_readers(long long baseline_p99)
{
	static long long lat[PROBES * 20];
	long long bound, until;
	pthread_t th, opener;
	char code[64];
	int st, bad = 0, n = 0, freed_ms = -1;
	long long t0;

	for (int i = 0; i < EXPORT_READERS; i++)
		readers[i] = -1;
	CHECK(pthread_create(&opener, NULL, export_opener, NULL) == 0);
	CHECK(pthread_create(&th, NULL, export_reader, NULL) == 0);
	/* Probes while the exports start and are read slowly: as long as the
	 * opening takes and at least PROBES, then PROBES more. */
	until = -1;
	while (n < PROBES * 20 && (until < 0 || rawhttp_now_ms() < until || n < PROBES)) {
		lat[n] = probe_one(n);
		if (lat[n] < 0) {
			bad++;
			lat[n] = IO_TIMEOUT_MS * 1000LL;
		}
		n++;
		if (until < 0 && atomic_load(&readers_opened) >= 0)
			until = rawhttp_now_ms() + 1000;
	}
	pthread_join(opener, NULL);
	probe_close();
	CHECK_I64(atomic_load(&readers_opened), EXPORT_READERS);
	CHECK_I64(bad, 0);
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_ll);
	if (getenv("LOAD_DEBUG") && n > 12) {
		fprintf(stderr, "probe latencies (us), slowest:");
		for (int i = n - 12; i < n; i++)
			fprintf(stderr, " %lld", lat[i]);
		fprintf(stderr, "\n");
	}
	bound = baseline_p99 * 5 > LATENCY_FLOOR_US ? baseline_p99 * 5 : LATENCY_FLOOR_US;
	printf("load: while %d large exports start and are read slowly (%d requests): p50 %.2f ms,"
	       " p99 %.2f ms, max %.2f ms (bound on p99 %.2f ms), %lld export bytes read\n",
	       EXPORT_READERS, n, pct(lat, n, 50) / 1000.0, pct(lat, n, 99) / 1000.0,
	       lat[n - 1] / 1000.0, bound / 1000.0, (long long)atomic_load(&export_bytes));
	CHECK(pct(lat, n, 99) <= bound);
	/* No client waits behind an export's query (each takes longer). */
	CHECK(lat[n - 1] <= (bound * 5 > 250000 ? bound * 5 : 250000));
	CHECK(atomic_load(&export_bytes) > 0);
	/* Every export slot is taken: one more is told so, clearly. */
	st = export_small(code);
	CHECK_I64(st, 429);
	CHECK_STR(code, "too_many_exports");

	/* The readers stall: the server cannot write, the connections go idle
	 * and are timed out, and their export slots come free. */
	atomic_store(&export_mode, 1);
	t0 = rawhttp_now_ms();
	while (rawhttp_now_ms() - t0 < CONN_TIMEOUT_S * 1000 + SLACK_MS + 1000) {
		struct timespec pause = {.tv_nsec = 250 * 1000000L};

		st = export_small(code);
		if (st == 200) {
			freed_ms = (int)(rawhttp_now_ms() - t0);
			break;
		}
		CHECK_I64(st, 429);
		nanosleep(&pause, NULL);
	}
	printf("load: stalled export readers timed out, slots free after %d ms\n", freed_ms);
	CHECK(freed_ms >= 0);
	atomic_store(&export_mode, 2);
	pthread_join(th, NULL);
	for (int i = 0; i < EXPORT_READERS; i++)
		if (readers[i] >= 0)
			close(readers[i]);
}

int main(void)
{
	const char *args[] = {"--max-connections",
			      "2000",
			      "--connection-timeout-s",
			      CONN_TIMEOUT_ARG,
			      "--request-timeout-s",
			      REQUEST_TIMEOUT_ARG,
			      "--collector",
			      "off",
			      NULL};
	static long long base[PROBES], during[PROBES];
	long long rss_idle, hwm, bound_lat, hwm_bound, t_keep_stop, t_phase;
	pthread_t keep_th, slow_th;
	int bad, opened = 0, fds;
	bool held_ok;

	signal(SIGPIPE, SIG_IGN);
	if (raise_nofile(8192) != 0) {
		printf("load: cannot raise the open-file limit to 8192; skipped\n");
		return 77;
	}
	t_start_ms = rawhttp_now_ms();
	/* meterd starts under a soft open-file limit of 512, as services
	 * often do (1024): it must raise its own to fit its connections. */
	if (set_nofile(512) != 0 || apitest_start(&t, "load", 1, args, NULL) < 0)
		return 1;
	if (set_nofile(8192) != 0)
		return 1;
	{
		long long soft = proc_nofile(t.servers[0].pid);

		printf("load: meterd started under an open-file limit of 512 and raised it to"
		       " %lld\n",
		       soft);
		CHECK(soft >= 2000);
	}
	port = t.servers[0].port;
	CHECK(apitest_create_account(&t, "load", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key_id, tok_full) == 0);
	probe_len = (size_t)snprintf(probe_req, sizeof(probe_req),
				     "GET /v1/keys/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
				     "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
				     key_id, tok_full);
	probe_ka_len = (size_t)snprintf(probe_ka_req, sizeof(probe_ka_req),
					"GET /v1/keys/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
					"Authorization: Bearer %s\r\n\r\n",
					key_id, tok_full);
	phase("meterd started; usage rows for the export phase");
	export_data();

	/* 1. Baseline. */
	phase("baseline");
	bad = probe_run(PROBES, base);
	probe_close();
	CHECK_I64(bad, 0);
	rss_idle = apitest_proc_kib(t.servers[0].pid, "VmRSS");
	printf("load: baseline (%d requests, half on new connections, half kept alive): p50 %.2f "
	       "ms, p99 %.2f ms;"
	       " RSS %lld KiB\n",
	       PROBES, pct(base, PROBES, 50) / 1000.0, pct(base, PROBES, 99) / 1000.0, rss_idle);

	/* 2. HELD keep-alive connections, each served once, then kept busy. */
	phase("held connections and slow clients");
	t_phase = rawhttp_now_ms();
	for (int i = 0; i < HELD; i++)
		held[i] = rawhttp_connect(port);
	opened = HELD - held_round();
	printf("load: %d keep-alive connections opened and served in %lld ms\n", opened,
	       rawhttp_now_ms() - t_phase);
	CHECK_I64(opened, HELD);
	CHECK(pthread_create(&keep_th, NULL, keeper, NULL) == 0);

	/* Slow clients: trickling a header, a body; silent; stalled. */
	for (int i = 0; i < SLOW_TOTAL; i++) {
		enum slow_kind k = i < SLOW_HEADERS				    ? SLOW_HEADER
				   : i < SLOW_HEADERS + SLOW_BODIES		    ? SLOW_BODY
				   : i < SLOW_HEADERS + SLOW_BODIES + SLOW_REFUSALS ? SLOW_REFUSED
				   : i < SLOW_TOTAL - STALLED			    ? SLOW_SILENT
										    : SLOW_STALLED;
		CHECK(slow_open(i, k) == 0);
	}
	CHECK(pthread_create(&slow_th, NULL, trickler, NULL) == 0);

	/* 3. Other clients while all that is held. */
	phase("other clients while they are held");
	bad = probe_run(PROBES, during);
	probe_close();
	CHECK_I64(bad, 0);
	fds = proc_fds(t.servers[0].pid);
	bound_lat = pct(base, PROBES, 99) * 5 > LATENCY_FLOOR_US ? pct(base, PROBES, 99) * 5
								 : LATENCY_FLOOR_US;
	printf("load: during (%d keep-alive connections held and busy, %d slow clients, meterd"
	       " has %d open files): p50 %.2f ms, p99 %.2f ms (bound %.2f ms)\n",
	       opened, SLOW_TOTAL, fds, pct(during, PROBES, 50) / 1000.0,
	       pct(during, PROBES, 99) / 1000.0, bound_lat / 1000.0);
	CHECK(pct(during, PROBES, 99) <= bound_lat);
	CHECK(fds >= HELD); /* they really were held by the server */

	/* The held connections all stayed served, through several rounds. */
	while (atomic_load(&keep_rounds) < 3)
		usleep(50 * 1000);
	atomic_store(&keep_stop, true);
	pthread_join(keep_th, NULL);
	t_keep_stop = rawhttp_now_ms();
	printf("load: %d rounds over the held connections, %d failures\n",
	       atomic_load(&keep_rounds), atomic_load(&keep_failures));
	CHECK_I64(atomic_load(&keep_failures), 0);

	/* 4. Memory: the peak, against a budget per connection over idle. */
	hwm = apitest_proc_kib(t.servers[0].pid, "VmHWM");
	hwm_bound = rss_idle + (HELD + SLOW_TOTAL) * 128LL;
	printf("load: meterd peak RSS (VmHWM) %lld KiB (idle %lld KiB, bound %lld KiB)\n", hwm,
	       rss_idle, hwm_bound);
	CHECK(hwm > 0 && hwm <= hwm_bound);

	/* 5. Timeouts. Idle held connections: closed after the idle timeout. */
	phase("timeouts");
	held_ok = true;
	for (int i = 0; i < HELD; i++) {
		long long left;
		int c;

		if (held[i] < 0)
			continue;
		left = held_last_ms[i] + CONN_TIMEOUT_S * 1000 + SLACK_MS - rawhttp_now_ms();
		c = rawhttp_wait_closed(held[i], left > 0 ? (int)left : 0);
		if (c != 1 || rawhttp_now_ms() - held_last_ms[i] < (CONN_TIMEOUT_S - 1) * 1000) {
			if (held_ok)
				fprintf(stderr, "held %d: closed %d after %lld ms idle\n", i, c,
					rawhttp_now_ms() - held_last_ms[i]);
			held_ok = false;
		}
		close(held[i]);
		held[i] = -1;
	}
	CHECK(held_ok);
	printf("load: idle keep-alive connections closed by the server %d s after their last"
	       " request (%lld ms after the last round)\n",
	       CONN_TIMEOUT_S, rawhttp_now_ms() - t_keep_stop);

	/* Slow clients: the idle ones after the idle timeout, the tricklers
	 * (never idle) after the request timeout. */
	{
		long long until = rawhttp_now_ms() + REQUEST_TIMEOUT_S * 1000 + SLACK_MS;
		int open_left;

		do {
			open_left = 0;
			for (int i = 0; i < SLOW_TOTAL; i++)
				open_left += slows[i].closed_ms == 0;
			if (open_left)
				usleep(100 * 1000);
		} while (open_left && rawhttp_now_ms() < until);
		atomic_store(&slow_mode, 2);
		pthread_join(slow_th, NULL);
	}
	for (int k = SLOW_HEADER; k <= SLOW_STALLED; k++) {
		static const char *const names[] = {"header tricklers", "body tricklers",
						    "refused-body tricklers", "silent clients",
						    "stalled clients"};
		long long lo = -1, hi = -1;
		int n = 0, closed = 0;
		size_t got = 0;

		for (int i = 0; i < SLOW_TOTAL; i++) {
			long long after;

			if (slows[i].kind != (enum slow_kind)k)
				continue;
			n++;
			if (!slows[i].closed_ms)
				continue;
			closed++;
			got += slows[i].got;
			after = slows[i].closed_ms -
				(k <= SLOW_REFUSED ? slows[i].opened_ms : slows[i].last_sent_ms);
			lo = lo < 0 || after < lo ? after : lo;
			hi = after > hi ? after : hi;
		}
		printf("load: %d %s: %d closed by the server after %lld..%lld ms (%zu response"
		       " bytes)\n",
		       n, names[k], closed, lo, hi, got);
		CHECK_I64(closed, n);
		if (k == SLOW_REFUSED) {
			CHECK(hi <= SLACK_MS);
			CHECK(got >= (size_t)n * sizeof("HTTP/1.1 401"));
		} else if (k <= SLOW_BODY) {
			CHECK(lo >= (REQUEST_TIMEOUT_S - 1) * 1000);
			CHECK(hi <= REQUEST_TIMEOUT_S * 1000 + SLACK_MS);
		} else {
			CHECK(lo >= (CONN_TIMEOUT_S - 1) * 1000);
			CHECK(hi <= CONN_TIMEOUT_S * 1000 + SLACK_MS);
		}
	}
	for (int i = 0; i < SLOW_TOTAL; i++)
		if (slows[i].fd >= 0)
			close(slows[i].fd);
	/* Counted: at least the header and body tricklers were cut. */
	CHECK(apitest_metric(&t, 0, "meter_http_slow_requests_cut_total") >=
	      SLOW_HEADERS + SLOW_BODIES);

	/* 6. Slow readers of a large export. */
	phase("slow export readers");
	test_export_readers(pct(base, PROBES, 99));

	/* Still alive and well. */
	{
		struct apitest_resp r;

		CHECK(apitest_call(&t, 0, "GET", "/healthz", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
	}
	printf("load: figures: %d keep-alive connections held + %d slow clients; p50/p99"
	       " before %.2f/%.2f ms, during %.2f/%.2f ms; peak RSS %lld KiB\n",
	       opened, SLOW_TOTAL, pct(base, PROBES, 50) / 1000.0, pct(base, PROBES, 99) / 1000.0,
	       pct(during, PROBES, 50) / 1000.0, pct(during, PROBES, 99) / 1000.0, hwm);
	/* Stopping while exports are starting (their connections parked while
	 * the query runs) is still a clean exit. */
	{
		int st, efd[2];

		for (int i = 0; i < 2; i++) {
			char req[1024];
			int n = snprintf(req, sizeof(req),
					 "GET /v1/reports/usage.csv?from=2026-01-01T00:00:00Z&to="
					 "2026-01-31T00:00:00Z HTTP/1.1\r\nHost: 127.0.0.1\r\n"
					 "Authorization: Bearer %s\r\n\r\n",
					 tok_full);

			efd[i] = rawhttp_connect(port);
			CHECK(efd[i] >= 0 &&
			      rawhttp_send(efd[i], req, (size_t)n, IO_TIMEOUT_MS) == 0);
		}
		usleep(100 * 1000);
		st = apitest_stop_one(&t, 0);
		CHECK_I64(st, 0);
		for (int i = 0; i < 2; i++)
			if (efd[i] >= 0)
				close(efd[i]);
	}
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
