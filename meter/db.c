/* meter: PostgreSQL connections. */
#include "db.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

/* Copies msg into err as one line: line breaks and tabs become single
 * spaces, trailing white space is dropped. Truncates to errlen. */
static void db_copy_line(char *err, size_t errlen, const char *msg)
{
	size_t n = 0;
	int space = 0;

	if (!err || errlen == 0)
		return;
	for (const char *p = msg ? msg : ""; *p && n + 1 < errlen; p++) {
		if (*p == '\n' || *p == '\r' || *p == '\t' || *p == ' ') {
			space = 1;
			continue;
		}
		if (space && n > 0 && n + 2 < errlen)
			err[n++] = ' ';
		space = 0;
		err[n++] = *p;
	}
	err[n] = '\0';
}

/* Replaces each occurrence of secret in s (NUL-terminated, in place) with
 * "***". Secrets shorter than 4 characters are left alone: masking them
 * would garble the message and they would not be recognisable anyway. */
static void db_mask(char *s, const char *secret)
{
	size_t slen = secret ? strlen(secret) : 0;
	char *hit;

	if (slen < 4)
		return;
	while ((hit = strstr(s, secret)) != NULL) {
		/* "***" is never longer than the secret: shift the tail left.
		 * The tail (with its NUL) follows the 3 bytes copied. */
		memcpy(hit, "***", 3); /* NOLINT(bugprone-not-null-terminated-result) */
		memmove(hit + 3, hit + slen, strlen(hit + slen) + 1);
	}
}

/* meter's schema (db_set_schema). */
static char db_schema_buf[DB_SCHEMA_MAX + 1] = "public";

/* Whether a connection found the server's fsync off, and said so. */
static atomic_bool db_fsync_off_warned;

