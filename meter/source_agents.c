/* meter: polling host agents over HTTP (see source_agents.h).
 *
 * libcurl must be initialised once by the process before any poller is made
 * (curl_global_init(CURL_GLOBAL_DEFAULT) in main, before threads start);
 * meterd and meterctl do. Each host keeps one easy handle for its life, so
 * its body buffer and (through the multi handle's cache) its connection are
 * reused from round to round. Every transfer has CURLOPT_TIMEOUT_MS and
 * CURLOPT_CONNECTTIMEOUT_MS of the poller's timeout, CURLOPT_NOSIGNAL, no
 * redirects, http and https only, and a body cap of AGENT_DOC_MAX_BYTES
 * enforced both from Content-Length (CURLOPT_MAXFILESIZE_LARGE) and in the
 * write callback (for chunked bodies).
 *
 * Backoff: after the k-th consecutive failure a host waits
 * d = min(backoff_base_ms × 2^(k-1), backoff_max_ms), jittered uniformly in
 * [d/2, d], before it is polled again; one good document resets it. */
#include "source_agents.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "clock.h"
#include "log.h"
#include "url.h"

#define AGENT_URL_MAX		2048	    /* characters of one agent URL */
#define AGENT_URLS_MAX		100000	    /* URLs in one list */
#define AGENT_BUF_KEEP		(64 * 1024) /* a larger body buffer is freed after use */
#define AGENT_URLS_FILE_MAX	(64 * 1024 * 1024)
#define AGENT_PATH		"/v1/usage"
#define AGENT_POLL_WAIT_MS	100
#define AGENT_BACKOFF_SHIFT_MAX 30

struct agent_host {
	char *url;	 /* base URL, owned */
	char *usage_url; /* url + "/v1/usage", owned */
	CURL *easy;	 /* created on first use, reused */
	char *buf;	 /* the response body so far */
	size_t len;
	size_t cap;
	bool too_big;	  /* the body passed AGENT_DOC_MAX_BYTES */
	uint64_t errors;  /* cumulative failures */
	uint32_t fails;	  /* consecutive failures */
	int64_t due_usec; /* monotonic time it may be polled again; 0 = now */
};

struct agent_poller {
	struct agent_host *hosts;
	size_t n;
	struct agent_poller_opts o;
	CURLM *multi;
	size_t *queue;		   /* this round's due hosts (n slots) */
	struct sample_batch *done; /* this round's good documents (n slots) */
	uint64_t rng;
};

void agent_poller_opts_init(struct agent_poller_opts *o)
{
	o->timeout_ms = 2000;
	o->backoff_base_ms = 1000;
	o->backoff_max_ms = 60000;
	o->max_parallel = 256;
}

