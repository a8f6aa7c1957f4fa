/* meter: configuration from defaults, a config file, METER_* environment
 * variables and command-line flags, in that order of precedence (a flag wins).
 *
 * Every option has one name used everywhere: "listen" is `listen = ...` in
 * the file, METER_LISTEN in the environment and --listen on the command line
 * (dashes and underscores are interchangeable in flags). */
#ifndef METER_CONFIG_H
#define METER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rc.h"

#define CONFIG_STR_MAX 1024

struct meter_config {
	char database_url[CONFIG_STR_MAX]; /* libpq URL; empty = not configured */
	char database_schema[64];	   /* meter's schema (search_path); default public */
	char listen[CONFIG_STR_MAX];	   /* host:port, [v6]:port; default 127.0.0.1:8080 */
	char log_level[16];		   /* debug, info, warn, error */
	int64_t http_threads;		   /* libmicrohttpd thread pool size */
	int64_t max_connections;	   /* total HTTP connections */
	int64_t per_ip_connections;	   /* HTTP connections from one address */
	int64_t connection_timeout_s;	   /* idle HTTP connection timeout */
	int64_t request_timeout_s;	   /* to send a whole request; 0 = no limit */
	int64_t answers_memory_mib; /* built answers over 64 KiB, held or being built together */
	int64_t db_pool_size;	    /* PostgreSQL connections for requests */
	int64_t db_statement_timeout_ms;  /* per statement, on every pool connection */
	char operator_token[256];	  /* secret; empty = no operator access */
	char control_plane_token[256];	  /* secret; empty = no control-plane access */
	char agent_token[256];		  /* secret: host agents' pushes; empty = none */
	char session_secret[256];	  /* secret: signs dashboard sessions; empty = random */
	int64_t session_cookie_secure;	  /* 1: session cookie only over HTTPS */
	int64_t check_batch_max;	  /* checks decided in one transaction */
	int64_t check_connections;	  /* the check engine's connections: batches in flight */
	int64_t lease_grace_s;		  /* run past lease end this long: hold_outrun;
					   * a tail's hold kept this long unmetered */
	int64_t clock_offset_s;		  /* TEST ONLY: shifts the check engine's clock */
	int64_t sample_retention_days;	  /* raw samples' days kept; 0 = for ever */
	char webhook_url[CONFIG_STR_MAX]; /* control plane's webhook; empty = none */
	char webhook_secret[256];	  /* secret: HMAC key of Meter-Signature */
	int64_t webhook_concurrency;	  /* events POSTed at once by this process */
	/* What this process runs (both by default; either can be off so they
	 * scale separately). */
	bool collector; /* the collector thread */
	bool api;	/* the API routes (off: /healthz, /readyz, /metrics only) */
	/* The collector's sources and rhythm. */
	int64_t collector_period_s;	  /* seconds between rounds */
	char cgroup_root[CONFIG_STR_MAX]; /* cgroup directory of sandboxes; empty = none */
	char agents[CONFIG_STR_MAX];	  /* host agent base URLs, comma-separated */
	char agents_file[CONFIG_STR_MAX]; /* file of host agent URLs, one per line */
	char host_id[128];		  /* host id of cgroup samples; empty = hostname */
	int64_t agent_timeout_ms;	  /* per agent request */
	int64_t collector_backlog_max;	  /* samples kept while the database is down */
	int64_t collector_connections;	  /* ingestion connections, hosts split among them */
	int64_t ingest_cache_sandboxes;	  /* meter rows ingestion keeps between calls; 0 = none */
	/* Not an option: the secret options config_load found among the
	 * flags, comma-separated (empty: none), for a warning. */
	char secrets_on_command_line[256];
	/* Not an option: METER_ variables of the environment that name no
	 * option (a misspelt one is otherwise silently not applied), comma-
	 * separated (empty: none; "..." ends a list cut short), for a
	 * warning. METER_CONFIG is not listed. */
	char unknown_environment[256];
};

/* Fills cfg with the defaults. */
void config_init(struct meter_config *cfg);

/* Sets option name (as in the file, e.g. "listen") from text value.
 * METER_ENOTFOUND for an unknown name, METER_EINVAL / METER_ERANGE for a bad
 * value; err gets one line naming the option (never the value of a secret). */
METER_MUSTCHECK enum meter_rc config_set(struct meter_config *cfg, const char *name,
					 const char *value, char *err, size_t errlen);

/* Reads "name = value" lines (a line whose first non-blank character is
 * '#' is a comment, as is a blank one; a '#' after the '=' is the value's)
 * from path. An unknown name or a bad value is an error naming the line. */
METER_MUSTCHECK enum meter_rc config_load_file(struct meter_config *cfg, const char *path,
					       char *err, size_t errlen);

/* Applies every METER_<NAME> variable of envp that names an option.
 * METER_CONFIG (the file) is not an option and is skipped. */
METER_MUSTCHECK enum meter_rc config_load_env(struct meter_config *cfg, char *const *envp,
					      char *err, size_t errlen);

/* The whole sequence: defaults, then the file from --config or
 * METER_CONFIG, then the environment, then flags --name value or
 * --name=value from argv[1..]. --help sets *help and stops. The value of
 * a secret option given as a flag is overwritten with 'x' in argv once
 * applied (a process's command line is readable by every local user) and
 * its name listed in cfg->secrets_on_command_line. */
METER_MUSTCHECK enum meter_rc config_load(struct meter_config *cfg, int argc, char **argv,
					  char *const *envp, bool *help, char *err, size_t errlen);

/* Splits cfg->listen into host (without brackets) and port.
 * METER_EINVAL when it is not host:port with a port in 0..65535 (0 picks a
 * free port) and the host a dotted IPv4 address or localhost, or
 * [v6]:port with an IPv6 address. */
METER_MUSTCHECK enum meter_rc config_listen_split(const char *listen, char *host, size_t hostlen,
						  int *port);

/* Prints the options and their defaults, one per line, to stdout. */
void config_usage(const char *prog);

#endif
