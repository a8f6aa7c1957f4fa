/* meter: configuration (see config.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ingest.h"
#include "log.h"
#include "parse.h"

enum opt_kind { OPT_STR, OPT_INT, OPT_LISTEN, OPT_LOG_LEVEL, OPT_BOOL };

struct opt {
	const char *name;
	enum opt_kind kind;
	size_t offset;
	size_t size; /* OPT_STR: buffer size */
	int64_t min, max;
	bool secret; /* never echo the value */
	const char *help;
};

/* Rows of opts[]. field is a member name, which cannot be parenthesised;
 * every other argument is a whole initialiser.
 * NOLINTBEGIN(bugprone-macro-parentheses) */
#define STR_OPT(n, field, sec, h)                                                                  \
	{                                                                                          \
		.name = n, .kind = OPT_STR, .offset = offsetof(struct meter_config, field),        \
		.size = sizeof(((struct meter_config *)0)->field), .secret = sec, .help = h        \
	}
#define BOOL_OPT(n, field, h)                                                                      \
	{                                                                                          \
		.name = n, .kind = OPT_BOOL, .offset = offsetof(struct meter_config, field),       \
		.help = h                                                                          \
	}
#define INT_OPT(n, field, lo, hi, h)                                                               \
	{                                                                                          \
		.name = n, .kind = OPT_INT, .offset = offsetof(struct meter_config, field),        \
		.min = lo, .max = hi, .help = h                                                    \
	}
/* NOLINTEND(bugprone-macro-parentheses) */