/* splitmix64: the jitter's generator (not for anything secret). */
static uint64_t agent_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static int64_t agent_clamp(int64_t v, int64_t lo, int64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* A copy of url[0..len) without userinfo, query or fragment
 * ("http://user:secret@host/x?t=1" is shown "http://host/x"): what labels
 * and log lines name, so that credentials in an agent's URL reach neither
 * /metrics nor the log (agent_urls_split refuses a query or fragment; this
 * holds for any URL). The URL is read as libcurl reads it for the
 * requests; one without those parts is kept as written, one libcurl cannot
 * read is not shown at all. */
static char *agent_url_shown(const char *url, size_t len, size_t index)
{
	char hidden[64];
	char *copy = strndup(url, len), *user = NULL, *pass = NULL, *opts = NULL, *query = NULL;
	char *fragment = NULL, *out = NULL;
	char *shown = NULL;
	CURLU *u = curl_url();

	if (!copy || !u)
		goto out;
	(void)snprintf(hidden, sizeof(hidden), "(agent %zu: a URL that cannot be parsed)", index);
	if (curl_url_set(u, CURLUPART_URL, copy, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
		shown = strdup(hidden);
		goto out;
	}
	(void)curl_url_get(u, CURLUPART_USER, &user, 0);
	(void)curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
	(void)curl_url_get(u, CURLUPART_OPTIONS, &opts, 0);
	(void)curl_url_get(u, CURLUPART_QUERY, &query, 0);
	(void)curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0);
	if (!user && !pass && !opts && !query && !fragment) {
		shown = copy;
		copy = NULL;
		goto out;
	}
	if (curl_url_set(u, CURLUPART_USER, NULL, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_OPTIONS, NULL, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &out, 0) == CURLUE_OK)
		shown = strdup(out);
	else
		shown = strdup(hidden);
out:
	curl_free(user);
	curl_free(pass);
	curl_free(opts);
	curl_free(query);
	curl_free(fragment);
	curl_free(out);
	curl_url_cleanup(u);
	free(copy);
	return shown;
}

/* Options out of range are clamped: timeout 1 ms to 10 min, backoff 0 to
 * 1 day (max at least base), 1 to 10,000 transfers. Trailing slashes of the
 * URLs are dropped. */
struct agent_poller *agent_poller_new(const char *const *urls, size_t n,
				      const struct agent_poller_opts *o)
{
	struct agent_poller *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (o)
		p->o = *o;
	else
		agent_poller_opts_init(&p->o);
	p->o.timeout_ms = agent_clamp(p->o.timeout_ms, 1, 600000);
	p->o.backoff_base_ms = agent_clamp(p->o.backoff_base_ms, 0, 86400000);
	p->o.backoff_max_ms = agent_clamp(p->o.backoff_max_ms, p->o.backoff_base_ms, 86400000);
	p->o.max_parallel = agent_clamp(p->o.max_parallel, 1, 10000);
	p->rng = (uint64_t)clock_real_usec() ^ (uint64_t)(uintptr_t)p;
	p->hosts = calloc(n ? n : 1, sizeof(*p->hosts));
	p->queue = calloc(n ? n : 1, sizeof(*p->queue));
	p->done = calloc(n ? n : 1, sizeof(*p->done));
	p->multi = curl_multi_init();
	if (!p->hosts || !p->queue || !p->done || !p->multi)
		goto fail;
	/* Keep as many idle connections as transfers can run at once. */
	if (curl_multi_setopt(p->multi, CURLMOPT_MAXCONNECTS, (long)p->o.max_parallel) != CURLM_OK)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		struct agent_host *h = &p->hosts[i];
		size_t len = strlen(urls[i]);

		while (len > 0 && urls[i][len - 1] == '/')
			len--; /* "…/h1/" and "…/h1" are the same agent */
		p->n = i + 1;
		h->url = agent_url_shown(urls[i], len, i);
		h->usage_url = malloc(len + sizeof(AGENT_PATH));
		if (!h->url || !h->usage_url)
			goto fail;
		memcpy(h->usage_url, urls[i], len);
		memcpy(h->usage_url + len, AGENT_PATH, sizeof(AGENT_PATH));
	}
	p->n = n;
	return p;
fail:
	agent_poller_free(p);
	return NULL;
}

void agent_poller_free(struct agent_poller *p)
{
	if (!p)
		return;
	for (size_t i = 0; p->hosts && i < p->n; i++) {
		struct agent_host *h = &p->hosts[i];

		if (h->easy)
			curl_easy_cleanup(h->easy);
		free(h->url);
		free(h->usage_url);
		free(h->buf);
	}
	if (p->multi)
		curl_multi_cleanup(p->multi);
	free(p->hosts);
	free(p->queue);
	free(p->done);
	free(p);
}

size_t agent_poller_hosts(const struct agent_poller *p)
{
	return p ? p->n : 0;
}

const char *agent_poller_host_url(const struct agent_poller *p, size_t i)
{
	return p && i < p->n ? p->hosts[i].url : NULL;
}

uint64_t agent_poller_host_errors(const struct agent_poller *p, size_t i)
{
	return p && i < p->n ? p->hosts[i].errors : 0;
}

/* libcurl's write callback: appends to the host's buffer, refusing to grow
 * past AGENT_DOC_MAX_BYTES (returning less than given aborts the transfer). */
static size_t agent_on_data(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct agent_host *h = userdata;
	size_t n = size * nmemb;

	if (n > (size_t)AGENT_DOC_MAX_BYTES - h->len) {
		h->too_big = true;
		return 0;
	}
	if (h->len + n > h->cap) {
		size_t cap = h->cap ? h->cap : 16384;
		char *grown;

		while (cap < h->len + n)
			cap *= 2;
		if (cap > (size_t)AGENT_DOC_MAX_BYTES)
			cap = AGENT_DOC_MAX_BYTES;
		grown = realloc(h->buf, cap);
		if (!grown)
			return 0;
		h->buf = grown;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, data, n);
	h->len += n;
	return n;
}