bool db_schema_name_ok(const char *name)
{
	size_t n;

	if (!name || !((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
		return false;
	for (n = 0; name[n]; n++)
		if (!((name[n] >= 'a' && name[n] <= 'z') || (name[n] >= '0' && name[n] <= '9') ||
		      name[n] == '_'))
			return false;
	return n <= DB_SCHEMA_MAX && strncmp(name, "pg_", 3) != 0;
}

bool db_set_schema(const char *name)
{
	if (!db_schema_name_ok(name))
		return false;
	snprintf(db_schema_buf, sizeof(db_schema_buf), "%s", name);
	return true;
}

const char *db_schema(void)
{
	return db_schema_buf;
}

/* The thread of db_cancel_now: sends the cancel, however long the server
 * takes. Nobody waits for it; a process may end while it still waits. */
static void *db_cancel_main(void *arg)
{
	PGcancel *cancel = arg;
	char err[256];

	if (!PQcancel(cancel, err, sizeof(err)))
		log_debug("database: cancel: %s", err);
	PQfreeCancel(cancel);
	return NULL;
}

void db_cancel_now(PGcancel *cancel, int sock)
{
	pthread_attr_t attr;
	pthread_t t;
	bool sent = false;

	if (cancel && pthread_attr_init(&attr) == 0) {
		if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0)
			sent = pthread_create(&t, &attr, db_cancel_main, cancel) == 0;
		pthread_attr_destroy(&attr);
	}
	if (cancel && !sent) {
		log_debug("database: no thread to send a cancel on");
		PQfreeCancel(cancel);
	}
	if (sock >= 0)
		(void)shutdown(sock, SHUT_RDWR);
}

bool db_idle_closed(PGconn *c)
{
	for (int i = 0; i < 2; i++)
		if (PQconsumeInput(c) != 1 || PQstatus(c) != CONNECTION_OK)
			return true;
	return false;
}

/* The server's notices on a connection (a shutdown's "terminating
 * connection", a RAISE WARNING, a migration's NOTICE) as log lines, instead
 * of libpq's default, which writes them raw to stderr: a WARNING at warn,
 * the rest at debug. */
static void db_notice(void *arg, const PGresult *res)
{
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	(void)arg;
	if (sev && strcmp(sev, "WARNING") == 0)
		log_warn("database: warning: %s", msg ? msg : "");
	else
		log_debug("database: %s: %s", sev ? sev : "notice", msg ? msg : "");
}

/* Opens the connection; see db.h. The URL is parsed first so that a
 * malformed one is reported without libpq's detail, which may quote it
 * (password included). */
enum meter_rc db_connect(const char *url, PGconn **out, char *err, size_t errlen)
{
	/* TCP keepalives first, so the URL's own win (later values override
	 * earlier ones): a server gone without a word (a host down, a network
	 * cut) is found in about half a minute instead of the system's two
	 * hours, also by the threads that wait on a query with no deadline of
	 * their own (a statement, an export; see db_util_set_deadline_ms).
	 * The application name too, so that a URL may name each process in
	 * pg_stat_activity. After the URL, meterd's own: the connect timeout,
	 * which bounds a stop and /readyz (a URL's 0 would wait for ever), and
	 * the session's options. */
	static const char *const keywords[] = {"keepalives",
					       "keepalives_idle",
					       "keepalives_interval",
					       "keepalives_count",
					       "tcp_user_timeout",
					       "application_name",
					       "dbname",
					       "connect_timeout",
					       "options",
					       "client_encoding",
					       NULL};
	/* UTF-8 whatever PGCLIENTENCODING says: the text meterd sends and
	 * reads (names, ids, answers) is UTF-8, and under another encoding the
	 * server would convert it byte by byte into something else. */
	char options[DB_SCHEMA_MAX + 48];
	const char *values[] = {"1", "15", "5",	    "3",    "30000", "meter",
				url, "5",  options, "UTF8", NULL};
	PQconninfoOption *opts = NULL;
	char *perr = NULL;
	char *password = NULL;
	PGconn *conn = NULL;
	PGresult *res;
	enum meter_rc rc;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (!url) {
		db_copy_line(err, errlen, "no database URL");
		rc = METER_EINVAL;
		goto out;
	}
	/* Its names found in meter's schema alone (pg_catalog's, PostgreSQL
	 * searches first itself), as the session's own setting, which RESET
	 * and DISCARD ALL return to and the database's or the role's defaults
	 * do not change: a search_path changed by them after meter was
	 * migrated would find no tables, or another schema's, and make
	 * meterd advise a migration into that schema. */
	snprintf(options, sizeof(options), "-c TimeZone=UTC -c search_path=%s", db_schema_buf);
	opts = PQconninfoParse(url, &perr);
	if (!opts) {
		db_copy_line(err, errlen,
			     perr ? "invalid database URL"
				  : "out of memory parsing the database URL");
		rc = perr ? METER_EINVAL : METER_ENOMEM;
		goto out;
	}
	for (PQconninfoOption *o = opts; o->keyword; o++)
		if (strcmp(o->keyword, "password") == 0 && o->val)
			password = o->val;

	conn = PQconnectdbParams(keywords, values, 1);
	if (!conn) {
		db_copy_line(err, errlen, "out of memory connecting to the database");
		rc = METER_ENOMEM;
		goto out;
	}
	if (PQstatus(conn) != CONNECTION_OK) {
		db_copy_line(err, errlen, PQerrorMessage(conn));
		if (err && errlen)
			db_mask(err, password);
		rc = METER_EDB;
		goto out;
	}
	PQsetNoticeReceiver(conn, db_notice, NULL);
	/* The session as meter's code assumes it, whatever the server's, the
	 * database's or the role's defaults or the environment say (libpq
	 * sends PGTZ and PGDATESTYLE after the options above, where they win):
	 * - in UTC (hours are bucketed and days cut by its clock), with dates
	 *   read as text (a key's day, usage by day, the reports) as
	 *   YYYY-MM-DD, and the Default time zone abbreviations, which keys'
	 *   zones are checked against (sql/0047): under another set, a name
	 *   such as EST reads as another offset;
	 * - no statement, lock or idle-transaction timeout: each user sets its
	 *   own (the pool and the check engine, from db_statement_timeout_ms;
	 *   an export its lock timeout alone, as documented);
	 * - read committed: a statement of its own takes a new snapshot, which
	 *   the checks' functions rely on (sql/0032);
	 * - no JIT: meter's statements are short, and compiling one costs more
	 *   than running it;
	 * - a commit durable before it returns: synchronous_commit off or
	 *   local is raised to on (a stronger setting, such as remote_apply,
	 *   stays), so that nothing answered can be lost in a crash. The
	 *   server's fsync, which no session can change, is read too: off,
	 *   a commit is not on disk when it returns, and a crash of the
	 *   server's host may lose what was answered; warned about once;
	 * - as the origin of its changes (session_replication_role), so that
	 *   meter's triggers fire: a database or role that sets it otherwise is
	 *   refused (only a superuser could set it back). */
	res = PQexec(conn, "SET TimeZone = 'UTC'; SET DateStyle = ISO, YMD;"
			   " SET timezone_abbreviations = 'Default';"
			   " SET statement_timeout = 0; SET lock_timeout = 0;"
			   " SET idle_in_transaction_session_timeout = 0;"
			   " SET default_transaction_isolation = 'read committed'; SET jit = off;"
			   " SELECT current_setting('fsync'), CASE WHEN"
			   " current_setting('synchronous_commit') IN ('off', 'local') THEN"
			   " set_config('synchronous_commit', 'on', false) END,"
			   " current_setting('session_replication_role')");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		db_copy_line(err, errlen,
			     PQresultStatus(res) != PGRES_TUPLES_OK ? PQerrorMessage(conn)
								    : "no session settings read");
		PQclear(res);
		rc = METER_EDB;
		goto out;
	}
	/* Only a superuser may set it back, so it is refused: as a replica,
	 * the session would fire none of meter's triggers (the webhook's
	 * limit crossings, the ingestion cache's generations). */
	if (strcmp(PQgetvalue(res, 0, 2), "origin") != 0) {
		db_copy_line(err, errlen,
			     "session_replication_role is not origin for this database or role, so "
			     "meter's triggers would not fire: RESET it (ALTER DATABASE ... RESET "
			     "session_replication_role)");
		PQclear(res);
		rc = METER_EDB;
		goto out;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "off") == 0 &&
	    !atomic_exchange(&db_fsync_off_warned, true))
		log_warn("database: the server runs with fsync off: a commit is not on disk when "
			 "it returns, and a crash of the server's host may lose checks already "
			 "answered (set fsync = on in postgresql.conf)");
	PQclear(res);
	*out = conn;
	conn = NULL;
	rc = METER_OK;
out:
	PQfinish(conn);
	PQconninfoFree(opts);
	PQfreemem(perr);
	return rc;
}