static const struct opt opts[] = {
    STR_OPT("database_url", database_url, true,
	    "PostgreSQL URL (libpq syntax; required; secret: it may hold a password)"),
    STR_OPT("database_schema", database_schema, false,
	    "schema of meter's tables, every session's search_path (1 to 63 of a-z, 0-9, _;"
	    " not starting with a digit or pg_)"),
    {.name = "listen",
     .kind = OPT_LISTEN,
     .offset = offsetof(struct meter_config, listen),
     .size = sizeof(((struct meter_config *)0)->listen),
     .help = "HTTP address, host:port or [v6]:port"},
    {.name = "log_level",
     .kind = OPT_LOG_LEVEL,
     .offset = offsetof(struct meter_config, log_level),
     .size = sizeof(((struct meter_config *)0)->log_level),
     .help = "debug, info, warn or error"},
    INT_OPT(
	"http_threads", http_threads, 1, 64,
	"HTTP threads (epoll): they read requests and answer; nothing on them waits on PostgreSQL"),
    INT_OPT("max_connections", max_connections, 1, 100000, "HTTP connection limit"),
    INT_OPT("per_ip_connections", per_ip_connections, 0, 100000,
	    "HTTP connections from one address (0 = no limit)"),
    INT_OPT("connection_timeout_s", connection_timeout_s, 1, 3600,
	    "idle HTTP connection timeout, seconds"),
    INT_OPT("answers_memory_mib", answers_memory_mib, 1, 1048576,
	    "MiB that built answers over 64 KiB may hold together until their clients read them"
	    " (a larger one beyond it is answered 503)"),
    INT_OPT("request_timeout_s", request_timeout_s, 0, 3600,
	    "seconds a client has to send a whole request (headers and body) from connecting or "
	    "from its previous response; slower clients are cut off (0 = no limit)"),
    INT_OPT("db_pool_size", db_pool_size, 2, 256,
	    "PostgreSQL connections for requests (at least one per lane of workers: 2)"),
    STR_OPT("operator_token", operator_token, true,
	    "bearer token of the operator (secret, at least 32 bytes)"),
    STR_OPT("control_plane_token", control_plane_token, true,
	    "bearer token of the control plane (secret, at least 32 bytes)"),
    STR_OPT("agent_token", agent_token, true,
	    "bearer token of host agents that push samples; POST /v1/samples only"
	    " (secret, at least 32 bytes)"),
    INT_OPT("db_statement_timeout_ms", db_statement_timeout_ms, 100, 600000,
	    "PostgreSQL statement timeout, milliseconds"),
    STR_OPT("session_secret", session_secret, true,
	    "signs dashboard session cookies; replicas share it (secret, at least 32 bytes;"
	    " empty = random)"),
    INT_OPT("session_cookie_secure", session_cookie_secure, 0, 1,
	    "1 when the dashboard is served over HTTPS (Secure cookie)"),
    INT_OPT("check_batch_max", check_batch_max, 1, 4096,
	    "create/wake checks decided in one transaction"),
    INT_OPT("check_connections", check_connections, 1, 16,
	    "PostgreSQL connections of the check engine: batches in flight at once"),
    INT_OPT("lease_grace_s", lease_grace_s, 0, 86400,
	    "seconds a sandbox may run past its lease end before hold_outrun is sent, and"
	    " a pause or stop keeps its unmetered tail's hold with no later sample"),
    INT_OPT("sample_retention_days", sample_retention_days, 0, 36500,
	    "UTC days of raw samples kept before today's (older daily partitions are dropped;"
	    " 0 = kept for ever)"),
    INT_OPT("clock_offset_s", clock_offset_s, -3153600000, 3153600000,
	    "TEST ONLY: seconds added to the check engine's clock (0 in production)"),
    STR_OPT("webhook_url", webhook_url, false,
	    "control plane's webhook URL for limit and outrun events (empty = none)"),
    STR_OPT("webhook_secret", webhook_secret, true,
	    "HMAC-SHA256 key of the webhook's Meter-Signature (secret, at least 32 bytes;"
	    " required with webhook_url)"),
    INT_OPT("webhook_concurrency", webhook_concurrency, 1, 32,
	    "webhook events this process POSTs at once (over reused connections)"),
    BOOL_OPT("collector", collector, "run the collector: on or off"),
    BOOL_OPT("api", api, "serve the API: on or off (off: /healthz, /readyz, /metrics only)"),
    INT_OPT("collector_period_s", collector_period_s, 1, 3600, "seconds between collector rounds"),
    STR_OPT("cgroup_root", cgroup_root, false,
	    "cgroup directory whose sub-directories are sandboxes (v2 or v1 cpuacct)"),
    STR_OPT("agents", agents, false, "host agent base URLs, comma-separated"),
    STR_OPT("agents_file", agents_file, false, "file of host agent base URLs, one per line"),
    STR_OPT("host_id", host_id, false, "host id of cgroup samples (default: the hostname)"),
    INT_OPT("agent_timeout_ms", agent_timeout_ms, 100, 600000,
	    "timeout of one host agent request, milliseconds"),
    INT_OPT("collector_backlog_max", collector_backlog_max, 0, 100000000,
	    "samples kept while the database is down (older rounds are dropped)"),
    INT_OPT("collector_connections", collector_connections, 1, 16,
	    "PostgreSQL connections the collector ingests over at once (hosts split among them)"),
    INT_OPT("ingest_cache_sandboxes", ingest_cache_sandboxes, 0, 10000000,
	    "sandboxes whose meter row ingestion keeps between calls (0: none)"),
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

void config_init(struct meter_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->listen, sizeof(cfg->listen), "127.0.0.1:8080");
	snprintf(cfg->log_level, sizeof(cfg->log_level), "info");
	snprintf(cfg->database_schema, sizeof(cfg->database_schema), "public");
	cfg->http_threads = 2;
	cfg->max_connections = 1024;
	cfg->per_ip_connections = 0;
	cfg->connection_timeout_s = 30;
	cfg->request_timeout_s = 60;
	cfg->answers_memory_mib = 256;
	cfg->db_pool_size = 8;
	cfg->db_statement_timeout_ms = 10000;
	cfg->check_batch_max = 256;
	cfg->check_connections = 1;
	cfg->lease_grace_s = 30;
	cfg->sample_retention_days = 400;
	cfg->webhook_concurrency = 4;
	cfg->collector = true;
	cfg->api = true;
	cfg->collector_period_s = 10;
	cfg->agent_timeout_ms = 2000;
	cfg->collector_backlog_max = 1000000;
	cfg->collector_connections = 2;
	cfg->ingest_cache_sandboxes = INGEST_CACHE_DEFAULT;
	cfg->clock_offset_s = 0;
}

/* Finds an option by name; '-' and '_' compare equal. NULL when unknown. */
static const struct opt *opt_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const char *o = opts[i].name;
		size_t j;

		if (strlen(o) != len)
			continue;
		for (j = 0; j < len; j++) {
			char c = (char)(name[j] == '-' ? '_' : name[j]);
			if (c != o[j])
				break;
		}
		if (j == len)
			return &opts[i];
	}
	return NULL;
}