/* Creates the host's easy handle with its fixed options. */
static CURL *agent_easy(struct agent_poller *p, struct agent_host *h)
{
	CURL *e = curl_easy_init();
	CURLcode c = CURLE_OK;

	if (!e)
		return NULL;
#define SET(opt, val)                                                                              \
	do {                                                                                       \
		if (c == CURLE_OK)                                                                 \
			c = curl_easy_setopt(e, opt, val);                                         \
	} while (0)
	SET(CURLOPT_URL, h->usage_url);
	SET(CURLOPT_HTTPGET, 1L);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TIMEOUT_MS, (long)p->o.timeout_ms);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)p->o.timeout_ms);
	SET(CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)AGENT_DOC_MAX_BYTES);
	SET(CURLOPT_ACCEPT_ENCODING, "");
	SET(CURLOPT_USERAGENT, "meter-collector");
	SET(CURLOPT_WRITEFUNCTION, agent_on_data);
	SET(CURLOPT_WRITEDATA, h);
	SET(CURLOPT_PRIVATE, h);
#undef SET
	if (c != CURLE_OK) {
		log_error("agents: cannot set up a transfer for %s: %s", h->url,
			  curl_easy_strerror(c));
		curl_easy_cleanup(e);
		return NULL;
	}
	return e;
}

/* Records a failure of h (reason: one line) and schedules its retry. */
static void agent_failed(struct agent_poller *p, struct agent_host *h, const char *reason)
{
	int64_t delay = p->o.backoff_base_ms, jittered;
	uint32_t shift;

	h->errors++;
	if (h->fails < UINT32_MAX)
		h->fails++;
	shift = h->fails - 1 < AGENT_BACKOFF_SHIFT_MAX ? h->fails - 1 : AGENT_BACKOFF_SHIFT_MAX;
	while (shift-- > 0 && delay < p->o.backoff_max_ms)
		delay *= 2;
	if (delay > p->o.backoff_max_ms)
		delay = p->o.backoff_max_ms;
	jittered = delay / 2 + (int64_t)(agent_rand(&p->rng) % (uint64_t)(delay - delay / 2 + 1));
	h->due_usec = clock_mono_usec() + jittered * 1000;
	log_warn("agents: %s: %s (failure %u, retry in %lld ms)", h->url, reason,
		 (unsigned)h->fails, (long long)jittered);
}

/* A finished transfer of h: its document, or a failure. Appends a good
 * document to p->done[*ndone]. */
static void agent_finish(struct agent_poller *p, struct agent_host *h, CURLcode result,
			 size_t *ndone, struct agent_round_stats *st)
{
	char reason[512];
	long status = 0;
	struct sample_batch b;

	if (h->too_big || result == CURLE_FILESIZE_EXCEEDED) {
		(void)snprintf(reason, sizeof(reason), "body larger than %d bytes",
			       AGENT_DOC_MAX_BYTES);
		goto failed;
	}
	if (result != CURLE_OK) {
		(void)snprintf(reason, sizeof(reason), "%s", curl_easy_strerror(result));
		goto failed;
	}
	(void)curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		(void)snprintf(reason, sizeof(reason), "HTTP status %ld", status);
		goto failed;
	}
	if (agent_doc_parse(h->buf, h->len, clock_real_usec(), &b, reason, sizeof(reason)) !=
	    METER_OK)
		goto failed;
	h->fails = 0;
	h->due_usec = 0;
	p->done[(*ndone)++] = b;
	st->ok++;
	return;
failed:
	st->failed++;
	agent_failed(p, h, reason);
}

/* Starts the transfer of h; false (counted as a failure) when it cannot. */
static bool agent_start(struct agent_poller *p, struct agent_host *h)
{
	if (!h->easy)
		h->easy = agent_easy(p, h);
	if (!h->easy)
		return false;
	h->len = 0;
	h->too_big = false;
	return curl_multi_add_handle(p->multi, h->easy) == CURLM_OK;
}

enum meter_rc agent_poller_round(struct agent_poller *p, struct sample_batch **batches, size_t *n,
				 struct agent_round_stats *stats)
{
	struct agent_round_stats st = {0};
	size_t nq = 0, next = 0, ndone = 0;
	int64_t now = clock_mono_usec();
	int inflight = 0;
	enum meter_rc rc = METER_OK;

	if (!p || !batches || !n)
		return METER_EINVAL;
	for (size_t i = 0; i < p->n; i++) {
		if (p->hosts[i].due_usec > now)
			st.skipped++;
		else
			p->queue[nq++] = i;
	}

