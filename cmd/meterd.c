/* meterd: the metering daemon: the HTTP API and the collector (either can be
 * switched off: --api off, --collector off).
 *
 * Configuration: defaults < config file < METER_* environment < flags.
 * Starts serving at once, even while PostgreSQL is down: /healthz answers,
 * /readyz says 503 until the database answers, and the connection is retried
 * with backoff in the background. SIGTERM or SIGINT stop it cleanly (a
 * second one at once); SIGHUP is ignored. */
#include <curl/curl.h>
#include <errno.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "checks.h"
#include "clock.h"
#include "collector.h"
#include "config.h"
#include "db.h"
#include "db_util.h"
#include "dbpool.h"
#include "log.h"
#include "parse.h"
#include "schema_gate.h"
#include "server.h"
#include "session.h"
#include "url.h"
#include "webhook.h"

extern char **environ;

#define WATCH_INTERVAL_MS      1000
#define GATE_WAIT_MS	       2000	    /* at start, for the schema gate's first reading */
#define STARTUP_STEP_MS	       50	    /* ... taking a signal this often */
#define FD_HEADROOM	       256	    /* descriptors beside the HTTP connections */
#define NOFILE_CONNECTIONS_MIN 8	    /* max_connections is never lowered below */
#define MMAP_THRESHOLD	       (128 * 1024) /* blocks this large come from mmap */

/* While meterd stops: a second SIGTERM or SIGINT ends it at once, with
 * the requests still under way cut (every answer already sent was durable
 * before it went; what was not answered was not decided). */
static void *second_signal(void *arg)
{
	const sigset_t *sigs = arg;

	for (;;) {
		int sig = 0;

		if (sigwait(sigs, &sig) != 0)
			return NULL;
		if (sig == SIGTERM || sig == SIGINT) {
			log_warn("meterd: %s received again: stopping at once",
				 sig == SIGTERM ? "SIGTERM" : "SIGINT");
			_exit(1);
		}
	}
}

/* Takes a SIGTERM, SIGINT or SIGHUP already sent (wait false), or waits
 * for one. 1: SIGTERM or SIGINT, logged; 0: none, or SIGHUP, logged and
 * ignored; -1: the wait failed, logged. */