enum meter_rc config_listen_split(const char *listen, char *host, size_t hostlen, int *port)
{
	const char *colon, *h = listen;
	size_t hlen;
	int64_t p;
	char portbuf[8];

	if (listen[0] == '[') {
		const char *close = strchr(listen, ']');
		if (!close || close[1] != ':')
			return METER_EINVAL;
		h = listen + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(listen, ':');
		if (!colon || strchr(listen, ':') != colon)
			return METER_EINVAL;
		hlen = (size_t)(colon - listen);
	}
	if (hlen == 0 || hlen >= hostlen || strlen(colon + 1) >= sizeof(portbuf))
		return METER_EINVAL;
	memcpy(portbuf, colon + 1, strlen(colon + 1) + 1);
	if (parse_int64(portbuf, 0, 65535, &p) != METER_OK)
		return METER_EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	/* Numeric, in the one form each family has: inet_pton takes neither
	 * the shorthands getaddrinfo would ("0" for every interface, "127.1")
	 * nor octets with leading zeros (read as octal by some). */
	if (listen[0] == '[') {
		/* A link-local address may name its interface: fe80::1%eth0. */
		struct in6_addr a6;
		char addr[INET6_ADDRSTRLEN];
		size_t alen = strcspn(host, "%");

		if (alen >= sizeof(addr) ||
		    (host[alen] == '%' &&
		     (host[alen + 1] == '\0' ||
		      strspn(host + alen + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					      "0123456789_.-") != strlen(host + alen + 1))))
			return METER_EINVAL;
		memcpy(addr, host, alen);
		addr[alen] = '\0';
		if (inet_pton(AF_INET6, addr, &a6) != 1)
			return METER_EINVAL;
	} else {
		struct in_addr a4;
		if (strcmp(host, "localhost") != 0 && inet_pton(AF_INET, host, &a4) != 1)
			return METER_EINVAL;
	}
	*port = (int)p;
	return METER_OK;
}

/* Applies value to one option. */
static enum meter_rc opt_apply(struct meter_config *cfg, const struct opt *o, const char *value,
			       char *err, size_t errlen)
{
	char *base = (char *)cfg + o->offset;
	enum meter_rc rc;

	switch (o->kind) {
	case OPT_STR:
	case OPT_LISTEN:
	case OPT_LOG_LEVEL:
		if (strlen(value) >= o->size) {
			snprintf(err, errlen, "%s: value too long (at most %zu bytes)", o->name,
				 o->size - 1);
			return METER_ERANGE;
		}
		if (o->kind == OPT_LISTEN) {
			char host[256];
			int port;
			if (config_listen_split(value, host, sizeof(host), &port) != METER_OK) {
				snprintf(err, errlen,
					 "%s: expected host:port (the host a dotted IPv4 address or"
					 " localhost) or [v6]:port, got \"%s\"",
					 o->name, value);
				return METER_EINVAL;
			}
		}
		if (o->kind == OPT_LOG_LEVEL && log_level_parse(value) < 0) {
			snprintf(err, errlen, "%s: expected debug, info, warn or error", o->name);
			return METER_EINVAL;
		}
		memcpy(base, value, strlen(value) + 1);
		return METER_OK;
	case OPT_BOOL:
		if (strcmp(value, "on") == 0 || strcmp(value, "true") == 0 ||
		    strcmp(value, "yes") == 0 || strcmp(value, "1") == 0) {
			*(bool *)(void *)base = true;
		} else if (strcmp(value, "off") == 0 || strcmp(value, "false") == 0 ||
			   strcmp(value, "no") == 0 || strcmp(value, "0") == 0) {
			*(bool *)(void *)base = false;
		} else {
			snprintf(err, errlen, "%s: expected on or off", o->name);
			return METER_EINVAL;
		}
		return METER_OK;
	case OPT_INT:
		rc = parse_int64(value, o->min, o->max, (int64_t *)(void *)base);
		if (rc != METER_OK) {
			snprintf(err, errlen, "%s: expected an integer in %lld..%lld", o->name,
				 (long long)o->min, (long long)o->max);
			return rc;
		}
		return METER_OK;
	}
	return METER_EINVAL;
}

enum meter_rc config_set(struct meter_config *cfg, const char *name, const char *value, char *err,
			 size_t errlen)
{
	const struct opt *o = opt_find(name, strlen(name));

	if (!o) {
		snprintf(err, errlen, "unknown option \"%.64s\"", name);
		return METER_ENOTFOUND;
	}
	return opt_apply(cfg, o, value, err, errlen);
}

