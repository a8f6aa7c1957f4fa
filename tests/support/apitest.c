/* API test harness (see apitest.h). */
#include "apitest.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "migrate.h"
#include "openapi_check.h"

extern char **environ;

#define APITEST_START_WAIT_MS 15000 /* per server: log line, then /readyz */
#define APITEST_STOP_WAIT_MS  10000
#define APITEST_REQ_TIMEOUT_S 30
#define APITEST_RESP_MAX      (64u * 1024 * 1024)
#define APITEST_ENV_MAX	      512

static pthread_once_t apitest_curl_once = PTHREAD_ONCE_INIT;

static void apitest_curl_init(void)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		fprintf(stderr, "apitest: curl_global_init failed\n");
}

static void apitest_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* 32 random bytes as 64 lower-case hex digits into out (65 bytes). */
static int apitest_random_hex(char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[32];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -1;
	for (size_t i = 0; i < sizeof(b); i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[64] = '\0';
	return 0;
}

/* Reads a whole file, malloc'd and NUL-terminated, or NULL. */
static char *apitest_slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		size_t n;

		if (cap - len < 4096) {
			char *g = realloc(buf, cap + 65536);
			if (!g) {
				free(buf);
				buf = NULL;
				goto out;
			}
			buf = g;
			cap += 65536;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	buf[len] = '\0';
out:
	fclose(f);
	return buf;
}

char *apitest_read_log(const struct apitest *t, int i)
{
	if (i < 0 || i >= t->nservers)
		return NULL;
	return apitest_slurp(t->servers[i].log_path);
}

/* Prints the last part of server i's log, to explain a failure. */
static void apitest_dump_log(const struct apitest *t, int i)
{
	char *log = apitest_read_log(t, i);
	size_t n;

	if (!log)
		return;
	n = strlen(log);
	fprintf(stderr, "--- meterd %d log (%s), last part ---\n%s\n---\n", i,
		t->servers[i].log_path, log + (n > 4000 ? n - 4000 : 0));
	free(log);
}

/* True when NAME=... in entry has the name of one of the NAME=VALUE
 * strings in set (NULL-terminated, may be NULL). */
static bool apitest_env_named(const char *entry, const char *const *set)
{
	size_t n = strcspn(entry, "=");

	for (; set && *set; set++)
		if (strncmp(entry, *set, n) == 0 && (*set)[n] == '=')
			return true;
	return false;
}

/* Starts server i of t; fills pid and log_path. The port is found later. */
static int apitest_spawn(struct apitest *t, int i, const char *const *extra_args,
			 const char *const *extra_env)
{
	struct apitest_server *s = &t->servers[i];
	const char *bindir = getenv("METER_BIN_DIR");
	char exe[1024], url_env[4200], op_env[96], cp_env[96], ag_env[96];
	const char *ours[] = {url_env, op_env, cp_env, ag_env, "METER_LISTEN=127.0.0.1:0", NULL};
	const char *argv[64];
	const char *envp[APITEST_ENV_MAX];
	size_t na = 0, ne = 0;
	int fd;
	pid_t pid, parent;

	if (!bindir || !*bindir) {
		fprintf(stderr, "apitest: METER_BIN_DIR is not set\n");
		return -1;
	}
	snprintf(exe, sizeof(exe), "%s/meterd", bindir);
	{
		/* s is inside *t: format from a copy, not from t itself. */
		char name[sizeof(t->db.name)];
		memcpy(name, t->db.name, sizeof(name));
		snprintf(s->log_path, sizeof(s->log_path), "%s/apitest-%s-%d.log", bindir, name, i);
	}
	snprintf(url_env, sizeof(url_env), "METER_DATABASE_URL=%s", t->db.url);
	snprintf(op_env, sizeof(op_env), "METER_OPERATOR_TOKEN=%s", t->operator_token);
	snprintf(cp_env, sizeof(cp_env), "METER_CONTROL_PLANE_TOKEN=%s", t->control_plane_token);
	snprintf(ag_env, sizeof(ag_env), "METER_AGENT_TOKEN=%s", t->agent_token);

	argv[na++] = exe;
	argv[na++] = "--listen";
	argv[na++] = "127.0.0.1:0";
	for (; extra_args && *extra_args && na + 1 < sizeof(argv) / sizeof(argv[0]); extra_args++)
		argv[na++] = *extra_args;
	argv[na] = NULL;

	/* The caller's variables win over ours, ours over the inherited ones. */
	for (char **e = environ; *e && ne + 16 < APITEST_ENV_MAX; e++)
		if (!apitest_env_named(*e, ours) && !apitest_env_named(*e, extra_env))
			envp[ne++] = *e;
	for (const char *const *e = ours; *e; e++)
		if (!apitest_env_named(*e, extra_env))
			envp[ne++] = *e;
	for (const char *const *e = extra_env; e && *e && ne + 1 < APITEST_ENV_MAX; e++)
		envp[ne++] = *e;
	envp[ne] = NULL;

	fd = open(s->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "apitest: cannot create %s: %s\n", s->log_path, strerror(errno));
		return -1;
	}
	fflush(NULL);
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "apitest: fork: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	if (pid == 0) {
		/* Child: only async-signal-safe calls from here. A test that
		 * dies (a sanitizer's abort, a crash) takes its servers with
		 * it, instead of leaving them to run on. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(127);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execve(exe, (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	close(fd);
	s->pid = pid;
	return 0;
}

/* True while server i's process has not exited (reaps it if it has). */
static bool apitest_alive(struct apitest *t, int i, int *status)
{
	struct apitest_server *s = &t->servers[i];
	pid_t r;

	if (!s->pid)
		return false;
	r = waitpid(s->pid, status, WNOHANG);
	if (r == 0)
		return true;
	s->pid = 0;
	return false;
}

/* Waits for server i's "listening on http://HOST:PORT/" log line and its
 * /readyz 200, until deadline_ms has passed. */
static int apitest_wait_ready(struct apitest *t, int i)
{
	struct apitest_server *s = &t->servers[i];
	static const char mark[] = "listening on http://127.0.0.1:";
	int status = 0; /* stays 0 when the process was reaped already */

	for (int waited = 0; waited < APITEST_START_WAIT_MS; waited += 20) {
		if (!apitest_alive(t, i, &status)) {
			fprintf(stderr, "apitest: meterd %d exited during start-up (status %d)\n",
				i, status);
			return -1;
		}
		if (s->port == 0) {
			char *log = apitest_slurp(s->log_path);
			const char *p = log ? strstr(log, mark) : NULL;

			if (p) {
				long port = strtol(p + sizeof(mark) - 1, NULL, 10);
				if (port > 0 && port < 65536) {
					s->port = (int)port;
					snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%d",
						 s->port);
				}
			}
			free(log);
		}
		if (s->port) {
			struct apitest_resp r;
			int rc = apitest_call(t, i, "GET", "/readyz", NULL, NULL, &r);
			long st = r.status;

			apitest_resp_release(&r);
			if (rc == 0 && st == 200)
				return 0;
		}
		apitest_sleep_ms(20);
	}
	fprintf(stderr, "apitest: meterd %d not ready after %d ms\n", i, APITEST_START_WAIT_MS);
	return -1;
}

