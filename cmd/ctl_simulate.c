/* meterctl simulate: a fleet of host agents for demos, tests and benchmarks.
 *
 * Server mode (--listen HOST:PORT): one libmicrohttpd server answers
 * GET /hosts/h<i>/v1/usage for every host i in [0, N) with the host-agent
 * document of DESIGN.md §3 at the current simulated instant (or at ?at=TIME,
 * an RFC 3339 instant, for tests). --urls-file writes the N agent base URLs,
 * one per line, for the collector (METER_AGENTS_FILE).
 *
 * Push mode (--push URL --token T): for steps 0, 1, ... (up to --steps), at
 * the simulated instants start + step × period, POSTs every host's document
 * to URL in host order, retrying each POST until it is answered 2xx
 * (at-least-once delivery; each kind of failure said once on stderr); a
 * 4xx other than 408 and 429 is fatal.
 *
 * The simulated clock: simulated time = start + (wall time since launch) ×
 * speed, in integer microseconds. --speed 0 stops the clock at --start in
 * server mode, and sends the push steps back to back without waiting.
 *
 * The model. A sandbox's state at an instant is a pure function of (seed,
 * host, sandbox, instant): nothing depends on how often or in which order it
 * is asked, so two simulators with the same seed agree byte for byte.
 * - Time is cut into 60 s slots. Each sandbox slot j of host i lives through
 *   generations of 2 to 12 hours (its own length and phase): each generation
 *   is a new sandbox "sbx-h<i>-<j>-g<g>" with its own size (1, 2, 4 or 8
 *   vCPUs, 1 to 16 GiB), booted at its start (counter 0), stopped for its
 *   last slots (state "stopped", then it is gone and the next is created).
 * - A generation is a run of episodes of 5 to 30 minutes (per sandbox); the
 *   first runs, each later one is paused with probability 35% (state
 *   "paused", CPU frozen, storage_mib = the snapshot size).
 * - A running slot is idle at 2 to 20 millicores (88%), busy at 100 to 599
 *   (8%), or a burst at all vCPUs (4%).
 * - A quarter of the generations have a counter reset at one slot: cpu_usec
 *   restarts from 0 there (the VM moved), the state goes on.
 * - cpu_usec is the exact integral of the slot rates since the counter
 *   started: Σ full slots (rate × 60,000 µs) + floor(rate × offset / 1000).
 * Each sandbox keeps a cache of its counter at the start of the last slot
 * asked, so a poll costs the slots elapsed since the previous one; the cache
 * only saves work, it never changes an answer. */
#include "ctl.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_doc.h"
#include "clock.h"
#include "config.h"
#include "ctl_args.h"
#include "parse.h"
#include "sample.h"
#include "url.h"

#define SIM_SLOT_USEC	 INT64_C(60000000)
#define SIM_USEC_PER_SEC INT64_C(1000000)
#define SIM_HOSTS_MAX	 INT64_C(100000)
#define SIM_TOTAL_MAX	 INT64_C(2000000) /* sandboxes in the fleet */
#define SIM_KEYS_MAX	 10000
#define SIM_SPEED_MAX	 INT64_C(1000000)
#define SIM_TIME_MIN	 INT64_C(946684800000000)    /* 2000-01-01T00:00:00Z */
#define SIM_TIME_MAX	 INT64_C(221845392000000000) /* 9000-01-01T00:00:00Z */
#define SIM_ITEM_MAX	 400			     /* bytes of one rendered sandbox, at most */
#define SIM_HEAD_MAX	 256
#define SIM_TOKEN_MAX	 512
#define SIM_RETRY_MIN_MS 50
#define SIM_RETRY_MAX_MS 2000
#define SIM_POST_TIMEOUT 30000L
#define SIM_ERR_BODY_MAX 300

enum sim_tag { SIM_TAG_BOX = 1, SIM_TAG_GEN, SIM_TAG_EPISODE, SIM_TAG_SLOT };

/* One sandbox slot of one host: its fixed shape and the counter cache. */
struct sim_box {
	int32_t gen_slots;     /* generation length, slots */
	int32_t phase;	       /* offset of its generations, slots */
	int32_t episode_slots; /* episode length, slots */
	int32_t cache_k;       /* slot (within cache_g) the cache is at */
	int64_t cache_g;       /* generation of the cache; INT64_MIN = empty */
	int64_t cache_cum;     /* cpu µs from the counter's start to slot cache_k */
};

/* One generation of a sandbox slot. */
struct sim_gen {
	int64_t g;
	int32_t stop_k;	 /* first stopped slot */
	int32_t reset_k; /* slot where the counter restarts; -1 = none */
	int32_t vcpus;
	int32_t memory_mib;
	int32_t storage_mib;
};