/* A config file read a line at a time (config_line_read), its first bytes
 * read ahead to skip an editor's UTF-8 byte order mark. */
struct config_reader {
	FILE *f;
	int ahead[3]; /* bytes read ahead, given back first */
	size_t nahead, next;
};

/* Opens r on f, skipping a byte order mark at its start. */
static void config_reader_init(struct config_reader *r, FILE *f)
{
	static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
	int c;

	memset(r, 0, sizeof(*r));
	r->f = f;
	while (r->nahead < sizeof(bom) && (c = getc(f)) != EOF) {
		r->ahead[r->nahead++] = c;
		if (c != bom[r->nahead - 1])
			return;
	}
	if (r->nahead == sizeof(bom))
		r->nahead = 0; /* the mark: no part of the first name */
}

static int config_getc(struct config_reader *r)
{
	if (r->next < r->nahead)
		return r->ahead[r->next++];
	return getc(r->f);
}

enum config_line { CONFIG_LINE_END, CONFIG_LINE_OK, CONFIG_LINE_LONG };

/* Reads r's next line into buf (size bytes, NUL-terminated) without what no
 * option's name or value holds: its line end, and the blanks (spaces and
 * tabs; carriage returns too, but where the line or the value begins) at
 * its two ends and on either side of its first '=', as README says.
 * Blanks inside the value are kept as they are; a run of them inside the
 * name (which has none: the line is refused) is kept as one space. A
 * comment (the first non-blank a '#') reads as "". Blanks and comments may
 * be as long as they like: only what is kept counts against size.
 * CONFIG_LINE_LONG when that does not fit (the rest of the line is
 * skipped; buf holds what fit), CONFIG_LINE_END at the end of the file. */
static enum config_line config_line_read(struct config_reader *r, char *buf, size_t size)
{
	enum { LEAD, NAME, VALUE_LEAD, VALUE } at = LEAD;
	size_t n = 0, blanks = 0; /* a run of blanks after buf[n - 1], not kept yet */
	bool any = false, long_line = false;
	int c;

	while ((c = config_getc(r)) != EOF && c != '\n') {
		any = true;
		if (long_line)
			continue;
		if (c == '\r' && (at == LEAD || at == VALUE_LEAD)) {
			/* Blank at an end only: here it begins the name
			 * (refused) or the value. */
			at = at == LEAD ? NAME : VALUE;
			blanks = 0;
		}
		if (c == ' ' || c == '\t' || c == '\r') {
			/* A value's blanks are written ahead, while they fit:
			 * kept once a byte of the value follows them. */
			if (at == VALUE && n + blanks + 1 < size)
				buf[n + blanks] = (char)c;
			blanks++;
			continue;
		}
		if (at == LEAD && c == '#') {
			while ((c = config_getc(r)) != EOF && c != '\n')
				;
			buf[0] = '\0';
			return CONFIG_LINE_OK;
		}
		if (c == '=' && (at == LEAD || at == NAME)) {
			at = VALUE_LEAD;
			blanks = 0;
		} else if (at == LEAD || at == VALUE_LEAD) {
			at = at == LEAD ? NAME : VALUE;
			blanks = 0;
		} else if (blanks > 0 && at == NAME) {
			blanks = 1;
			if (n + 1 < size)
				buf[n] = ' ';
		}
		if (n + blanks + 1 >= size) {
			long_line = true;
			continue;
		}
		n += blanks;
		blanks = 0;
		buf[n++] = (char)c;
	}
	buf[n] = '\0';
	if (c == EOF && !any)
		return CONFIG_LINE_END;
	return long_line ? CONFIG_LINE_LONG : CONFIG_LINE_OK;
}

enum meter_rc config_load_file(struct meter_config *cfg, const char *path, char *err, size_t errlen)
{
	char line[CONFIG_STR_MAX + 128] = ""; /* all of it set: the analyzer sees no byte unset */
	char sub[512];
	struct config_reader r;
	FILE *f;
	int lineno = 0, first_line[NOPTS] = {0}; /* where each option was set */
	enum config_line got;
	enum meter_rc rc = METER_OK;