int apitest_start(struct apitest *t, const char *tag, int nservers, const char *const *extra_args,
		  const char *const *extra_env)
{
	char err[512];
	int applied = 0;

	memset(t, 0, sizeof(*t));
	pthread_once(&apitest_curl_once, apitest_curl_init);
	if (nservers < 1 || nservers > APITEST_SERVERS_MAX) {
		fprintf(stderr, "apitest: nservers %d out of range\n", nservers);
		return -1;
	}
	if (apitest_random_hex(t->operator_token) < 0 ||
	    apitest_random_hex(t->control_plane_token) < 0 ||
	    apitest_random_hex(t->agent_token) < 0) {
		fprintf(stderr, "apitest: getrandom failed\n");
		return -1;
	}
	if (testdb_create(&t->db, tag) < 0)
		return -1;
	if (migrate_apply(t->db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "apitest: migrate: %s\n", err);
		goto fail;
	}
	t->nservers = nservers;
	for (int i = 0; i < nservers; i++)
		if (apitest_spawn(t, i, extra_args, extra_env) < 0)
			goto fail;
	for (int i = 0; i < nservers; i++) {
		if (apitest_wait_ready(t, i) < 0) {
			apitest_dump_log(t, i);
			goto fail;
		}
	}
	return 0;
fail:
	apitest_drop(t);
	return -1;
}