struct sim {
	uint64_t seed;
	int64_t hosts;
	int64_t per_host;
	char **keys; /* borrowed from keys_text */
	size_t nkeys;
	char *keys_text;
	struct sim_box *boxes; /* hosts × per_host */
	char *buf;	       /* one rendered document */
	size_t buflen;
	/* the clock */
	int64_t start_usec;
	int64_t speed;
	int64_t launch_mono_usec;
};

struct sim_opts {
	int64_t hosts, per_host, seed, speed, period_s, steps, duration_s;
	const char *listen, *start, *urls_file, *key_ids, *push, *token;
};

static volatile sig_atomic_t sim_stop;

static void sim_on_signal(int sig)
{
	(void)sig;
	sim_stop = 1;
}

__attribute__((format(printf, 1, 2))) static void sim_fail(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)fprintf(stderr, "meterctl simulate: %s\n", msg);
}

/* Sleeps up to ms, returning early on a signal. */
static void sim_sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
			      .tv_nsec = (long)(ms % 1000) * 1000000};

	(void)nanosleep(&ts, NULL);
}

/* ---- the model ---------------------------------------------------------- */

/* splitmix64's finaliser. */
static uint64_t sim_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15u;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* A 64-bit value from (seed, tag, a, b, c, d): the only source of chance. */
static uint64_t sim_hash(uint64_t seed, enum sim_tag tag, uint64_t a, uint64_t b, uint64_t c,
			 uint64_t d)
{
	uint64_t h = sim_mix(seed ^ ((uint64_t)tag << 56));

	h = sim_mix(h ^ a);
	h = sim_mix(h ^ b);
	h = sim_mix(h ^ c);
	return sim_mix(h ^ d);
}

static void sim_box_init(const struct sim *s, int64_t host, int64_t j, struct sim_box *b)
{
	uint64_t r = sim_hash(s->seed, SIM_TAG_BOX, (uint64_t)host, (uint64_t)j, 0, 0);

	b->gen_slots = 120 + (int32_t)(r % 601); /* 2 to 12 hours */
	b->phase = (int32_t)((r >> 20) % (uint64_t)b->gen_slots);
	b->episode_slots = 5 + (int32_t)((r >> 40) % 26); /* 5 to 30 minutes */
	b->cache_g = INT64_MIN;
	b->cache_k = 0;
	b->cache_cum = 0;
}

/* The generation holding absolute slot abs_slot (>= 0), and the slot's index
 * k within it. */
static void sim_gen_at(const struct sim *s, int64_t host, int64_t j, const struct sim_box *b,
		       int64_t abs_slot, struct sim_gen *gen, int32_t *k)
{
	static const int32_t vcpu_choices[] = {1, 2, 2, 2, 4, 4, 8};
	int64_t x = abs_slot + b->phase;
	int32_t tail;
	uint64_t r;

	gen->g = x / b->gen_slots;
	*k = (int32_t)(x - gen->g * b->gen_slots);
	r = sim_hash(s->seed, SIM_TAG_GEN, (uint64_t)host, (uint64_t)j, (uint64_t)gen->g, 0);
	gen->vcpus = vcpu_choices[r % 7];
	gen->memory_mib = gen->vcpus * 1024 * (1 + (int32_t)((r >> 8) % 2));
	if (gen->memory_mib < 1024)
		gen->memory_mib = 1024;
	if (gen->memory_mib > 16384)
		gen->memory_mib = 16384;
	gen->storage_mib = gen->memory_mib / 2 + (int32_t)((r >> 16) % 1024);
	tail = 1 + (int32_t)((r >> 24) % (uint64_t)(b->gen_slots / 8));
	gen->stop_k = b->gen_slots - tail;
	if ((r >> 40) % 100 < 25)
		gen->reset_k = 1 + (int32_t)((r >> 48) % (uint64_t)(gen->stop_k - 1));
	else
		gen->reset_k = -1;
}

/* True when episode e of a generation is a pause (the first never is). */
static bool sim_paused(const struct sim *s, int64_t host, int64_t j, const struct sim_gen *gen,
		       int32_t e)
{
	uint64_t r;

	if (e == 0)
		return false;
	r = sim_hash(s->seed, SIM_TAG_EPISODE, (uint64_t)host, (uint64_t)j, (uint64_t)gen->g,
		     (uint64_t)e);
	return r % 100 < 35;
}

/* Rate (millicores) and state of slot k of a generation. */
static int64_t sim_slot(const struct sim *s, int64_t host, int64_t j, const struct sim_box *b,
			const struct sim_gen *gen, int32_t k, const char **state)
{
	int64_t cap = (int64_t)gen->vcpus * 1000, rate;
	uint64_t r, u;

	if (k >= gen->stop_k) {
		*state = "stopped";
		return 0;
	}
	if (sim_paused(s, host, j, gen, k / b->episode_slots)) {
		*state = "paused";
		return 0;
	}
	*state = "running";
	r = sim_hash(s->seed, SIM_TAG_SLOT, (uint64_t)host, (uint64_t)j, (uint64_t)gen->g,
		     (uint64_t)k);
	u = r % 1000;
	if (u < 40)
		return cap; /* a burst on every vCPU */
	if (u < 120) {
		rate = 100 + (int64_t)((r >> 16) % 500);
		return rate < cap ? rate : cap;
	}
	return 2 + (int64_t)((r >> 16) % 19); /* waiting on the model */
}