static int take_signal(const sigset_t *sigs, bool wait)
{
	static const struct timespec now = {0};
	int sig = wait ? sigwaitinfo(sigs, NULL) : sigtimedwait(sigs, NULL, &now);

	if (sig == SIGTERM || sig == SIGINT) {
		log_info("meterd: %s received, shutting down (another stops it at once)",
			 sig == SIGTERM ? "SIGTERM" : "SIGINT");
		return 1;
	}
	if (sig == SIGHUP)
		log_info("meterd: SIGHUP received and ignored: the configuration is read "
			 "at start only (restart meterd to change it)");
	if (sig < 0 && errno != EAGAIN && errno != EINTR) {
		log_error("meterd: waiting for a signal: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The database watch, on a thread of its own: it connects at start-up and
 * reconnects after an outage, with the pool's backoff, pinging every
 * WATCH_INTERVAL_MS. A ping may wait for the connect timeout (a server
 * that takes connections and never answers); a signal is not kept waiting
 * with it, so a stop stops listening at once. One for the process, never
 * freed; the stop joins its thread before the pool goes (a second signal
 * ends the process at once, without it). Joined, not only waited for: the
 * thread's exit frees its OpenSSL state (the per-thread random generators
 * libpq's authentication made), and a process that ended while that ran
 * lost it, which LeakSanitizer reported. */
static struct {
	struct app *app;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started;  /* main's thread's alone */
	bool stopping; /* under mu */
} watch = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Sleeps ms unless told to stop; true when stopping. */
static bool watch_nap(int64_t ms)
{
	struct timespec until = clock_mono_after_ms(ms);
	bool stop;

	pthread_mutex_lock(&watch.mu);
	while (!watch.stopping)
		if (pthread_cond_timedwait(&watch.cv, &watch.mu, &until) == ETIMEDOUT)
			break;
	stop = watch.stopping;
	pthread_mutex_unlock(&watch.mu);
	return stop;
}

static void *watch_main(void *arg)
{
	(void)arg;
	if (db_pool_ping(watch.app->pool, 2000) != METER_OK && !watch_nap(0))
		log_warn("database not answering yet; serving anyway, /readyz says 503 until it "
			 "does");
	while (!watch_nap(WATCH_INTERVAL_MS))
		if (app_db_ping(watch.app, 2000) != METER_OK)
			log_debug("database not answering");
	return NULL;
}

/* Starts the watch on app (which outlives it). False when it cannot. */
static bool watch_start(struct app *app)
{
	watch.app = app;
	if (clock_mono_cond_init(&watch.cv) != 0)
		return false;
	watch.started = pthread_create(&watch.thread, NULL, watch_main, NULL) == 0;
	return watch.started;
}

/* Tells the watch to stop, at once. */
static void watch_stop(void)
{
	pthread_mutex_lock(&watch.mu);
	watch.stopping = true;
	if (watch.started) /* its cv made */
		pthread_cond_broadcast(&watch.cv);
	pthread_mutex_unlock(&watch.mu);
}

/* Waits until the watch's thread has ended (one never started: at once):
 * a ping under way ends within its 2 s, or the connect timeout of one
 * being made. Before the engine and the pool go: the ping tells both. */
static void watch_wait(void)
{
	if (watch.started && pthread_join(watch.thread, NULL) != 0)
		log_warn("meterd: the database watch could not be joined");
}

/* The descriptors meterd needs beside max_connections connections: two
 * for each HTTP thread (its epoll set and its wake-up; their number grows
 * with max_connections, see http_server_threads), the database pool's,
 * and FD_HEADROOM for the rest. */
static rlim_t nofile_other(const struct meter_config *cfg, int64_t max_connections)
{
	return FD_HEADROOM + (rlim_t)cfg->db_pool_size +
	       2 * (rlim_t)http_server_threads(cfg->http_threads, max_connections);
}

/* Every HTTP connection is a descriptor, and the soft open-file limit is
 * often 1024: raise it (up to the hard limit) so max_connections fit. When
 * the hard limit is lower, max_connections is lowered to fit under it:
 * connections that took the descriptors the database pool, the engine, the
 * webhook and the exports need would turn a busy minute into failed
 * reconnects and 503s, where a connection over max_connections only waits
 * to be accepted. */
static void raise_nofile(struct meter_config *cfg)
{
	const int64_t asked = cfg->max_connections;
	const int64_t threads = http_server_threads(cfg->http_threads, asked);
	const rlim_t rest = FD_HEADROOM + (rlim_t)cfg->db_pool_size;
	const rlim_t other = nofile_other(cfg, asked);
	rlim_t want = (rlim_t)asked + other;
	struct rlimit rl;
	int64_t fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur >= want)
		return;
	/* The most that fit beside what they need (fewer may need fewer HTTP
	 * threads), never lowered below NOFILE_CONNECTIONS_MIN. */
	fit = rl.rlim_cur > rest + NOFILE_CONNECTIONS_MIN ? (int64_t)(rl.rlim_cur - rest)
							  : NOFILE_CONNECTIONS_MIN;
	if (fit > asked)
		fit = asked;
	while (fit > NOFILE_CONNECTIONS_MIN && (rlim_t)fit + nofile_other(cfg, fit) > rl.rlim_cur)
		fit--;
	if (fit < asked)
		cfg->max_connections = fit;
	log_warn("meterd: open-file limit %llu is below max_connections %lld + %llu (%llu for "
		 "%lld HTTP threads, %lld for the database pool, %d for the rest): "
		 "max_connections %s %lld",
		 (unsigned long long)rl.rlim_cur, (long long)asked, (unsigned long long)other,
		 (unsigned long long)(other - rest), (long long)threads,
		 (long long)cfg->db_pool_size, FD_HEADROOM,
		 cfg->max_connections < asked ? "lowered to" : "kept at",
		 (long long)cfg->max_connections);
}

int main(int argc, char **argv)
{
	struct meter_config cfg;
	struct app app = {0};
	struct http_server *srv = NULL;
	struct db_pool *pool = NULL;
	struct checks_engine *checks = NULL;
	struct webhook *webhook = NULL;
	struct collector *collector = NULL;
	bool curl_ready = false;
	char err[512];
	sigset_t sigs;
	bool help;
	int status = 1, got;
	enum meter_rc rc;

	/* Signals are taken synchronously by the main thread only (and,
	 * once it stops, by second_signal's), from the first instruction: one
	 * sent while the process starts waits for the main thread, instead of
	 * ending it with the default action. SIGHUP is among them so that it
	 * does not end the process, as it would by default. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* No core dump and no tracing by other processes of this user: the
	 * process holds the tokens and secrets, in its memory and its
	 * environment (/proc/PID/environ becomes root's alone). */
	if (prctl(PR_SET_DUMPABLE, 0L, 0L, 0L, 0L) != 0)
		fprintf(stderr, "meterd: cannot make the process undumpable: %s\n",
			strerror(errno));
	if (config_load(&cfg, argc, argv, environ, &help, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "meterd: %s\n", err);
		return 2;
	}
	if (help) {
		config_usage("meterd");
		return 0;
	}
	if (cfg.database_url[0] == '\0') {
		fprintf(stderr, "meterd: no database: set METER_DATABASE_URL or --database-url\n");
		return 2;
	}
	/* A URL libpq cannot read is a bad value, not an outage to wait out. */
	if (!db_url_ok(cfg.database_url, err, sizeof(err))) {
		fprintf(stderr, "meterd: database_url: %s\n", err);
		return 2;
	}
	if (!db_set_schema(cfg.database_schema)) {
		fprintf(stderr,
			"meterd: database_schema must be 1 to 63 of a-z, 0-9 and _, not starting"
			" with a digit or pg_\n");
		return 2;
	}
	if (cfg.webhook_url[0] && !url_http_ok(cfg.webhook_url, err, sizeof(err))) {
		fprintf(stderr, "meterd: webhook_url %s\n", err);
		return 2;
	}
	log_set_level((enum log_level)log_level_parse(cfg.log_level));
	if (cfg.unknown_environment[0])
		log_warn("environment variables that name no option, not applied: %s",
			 cfg.unknown_environment);
	if (cfg.secrets_on_command_line[0])
		log_warn("secret options on the command line (%s): every local user can read a "
			 "command line until it is overwritten, as meterd has now done; set them "
			 "in the environment or the config file",
			 cfg.secrets_on_command_line);
	raise_nofile(&cfg);
	/* Large blocks (a statement's lines and text, big answers) come from
	 * mmap and go back to the system when freed. glibc's default raises
	 * that threshold to the size of the largest block freed, after which
	 * such blocks come from the heaps, which keep what is freed: memory
	 * that answers_memory_mib no longer counts stayed with the process
	 * (about 200 MB after a few large statements at once). A sanitizer's
	 * allocator ignores this. */
	if (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1)
		log_debug("mallopt(M_MMAP_THRESHOLD) not taken");
	if (!cfg.api && !cfg.collector) {
		fprintf(stderr, "meterd: api and collector are both off: nothing to run\n");
		return 2;
	}
	if (cfg.session_secret[0] && strlen(cfg.session_secret) < 32) {
		fprintf(stderr, "meterd: session_secret must be at least 32 bytes\n");
		return 2;
	}
	/* Unsigned (or weakly signed) events could be forged by anyone who
	 * can reach the control plane's webhook. */
	if (cfg.webhook_url[0] && strlen(cfg.webhook_secret) < 32) {
		fprintf(stderr, "meterd: webhook_url needs a webhook_secret of at least 32 "
				"bytes\n");
		return 2;
	}
	/* A short secret set ahead of its URL would be refused only once the
	 * URL comes: say so now, as for session_secret. */
	if (cfg.webhook_secret[0] && strlen(cfg.webhook_secret) < 32) {
		fprintf(stderr, "meterd: webhook_secret must be at least 32 bytes\n");
		return 2;
	}
	/* One token per caller: a token given to two would carry the
	 * rights of the first that matches. */
	{
		const char *tokens[3] = {cfg.operator_token, cfg.control_plane_token,
					 cfg.agent_token};
		const char *names[3] = {"operator_token", "control_plane_token", "agent_token"};

		/* A token is the whole of its caller's credential, and the
		 * operator's dashboard session carries a hash of the operator's:
		 * a short one could be guessed, online or from a stolen cookie
		 * offline. At least as long as a webhook's secret. */
		for (int i = 0; i < 3; i++)
			if (tokens[i][0] && strlen(tokens[i]) < 32) {
				fprintf(stderr,
					"meterd: %s needs at least 32 bytes (a random one: "
					"openssl rand -hex 32)\n",
					names[i]);
				return 2;
			}
		for (int i = 0; i < 3; i++)
			for (int j = i + 1; j < 3; j++)
				if (tokens[i][0] && strlen(tokens[i]) == strlen(tokens[j]) &&
				    CRYPTO_memcmp(tokens[i], tokens[j], strlen(tokens[i])) == 0) {
					fprintf(stderr, "meterd: %s and %s are the same token\n",
						names[i], names[j]);
					return 2;
				}
	}
	if (session_init(cfg.session_secret) != METER_OK) {
		fprintf(stderr, "meterd: cannot set up dashboard sessions\n");
		return 1;
	}
	if (!cfg.session_secret[0])
		log_info("no session_secret configured: dashboard sessions last as long as this "
			 "process and are not shared with other meterd processes");

	/* The server keeps the statement timeout; a server that stopped
	 * answering is given up on 2 s after it (checks keep their own). */
	db_util_set_deadline_ms(cfg.db_statement_timeout_ms + DB_UTIL_DEADLINE_SLACK_MS);
	pool = db_pool_new(cfg.database_url, (int)cfg.db_pool_size, cfg.db_statement_timeout_ms);
	if (!pool) {
		fprintf(stderr, "meterd: out of memory\n");
		goto out;
	}
	app.cfg = &cfg;
	app.pool = pool;
	/* Before anything that works on the database: until the gate has
	 * read the schema and found it this binary's, nothing does. */
	if (schema_gate_start(cfg.database_url, cfg.db_statement_timeout_ms) != METER_OK) {
		log_error("meterd: cannot start the schema gate");
		goto out;
	}
	/* The database down: the gate reads it once it is up. A SIGTERM or
	 * SIGINT meanwhile stops meterd before it listens. */
	for (int64_t until = clock_mono_ms() + GATE_WAIT_MS;
	     !schema_gate_wait(STARTUP_STEP_MS) && clock_mono_ms() < until;) {
		got = take_signal(&sigs, false);
		if (got > 0)
			goto stop;
		if (got < 0)
			goto out;
	}
	/* libcurl's global state, before any thread uses it (the collector's
	 * agent polling, the webhook deliverer). */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("meterd: cannot initialise libcurl");
		goto out;
	}
	curl_ready = true;
	{
		/* The collector's settings, whether it runs or not (a typo
		 * shows at this start, not at the one that switches it on),
		 * and host_id whichever source it would name. */
		struct collector_opts co = {
		    .host_id = cfg.host_id, .agents = cfg.agents, .agents_file = cfg.agents_file};

		rc = collector_check(&co, err, sizeof(err));
		if (rc != METER_OK) {
			log_error("meterd: collector%s: %s", cfg.collector ? "" : " (off)", err);
			if (rc == METER_EINVAL || rc == METER_EIO)
				status = 2;
			goto out;
		}
	}
	if (cfg.collector) {
		struct collector_opts co = {.database_url = cfg.database_url,
					    .statement_timeout_ms = cfg.db_statement_timeout_ms,
					    .period_s = cfg.collector_period_s,
					    .cgroup_root = cfg.cgroup_root,
					    .agents = cfg.agents,
					    .agents_file = cfg.agents_file,
					    .agent_timeout_ms = cfg.agent_timeout_ms,
					    .backlog_max = cfg.collector_backlog_max,
					    .connections = cfg.collector_connections,
					    .cache_sandboxes = cfg.ingest_cache_sandboxes > 0
								   ? cfg.ingest_cache_sandboxes
								   : -1};
		char host[256] = "", host_id[sizeof(cfg.host_id)];

		if (cfg.host_id[0])
			snprintf(host, sizeof(host), "%s", cfg.host_id);
		else if (gethostname(host, sizeof(host) - 1) != 0)
			host[0] = '\0';
		if (cfg.host_id[0])
			snprintf(host_id, sizeof(host_id), "%s", cfg.host_id);
		else
			collector_host_id(host, host_id, sizeof(host_id));
		co.host_id = host_id;
		rc = collector_start(&co, &collector, err, sizeof(err));
		if (rc != METER_OK) {
			log_error("meterd: collector: %s", err);
			if (rc == METER_EINVAL || rc == METER_EIO)
				status = 2; /* a bad setting (an agent URL, the host id, an
					     * agents file that cannot be read) */
			goto out;
		}
	}
	if (!cfg.api)
		log_info("meterd: api off: only /healthz, /readyz and /metrics are served");
	{
		/* The check engine: group-committed create/wake checks and the
		 * lease-end sweeper, on connections of their own. */
		struct checks_options co = {.database_url = cfg.database_url,
					    .statement_timeout_ms = cfg.db_statement_timeout_ms,
					    .batch_max = (int)cfg.check_batch_max,
					    .batchers = (int)cfg.check_connections,
					    .clock_offset_s = cfg.clock_offset_s,
					    .sweeper = true,
					    .lease_grace_s = cfg.lease_grace_s,
					    .sample_retention_days = cfg.sample_retention_days};
		if (checks_engine_start(&co, &checks) != METER_OK) {
			log_error("meterd: cannot start the check engine");
			goto out;
		}
		if (cfg.clock_offset_s != 0)
			log_warn(
			    "meterd: TEST ONLY clock_offset_s=%lld shifts the check engine's clock",
			    (long long)cfg.clock_offset_s);
		app.checks = checks;
	}
	{
		/* Without a URL it only counts the outbox for /metrics. */
		struct webhook_options wo = {.database_url = cfg.database_url,
					     .url = cfg.webhook_url,
					     .secret = cfg.webhook_secret,
					     .statement_timeout_ms = cfg.db_statement_timeout_ms,
					     .concurrency = cfg.webhook_concurrency};
		if (webhook_start(&wo, &webhook) != METER_OK) {
			log_error("meterd: cannot start the webhook deliverer");
			goto out;
		}
	}
	if (!cfg.webhook_url[0] && (cfg.api || cfg.collector))
		log_info("no webhook_url: spend_limit_crossed and hold_outrun events are kept in"
			 " the database's outbox, and sent by the first meterd on it that has one"
			 " (/metrics shows how many wait)");
	/* Nor does it start listening once told to stop. */
	got = take_signal(&sigs, false);
	if (got > 0)
		goto stop;
	if (got < 0)
		goto out;
	rc = http_server_start(&app, &srv, err, sizeof(err));
	if (rc != METER_OK) {
		log_error("meterd: %s", err);
		if (rc == METER_EINVAL)
			status = 2; /* a bad listen address */
		goto out;
	}
	{
		char host[256];
		int port;
		if (config_listen_split(cfg.listen, host, sizeof(host), &port) != METER_OK)
			host[0] = '\0';
		log_info("meterd listening on http://%s%s%s:%d/", strchr(host, ':') ? "[" : "",
			 host, strchr(host, ':') ? "]" : "", http_server_port(srv));
	}

	if (!watch_start(&app)) {
		log_error("meterd: cannot start the database watch");
		goto out;
	}
	/* Until told to stop, this thread takes the signals alone. */
	while ((got = take_signal(&sigs, true)) == 0)
		;
	if (got < 0)
		goto out;
stop:
	status = 0;
	{
		static sigset_t again; /* outlives main's frame, as the thread may */
		pthread_t t;

		again = sigs;
		if (pthread_create(&t, NULL, second_signal, &again) == 0)
			pthread_detach(t);
	}
out:
	/* Every answer from here on closes its connection, and a request on a
	 * connection kept alive is answered 503 at once. Then the checks:
	 * every parked connection gets its answer (or a 503) and is resumed;
	 * new checks get a 503 at once. The server stops once every request
	 * under way has had its answer sent (2 s at most: an export still
	 * streaming is cut then). */
	http_server_quiesce(srv);
	watch_stop();
	collector_stop(collector);
	checks_engine_stop(checks);
	webhook_stop(webhook);
	schema_gate_stop();
	if (srv && !http_server_drained(srv, 2000))
		log_warn("stopping with requests still under way");
	http_server_stop(srv);
	/* The watch's ping under way tells the engine and the pool: both are
	 * kept until it has ended. */
	watch_wait();
	checks_engine_free(checks);
	db_pool_free(pool);
	if (curl_ready)
		curl_global_cleanup();
	if (status == 0)
		log_info("meterd stopped");
	return status;
}