/* The options whose values libpq checks only when it connects, with the
 * values it takes (PostgreSQL 15's libpq compares them case-sensitively).
 * A value outside them fails every connection, forever: meterd would wait
 * it out as an outage. */
static const struct {
	const char *keyword;
	const char *values[7];
} db_url_choices[] = {
    {"sslmode", {"disable", "allow", "prefer", "require", "verify-ca", "verify-full", NULL}},
    {"gssencmode", {"disable", "prefer", "require", NULL}},
    {"channel_binding", {"disable", "prefer", "require", NULL}},
    {"target_session_attrs",
     {"any", "read-write", "read-only", "primary", "standby", "prefer-standby", NULL}},
};

/* True when v is one of a choice's values. */
static bool db_url_choice_ok(const char *const *values, const char *v)
{
	for (; *values; values++)
		if (strcmp(*values, v) == 0)
			return true;
	return false;
}

/* True when each comma-separated part of ports (one a host) is empty (the
 * default) or a port number, as libpq reads them when it connects (strtol:
 * blanks around it and a '+' are taken). */
static bool db_url_ports_ok(const char *ports)
{
	const char *p = ports;

	for (;;) {
		const char *start = p;
		long n = 0;
		bool digits = false;

		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' ||
		       *p == '\v')
			p++;
		if (*p == '+' && p[1] >= '0' && p[1] <= '9')
			p++;
		for (; *p >= '0' && *p <= '9'; p++) {
			n = n * 10 + (*p - '0');
			digits = true;
			if (n > 65535)
				return false;
		}
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' ||
		       *p == '\v')
			p++;
		if (digits ? n < 1 : p != start) /* 0, or blanks alone */
			return false;
		if (*p == '\0')
			return true;
		if (*p != ',')
			return false;
		p++;
	}
}