struct sim_sample {
	int64_t g;
	const char *state;
	int64_t cpu_usec;
	int32_t vcpus;
	int32_t memory_mib;
	int32_t storage_mib; /* the snapshot while paused, else 0 */
};

/* The sample of sandbox slot j of host at instant t (SIM_TIME_MIN..MAX). */
static void sim_sample_at(struct sim *s, int64_t host, int64_t j, int64_t t, struct sim_sample *out)
{
	struct sim_box *b = &s->boxes[host * s->per_host + j];
	int64_t abs_slot = t / SIM_SLOT_USEC, off = t - abs_slot * SIM_SLOT_USEC;
	int64_t cum, rate;
	int32_t k, from, counter_start;
	struct sim_gen gen;
	const char *state;

	sim_gen_at(s, host, j, b, abs_slot, &gen, &k);
	counter_start = gen.reset_k >= 0 && k >= gen.reset_k ? gen.reset_k : 0;
	if (b->cache_g == gen.g && b->cache_k <= k && b->cache_k >= counter_start) {
		from = b->cache_k;
		cum = b->cache_cum;
	} else {
		from = counter_start;
		cum = 0;
	}
	for (int32_t kk = from; kk < k; kk++)
		cum += sim_slot(s, host, j, b, &gen, kk, &state) * (SIM_SLOT_USEC / 1000);
	b->cache_g = gen.g;
	b->cache_k = k;
	b->cache_cum = cum;
	rate = sim_slot(s, host, j, b, &gen, k, &state);
	out->g = gen.g;
	out->state = state;
	out->cpu_usec = cum + rate * off / 1000;
	out->vcpus = gen.vcpus;
	out->memory_mib = gen.memory_mib;
	out->storage_mib = strcmp(state, "paused") == 0 ? gen.storage_mib : 0;
}

/* ---- rendering ---------------------------------------------------------- */

/* Appends text at p without its NUL (a document is used by its length) and
 * returns the new end. */
static char *sim_put(char *p, const char *text)
{
	size_t n = strlen(text);

	memcpy(p, text, n); /* NOLINT(bugprone-not-null-terminated-result) */
	return p + n;
}

static char *sim_put_u64(char *p, uint64_t v)
{
	char tmp[24];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

/* Renders host's document at t into s->buf; returns its length. The buffer
 * holds SIM_HEAD_MAX + per_host × SIM_ITEM_MAX bytes, more than any
 * document needs. */
static size_t sim_render(struct sim *s, int64_t host, int64_t t)
{
	char at[40];
	char *p = s->buf;

	agent_doc_format_time(t, at, sizeof(at));
	p = sim_put(p, "{\"host_id\":\"h");
	p = sim_put_u64(p, (uint64_t)host);
	p = sim_put(p, "\",\"sampled_at\":\"");
	p = sim_put(p, at);
	p = sim_put(p, "\",\"sandboxes\":[");
	for (int64_t j = 0; j < s->per_host; j++) {
		struct sim_sample x;

		sim_sample_at(s, host, j, t, &x);
		p = sim_put(p, j ? ",{\"sandbox_id\":\"sbx-h" : "{\"sandbox_id\":\"sbx-h");
		p = sim_put_u64(p, (uint64_t)host);
		*p++ = '-';
		p = sim_put_u64(p, (uint64_t)j);
		p = sim_put(p, "-g");
		p = sim_put_u64(p, (uint64_t)x.g);
		if (s->nkeys) {
			p = sim_put(p, "\",\"key_id\":\"");
			p = sim_put(p, s->keys[(host * s->per_host + j) % (int64_t)s->nkeys]);
		}
		p = sim_put(p, "\",\"state\":\"");
		p = sim_put(p, x.state);
		p = sim_put(p, "\",\"vcpus\":");
		p = sim_put_u64(p, (uint64_t)x.vcpus);
		p = sim_put(p, ",\"memory_mib\":");
		p = sim_put_u64(p, (uint64_t)x.memory_mib);
		p = sim_put(p, ",\"storage_mib\":");
		p = sim_put_u64(p, (uint64_t)x.storage_mib);
		p = sim_put(p, ",\"cpu_usec\":");
		p = sim_put_u64(p, (uint64_t)x.cpu_usec);
		*p++ = '}';
	}
	p = sim_put(p, "]}");
	return (size_t)(p - s->buf);
}

/* The simulated instant now: start + elapsed wall time × speed. */
static int64_t sim_now(const struct sim *s)
{
	__int128 t = (__int128)(clock_mono_usec() - s->launch_mono_usec) * s->speed + s->start_usec;

	return t > SIM_TIME_MAX ? SIM_TIME_MAX : (int64_t)t;
}

/* ---- server mode -------------------------------------------------------- */

static enum MHD_Result sim_reply(struct MHD_Connection *c, unsigned status, const char *body,
				 size_t len)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (MHD_add_response_header(r, "Content-Type", "application/json") != MHD_YES) {
		MHD_destroy_response(r);
		return MHD_NO;
	}
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result sim_error(struct MHD_Connection *c, unsigned status, const char *code,
				 const char *message)
{
	char body[256];
	int n = snprintf(body, sizeof(body), "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}",
			 code, message);

	return sim_reply(c, status, body, (size_t)n);
}

/* Host index of "/hosts/h<i>/v1/usage" (i without leading zeros), or -1. */
static int64_t sim_host_of(const struct sim *s, const char *url)
{
	static const char prefix[] = "/hosts/h", suffix[] = "/v1/usage";
	const char *p = url + sizeof(prefix) - 1, *digits;
	char num[24];
	int64_t i;

	if (strncmp(url, prefix, sizeof(prefix) - 1) != 0)
		return -1;
	digits = p;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == digits || (size_t)(p - digits) >= sizeof(num) || strcmp(p, suffix) != 0)
		return -1;
	memcpy(num, digits, (size_t)(p - digits));
	num[p - digits] = '\0';
	if (parse_int64(num, 0, s->hosts - 1, &i) != METER_OK)
		return -1;
	return i;
}