int apitest_stop_one(struct apitest *t, int i)
{
	struct apitest_server *s = &t->servers[i];
	int status = 0;

	if (!s->pid)
		return -1;
	kill(s->pid, SIGTERM);
	for (int waited = 0;; waited += 10) {
		pid_t r = waitpid(s->pid, &status, WNOHANG);

		if (r == s->pid)
			break;
		if (r < 0) {
			s->pid = 0;
			return -1;
		}
		if (waited >= APITEST_STOP_WAIT_MS) {
			fprintf(stderr, "apitest: meterd %d ignored SIGTERM; killing it\n", i);
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
			s->pid = 0;
			return -1;
		}
		apitest_sleep_ms(10);
	}
	s->pid = 0;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	fprintf(stderr, "apitest: meterd %d died of signal %d\n", i,
		WIFSIGNALED(status) ? WTERMSIG(status) : -1);
	return -1;
}

int apitest_stop(struct apitest *t)
{
	int ret = 0;

	for (int i = 0; i < t->nservers; i++) {
		int st;

		if (!t->servers[i].pid)
			continue;
		st = apitest_stop_one(t, i);
		if (st != 0) {
			fprintf(stderr, "apitest: meterd %d exited with status %d\n", i, st);
			apitest_dump_log(t, i);
			ret = -1;
		}
	}
	return ret;
}

void apitest_drop(struct apitest *t)
{
	for (int i = 0; i < t->nservers; i++) {
		if (t->servers[i].pid) {
			kill(t->servers[i].pid, SIGKILL);
			waitpid(t->servers[i].pid, NULL, 0);
			t->servers[i].pid = 0;
		}
		/* Logs are kept when a check failed, to look at. */
		if (t->servers[i].log_path[0] && check_failures() == 0)
			unlink(t->servers[i].log_path);
	}
	testdb_drop(&t->db);
}

/* A growable buffer for curl's write callbacks. It doubles: grown by each
 * 16 KiB piece, a 2.9 MB body was copied some 180 times (under the
 * sanitizers, whose realloc always copies, most of a second). */
struct apitest_buf {
	char *p;
	size_t len;
	size_t cap;
};

