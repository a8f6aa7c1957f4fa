/* A small WebDriver client (see webdriver.h). */
#include "webdriver.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ELEMENT_KEY "element-6066-11e4-a52e-4f735466cecf"

struct buf {
	char *data;
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *cls)
{
	struct buf *b = cls;
	char *g = realloc(b->data, b->len + size * n + 1);

	if (!g)
		return 0;
	memcpy(g + b->len, p, size * n);
	b->data = g;
	b->len += size * n;
	b->data[b->len] = '\0';
	return size * n;
}

/* One WebDriver command: method, path under the session (or the server when
 * session is false), JSON body (may be NULL; stolen). Returns the "value"
 * member (new reference) or NULL after printing the error. */
static json_t *wd_call(struct webdriver *wd, const char *method, const char *path, json_t *body,
		       bool session)
{
	char url[512];
	struct buf out = {0};
	struct curl_slist *hdr = NULL;
	json_t *resp = NULL, *value = NULL;
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	CURL *c = curl_easy_init();
	long status = 0;

	snprintf(url, sizeof(url), "%s%s%s%s", wd->base, session ? "/session/" : "",
		 session ? wd->session : "", path);
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	if (text)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
	else if (strcmp(method, "POST") == 0)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{}");
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (out.data)
		resp = json_loads(out.data, 0, NULL);
	if (resp && status == 200) {
		value = json_object_get(resp, "value");
		json_incref(value);
	} else {
		fprintf(stderr, "webdriver %s %s: HTTP %ld %.300s\n", method, path, status,
			out.data ? out.data : "");
	}
	json_decref(resp);
	json_decref(body);
	free(text);
	free(out.data);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	return value;
}

static int free_port(void)
{
	for (int i = 0; i < 200; i++) {
		/* Below the kernel's ephemeral range (32768 up), where no
		 * outgoing connection can take the port before chromedriver
		 * binds it. */
		int p = 10000 + (int)((unsigned)rand() % 22000);
		char cmd[96];
		snprintf(cmd, sizeof(cmd), "(exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null", p);
		if (system(cmd) != 0)
			return p;
	}
	return -1;
}

int wd_start(struct webdriver *wd, bool *missing)
{
	json_t *caps, *value;

	memset(wd, 0, sizeof(*wd));
	*missing =
	    access("/usr/bin/chromium", X_OK) != 0 || access("/usr/bin/chromedriver", X_OK) != 0;
	if (*missing) {
		fprintf(stderr, "chromium or chromedriver is not installed\n");
		return -1;
	}
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	wd->port = free_port();
	snprintf(wd->base, sizeof(wd->base), "http://127.0.0.1:%d", wd->port);
	snprintf(wd->profile, sizeof(wd->profile), "/tmp/meter-chromium-XXXXXX");
	if (!mkdtemp(wd->profile))
		return -1;
	wd->driver_pid = fork();
	if (wd->driver_pid == 0) {
		char port[32];
		snprintf(port, sizeof(port), "--port=%d", wd->port);
		execl("/usr/bin/chromedriver", "chromedriver", port, "--silent", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		value = wd_call(wd, "GET", "/status", NULL, false);
		if (value && json_is_true(json_object_get(value, "ready"))) {
			json_decref(value);
			break;
		}
		json_decref(value);
		usleep(100000);
	}
	caps = json_pack(
	    "{s:{s:{s:s,s:{s:s,s:[s,s,s,s,s,s,s,s,s,s,s]},s:{s:s}}}}", "capabilities",
	    "alwaysMatch", "browserName", "chrome", "goog:chromeOptions", "binary",
	    "/usr/bin/chromium", "args", "--headless=new", "--no-sandbox", "--disable-gpu",
	    "--disable-dev-shm-usage", "--disable-background-networking",
	    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
	    "--window-size=1280,1000", "--user-data-dir", "goog:loggingPrefs", "browser", "ALL");
	/* The profile directory goes with --user-data-dir. */
	{
		json_t *args = json_object_get(
		    json_object_get(
			json_object_get(json_object_get(caps, "capabilities"), "alwaysMatch"),
			"goog:chromeOptions"),
		    "args");
		char arg[128];
		snprintf(arg, sizeof(arg), "--user-data-dir=%s", wd->profile);
		json_array_set_new(args, json_array_size(args) - 1, json_string(arg));
	}
	value = wd_call(wd, "POST", "/session", caps, false);
	if (!value || !json_is_string(json_object_get(value, "sessionId"))) {
		json_decref(value);
		return -1;
	}
	snprintf(wd->session, sizeof(wd->session), "%s",
		 json_string_value(json_object_get(value, "sessionId")));
	json_decref(value);
	return 0;
}

void wd_stop(struct webdriver *wd)
{
	char cmd[128];

	if (wd->session[0])
		json_decref(wd_call(wd, "DELETE", "", NULL, true));
	if (wd->driver_pid > 0) {
		kill(wd->driver_pid, SIGTERM);
		waitpid(wd->driver_pid, NULL, 0);
	}
	if (wd->profile[0] && strncmp(wd->profile, "/tmp/meter-chromium-", 20) == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", wd->profile);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", wd->profile);
	}
}

