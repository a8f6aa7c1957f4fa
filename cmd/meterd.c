/* meterd: the metering daemon (HTTP API; the collector joins it later).
 *
 * Configuration: defaults < config file < METER_* environment < flags.
 * Starts serving at once, even while PostgreSQL is down: /healthz answers,
 * /readyz says 503 until the database answers, and the connection is retried
 * with backoff in the background. SIGTERM or SIGINT stop it cleanly. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "config.h"
#include "dbpool.h"
#include "log.h"
#include "server.h"

extern char **environ;

#define WATCH_INTERVAL_S 1

int main(int argc, char **argv)
{
	struct meter_config cfg;
	struct app app = {0};
	struct http_server *srv = NULL;
	struct db_pool *pool = NULL;
	char err[512];
	sigset_t sigs;
	bool help;
	int status = 1;

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
	log_set_level((enum log_level)log_level_parse(cfg.log_level));

	/* Signals are taken synchronously by the main thread only. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	pool = db_pool_new(cfg.database_url, (int)cfg.db_pool_size, cfg.db_statement_timeout_ms);
	if (!pool) {
		fprintf(stderr, "meterd: out of memory\n");
		goto out;
	}
	app.cfg = &cfg;
	app.pool = pool;
	if (http_server_start(&app, &srv, err, sizeof(err)) != METER_OK) {
		log_error("meterd: %s", err);
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

	if (db_pool_ping(pool, 2000) != METER_OK)
		log_warn(
		    "database not answering yet; serving anyway, /readyz says 503 until it does");

	/* Watch the database until told to stop: this is what connects at
	 * start-up and reconnects after an outage, with the pool's backoff. */
	for (;;) {
		struct timespec tick = {.tv_sec = WATCH_INTERVAL_S};
		int sig = sigtimedwait(&sigs, NULL, &tick);

		if (sig == SIGTERM || sig == SIGINT) {
			log_info("meterd: %s received, shutting down",
				 sig == SIGTERM ? "SIGTERM" : "SIGINT");
			break;
		}
		if (sig < 0 && errno != EAGAIN && errno != EINTR) {
			log_error("meterd: sigtimedwait: %s", strerror(errno));
			goto out;
		}
		if (db_pool_ping(pool, 2000) != METER_OK)
			log_debug("database not answering");
	}
	status = 0;
out:
	http_server_stop(srv);
	db_pool_free(pool);
	if (status == 0)
		log_info("meterd stopped");
	return status;
}