/* Runs on libmicrohttpd's one thread: requests are answered one at a time,
 * so the sandboxes' caches and the render buffer need no lock. */
static enum MHD_Result sim_on_request(void *cls, struct MHD_Connection *c, const char *url,
				      const char *method, const char *version, const char *upload,
				      size_t *upload_size, void **state)
{
	struct sim *s = cls;
	const char *at_text;
	int64_t host, t;
	size_t len;

	(void)version;
	(void)upload;
	if (!*state) {
		/* The headers are in; answering on the next call, once the
		 * request is complete, lets libmicrohttpd keep the connection. */
		*state = s;
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0; /* a body is never wanted: ignore it */
		return MHD_YES;
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return sim_error(c, 405, "method_not_allowed", "only GET is served");
	host = sim_host_of(s, url);
	if (host < 0)
		return sim_error(c, 404, "not_found", "no such agent: GET /hosts/h<i>/v1/usage");
	t = sim_now(s);
	at_text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "at");
	if (at_text && (agent_doc_parse_time(at_text, &t) != METER_OK || t < SIM_TIME_MIN ||
			t >= SIM_TIME_MAX))
		return sim_error(c, 400, "invalid_request",
				 "at: must be an RFC 3339 time from 2000 to 8999");
	len = sim_render(s, host, t);
	return sim_reply(c, 200, s->buf, len);
}

/* Writes the agents' URLs to path (through a temporary file and a rename,
 * so a reader never sees half a list). */
static int sim_write_urls(const struct sim *s, const char *path, const char *base)
{
	char tmp[4096];
	FILE *f;
	int bad = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		sim_fail("--urls-file: path too long");
		return 1;
	}
	f = fopen(tmp, "w");
	if (!f) {
		sim_fail("--urls-file: cannot write %s: %s", tmp, strerror(errno));
		return 1;
	}
	for (int64_t i = 0; i < s->hosts; i++)
		if (fprintf(f, "%s/hosts/h%" PRId64 "\n", base, i) < 0)
			bad = 1;
	if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
		sim_fail("--urls-file: cannot write %s", path);
		(void)unlink(tmp);
		return 1;
	}
	return 0;
}

/* More descriptors for a large fleet's connections, up to the hard limit. */
static void sim_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static bool sim_expired(const struct sim_opts *o, const struct sim *s)
{
	return o->duration_s > 0 &&
	       clock_mono_usec() - s->launch_mono_usec >= o->duration_s * SIM_USEC_PER_SEC;
}