	f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return METER_EIO;
	}
	config_reader_init(&r, f);
	while ((got = config_line_read(&r, line, sizeof(line))) != CONFIG_LINE_END) {
		char *eq, *name, *value;

		lineno++;
		if (got == CONFIG_LINE_LONG) {
			/* Longer than any option's line, less its blanks: an
			 * option's value is too long for it. */
			const struct opt *o = NULL;

			eq = strchr(line, '=');
			if (eq)
				o = opt_find(line, (size_t)(eq - line));
			if (o && o->kind != OPT_INT && o->kind != OPT_BOOL)
				snprintf(err, errlen,
					 "%s:%d: %s: value too long (at most %zu bytes)", path,
					 lineno, o->name, o->size - 1);
			else if (o && o->kind == OPT_INT)
				snprintf(
				    err, errlen,
				    "%s:%d: %s: value too long (expected an integer in %lld..%lld)",
				    path, lineno, o->name, (long long)o->min, (long long)o->max);
			else if (o)
				snprintf(err, errlen, "%s:%d: %s: value too long", path, lineno,
					 o->name);
			else
				snprintf(err, errlen, "%s:%d: line too long (no option's line is)",
					 path, lineno);
			rc = METER_ERANGE;
			goto out;
		}
		if (line[0] == '\0')
			continue;
		eq = strchr(line, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected name = value", path, lineno);
			rc = METER_EINVAL;
			goto out;
		}
		*eq = '\0';
		name = line;
		value = eq + 1;
		if (strspn(name,
			   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
		    strlen(name)) {
			/* "database_url postgresql://u:pw@h/db?sslmode=x" has its
			 * '=' inside the value: what comes before it is no name,
			 * and may hold a secret, so it is not shown. */
			snprintf(
			    err, errlen,
			    "%s:%d: expected name = value, the name of letters, digits, _ and -"
			    " (the line is not shown: it may hold a secret)",
			    path, lineno);
			rc = METER_EINVAL;
			goto out;
		}
		{
			/* A file says each thing once: a second line for an
			 * option is a mistake, not an override. */
			const struct opt *o = opt_find(name, strlen(name));

			if (o && first_line[o - opts]) {
				snprintf(err, errlen, "%s:%d: %s is set already, on line %d", path,
					 lineno, o->name, first_line[o - opts]);
				rc = METER_EINVAL;
				goto out;
			}
			if (o)
				first_line[o - opts] = lineno;
		}
		rc = config_set(cfg, name, value, sub, sizeof(sub));
		if (rc != METER_OK) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
			goto out;
		}
	}
	if (ferror(f)) {
		snprintf(err, errlen, "config file %s: read error", path);
		rc = METER_EIO;
	}
out:
	fclose(f);
	return rc;
}

enum meter_rc config_load_env(struct meter_config *cfg, char *const *envp, char *err, size_t errlen)
{
	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq;
		char name[64];
		size_t len;
		const struct opt *o;