	while (next < nq || inflight > 0) {
		struct CURLMsg *msg;
		int running = 0, left = 0;
		CURLMcode mc;

		while (next < nq && inflight < p->o.max_parallel) {
			struct agent_host *h = &p->hosts[p->queue[next++]];

			st.polled++;
			if (agent_start(p, h)) {
				inflight++;
			} else {
				st.failed++;
				agent_failed(p, h, "cannot start the transfer");
			}
		}
		mc = curl_multi_perform(p->multi, &running);
		if (mc != CURLM_OK) {
			log_error("agents: curl_multi_perform: %s", curl_multi_strerror(mc));
			rc = METER_EIO;
			break;
		}
		while ((msg = curl_multi_info_read(p->multi, &left))) {
			struct agent_host *h;
			char *priv = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			(void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
			(void)curl_multi_remove_handle(p->multi, msg->easy_handle);
			h = (struct agent_host *)(void *)priv;
			if (!h)
				continue;
			inflight--;
			agent_finish(p, h, msg->data.result, &ndone, &st);
			if (h->cap > AGENT_BUF_KEEP) {
				free(h->buf);
				h->buf = NULL;
				h->cap = 0;
			}
		}
		if (inflight > 0 && (next >= nq || inflight >= p->o.max_parallel)) {
			mc = curl_multi_poll(p->multi, NULL, 0, AGENT_POLL_WAIT_MS, NULL);
			if (mc != CURLM_OK) {
				log_error("agents: curl_multi_poll: %s", curl_multi_strerror(mc));
				rc = METER_EIO;
				break;
			}
		}
	}
	if (rc != METER_OK) {
		/* Abandon what is still in flight; those hosts are retried later. */
		for (size_t i = 0; i < p->n; i++)
			if (p->hosts[i].easy)
				(void)curl_multi_remove_handle(p->multi, p->hosts[i].easy);
	}

	if (ndone > 0) {
		struct sample_batch *grown = realloc(*batches, (*n + ndone) * sizeof(**batches));

		if (!grown) {
			for (size_t i = 0; i < ndone; i++)
				sample_batch_release(&p->done[i]);
			rc = METER_ENOMEM;
		} else {
			memcpy(grown + *n, p->done, ndone * sizeof(*grown));
			*batches = grown;
			*n += ndone;
		}
	}
	if (stats)
		*stats = st;
	return rc;
}

void agent_urls_free(char **urls)
{
	if (!urls)
		return;
	for (size_t i = 0; urls[i]; i++)
		free(urls[i]);
	free(urls);
}

/* A growing NULL-terminated list of URLs. */
struct agent_url_list {
	char **urls;
	size_t n;
	size_t cap;
};

static bool agent_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Appends text[0..len) (surrounding blanks trimmed, a trailing '/' removed)
 * after checking it is an http(s) URL; where names it in errors. */
static enum meter_rc agent_url_add(struct agent_url_list *l, const char *text, size_t len,
				   const char *where, char *err, size_t errlen)
{
	char why[128];
	char *url;

	while (len > 0 && agent_is_space(*text)) {
		text++;
		len--;
	}
	while (len > 0 && agent_is_space(text[len - 1]))
		len--;
	while (len > 0 && text[len - 1] == '/')
		len--;
	if (len == 0) {
		(void)snprintf(err, errlen, "%s: empty URL", where);
		return METER_EINVAL;
	}
	if (len > AGENT_URL_MAX) {
		(void)snprintf(err, errlen, "%s: URL longer than %d characters", where,
			       AGENT_URL_MAX);
		return METER_EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c <= 0x20 || c >= 0x7f) {
			(void)snprintf(err, errlen, "%s: URL has a blank or non-ASCII character",
				       where);
			return METER_EINVAL;
		}
	}
	/* The agent's document is at the URL's path + /v1/usage: a query or
	 * fragment would swallow that path (and a token in one would show
	 * wherever the URL is named). */
	if (memchr(text, '?', len) || memchr(text, '#', len)) {
		(void)snprintf(err, errlen,
			       "%s: URL has a query or fragment (meter adds /v1/usage to its path)",
			       where);
		return METER_EINVAL;
	}
	url = strndup(text, len);
	if (!url)
		goto nomem;
	if (!url_http_ok(url, why, sizeof(why))) {
		(void)snprintf(err, errlen, "%s: the URL %s", where, why);
		free(url);
		return METER_EINVAL;
	}
	if (l->n >= AGENT_URLS_MAX) {
		(void)snprintf(err, errlen, "%s: more than %d URLs", where, AGENT_URLS_MAX);
		free(url);
		return METER_ERANGE;
	}
	if (l->n + 1 >= l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **grown = realloc(l->urls, cap * sizeof(*grown));

		if (!grown) {
			free(url);
			goto nomem;
		}
		l->urls = grown;
		l->cap = cap;
	}
	l->urls[l->n++] = url;
	l->urls[l->n] = NULL;
	return METER_OK;
nomem:
	(void)snprintf(err, errlen, "%s: out of memory", where);
	return METER_ENOMEM;
}