static int sim_serve(struct sim *s, const struct sim_opts *o)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	char host[256], port_s[8], base[300], start_text[40];
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	/* poll(), not epoll: libmicrohttpd 0.9.75's epoll loop can hold a burst
	 * of exactly 128 or 256 requests unserved until another event comes
	 * (see api/server.h), and a collector reading 256 agents of one
	 * simulator at once makes just such bursts. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
	int port, gai;

	if (config_listen_split(o->listen, host, sizeof(host), &port) != METER_OK) {
		sim_fail("--listen: expected host:port or [v6]:port, got \"%.100s\"", o->listen);
		return 2;
	}
	if (strcmp(host, "localhost") == 0)
		(void)snprintf(host, sizeof(host), "127.0.0.1");
	(void)snprintf(port_s, sizeof(port_s), "%d", port);
	gai = getaddrinfo(host, port_s, &hints, &ai);
	if (gai != 0) {
		sim_fail("--listen: %s: %s (use a numeric address)", host, gai_strerror(gai));
		return 2;
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	sim_raise_nofile();
	d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, sim_on_request, s,
			     MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, 10000u,
			     MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_LISTEN_BACKLOG_SIZE,
			     1024u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		sim_fail("cannot listen on %s (address in use or not permitted?)", o->listen);
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	port = info && info->port ? info->port : port;
	if (strcmp(host, "0.0.0.0") == 0)
		(void)snprintf(host, sizeof(host), "127.0.0.1");
	if (strcmp(host, "::") == 0)
		(void)snprintf(host, sizeof(host), "::1");
	(void)snprintf(base, sizeof(base), strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d",
		       host, port);
	if (o->urls_file && sim_write_urls(s, o->urls_file, base) != 0) {
		MHD_stop_daemon(d);
		return 1;
	}
	agent_doc_format_time(s->start_usec, start_text, sizeof(start_text));
	printf("simulate: listening on %s, agents %s/hosts/h0 .. h%" PRId64 " (%" PRId64
	       " sandboxes each), seed %" PRId64 ", start %s, speed %" PRId64 "\n",
	       base, base, s->hosts - 1, s->per_host, o->seed, start_text, s->speed);
	if (fflush(stdout) == EOF) {
		MHD_stop_daemon(d);
		return 1;
	}
	while (!sim_stop && !sim_expired(o, s))
		sim_sleep_ms(50);
	MHD_stop_daemon(d);
	return 0;
}

/* ---- push mode ---------------------------------------------------------- */

struct sim_resp {
	char text[SIM_ERR_BODY_MAX + 1];
	size_t len;
};

/* Keeps the first SIM_ERR_BODY_MAX bytes of a response, for error lines. */
static size_t sim_on_resp(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct sim_resp *r = userdata;
	size_t n = size * nmemb, room = SIM_ERR_BODY_MAX - r->len;

	if (room > n)
		room = n;
	memcpy(r->text + r->len, data, room);
	r->len += room;
	r->text[r->len] = '\0';
	return n;
}

/* Aborts a transfer in flight when a signal asks to stop. */
static int sim_on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			   curl_off_t ulnow)
{
	(void)clientp;
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return sim_stop ? 1 : 0;
}

enum sim_post { SIM_POSTED, SIM_STOPPED, SIM_FATAL };

/* Why a push's POSTs were retried: each kind of failure (a libcurl error,
 * or an HTTP status) is said once, the first time, so that a service away
 * for an hour writes a line for it, not one for each of thousands of
 * retries; the last line counts them all. */
struct sim_retry_told {
	long kinds[32]; /* -CURLcode, or an HTTP status */
	size_t n;
};

/* Says why a POST is retried (cc, else the HTTP status; detail: libcurl's
 * words, or the answer's body), unless told says it was already. */