		if (strncmp(e, "METER_", 6) != 0)
			continue;
		eq = strchr(e, '=');
		if (!eq)
			continue;
		len = (size_t)(eq - e) - 6;
		if (len == 0)
			continue;
		/* A name too long for the buffer is no option's name. */
		o = NULL;
		name[0] = '\0';
		if (len < sizeof(name)) {
			for (size_t i = 0; i < len; i++) {
				char c = e[6 + i];
				name[i] = (char)((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
			}
			name[len] = '\0';
			o = opt_find(name, len);
		}
		if (!o) {
			/* Not applied; listed for a warning (the project's
			 * scripts and other tools use METER_ names too, so not
			 * an error). */
			size_t used = strlen(cfg->unknown_environment);
			/* A name over 64 characters (METER_ counted) is shown
			 * by its first 60, as README says. */
			size_t shown = 6 + len > 64 ? 60 - 6 : len;

			if (strcmp(name, "config") == 0)
				continue;
			if (used + shown + 11 < sizeof(cfg->unknown_environment))
				snprintf(cfg->unknown_environment + used,
					 sizeof(cfg->unknown_environment) - used, "%sMETER_%.*s%s",
					 used ? "," : "", (int)shown, e + 6,
					 shown < len ? "..." : "");
			else if (used + 5 < sizeof(cfg->unknown_environment) &&
				 !strstr(cfg->unknown_environment, ",..."))
				snprintf(cfg->unknown_environment + used,
					 sizeof(cfg->unknown_environment) - used, ",...");
			continue;
		}
		if (opt_apply(cfg, o, eq + 1, err, errlen) != METER_OK) {
			char sub[512];
			snprintf(sub, sizeof(sub), "%s", err);
			snprintf(err, errlen, "environment METER_%.*s: %s", (int)len, e + 6, sub);
			return METER_EINVAL;
		}
	}
	return METER_OK;
}

enum meter_rc config_load(struct meter_config *cfg, int argc, char **argv, char *const *envp,
			  bool *help, char *err, size_t errlen)
{
	const char *file = NULL, *flag_file = NULL;
	enum meter_rc rc;

	*help = false;
	config_init(cfg);
	/* --help first, whatever the file or the environment hold (every
	 * option takes a value: "--name value" skips the value). */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			*help = true;
			return METER_OK;
		}
		if (strncmp(argv[i], "--", 2) == 0 && !strchr(argv[i], '='))
			i++;
	}
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, "METER_CONFIG=", 13) == 0)
			file = *e + 13;
	/* --config is looked for first: the file sits below env and flags. */
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;

		if (strcmp(argv[i], "--config") == 0)
			v = i + 1 < argc ? argv[i + 1] : "";
		else if (strncmp(argv[i], "--config=", 9) == 0)
			v = argv[i] + 9;
		else
			continue;
		if (!*v) {
			snprintf(err, errlen, "option --config needs a value");
			return METER_EINVAL;
		}
		if (flag_file) {
			/* One file is read: a second would be ignored. */
			snprintf(err, errlen, "option --config given twice (one file is read)");
			return METER_EINVAL;
		}
		file = flag_file = v;
	}
	if (file && *file) {
		rc = config_load_file(cfg, file, err, errlen);
		if (rc != METER_OK)
			return rc;
	}
	rc = config_load_env(cfg, envp, err, errlen);
	if (rc != METER_OK)
		return rc;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq;
		char *value;
		const struct opt *o;
		size_t len;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			*help = true;
			return METER_OK;
		}
		if (strncmp(a, "--", 2) != 0) {
			char shown[80];

			snprintf(err, errlen,
				 "unexpected argument %s (a value with blanks needs quotes)",
				 parse_arg_shown(a, shown, sizeof(shown)));
			return METER_EINVAL;
		}
		a += 2;
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		if (len == 6 && strncmp(a, "config", 6) == 0) {
			if (!eq)
				i++;
			continue;
		}
		if (len == 4 && strncmp(a, "help", 4) == 0) { /* --help=...: not an option's */
			snprintf(err, errlen, "option --help takes no value");
			return METER_EINVAL;
		}
		o = opt_find(a, len);
		if (!o) {
			char shown[224];

			snprintf(err, errlen, "unknown option %s",
				 parse_arg_shown(argv[i], shown, sizeof(shown)));
			return METER_ENOTFOUND;
		}
		if (eq) {
			value = argv[i] + 2 + len + 1;
		} else if (i + 1 < argc) {
			value = argv[++i];
		} else {
			snprintf(err, errlen, "option --%s needs a value", o->name);
			return METER_EINVAL;
		}
		rc = opt_apply(cfg, o, value, err, errlen);
		if (rc != METER_OK)
			return rc;
		if (o->secret && value[0]) { /* an empty value shows no secret */
			size_t used = strlen(cfg->secrets_on_command_line);

			memset(value, 'x', strlen(value));
			snprintf(cfg->secrets_on_command_line + used,
				 sizeof(cfg->secrets_on_command_line) - used, "%s%s",
				 used ? "," : "", o->name);
		}
	}
	return METER_OK;
}

void config_usage(const char *prog)
{
	struct meter_config d;

	config_init(&d);
	printf("usage: %s [--config FILE] [--OPTION VALUE]...\n\n"
	       "Each option is also read from METER_<OPTION> and from the config file\n"
	       "(\"option = value\" lines); flags win over the environment, which wins\n"
	       "over the file.\n\n",
	       prog);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *base = (const char *)&d + o->offset;

		printf("  --%-26s %s", o->name, o->help);
		if (o->kind == OPT_INT)
			printf(" (%lld to %lld, default %lld)", (long long)o->min,
			       (long long)o->max, (long long)*(const int64_t *)(const void *)base);
		else if (o->kind == OPT_BOOL)
			printf(" (default %s)", *(const bool *)(const void *)base ? "on" : "off");
		else if (*base)
			printf(" (default %s)", base);
		printf("\n");
	}
}