static size_t apitest_write(char *data, size_t size, size_t n, void *userdata)
{
	struct apitest_buf *b = userdata;
	size_t len = size * n, cap;
	char *g;

	if (len > APITEST_RESP_MAX - b->len)
		return 0; /* curl reports a write error */
	if (b->len + len + 1 > b->cap) {
		cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len + 1)
			cap *= 2;
		g = realloc(b->p, cap);
		if (!g)
			return 0;
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

/* Keeps a failed answer's message beside its check's line on stderr. */
static pthread_mutex_t apitest_check_lock = PTHREAD_MUTEX_INITIALIZER;

bool apitest_webhook_conforms(const char *headers, const char *body)
{
	const json_t *doc = openapi_check_doc(METER_OPENAPI_PATH);
	json_t *json = body ? json_loads(body, 0, NULL) : NULL;
	char err[1024] = "the body is not JSON";
	bool ok = doc && json && openapi_check_webhook(doc, headers, json, err, sizeof(err));

	if (!ok)
		fprintf(stderr, "apitest: the webhook is not as api/openapi.json says: %s\n",
			doc ? err : "the document did not load");
	json_decref(json);
	return ok;
}

/* Every answer against the API's OpenAPI document (openapi_check.h): a
 * failed check of the test that made the request when it does not
 * conform. */
static void apitest_conforms(const struct apitest_req *rq, const struct apitest_resp *r)
{
	const json_t *doc = openapi_check_doc(METER_OPENAPI_PATH);
	char err[1024];
	bool ok = doc && openapi_check_response(doc, rq->method, rq->path, r->status, r->headers,
						r->body, r->body_len, r->json, err, sizeof(err));

	/* Documented on every operation, and a fault of the service in any
	 * test. */
	if (ok && r->status == 500) {
		snprintf(err, sizeof(err), "%s %s answered 500", rq->method, rq->path);
		ok = false;
	}

	pthread_mutex_lock(&apitest_check_lock);
	if (!ok)
		fprintf(stderr, "apitest: the answer is not as api/openapi.json says: %s\n",
			doc ? err : "the document did not load");
	check_record(ok, __FILE__, __LINE__, "the answer conforms to api/openapi.json");
	pthread_mutex_unlock(&apitest_check_lock);
}

int apitest_do(const struct apitest *t, int i, const struct apitest_req *rq,
	       struct apitest_resp *out)
{
	struct apitest_buf body = {0}, hdrs = {0};
	struct curl_slist *list = NULL, *grown;
	char url[2048], auth[APITEST_TOKEN_MAX + 64];
	bool has_ctype = false;
	CURLcode cc = CURLE_OK;
	CURL *c = NULL;
	int ret = -1;

	memset(out, 0, sizeof(*out));
	pthread_once(&apitest_curl_once, apitest_curl_init);
	if (i < 0 || i >= t->nservers || !t->servers[i].port) {
		snprintf(out->error, sizeof(out->error), "no server %d", i);
		goto out;
	}
	snprintf(url, sizeof(url), "%s%s", t->servers[i].base, rq->path);
	c = curl_easy_init();
	if (!c) {
		snprintf(out->error, sizeof(out->error), "curl_easy_init failed");
		goto out;
	}
	if (rq->token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", rq->token);
		grown = curl_slist_append(list, auth);
		if (!grown)
			goto oom;
		list = grown;
	}
	for (const char *const *h = rq->headers; h && *h; h++) {
		if (strncasecmp(*h, "Content-Type:", 13) == 0)
			has_ctype = true;
		grown = curl_slist_append(list, *h);
		if (!grown)
			goto oom;
		list = grown;
	}
	if (rq->body) {
		if (!has_ctype) {
			grown = curl_slist_append(list, "Content-Type: application/json");
			if (!grown)
				goto oom;
			list = grown;
		}
		/* Ask before sending a large body, so a 413 can come first. */
		if (rq->body_len > 1024) {
			grown = curl_slist_append(list, "Expect: 100-continue");
			if (!grown)
				goto oom;
			list = grown;
		}
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	if (strcmp(rq->method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	else if (strcmp(rq->method, "GET") != 0 || rq->body)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)APITEST_REQ_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, apitest_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, apitest_write);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &hdrs);
	cc = curl_easy_perform(c);
	if (cc != CURLE_OK) {
		snprintf(out->error, sizeof(out->error), "%s %s: %s", rq->method, rq->path,
			 curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	ret = 0;
	goto out;
oom:
	snprintf(out->error, sizeof(out->error), "out of memory");
out:
	out->body = body.p ? body.p : calloc(1, 1);
	out->body_len = body.p ? body.len : 0;
	out->headers = hdrs.p ? hdrs.p : calloc(1, 1);
	if (out->body && out->body_len)
		out->json = json_loadb(out->body, out->body_len, 0, NULL);
	if (ret == 0)
		apitest_conforms(rq, out);
	curl_slist_free_all(list);
	if (c)
		curl_easy_cleanup(c);
	return ret;
}

int apitest_call(const struct apitest *t, int i, const char *method, const char *path,
		 const char *token, const char *body, struct apitest_resp *out)
{
	struct apitest_req rq = {
	    .method = method,
	    .path = path,
	    .token = token,
	    .body = body,
	    .body_len = body ? strlen(body) : 0,
	};

	return apitest_do(t, i, &rq, out);
}

void apitest_resp_release(struct apitest_resp *r)
{
	free(r->headers);
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

const char *apitest_error_code(const struct apitest_resp *r)
{
	const char *code =
	    json_string_value(json_object_get(json_object_get(r->json, "error"), "code"));

	return code ? code : "";
}

const char *apitest_json_str(const struct apitest_resp *r, const char *name)
{
	return json_string_value(json_object_get(r->json, name));
}

long long apitest_jpath(json_t *o, const char *path)
{
	char part[64];

	while (*path) {
		size_t n = strcspn(path, ".");

		snprintf(part, sizeof(part), "%.*s", (int)n, path);
		o = json_object_get(o, part);
		path += n + (path[n] == '.');
	}
	return json_is_integer(o) ? json_integer_value(o) : -1;
}

const char *apitest_jstr(json_t *o, const char *name)
{
	const char *s = json_string_value(json_object_get(o, name));

	return s ? s : "";
}

long long apitest_metric(const struct apitest *t, int i, const char *series)
{
	struct apitest_resp r;
	long long v = -1;
	size_t n = strlen(series);

	if (apitest_call(t, i, "GET", "/metrics", NULL, NULL, &r) == 0 && r.status == 200 &&
	    r.body) {
		v = 0;
		/* A line that starts with the series and a space. */
		for (const char *at = r.body; (at = strstr(at, series)) != NULL; at += n) {
			if ((at == r.body || at[-1] == '\n') && at[n] == ' ') {
				v = strtoll(at + n + 1, NULL, 10);
				break;
			}
		}
	}
	apitest_resp_release(&r);
	return v;
}

/* Copies a string member of r->json into out (size len); -1 when absent
 * or too long. */
static int apitest_copy_str(const struct apitest_resp *r, const char *name, char *out, size_t len)
{
	const char *v = apitest_json_str(r, name);

	if (!v || strlen(v) >= len)
		return -1;
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

int apitest_create_account(const struct apitest *t, const char *name, char *account_id)
{
	json_t *req = json_pack("{s:s}", "name", name);
	char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	struct apitest_resp r;
	int ret = -1;

	json_decref(req);
	if (!text)
		return -1;
	if (apitest_call(t, 0, "POST", "/v1/accounts", t->operator_token, text, &r) == 0 &&
	    r.status == 201 && apitest_copy_str(&r, "account_id", account_id, 65) == 0)
		ret = 0;
	else
		fprintf(stderr, "apitest: create account: status %ld %s %s\n", r.status, r.body,
			r.error);
	/* Frees r.body, which the analyzer loses track of after the fprintf.
	 * NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
	apitest_resp_release(&r);
	free(text);
	return ret;
}

time_t apitest_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

const char *apitest_fixed_zone(char *buf, size_t len, int utc_offset_h)
{
	if (utc_offset_h == 0)
		snprintf(buf, len, "Etc/GMT");
	else
		snprintf(buf, len, "Etc/GMT%+d", -utc_offset_h);
	return buf;
}

int apitest_midday_offset(void)
{
	return 12 - (int)(apitest_now() % 86400 / 3600);
}

const char *apitest_midday_zone(char *buf, size_t len)
{
	return apitest_fixed_zone(buf, len, apitest_midday_offset());
}

int apitest_sign_in(const struct apitest *t, const char *token, char *header, size_t len)
{
	const char *form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
	char body[APITEST_TOKEN_MAX + 8];
	struct apitest_req rq = {.method = "POST", .path = "/dashboard/sign-in", .headers = form};
	struct apitest_resp r;
	const char *p, *q;
	int ret = -1;

	snprintf(body, sizeof(body), "key=%s", token);
	rq.body = body;
	rq.body_len = strlen(body);
	if (apitest_do(t, 0, &rq, &r) == 0 && r.status == 303) {
		p = r.headers ? strstr(r.headers, "meter_session=") : NULL;
		q = p ? strchr(p, ';') : NULL;
		if (p && q) {
			snprintf(header, len, "Cookie: %.*s", (int)(q - p), p);
			ret = 0;
		}
	}
	apitest_resp_release(&r);
	return ret;
}

int apitest_create_key(const struct apitest *t, const char *account_id, const char *role,
		       long long daily_limit_micros, const char *time_zone, char *key_id,
		       char *token)
{
	json_t *req = json_pack("{s:s}", "role", role);
	char *text = NULL;
	char path[128];
	struct apitest_resp r;
	int ret = -1;

	if (!req)
		return -1;
	if (daily_limit_micros >= 0)
		json_object_set_new(req, "daily_limit_micros", json_integer(daily_limit_micros));
	if (time_zone)
		json_object_set_new(req, "time_zone", json_string(time_zone));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!text)
		return -1;
	snprintf(path, sizeof(path), "/v1/accounts/%s/keys", account_id);
	if (apitest_call(t, 0, "POST", path, t->operator_token, text, &r) == 0 && r.status == 201 &&
	    apitest_copy_str(&r, "key_id", key_id, 65) == 0 &&
	    apitest_copy_str(&r, "secret", token, APITEST_TOKEN_MAX) == 0)
		ret = 0;
	else
		fprintf(stderr, "apitest: create key: status %ld %s %s\n", r.status, r.body,
			r.error);
	/* Frees r.body, which the analyzer loses track of after the fprintf.
	 * NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
	apitest_resp_release(&r);
	free(text);
	return ret;
}

long long apitest_proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	long long v = -1;
	size_t fl = strlen(field);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, fl) == 0 && line[fl] == ':')
			v = strtoll(line + fl + 1, NULL, 10);
	fclose(f);
	return v;
}