/* Entries of a comma-separated list as libpq counts them: 1 for NULL or an
 * empty value. */
static int db_url_count(const char *list)
{
	int n = 1;

	for (const char *p = list; p && *p; p++)
		n += *p == ',';
	return n;
}

/* True when the ports can be matched to the hosts as libpq matches them
 * when it connects: one port for every host, or one a host. */
static bool db_url_ports_match(const PQconninfoOption *opts)
{
	const char *host = NULL, *hostaddr = NULL, *port = NULL;
	int hosts;

	for (const PQconninfoOption *o = opts; o->keyword; o++) {
		if (strcmp(o->keyword, "host") == 0)
			host = o->val;
		else if (strcmp(o->keyword, "hostaddr") == 0)
			hostaddr = o->val;
		else if (strcmp(o->keyword, "port") == 0)
			port = o->val;
	}
	hosts = db_url_count(hostaddr && *hostaddr ? hostaddr : host);
	if (hostaddr && *hostaddr && host && *host && db_url_count(host) != hosts)
		return false;
	return !port || !*port || db_url_count(port) == 1 || db_url_count(port) == hosts;
}

/* True when a URL (postgresql:// or postgres://) has at most one '@'
 * before its query: the one that ends its user name and password. libpq
 * ends them at the first '@', so a second one, of a password not written
 * %40, leaves the rest of the password in the host or the database name,
 * which libpq's errors quote when it connects ("could not translate host
 * name"). Any other string is true. */
static bool db_url_one_at(const char *url)
{
	const char *p;
	int ats = 0;

	if (strncmp(url, "postgresql://", 13) == 0)
		p = url + 13;
	else if (strncmp(url, "postgres://", 11) == 0)
		p = url + 11;
	else
		return true;
	for (; *p && *p != '?'; p++)
		ats += *p == '@';
	return ats <= 1;
}

bool db_url_ok(const char *url, char *err, size_t errlen)
{
	char *perr = NULL;
	PQconninfoOption *opts = url ? PQconninfoParse(url, &perr) : NULL;
	bool ok = opts != NULL;

	/* perr may quote the URL, password and all: not shown. */
	if (!ok)
		(void)snprintf(err, errlen, "not a PostgreSQL URL libpq reads");
	if (ok && !db_url_one_at(url)) {
		(void)snprintf(err, errlen,
			       "a second '@' before the query: write an '@' of the user, "
			       "password or database as %%40");
		ok = false;
	}
	for (PQconninfoOption *o = opts; ok && o->keyword; o++) {
		if (!o->val)
			continue;
		if (strcmp(o->keyword, "port") == 0 && !db_url_ports_ok(o->val)) {
			(void)snprintf(err, errlen, "port: not a port number (1 to 65535)");
			ok = false;
		}
		for (size_t i = 0; ok && i < sizeof(db_url_choices) / sizeof(db_url_choices[0]);
		     i++) {
			if (strcmp(o->keyword, db_url_choices[i].keyword) != 0 ||
			    db_url_choice_ok(db_url_choices[i].values, o->val))
				continue;
			(void)snprintf(err, errlen, "%s: not a value libpq takes", o->keyword);
			ok = false;
		}
	}
	if (ok && !db_url_ports_match(opts)) {
		(void)snprintf(err, errlen,
			       "host, hostaddr, port: not one port, or one a host, for as many "
			       "hosts as addresses");
		ok = false;
	}
	PQconninfoFree(opts);
	PQfreemem(perr);
	return ok;
}