int wd_get(struct webdriver *wd, const char *url)
{
	json_t *v = wd_call(wd, "POST", "/url", json_pack("{s:s}", "url", url), true);
	int rc = v ? 0 : -1;

	json_decref(v);
	return rc;
}

/* A string value (malloc'd) of a command, or NULL. */
static char *string_of(json_t *v)
{
	char *s = json_is_string(v) ? strdup(json_string_value(v)) : NULL;

	json_decref(v);
	return s;
}

char *wd_url(struct webdriver *wd)
{
	return string_of(wd_call(wd, "GET", "/url", NULL, true));
}

int wd_wait_url(struct webdriver *wd, const char *want, const char *unwanted, int timeout_ms)
{
	for (int waited = 0;; waited += 50) {
		char *url = wd_url(wd);
		bool ok = url && strstr(url, want) && !(unwanted && strstr(url, unwanted));

		free(url);
		if (ok)
			return 0;
		if (waited >= timeout_ms)
			return -1;
		usleep(50000);
	}
}

int wd_wait_source(struct webdriver *wd, const char *needle, int timeout_ms)
{
	for (int waited = 0;; waited += 50) {
		char *src = wd_source(wd);
		bool ok = src && strstr(src, needle);

		free(src);
		if (ok)
			return 0;
		if (waited >= timeout_ms)
			return -1;
		usleep(50000);
	}
}

char *wd_source(struct webdriver *wd)
{
	return string_of(wd_call(wd, "GET", "/source", NULL, true));
}

/* The element id of the first match of css, or NULL. */
static char *find(struct webdriver *wd, const char *css)
{
	json_t *v = wd_call(wd, "POST", "/element",
			    json_pack("{s:s,s:s}", "using", "css selector", "value", css), true);
	char *id = v ? string_of(json_incref(json_object_get(v, ELEMENT_KEY))) : NULL;

	json_decref(v);
	return id;
}

char *wd_text(struct webdriver *wd, const char *css)
{
	char path[256], *id = find(wd, css), *text;

	if (!id)
		return NULL;
	snprintf(path, sizeof(path), "/element/%s/text", id);
	text = string_of(wd_call(wd, "GET", path, NULL, true));
	free(id);
	return text;
}

int wd_type(struct webdriver *wd, const char *css, const char *text)
{
	char path[256], *id = find(wd, css);
	json_t *v;

	if (!id)
		return -1;
	snprintf(path, sizeof(path), "/element/%s/value", id);
	v = wd_call(wd, "POST", path, json_pack("{s:s}", "text", text), true);
	free(id);
	json_decref(v);
	return 0;
}

int wd_click(struct webdriver *wd, const char *css)
{
	char path[256], *id = find(wd, css);
	json_t *v;

	if (!id)
		return -1;
	snprintf(path, sizeof(path), "/element/%s/click", id);
	v = wd_call(wd, "POST", path, NULL, true);
	free(id);
	if (!v)
		return -1;
	json_decref(v);
	return 0;
}

int wd_screenshot(struct webdriver *wd, const char *path)
{
	json_t *v = wd_call(wd, "GET", "/screenshot", NULL, true);
	const char *b64 = json_string_value(v);
	unsigned char *png;
	size_t len = b64 ? strlen(b64) : 0;
	int n, rc = -1;
	FILE *f;

	if (!b64) {
		json_decref(v);
		return -1;
	}
	png = malloc(len);
	n = png ? EVP_DecodeBlock(png, (const unsigned char *)b64, (int)len) : -1;
	if (n > 0) {
		/* EVP_DecodeBlock counts '=' padding as zero bytes. */
		while (len && b64[len - 1] == '=') {
			n--;
			len--;
		}
		f = fopen(path, "wb");
		if (f && fwrite(png, 1, (size_t)n, f) == (size_t)n)
			rc = 0;
		if (f)
			fclose(f);
	}
	free(png);
	json_decref(v);
	return rc;
}

json_t *wd_console_errors(struct webdriver *wd)
{
	json_t *v = wd_call(wd, "POST", "/se/log", json_pack("{s:s}", "type", "browser"), true);
	json_t *errors = json_array();
	size_t i;
	json_t *e;

	if (!v) {
		json_decref(errors);
		return NULL;
	}
	json_array_foreach(v, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "level")) ?: "", "SEVERE") == 0)
			json_array_append(errors, e);
	}
	json_decref(v);
	return errors;
}

char *wd_cookie(struct webdriver *wd, const char *name)
{
	char path[256];
	json_t *v;
	char *s;

	snprintf(path, sizeof(path), "/cookie/%s", name);
	v = wd_call(wd, "GET", path, NULL, true);
	s = v ? string_of(json_incref(json_object_get(v, "value"))) : NULL;
	json_decref(v);
	return s;
}