static int agent_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The end of a list: at least one URL, none twice. Hands the list over. */
static enum meter_rc agent_url_finish(struct agent_url_list *l, const char *what, char ***urls,
				      size_t *n, char *err, size_t errlen)
{
	char **sorted;

	if (l->n == 0) {
		(void)snprintf(err, errlen, "%s: no agent URLs", what);
		return METER_EINVAL;
	}
	sorted = malloc(l->n * sizeof(*sorted));
	if (!sorted) {
		(void)snprintf(err, errlen, "%s: out of memory", what);
		return METER_ENOMEM;
	}
	memcpy(sorted, l->urls, l->n * sizeof(*sorted));
	qsort(sorted, l->n, sizeof(*sorted), agent_cmp_str);
	for (size_t i = 1; i < l->n; i++) {
		if (strcmp(sorted[i - 1], sorted[i]) == 0) {
			char *shown = agent_url_shown(sorted[i], strlen(sorted[i]), i);
			(void)snprintf(err, errlen, "%s: %.200s is listed twice", what,
				       shown ? shown : "a URL");
			free(shown);
			free(sorted);
			return METER_EINVAL;
		}
	}
	free(sorted);
	*urls = l->urls;
	*n = l->n;
	l->urls = NULL;
	return METER_OK;
}

enum meter_rc agent_urls_split(const char *list, char ***urls, size_t *n, char *err, size_t errlen)
{
	struct agent_url_list l = {0};
	enum meter_rc rc = METER_OK;
	const char *p;
	size_t item = 0;

	if (!list || !urls || !n) {
		(void)snprintf(err, errlen, "agent URL list: missing");
		return METER_EINVAL;
	}
	p = list;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char where[48];

		(void)snprintf(where, sizeof(where), "agent URL %zu", ++item);
		rc = agent_url_add(&l, p, len, where, err, errlen);
		if (rc != METER_OK || !comma)
			break;
		p = comma + 1;
	}
	if (rc == METER_OK)
		rc = agent_url_finish(&l, "agent URL list", urls, n, err, errlen);
	agent_urls_free(l.urls);
	return rc;
}

enum meter_rc agent_urls_load_file(const char *path, char ***urls, size_t *n, char *err,
				   size_t errlen)
{
	struct agent_url_list l = {0};
	enum meter_rc rc = METER_OK;
	char *text = NULL;
	size_t len = 0, cap = 0, lineno = 0;
	const char *p, *end;
	FILE *f;

	if (!path || !urls || !n) {
		(void)snprintf(err, errlen, "agent URL file: missing");
		return METER_EINVAL;
	}
	f = fopen(path, "r");
	if (!f) {
		(void)snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
		return METER_EIO;
	}
	for (;;) {
		size_t got;

		if (len == cap) {
			char *grown;

			cap = cap ? cap * 2 : 65536;
			if (cap > AGENT_URLS_FILE_MAX + 1)
				cap = AGENT_URLS_FILE_MAX + 1;
			if (len == cap) {
				(void)snprintf(err, errlen, "%.200s: larger than %d bytes", path,
					       AGENT_URLS_FILE_MAX);
				rc = METER_ERANGE;
				goto out;
			}
			grown = realloc(text, cap);
			if (!grown) {
				(void)snprintf(err, errlen, "%.200s: out of memory", path);
				rc = METER_ENOMEM;
				goto out;
			}
			text = grown;
		}
		got = fread(text + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		(void)snprintf(err, errlen, "%.200s: read error", path);
		rc = METER_EIO;
		goto out;
	}
	if (len > AGENT_URLS_FILE_MAX) {
		(void)snprintf(err, errlen, "%.200s: larger than %d bytes", path,
			       AGENT_URLS_FILE_MAX);
		rc = METER_ERANGE;
		goto out;
	}
	for (p = text, end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *stop = nl ? nl : end;
		const char *q = p;
		char where[256];

		lineno++;
		while (q < stop && agent_is_space(*q))
			q++;
		if (q < stop && *q != '#') {
			if (memchr(q, '\0', (size_t)(stop - q))) {
				(void)snprintf(err, errlen, "%.200s:%zu: NUL byte", path, lineno);
				rc = METER_EINVAL;
				goto out;
			}
			(void)snprintf(where, sizeof(where), "%.200s:%zu", path, lineno);
			rc = agent_url_add(&l, q, (size_t)(stop - q), where, err, errlen);
			if (rc != METER_OK)
				goto out;
		}
		p = nl ? nl + 1 : end;
	}
	rc = agent_url_finish(&l, path, urls, n, err, errlen);
out:
	fclose(f);
	free(text);
	agent_urls_free(l.urls);
	return rc;
}