static void sim_retry_tell(struct sim_retry_told *told, const struct sim_opts *o, CURLcode cc,
			   long status, char *detail)
{
	long kind = cc != CURLE_OK ? -(long)cc : status;

	for (size_t i = 0; i < told->n; i++)
		if (told->kinds[i] == kind)
			return;
	if (told->n == sizeof(told->kinds) / sizeof(told->kinds[0]))
		return;
	told->kinds[told->n++] = kind;
	for (char *p = detail; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (cc != CURLE_OK)
		sim_fail("POST %s failed, retrying: %s (said once; the last line counts the "
			 "retries)",
			 o->push, detail[0] ? detail : curl_easy_strerror(cc));
	else
		sim_fail("POST %s answered HTTP %ld, retrying: %s (said once; the last line "
			 "counts the retries)",
			 o->push, status, detail);
}

/* POSTs body until a 2xx answer. Connection errors, 408, 429 and 5xx are
 * retried with a doubling pause (50 ms to 2 s), each kind said once on
 * stderr (told); any other status is fatal (one line on stderr). errbuf:
 * e's CURLOPT_ERRORBUFFER. SIM_STOPPED on a signal or at --duration-s. */
static enum sim_post sim_post(CURL *e, char *errbuf, const char *body, size_t len,
			      const struct sim_opts *o, const struct sim *s, uint64_t *retries,
			      struct sim_retry_told *told)
{
	int64_t pause_ms = SIM_RETRY_MIN_MS;

	for (;;) {
		struct sim_resp resp = {.len = 0};
		CURLcode cc;
		long status = 0;

		resp.text[0] = '\0';
		errbuf[0] = '\0';
		if (curl_easy_setopt(e, CURLOPT_POSTFIELDS, body) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_WRITEDATA, &resp) != CURLE_OK) {
			sim_fail("cannot set up the POST");
			return SIM_FATAL;
		}
		cc = curl_easy_perform(e);
		if (cc == CURLE_OK) {
			(void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
			if (status >= 200 && status < 300)
				return SIM_POSTED;
			if (status >= 400 && status < 500 && status != 408 && status != 429) {
				for (size_t i = 0; i < resp.len; i++)
					if (resp.text[i] == '\n' || resp.text[i] == '\r')
						resp.text[i] = ' ';
				sim_fail("POST %s: HTTP %ld: %s", o->push, status, resp.text);
				return SIM_FATAL;
			}
		}
		if (sim_stop || sim_expired(o, s))
			return SIM_STOPPED;
		sim_retry_tell(told, o, cc, status, cc != CURLE_OK ? errbuf : resp.text);
		(*retries)++;
		sim_sleep_ms(pause_ms);
		if (sim_stop || sim_expired(o, s))
			return SIM_STOPPED;
		pause_ms = pause_ms * 2 > SIM_RETRY_MAX_MS ? SIM_RETRY_MAX_MS : pause_ms * 2;
	}
}

static int sim_push(struct sim *s, const struct sim_opts *o)
{
	char auth[SIM_TOKEN_MAX + 32], start_text[40], steps_text[32], errbuf[CURL_ERROR_SIZE];
	struct sim_retry_told told = {.n = 0};
	struct curl_slist *headers = NULL, *h2;
	int64_t period_usec = o->period_s * SIM_USEC_PER_SEC, step;
	uint64_t docs = 0, retries = 0;
	CURL *e = curl_easy_init();
	CURLcode cc = CURLE_OK;
	int status = 0;

	if (!e) {
		sim_fail("cannot create an HTTP client");
		return 1;
	}
	(void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
	headers = curl_slist_append(NULL, "Content-Type: application/json");
	h2 = headers ? curl_slist_append(headers, auth) : NULL;
	if (!h2) {
		sim_fail("out of memory");
		status = 1;
		goto out;
	}
	headers = h2;
#define SET(opt, val)                                                                              \
	do {                                                                                       \
		if (cc == CURLE_OK)                                                                \
			cc = curl_easy_setopt(e, opt, val);                                        \
	} while (0)
	SET(CURLOPT_URL, o->push);
	SET(CURLOPT_HTTPHEADER, headers);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TIMEOUT_MS, SIM_POST_TIMEOUT);
	SET(CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	SET(CURLOPT_WRITEFUNCTION, sim_on_resp);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, sim_on_progress);
	SET(CURLOPT_USERAGENT, "meterctl-simulate");
	SET(CURLOPT_ERRORBUFFER, errbuf);
#undef SET
	if (cc != CURLE_OK) {
		sim_fail("cannot set up the HTTP client: %s", curl_easy_strerror(cc));
		status = 1;
		goto out;
	}

	agent_doc_format_time(s->start_usec, start_text, sizeof(start_text));
	if (o->steps > 0)
		(void)snprintf(steps_text, sizeof(steps_text), "%" PRId64, o->steps);
	else
		(void)snprintf(steps_text, sizeof(steps_text), "unbounded");
	printf("simulate: pushing %" PRId64 " hosts x %" PRId64 " sandboxes to %s every %" PRId64
	       " s of simulated time from %s, seed %" PRId64 ", speed %" PRId64 ", steps %s\n",
	       s->hosts, s->per_host, o->push, o->period_s, start_text, o->seed, s->speed,
	       steps_text);
	if (fflush(stdout) == EOF) {
		status = 1;
		goto out;
	}

	for (step = 0; o->steps == 0 || step < o->steps; step++) {
		int64_t t;

		if (step > (SIM_TIME_MAX - 1 - s->start_usec) / period_usec || sim_stop ||
		    sim_expired(o, s))
			break; /* the end of the simulated calendar, or told to stop */
		t = s->start_usec + step * period_usec;
		/* Paced by the simulated clock: step k is due when the clock
		 * reaches its instant. */
		if (s->speed > 0) {
			int64_t due = s->launch_mono_usec + (step * period_usec) / s->speed;

			while (!sim_stop && !sim_expired(o, s) && clock_mono_usec() < due) {
				int64_t wait_ms = (due - clock_mono_usec()) / 1000 + 1;

				sim_sleep_ms(wait_ms < 100 ? wait_ms : 100);
			}
			if (sim_stop || sim_expired(o, s))
				break;
		}
		for (int64_t host = 0; host < s->hosts; host++) {
			size_t len;
			enum sim_post r;

			if (sim_stop || sim_expired(o, s))
				goto done;
			len = sim_render(s, host, t);
			r = sim_post(e, errbuf, s->buf, len, o, s, &retries, &told);

			if (r == SIM_FATAL) {
				status = 1;
				goto out;
			}
			if (r == SIM_STOPPED)
				goto done;
			docs++;
		}
	}
done:
	printf("simulate: pushed %" PRIu64 " documents (%" PRIu64 " complete steps, %" PRIu64
	       " retries)\n",
	       docs, docs / (uint64_t)s->hosts, retries);
	if (fflush(stdout) == EOF)
		status = 1;
	/* --steps not all pushed by --duration-s (the service refusing or
	 * away meanwhile: the retries) is a run that did not do its work; a
	 * signal is the caller's own stop. */
	if (status == 0 && o->steps > 0 && !sim_stop &&
	    docs < (uint64_t)o->steps * (uint64_t)s->hosts &&
	    step < (SIM_TIME_MAX - 1 - s->start_usec) / period_usec + 1) {
		sim_fail("--duration-s ended the run with %" PRIu64 " of %" PRId64 " steps pushed",
			 docs / (uint64_t)s->hosts, o->steps);
		status = 1;
	}
out:
	curl_slist_free_all(headers);
	curl_easy_cleanup(e);
	return status;
}

/* ---- arguments ---------------------------------------------------------- */

static const char sim_usage[] =
    "usage: meterctl simulate --hosts N --sandboxes-per-host M [--seed S]\n"
    "         (--listen HOST:PORT [--urls-file F] |\n"
    "          --push URL [--token T] [--steps K] [--period-s P])\n"
    "         [--start RFC3339] [--speed X] [--key-ids k1,k2,...] [--duration-s D]\n"
    "\n"
    "A fleet of N simulated host agents with M sandboxes each, deterministic for a\n"
    "seed (default 1). --listen serves GET /hosts/h<i>/v1/usage (optionally\n"
    "?at=RFC3339); port 0 picks a free port, printed on start. --urls-file writes\n"
    "the agents' URLs.\n"
    "--push POSTs every host's document at start + k x P simulated seconds to URL\n"
    "with the bearer token (--token, else $METER_AGENT_TOKEN), retrying until\n"
    "accepted (each kind of failure said once on stderr). Simulated time runs at X times wall time "
    "from --start (default\n"
    "now, speed 1; speed 0: a frozen clock, or no pacing when pushing). Runs until\n"
    "SIGINT/SIGTERM, --duration-s or --steps.\n";

/* Splits --key-ids into s->keys. */
static int sim_parse_keys(struct sim *s, const char *text)
{
	char *p;

	s->keys_text = strdup(text);
	s->keys = calloc(SIM_KEYS_MAX, sizeof(*s->keys));
	if (!s->keys_text || !s->keys) {
		sim_fail("out of memory");
		return 1;
	}
	p = s->keys_text;
	for (;;) {
		char *comma = strchr(p, ',');

		if (comma)
			*comma = '\0';
		if (!parse_is_id(p)) {
			sim_fail(
			    "--key-ids: \"%.64s\" is not 1 to 64 characters of A-Z a-z 0-9 _ . -",
			    p);
			return 2;
		}
		if (s->nkeys == SIM_KEYS_MAX) {
			sim_fail("--key-ids: more than %d keys", SIM_KEYS_MAX);
			return 2;
		}
		s->keys[s->nkeys++] = p;
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
}

/* Parses argv into o; 0, or the exit status (2 after one line on stderr;
 * -1 after --help). */
static int sim_parse_args(int argc, char **argv, struct sim_opts *o)
{
	enum {
		HOSTS,
		PER_HOST,
		SEED,
		SPEED,
		PERIOD_S,
		STEPS,
		DURATION_S,
		LISTEN,
		START,
		URLS_FILE,
		KEY_IDS,
		PUSH,
		TOKEN,
		NOPTS
	};
	struct ctl_arg args[NOPTS] = {
	    [HOSTS] = {.name = "hosts",
		       .kind = CTL_ARG_INT,
		       .required = true,
		       .min = 1,
		       .max = SIM_HOSTS_MAX},
	    [PER_HOST] = {.name = "sandboxes-per-host",
			  .kind = CTL_ARG_INT,
			  .required = true,
			  .min = 1,
			  .max = SAMPLE_BATCH_MAX},
	    [SEED] = {.name = "seed", .kind = CTL_ARG_INT, .max = INT64_MAX, .i = 1},
	    [SPEED] = {.name = "speed", .kind = CTL_ARG_INT, .max = SIM_SPEED_MAX, .i = 1},
	    [PERIOD_S] = {.name = "period-s", .kind = CTL_ARG_INT, .min = 1, .max = 86400, .i = 10},
	    [STEPS] = {.name = "steps", .kind = CTL_ARG_INT, .min = 1, .max = INT64_C(1000000000)},
	    [DURATION_S] = {.name = "duration-s",
			    .kind = CTL_ARG_INT,
			    .min = 1,
			    .max = INT64_C(31536000)},
	    [LISTEN] = {.name = "listen", .kind = CTL_ARG_STR},
	    [START] = {.name = "start", .kind = CTL_ARG_STR},
	    [URLS_FILE] = {.name = "urls-file", .kind = CTL_ARG_STR},
	    [KEY_IDS] = {.name = "key-ids", .kind = CTL_ARG_STR},
	    [PUSH] = {.name = "push", .kind = CTL_ARG_STR},
	    [TOKEN] = {.name = "token", .kind = CTL_ARG_STR},
	};

	switch (ctl_args_parse("simulate", sim_usage, args, NOPTS, argc, argv)) {
	case CTL_ARGS_OK:
		break;
	case CTL_ARGS_HELP:
		return -1;
	default:
		return 2;
	}
	memset(o, 0, sizeof(*o));
	o->hosts = args[HOSTS].i;
	o->per_host = args[PER_HOST].i;
	o->seed = args[SEED].i;
	o->speed = args[SPEED].i;
	o->period_s = args[PERIOD_S].i;
	o->steps = args[STEPS].i;
	o->duration_s = args[DURATION_S].i;
	o->listen = args[LISTEN].s;
	o->start = args[START].s;
	o->urls_file = args[URLS_FILE].s;
	o->key_ids = args[KEY_IDS].s;
	o->push = args[PUSH].s;
	o->token = args[TOKEN].s;
	if (o->hosts * o->per_host > SIM_TOTAL_MAX) {
		sim_fail("--hosts x --sandboxes-per-host: more than %" PRId64 " sandboxes",
			 SIM_TOTAL_MAX);
		return 2;
	}
	if (!o->listen == !o->push) {
		sim_fail("give exactly one of --listen HOST:PORT and --push URL");
		return 2;
	}
	if (o->push) {
		char why[128];

		if (!url_http_ok(o->push, why, sizeof(why))) {
			sim_fail("--push: the URL %s", why);
			return 2;
		}
		if (!o->token || !*o->token) /* the environment keeps it off the command line */
			o->token = getenv("METER_AGENT_TOKEN");
		if (!o->token || !*o->token) {
			sim_fail("--push needs --token or METER_AGENT_TOKEN");
			return 2;
		}
		if (o->urls_file) {
			sim_fail("--urls-file goes with --listen, not --push");
			return 2;
		}
		if (strlen(o->token) > SIM_TOKEN_MAX) {
			sim_fail("--token: longer than %d characters", SIM_TOKEN_MAX);
			return 2;
		}
		for (const char *p = o->token; *p; p++) {
			if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) {
				sim_fail("--token: must be printable ASCII without spaces");
				return 2;
			}
		}
	} else if (o->token || o->steps) {
		sim_fail("--token and --steps go with --push, not --listen");
		return 2;
	}
	return 0;
}

int ctl_simulate_main(int argc, char **argv)
{
	struct sim s;
	struct sim_opts o;
	struct sigaction sa;
	int status;

	memset(&s, 0, sizeof(s));
	status = sim_parse_args(argc, argv, &o);
	if (status != 0)
		return status < 0 ? 0 : status;
	s.seed = (uint64_t)o.seed;
	s.hosts = o.hosts;
	s.per_host = o.per_host;
	s.speed = o.speed;
	if (o.start) {
		if (agent_doc_parse_time(o.start, &s.start_usec) != METER_OK ||
		    s.start_usec < SIM_TIME_MIN || s.start_usec >= SIM_TIME_MAX) {
			sim_fail("--start: expected an RFC 3339 time from 2000 to 8999, got "
				 "\"%.64s\"",
				 o.start);
			status = 2;
			goto out;
		}
	} else {
		s.start_usec = clock_real_usec();
	}
	if (o.key_ids && (status = sim_parse_keys(&s, o.key_ids)) != 0)
		goto out;

	s.boxes = malloc((size_t)(s.hosts * s.per_host) * sizeof(*s.boxes));
	s.buflen = SIM_HEAD_MAX + (size_t)s.per_host * SIM_ITEM_MAX;
	s.buf = malloc(s.buflen);
	if (!s.boxes || !s.buf) {
		sim_fail("out of memory for %" PRId64 " sandboxes", s.hosts * s.per_host);
		status = 1;
		goto out;
	}
	for (int64_t h = 0; h < s.hosts; h++)
		for (int64_t j = 0; j < s.per_host; j++)
			sim_box_init(&s, h, j, &s.boxes[h * s.per_host + j]);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sim_on_signal;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGTERM, &sa, NULL);
	(void)sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	(void)sigaction(SIGPIPE, &sa, NULL);

	s.launch_mono_usec = clock_mono_usec();
	status = o.listen ? sim_serve(&s, &o) : sim_push(&s, &o);
out:
	free(s.boxes);
	free(s.buf);
	free(s.keys);
	free(s.keys_text);
	return status;
}
