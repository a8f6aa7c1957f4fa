/* Integration: the migration runner against a real PostgreSQL, and the
 * schema's partitioned samples. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "db.h"
#include "db_keys.h"
#include "db_util.h"
#include "migrate.h"
#include "testdb.h"

/* Tables of DESIGN.md, and whether account_id leads their primary key. */
static const struct {
	const char *name;
	int account_keyed;
} spec_tables[] = {
    {"schema_migrations", 0}, {"accounts", 1}, {"api_keys", 1},		{"price_book", 0},
    {"sandboxes", 1},	      {"samples", 1},  {"sandbox_meter", 1},	{"usage_hourly", 1},
    {"key_day_ledger", 1},    {"holds", 1},    {"idempotency_keys", 1}, {"lifecycle_events", 1},
    {"ingest_watermarks", 0},
};

/* The one value of a one-row, one-column query, copied into out; "" (and a
 * printed error) when the query fails or returns no row. */
static void query_value(PGconn *conn, const char *sql, char *out, size_t len)
{
	PGresult *res = PQexec(conn, sql);

	out[0] = '\0';
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1) {
		fprintf(stderr, "query failed: %s: %s", sql, PQerrorMessage(conn));
	} else {
		snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
	}
	PQclear(res);
}

/* As query_value, for a query with one text parameter. */
static void query_value1(PGconn *conn, const char *sql, const char *param, char *out, size_t len)
{
	PGresult *res = PQexecParams(conn, sql, 1, NULL, &param, NULL, NULL, 0);

	out[0] = '\0';
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1) {
		fprintf(stderr, "query failed: %s: %s", sql, PQerrorMessage(conn));
	} else {
		snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
	}
	PQclear(res);
}

/* md5 of a listing of the schema's columns, constraints, indexes, comments
 * and of schema_migrations itself: equal fingerprints, unchanged schema. */
static void schema_fingerprint(PGconn *conn, char *out, size_t len)
{
	query_value(conn,
		    "SELECT md5(string_agg(line, E'\\n' ORDER BY line)) FROM ("
		    " SELECT format('col %s.%s %s %s %s %s', table_name, column_name,"
		    "  ordinal_position, data_type, is_nullable, column_default) AS line"
		    "  FROM information_schema.columns WHERE table_schema = 'public'"
		    " UNION ALL"
		    " SELECT format('con %s %s %s', conrelid::regclass, conname,"
		    "  pg_get_constraintdef(oid))"
		    "  FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
		    " UNION ALL"
		    " SELECT format('idx %s %s', indexname, indexdef)"
		    "  FROM pg_indexes WHERE schemaname = 'public'"
		    " UNION ALL"
		    " SELECT format('rel %s %s %s', relname, relkind,"
		    "  obj_description(oid, 'pg_class'))"
		    "  FROM pg_class WHERE relnamespace = 'public'::regnamespace"
		    " UNION ALL"
		    " SELECT format('mig %s %s %s %s', version, name, sha256, applied_at)"
		    "  FROM schema_migrations"
		    " UNION ALL"
		    " SELECT format('price %s', p) FROM price_book p"
		    " UNION ALL"
		    " SELECT format('acct %s', a) FROM accounts a) s",
		    out, len);
}

/* A fresh database: every compiled migration applies, every table exists,
 * the record is right. */
static void test_first_run(PGconn *conn)
{
	char err[512] = "";
	char buf[256];
	int applied = -1;

	CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
	if (err[0])
		fprintf(stderr, "migrate_apply: %s\n", err);
	CHECK(migrations_count >= 1);
	CHECK_I64(applied, migrations_count);

	for (size_t i = 0; i < sizeof(spec_tables) / sizeof(spec_tables[0]); i++) {
		query_value1(conn, "SELECT to_regclass($1) IS NOT NULL", spec_tables[i].name, buf,
			     sizeof(buf));
		if (strcmp(buf, "t") != 0)
			fprintf(stderr, "table %s is missing\n", spec_tables[i].name);
		CHECK_STR(buf, "t");
		query_value1(conn,
			     "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
			     " ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
			     " WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
			     spec_tables[i].name, buf, sizeof(buf));
		if (spec_tables[i].account_keyed) {
			if (strcmp(buf, "account_id") != 0)
				fprintf(stderr, "%s: primary key starts with %s\n",
					spec_tables[i].name, buf);
			CHECK_STR(buf, "account_id");
		} else {
			CHECK(strcmp(buf, "account_id") != 0);
		}
		query_value1(conn,
			     "SELECT coalesce(obj_description(to_regclass($1), 'pg_class'), '')",
			     spec_tables[i].name, buf, sizeof(buf));
		if (!buf[0])
			fprintf(stderr, "table %s has no comment\n", spec_tables[i].name);
		CHECK(buf[0] != '\0');
	}

	/* Every non-exempt table carries account_id: the exempt ones are the
	 * database's and the processes' own (a reference table, sharded by
	 * account), not an account's. */
	query_value(conn,
		    "SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
		    " AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
		    " AND c.relname NOT IN ('schema_migrations', 'price_book', 'ingest_watermarks',"
		    " 'meterd_sweepers')"
		    " AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
		    "  AND a.attname = 'account_id')",
		    buf, sizeof(buf));
	CHECK_STR(buf, "0");

	/* One row per migration, with the sha256 of its text (computed here by
	 * the server, independently of the runner's OpenSSL). */
	query_value(conn, "SELECT count(*) FROM schema_migrations", buf, sizeof(buf));
	CHECK_I64(strtol(buf, NULL, 10), migrations_count);
	for (int i = 0; i < migrations_count; i++) {
		char version[16];

		snprintf(version, sizeof(version), "%d", migrations_src[i].version);
		query_value1(conn, "SELECT sha256 FROM schema_migrations WHERE version = $1::int",
			     version, err, sizeof(err));
		query_value1(conn, "SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')",
			     migrations_src[i].sql, buf, sizeof(buf));
		CHECK(strlen(buf) == 64);
		CHECK_STR(err, buf);
		query_value1(conn, "SELECT name FROM schema_migrations WHERE version = $1::int",
			     version, buf, sizeof(buf));
		CHECK_STR(buf, migrations_src[i].name);
	}

	/* The seeds. */
	query_value(conn,
		    "SELECT format('%s %s %s %s %s %s %s %s', version, effective_from,"
		    " cpu_micros_per_vcpu_hour, memory_micros_per_gib_hour,"
		    " storage_micros_per_gib_hour, floor_millicores, free_sandbox_hours,"
		    " storage_price_assumed) FROM price_book",
		    buf, sizeof(buf));
	CHECK_STR(buf, "1 1970-01-01 00:00:00+00 25000 7500 100 50 50 t");
	query_value(conn, "SELECT count(*) FROM accounts WHERE account_id = 'unattributed'", buf,
		    sizeof(buf));
	CHECK_STR(buf, "1");
}

/* A second run applies nothing and changes nothing; tampering is caught. */
static void test_rerun(PGconn *conn)
{
	char before[64], after[64];
	char err[512] = "";
	int applied = -1;

	schema_fingerprint(conn, before, sizeof(before));
	CHECK(strlen(before) == 32);
	CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
	CHECK_I64(applied, 0);
	schema_fingerprint(conn, after, sizeof(after));
	CHECK_STR(after, before);

	/* A recorded text that no longer matches the compiled one. */
	CHECK_STR(testdb_exec_state(conn, "UPDATE schema_migrations SET sha256 = repeat('0', 64)"
					  " WHERE version = (SELECT min(version) FROM"
					  " schema_migrations)"),
		  "00000");
	err[0] = '\0';
	CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
	CHECK_I64(applied, 0);
	CHECK(strstr(err, migrations_src[0].name) != NULL);
	CHECK_I64(PQtransactionStatus(conn), PQTRANS_IDLE);

	/* Put the right hash back. */
	{
		char sql[256];
		char hex[65];

		query_value1(conn, "SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')",
			     migrations_src[0].sql, hex, sizeof(hex));
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = '%s' WHERE version = %d", hex,
			 migrations_src[0].version);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
	}

	/* Texts an earlier build recorded, since changed: accepted only as a
	 * whole state the later migrations were checked to bring to this
	 * schema (scripts/migration-history.sh). 0051 as eff1fa0 had it is
	 * one; 0032 as c5da35e had it is not alone (that build's schema ends
	 * apart), but with 0033 as 59cecdb had it, it is. */
	{
		static const char old51[] =
		    "ac0940b98dfbadb0eb408f9f2fa1be1fb10e3c37c7fe0ad53c8b1c7baa984da8";
		static const char old32[] =
		    "0b0034d00bd705bb927e0c26c670ad16bdaa1807f3f18ae6c37e3e543c2aad5a";
		static const char old33[] =
		    "3f9ce6182102e35f6e02602d44db5de08c95e09fec6b8613e224a839dbe323a4";
		char sql[512], h32[65], h33[65], h51[65];
		int version = -1;

		query_value(conn, "SELECT sha256 FROM schema_migrations WHERE version = 32", h32,
			    sizeof(h32));
		query_value(conn, "SELECT sha256 FROM schema_migrations WHERE version = 33", h33,
			    sizeof(h33));
		query_value(conn, "SELECT sha256 FROM schema_migrations WHERE version = 51", h51,
			    sizeof(h51));
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = '%s' WHERE version = 51", old51);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
		CHECK_I64(applied, 0);
		CHECK_I64(migrate_verify(conn, &version, err, sizeof(err)), METER_OK);
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = CASE version WHEN 51 THEN '%s'"
			 " WHEN 32 THEN '%s' END WHERE version IN (32, 51)",
			 h51, old32);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
		err[0] = '\0';
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
		CHECK(strstr(err, "0032_") != NULL);
		CHECK_I64(migrate_verify(conn, &version, err, sizeof(err)), METER_ECONFLICT);
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = '%s' WHERE version = 33", old33);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
		/* With one more old text beside the pair: no state has it. */
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = '%s' WHERE version = 51", old51);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
		snprintf(sql, sizeof(sql),
			 "UPDATE schema_migrations SET sha256 = CASE version WHEN 32 THEN '%s'"
			 " WHEN 33 THEN '%s' ELSE '%s' END WHERE version IN (32, 33, 51)",
			 h32, h33, h51);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
	}

	/* A database newer than this binary. */
	CHECK_STR(testdb_exec_state(conn, "INSERT INTO schema_migrations (version, name, sha256)"
					  " VALUES (999999, '999999_future', repeat('a', 64))"),
		  "00000");
	err[0] = '\0';
	CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
	CHECK(strstr(err, "newer than this binary") != NULL);
	CHECK_STR(testdb_exec_state(conn, "DELETE FROM schema_migrations WHERE version = 999999"),
		  "00000");

	/* Restored: current again, and the schema is what it was. */
	CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
	CHECK_I64(applied, 0);
	schema_fingerprint(conn, after, sizeof(after));
	CHECK_STR(after, before);
}

struct racer {
	const char *url;
	pthread_barrier_t *start;
	enum meter_rc rc;
	int applied;
	char err[512];
};

/* One concurrent migrator on its own connection. */
static void *racer_run(void *arg)
{
	struct racer *r = arg;
	PGconn *conn = NULL;

	r->rc = db_connect(r->url, &conn, r->err, sizeof(r->err));
	pthread_barrier_wait(r->start);
	if (r->rc == METER_OK)
		r->rc = migrate_apply(conn, &r->applied, r->err, sizeof(r->err));
	PQfinish(conn);
	return NULL;
}

/* Two migrators on a fresh database at once: both succeed, and the schema
 * is applied exactly once. */
static void test_concurrent(void)
{
	struct testdb db;
	pthread_barrier_t start;
	pthread_t th[2];
	struct racer r[2];
	char buf[64];

	if (testdb_create(&db, "migrate_race") != 0) {
		CHECK(0);
		return;
	}
	CHECK_I64(pthread_barrier_init(&start, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].url = db.url;
		r[i].start = &start;
		r[i].applied = -1;
		CHECK_I64(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		CHECK_I64(pthread_join(th[i], NULL), 0);
		if (r[i].rc != METER_OK)
			fprintf(stderr, "racer %d: %s\n", i, r[i].err);
		CHECK_I64(r[i].rc, METER_OK);
	}
	CHECK_I64(pthread_barrier_destroy(&start), 0);
	CHECK_I64(r[0].applied + r[1].applied, migrations_count);
	query_value(db.conn, "SELECT count(*) FROM schema_migrations", buf, sizeof(buf));
	CHECK_I64(strtol(buf, NULL, 10), migrations_count);
	query_value(db.conn, "SELECT count(*) FROM price_book", buf, sizeof(buf));
	CHECK_STR(buf, "1");
	testdb_drop(&db);
}

/* A migrator that finds another holding the migrators' lock says so,
 * naming that session (a killed meterctl's server process may hold it
 * until the server notices), and waits for it. */
static void test_waits_named(const char *url)
{
	char path[] = "/tmp/meter-migwait-XXXXXX", err[256], buf[4096], want[160];
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	PGconn *holder = NULL;
	PGresult *res;
	pthread_barrier_t start;
	pthread_t th;
	struct racer r;
	ssize_t n;
	int waiting = 0;

	CHECK(fd >= 0 && saved >= 0);
	if (fd < 0 || saved < 0 || db_connect(url, &holder, err, sizeof(err)) != METER_OK) {
		CHECK(0);
		return;
	}
	res = PQexec(holder, "SET application_name = 'meter-test-holder'; BEGIN;"
			     " SELECT pg_advisory_xact_lock(7882834701841296743)");
	CHECK_I64(PQresultStatus(res), PGRES_TUPLES_OK);
	PQclear(res);
	snprintf(want, sizeof(want),
		 "creating schema_migrations: waiting for another migration of this database to"
		 " finish (server pid %d, application 'meter-test-holder', since ",
		 PQbackendPID(holder));
	fflush(stderr);
	CHECK(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	CHECK_I64(pthread_barrier_init(&start, NULL, 1), 0);
	memset(&r, 0, sizeof(r));
	r.url = url;
	r.start = &start;
	CHECK_I64(pthread_create(&th, NULL, racer_run, &r), 0);
	/* Until the migrator waits on the lock (at most 10 s). */
	for (int i = 0; i < 200 && !waiting; i++) {
		query_value(holder,
			    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
			    " AND NOT granted AND database = (SELECT oid FROM pg_database"
			    "  WHERE datname = current_database())"
			    " AND classid = 1835365477 AND objid = 1918856551 AND objsubid = 1",
			    buf, sizeof(buf));
		waiting = strcmp(buf, "1") == 0;
		if (!waiting)
			usleep(50 * 1000);
	}
	PQclear(PQexec(holder, "COMMIT"));
	CHECK_I64(pthread_join(th, NULL), 0);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	CHECK(waiting);
	CHECK_I64(pthread_barrier_destroy(&start), 0);
	CHECK_I64(r.rc, METER_OK);
	CHECK_I64(r.applied, 0);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	buf[n > 0 ? n : 0] = '\0';
	if (!strstr(buf, want))
		fprintf(stderr, "migrator's log: %s\nwanted: %s\n", buf, want);
	CHECK(strstr(buf, want) != NULL);
	PQfinish(holder);
}

/* The socket's keepalive idle time and user timeout, as the kernel has
 * them. */
static void socket_keepalive(PGconn *conn, int *idle, int *user_timeout_ms)
{
	socklen_t len = sizeof(int);

	*idle = *user_timeout_ms = -1;
	CHECK_I64(getsockopt(PQsocket(conn), IPPROTO_TCP, TCP_KEEPIDLE, idle, &len), 0);
	len = sizeof(int);
	CHECK_I64(getsockopt(PQsocket(conn), IPPROTO_TCP, TCP_USER_TIMEOUT, user_timeout_ms, &len),
		  0);
}

/* Every connection meter opens finds a server gone without a word in
 * about half a minute (keepalives after 15 s idle, unacknowledged data
 * given up after 30 s), and is named "meter" in pg_stat_activity, unless
 * the URL says otherwise. */
static void test_keepalives(const char *url)
{
	char other[1024], err[256];
	PGconn *conn = NULL;
	int idle, user_timeout;

	CHECK_I64(db_connect(url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		socket_keepalive(conn, &idle, &user_timeout);
		CHECK_I64(idle, 15);
		CHECK_I64(user_timeout, 30000);
		CHECK_STR(PQparameterStatus(conn, "application_name"), "meter");
		PQfinish(conn);
		conn = NULL;
	}
	if (strncmp(url, "postgres", 8) == 0)
		snprintf(other, sizeof(other),
			 "%s%ckeepalives_idle=99&tcp_user_timeout=7000&application_name=meter-b",
			 url, strchr(url, '?') ? '&' : '?');
	else /* key=value pairs */
		snprintf(other, sizeof(other),
			 "%s keepalives_idle=99 tcp_user_timeout=7000 application_name=meter-b",
			 url);
	CHECK_I64(db_connect(other, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		socket_keepalive(conn, &idle, &user_timeout);
		CHECK_I64(idle, 99);
		CHECK_I64(user_timeout, 7000);
		CHECK_STR(PQparameterStatus(conn, "application_name"), "meter-b");
		PQfinish(conn);
	}
}

/* A warning the server sends is a log line of ours at warn, not libpq's
 * raw text on stderr; a notice is at debug, below the default level. */
static void test_notices(const char *url)
{
	char path[] = "/tmp/meter-notice-XXXXXX", err[256], buf[4096];
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	PGconn *conn = NULL;
	ssize_t n = -1;

	CHECK(fd >= 0 && saved >= 0);
	if (fd < 0 || saved < 0)
		return;
	fflush(stderr);
	CHECK(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	if (db_connect(url, &conn, err, sizeof(err)) == METER_OK) {
		PGresult *r = PQexec(conn, "DO $$BEGIN RAISE WARNING 'meter-notice-test';"
					   " RAISE NOTICE 'meter-quiet-test'; END$$");
		PQclear(r);
		PQfinish(conn);
	}
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	buf[n > 0 ? n : 0] = '\0';
	CHECK(strstr(buf, " warn  database: warning: meter-notice-test") != NULL);
	CHECK(strstr(buf, "WARNING:") == NULL);
	CHECK(strstr(buf, "meter-quiet-test") == NULL);
}

static long long rawclock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The check engine's, sweeper's and deliverer's session limits
 * (db_util_session_timeouts): the statement timeout, and half of it (at
 * least 1 s) for a transaction left idle, after which the server ends the
 * session: a stopped meterd does not keep the row locks it holds. The
 * request pool's set the statement timeout alone. */
static void test_session_timeouts(const char *url)
{
	char err[256], v[64];
	PGconn *conn = NULL;
	PGresult *res;
	long long t0;

	CHECK_I64(db_util_idle_tx_ms(0), 0);
	CHECK_I64(db_util_idle_tx_ms(100), 1000);
	CHECK_I64(db_util_idle_tx_ms(10000), 5000);
	CHECK_I64(db_connect(url, &conn, err, sizeof(err)), METER_OK);
	if (!conn)
		return;
	CHECK_I64(db_util_session_timeouts(conn, "test", 10000, db_util_idle_tx_ms(10000)),
		  METER_OK);
	query_value(conn, "SHOW statement_timeout", v, sizeof(v));
	CHECK_STR(v, "10s");
	query_value(conn, "SHOW idle_in_transaction_session_timeout", v, sizeof(v));
	CHECK_STR(v, "5s");
	CHECK_I64(db_util_session_timeouts(conn, "test", 2000, db_util_idle_tx_ms(2000)), METER_OK);
	query_value(conn, "SHOW idle_in_transaction_session_timeout", v, sizeof(v));
	CHECK_STR(v, "1s");
	/* No idle limit: a transaction stays. */
	CHECK_I64(db_util_session_timeouts(conn, "test", 2000, 0), METER_OK);
	query_value(conn, "SHOW idle_in_transaction_session_timeout", v, sizeof(v));
	CHECK_STR(v, "0");
	CHECK_I64(db_util_session_timeouts(conn, "test", 2000, db_util_idle_tx_ms(2000)), METER_OK);
	/* A transaction idle past it: the server ends the session. */
	PQclear(PQexec(conn, "BEGIN"));
	t0 = rawclock_ms();
	while (rawclock_ms() - t0 < 1600)
		usleep(50 * 1000);
	res = PQexec(conn, "SELECT 1");
	CHECK(PQresultStatus(res) != PGRES_TUPLES_OK);
	PQclear(res);
	CHECK(PQstatus(conn) == CONNECTION_BAD);
	PQfinish(conn);
}

/* A session db_connect opens is the one meter's code assumes, whatever
 * the database's defaults: an operator's database may set any of these. */
static void test_session_defaults(struct testdb *db)
{
	static const char *const sets[] = {
	    "TimeZone = 'Asia/Kolkata'",
	    "DateStyle = 'SQL, DMY'",
	    "timezone_abbreviations = 'Australia'",
	    "statement_timeout = '30ms'",
	    "lock_timeout = '1ms'",
	    "idle_in_transaction_session_timeout = '100ms'",
	    "default_transaction_isolation = 'repeatable read'",
	    "jit = on",
	    "synchronous_commit = off",
	    NULL,
	};
	char sql[256], err[256], v[256];
	PGconn *conn = NULL;

	for (int i = 0; sets[i]; i++) {
		snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" SET %s", db->name, sets[i]);
		CHECK_STR(testdb_exec_state(db->conn, sql), "00000");
	}
	CHECK_I64(db_connect(db->url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		query_value(conn,
			    "SELECT concat_ws('|', current_setting('TimeZone'),"
			    " current_setting('DateStyle'), current_setting('statement_timeout'),"
			    " current_setting('lock_timeout'),"
			    " current_setting('idle_in_transaction_session_timeout'),"
			    " current_setting('transaction_isolation'), current_setting('jit'),"
			    " current_setting('synchronous_commit'),"
			    " current_setting('client_encoding'), '2026-12-05'::date,"
			    " current_setting('timezone_abbreviations'),"
			    " '2026-07-01 12:00'::timestamp AT TIME ZONE 'EST')",
			    v, sizeof(v));
		CHECK_STR(v, "UTC|ISO, YMD|0|0|0|read committed|off|on|UTF8|2026-12-05|Default|"
			     "2026-07-01 17:00:00+00");
		PQfinish(conn);
		conn = NULL;
	}
	/* A commit setting stronger than on is the operator's to keep. */
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" SET synchronous_commit = remote_apply",
		 db->name);
	CHECK_STR(testdb_exec_state(db->conn, sql), "00000");
	CHECK_I64(db_connect(db->url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		query_value(conn, "SHOW synchronous_commit", v, sizeof(v));
		CHECK_STR(v, "remote_apply");
		PQfinish(conn);
	}
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" RESET ALL", db->name);
	CHECK_STR(testdb_exec_state(db->conn, sql), "00000");
}

/* The text of compiled migration name. */
static const char *migration_sql(const char *name)
{
	for (int i = 0; i < migrations_count; i++)
		if (strcmp(migrations_src[i].name, name) == 0)
			return migrations_src[i].sql;
	return "";
}

/* key_tz_4's zone and limit, as "EST 1500" or "EST none". */
static void kept_zone_key(PGconn *conn, char *v, size_t vlen)
{
	query_value(conn,
		    "SELECT time_zone || ' ' || COALESCE(daily_limit_micros::text, 'none')"
		    " FROM api_keys WHERE key_id = 'key_tz_4'",
		    v, vlen);
}

/* A key 0047 left in EST (key_tz_4) has its limit changed by a request that
 * names no zone, as any key's is (naming EST is refused, as naming any such
 * name is); one naming a place moves it there. */
static void test_kept_zone_limits(PGconn *conn)
{
	struct db_key k;
	struct db_key_tz_busy busy;
	char v[128];

	CHECK_I64(db_key_set_limits(conn, "acct_tz", "key_tz_4", true, true, 1500, NULL, &k, &busy),
		  METER_OK);
	CHECK_I64(db_key_set_limits(conn, NULL, "key_tz_4", true, false, 0, "EST", &k, &busy),
		  METER_EINVAL);
	kept_zone_key(conn, v, sizeof(v));
	CHECK_STR(v, "EST 1500");
	CHECK_I64(db_key_set_limits(conn, NULL, "key_tz_4", true, false, 0, NULL, &k, &busy),
		  METER_OK);
	CHECK(!k.has_limit && strcmp(k.time_zone, "EST") == 0);
	CHECK_I64(db_key_set_limits(conn, NULL, "key_tz_4", true, true, 1500, NULL, &k, &busy),
		  METER_OK);
	CHECK_I64(db_key_set_limits(conn, NULL, "key_tz_4", false, false, 0, "America/New_York", &k,
				    &busy),
		  METER_OK);
	CHECK_I64(db_key_set_limits(conn, NULL, "key_tz_4", false, false, 0, "EST", &k, &busy),
		  METER_EINVAL);
	kept_zone_key(conn, v, sizeof(v));
	CHECK_STR(v, "America/New_York 1500");
}

/* Keys stored in CET, EET, MET or WET before sql/0047 (then taken, and read
 * by AT TIME ZONE as fixed offsets) move to the zones those names link to,
 * whose days keep summer time; keys in the names that are fixed offsets
 * either way keep them. Replayed: 0031's check back, keys stored under it,
 * 0047 again (both are CREATE OR REPLACE, and 0047's UPDATE the rest). */
static void test_zone_abbreviations(PGconn *conn)
{
	static const char *const zones[][2] = {
	    {"CET", "Europe/Brussels"},	      {"EET", "Europe/Athens"}, {"MET", "Europe/Brussels"},
	    {"WET", "Europe/Lisbon"},	      {"EST", "EST"},		{"GMT", "GMT"},
	    {"Europe/Paris", "Europe/Paris"},
	};
	char sql[512], v[128];

	CHECK_STR(testdb_exec_state(conn, migration_sql("0031_time_zone_names")), "00000");
	CHECK_STR(testdb_exec_state(conn, "INSERT INTO accounts (account_id, name)"
					  " VALUES ('acct_tz', 'Zones')"),
		  "00000");
	for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
		snprintf(sql, sizeof(sql),
			 "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
			 " VALUES ('acct_tz', 'key_tz_%zu', sha256('%zu'::bytea), 'full', '%s')",
			 i, i, zones[i][0]);
		CHECK_STR(testdb_exec_state(conn, sql), "00000");
	}
	query_value(conn, "SELECT meter_key_day('CET', '2026-07-01 22:30Z')", v, sizeof(v));
	CHECK_STR(v, "2026-07-01"); /* the fixed offset: the day 0047 is for */
	CHECK_STR(testdb_exec_state(conn, migration_sql("0047_time_zone_abbreviations")), "00000");
	for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
		snprintf(sql, sizeof(sql),
			 "SELECT time_zone FROM api_keys WHERE key_id = 'key_tz_%zu'", i);
		query_value(conn, sql, v, sizeof(v));
		CHECK_STR(v, zones[i][1]);
	}
	query_value(conn,
		    "SELECT meter_key_day(time_zone, '2026-07-01 22:30Z') || ' '"
		    " || meter_day_start(time_zone, '2026-07-02')"
		    " FROM api_keys WHERE key_id = 'key_tz_0'",
		    v, sizeof(v));
	CHECK_STR(v, "2026-07-02 2026-07-01 22:00:00+00");
	CHECK_STR(testdb_exec_state(conn, "UPDATE api_keys SET time_zone = 'CET'"
					  " WHERE key_id = 'key_tz_0'"),
		  "23514");
	test_kept_zone_limits(conn);
}

/* Schema names database_schema takes, and those it does not. */
static void test_schema_names(void)
{
	static const char *const good[] = {
	    "public",
	    "meter",
	    "_b",
	    "billing_2026",
	    "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123456789_",
	    NULL};
	static const char *const bad[] = {
	    "",
	    "1meter",
	    "Meter",
	    "pg_meter",
	    "a-b",
	    "a b",
	    "a\"b",
	    "m\xc3\xa9ter",
	    "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123456789_x",
	    NULL};

	for (int i = 0; good[i]; i++)
		CHECK(db_schema_name_ok(good[i]));
	for (int i = 0; bad[i]; i++)
		CHECK(!db_schema_name_ok(bad[i]));
	CHECK(!db_schema_name_ok(NULL));
	CHECK(!db_set_schema("pg_x"));
	CHECK_STR(db_schema(), "public");
}

/* Every session works in meter's schema alone: the database's (or the
 * role's) search_path is not used, nor is it after a RESET. Before, a
 * search_path changed after migrating found no tables: /readyz advised a
 * migration, which made an empty second set of them in that schema. */
static void test_schema_pinned(struct testdb *db)
{
	char sql[256], err[256], v[256];
	PGconn *conn = NULL;
	int version = -1, applied = -1;

	CHECK_STR(testdb_exec_state(db->conn, "CREATE SCHEMA elsewhere"), "00000");
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" SET search_path = elsewhere", db->name);
	CHECK_STR(testdb_exec_state(db->conn, sql), "00000");
	CHECK_I64(db_connect(db->url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		query_value(conn, "SHOW search_path", v, sizeof(v));
		CHECK_STR(v, "public");
		CHECK_STR(testdb_exec_state(conn, "RESET search_path"), "00000");
		query_value(conn, "SELECT current_schema()", v, sizeof(v));
		CHECK_STR(v, "public");
		CHECK_I64(migrate_verify(conn, &version, err, sizeof(err)), METER_OK);
		CHECK_I64(version, migrate_latest());
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
		CHECK_I64(applied, 0);
		PQfinish(conn);
	}
	query_value(db->conn,
		    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
		    " WHERE n.nspname = 'elsewhere'",
		    v, sizeof(v));
	CHECK_STR(v, "0");
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" RESET search_path", db->name);
	CHECK_STR(testdb_exec_state(db->conn, sql), "00000");
	CHECK_STR(testdb_exec_state(db->conn, "DROP SCHEMA elsewhere"), "00000");

	/* Told another schema than the one meter's tables are in, migrate
	 * refuses, names theirs and makes nothing. */
	CHECK(db_set_schema("billing"));
	CHECK_I64(db_connect(db->url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		CHECK_I64(migrate_elsewhere(conn, v, sizeof(v)), METER_OK);
		CHECK_STR(v, "public");
		CHECK_I64(migrate_verify(conn, &version, err, sizeof(err)), METER_OK);
		CHECK_I64(version, 0);
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
		CHECK(strstr(err, "meter's tables are in schema \"public\", not in \"billing\"") !=
		      NULL);
		PQfinish(conn);
		conn = NULL;
	}
	query_value(db->conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'billing'", v,
		    sizeof(v));
	CHECK_STR(v, "0");
	CHECK(db_set_schema("public"));
}

/* A fresh database migrated into a schema of its own: every table and
 * function there and none in public, and they work (a day's partition goes
 * beside samples); a migrator told public then refuses. */
static void test_schema_own(void)
{
	struct testdb db;
	char err[256], v[256];
	PGconn *conn = NULL;
	int applied = -1, version = -1;

	if (testdb_create(&db, "migrate_schema") != 0) {
		CHECK(0);
		return;
	}
	CHECK(db_set_schema("billing"));
	CHECK_I64(db_connect(db.url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
		if (applied != migrations_count)
			fprintf(stderr, "migrate_apply: %s\n", err);
		CHECK_I64(applied, migrations_count);
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_OK);
		CHECK_I64(applied, 0);
		CHECK_I64(migrate_verify(conn, &version, err, sizeof(err)), METER_OK);
		CHECK_I64(version, migrate_latest());
		query_value(conn,
			    "SELECT meter_ensure_sample_partitions('2026-12-05', '2026-12-05')", v,
			    sizeof(v));
		CHECK_STR(v, "1");
		query_value(conn, "SELECT 'samples_20261205'::regclass::text", v, sizeof(v));
		CHECK_STR(v, "samples_20261205");
		PQfinish(conn);
		conn = NULL;
	}
	query_value(
	    db.conn,
	    "SELECT string_agg(DISTINCT n.nspname, ',') FROM pg_class c"
	    " JOIN pg_namespace n ON n.oid = c.relnamespace"
	    " WHERE c.relname IN ('schema_migrations', 'key_day_ledger', 'samples_20261205')",
	    v, sizeof(v));
	CHECK_STR(v, "billing");
	query_value(db.conn,
		    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
		    " WHERE p.proname = 'meter_checks_fast' AND n.nspname = 'billing'",
		    v, sizeof(v));
	CHECK_STR(v, "1");
	CHECK(db_set_schema("public"));
	CHECK_I64(db_connect(db.url, &conn, err, sizeof(err)), METER_OK);
	if (conn) {
		CHECK_I64(migrate_apply(conn, &applied, err, sizeof(err)), METER_ECONFLICT);
		CHECK(strstr(err, "schema \"billing\", not in \"public\"") != NULL);
		PQfinish(conn);
	}
	query_value(db.conn, "SELECT count(*) FROM pg_class WHERE relname = 'schema_migrations'", v,
		    sizeof(v));
	CHECK_STR(v, "1");
	testdb_drop(&db);
}

/* The partition a sample of sandbox sbx_p at time at landed in. */
static void sample_partition(PGconn *conn, const char *at, char *out, size_t len)
{
	query_value1(conn,
		     "SELECT tableoid::regclass::text FROM samples"
		     " WHERE account_id = 'acct_p' AND sandbox_id = 'sbx_p' AND sampled_at = $1",
		     at, out, len);
}

/* Inserts a sample of sbx_p at time at; returns its SQLSTATE. */
static const char *sample_insert(PGconn *conn, const char *at)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO samples (account_id, sandbox_id, sampled_at, state, cpu_usec,"
		 " memory_mib, storage_mib, vcpus, host_id)"
		 " VALUES ('acct_p', 'sbx_p', '%s', 'running', 1000, 4096, 0, 2, 'h1')",
		 at);
	return testdb_exec_state(conn, sql);
}

/* Daily partitions: creation (by UTC day, whatever the session's zone),
 * routing, the default partition, moving rows out of it, retention. */
static void test_partitions(PGconn *conn)
{
	char buf[128];

	CHECK_STR(testdb_exec_state(
		      conn, "INSERT INTO accounts (account_id, name) VALUES ('acct_p', 'P');"
			    " INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
			    "  VALUES ('acct_p', 'key_p', decode(repeat('ab', 32), 'hex'),"
			    "  'full');"
			    " INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus,"
			    "  memory_mib, state) VALUES ('acct_p', 'sbx_p', 'key_p', 2, 4096,"
			    "  'running')"),
		  "00000");

	/* The session's zone must not move the day boundaries. */
	CHECK_STR(testdb_exec_state(conn, "SET TimeZone = 'America/New_York'"), "00000");
	query_value(conn, "SELECT meter_ensure_sample_partitions('2026-11-29', '2026-12-01')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "3");
	query_value(conn, "SELECT meter_ensure_sample_partitions('2026-11-28', '2026-12-01')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "1");
	query_value(conn, "SELECT meter_ensure_sample_partitions('2026-11-28', '2026-12-01')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "0");
	CHECK_STR(testdb_exec_state(conn, "SET TimeZone = 'UTC'"), "00000");
	query_value(
	    conn,
	    "SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i"
	    " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'samples'::regclass",
	    buf, sizeof(buf));
	CHECK_STR(buf, "samples_20261128,samples_20261129,samples_20261130,samples_20261201,"
		       "samples_default");
	/* The partitions inherit the parent's keys and indexes. */
	query_value(conn, "SELECT count(*) FROM pg_indexes WHERE tablename = 'samples_20261130'",
		    buf, sizeof(buf));
	CHECK_STR(buf, "2");

	CHECK_STR(sample_insert(conn, "2026-11-30T01:02:03.456789Z"), "00000");
	sample_partition(conn, "2026-11-30T01:02:03.456789Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_20261130");
	CHECK_STR(sample_insert(conn, "2026-11-30T23:59:59.999999Z"), "00000");
	sample_partition(conn, "2026-11-30T23:59:59.999999Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_20261130");
	CHECK_STR(sample_insert(conn, "2026-12-01T00:00:00Z"), "00000");
	sample_partition(conn, "2026-12-01T00:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_20261201");
	/* A duplicate sample is refused whichever partition it is in. */
	CHECK_STR(sample_insert(conn, "2026-11-30T01:02:03.456789Z"), "23505");

	/* Very old (and far future) samples land in the default partition. */
	CHECK_STR(sample_insert(conn, "1999-01-01T12:00:00Z"), "00000");
	sample_partition(conn, "1999-01-01T12:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_default");
	CHECK_STR(sample_insert(conn, "2099-01-01T12:00:00Z"), "00000");
	sample_partition(conn, "2099-01-01T12:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_default");

	/* A partition created later takes its rows out of the default one. */
	query_value(conn, "SELECT meter_ensure_sample_partitions('1999-01-01', '1999-01-01')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "1");
	sample_partition(conn, "1999-01-01T12:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_19990101");
	query_value(conn, "SELECT count(*) FROM samples_default", buf, sizeof(buf));
	CHECK_STR(buf, "1");

	/* Bad ranges. */
	CHECK_STR(testdb_exec_state(conn, "SELECT meter_ensure_sample_partitions('2020-01-01',"
					  " '2030-01-01')"),
		  "22023");
	query_value(conn, "SELECT meter_ensure_sample_partitions('2026-12-05', '2026-12-01')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "0");

	/* Retention: days before 2026-11-30 go, with their samples. */
	query_value(conn, "SELECT meter_drop_sample_partitions('2026-11-30')", buf, sizeof(buf));
	CHECK_STR(buf, "3");
	query_value(
	    conn,
	    "SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i"
	    " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'samples'::regclass",
	    buf, sizeof(buf));
	CHECK_STR(buf, "samples_20261130,samples_20261201,samples_default");
	query_value(conn, "SELECT count(*) FROM samples", buf, sizeof(buf));
	CHECK_STR(buf, "4");
	query_value(conn, "SELECT meter_drop_sample_partitions('2100-01-01')", buf, sizeof(buf));
	CHECK_STR(buf, "2");
	/* The default partition's rows go apart (sql/0055), a batch at a
	 * time, the oldest first. */
	query_value(conn, "SELECT count(*) FROM samples", buf, sizeof(buf));
	CHECK_STR(buf, "1");
	CHECK_STR(sample_insert(conn, "1998-01-01T12:00:00Z"), "00000");
	query_value(conn, "SELECT meter_drop_default_samples('2099-01-01', 10)", buf, sizeof(buf));
	CHECK_STR(buf, "1");
	sample_partition(conn, "2099-01-01T12:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_default");
	CHECK_STR(sample_insert(conn, "1997-01-01T12:00:00Z"), "00000");
	CHECK_STR(sample_insert(conn, "1996-01-01T12:00:00Z"), "00000");
	query_value(conn, "SELECT meter_drop_default_samples('2100-01-01', 2)", buf, sizeof(buf));
	CHECK_STR(buf, "2");
	sample_partition(conn, "2099-01-01T12:00:00Z", buf, sizeof(buf));
	CHECK_STR(buf, "samples_default");
	query_value(conn, "SELECT meter_drop_default_samples('2100-01-01', 2)", buf, sizeof(buf));
	CHECK_STR(buf, "1");
	query_value(conn, "SELECT count(*) FROM samples", buf, sizeof(buf));
	CHECK_STR(buf, "0");
	CHECK_STR(testdb_exec_state(conn, "SELECT meter_drop_default_samples('2100-01-01', 0)"),
		  "22023");

	/* A schema named after the role, made after migrating, comes first
	 * in the default search_path ("$user", public): a new day's
	 * partition still goes beside samples, and retention drops it. */
	CHECK_STR(testdb_exec_state(conn, "SET search_path = \"$user\", public;"
					  " CREATE SCHEMA AUTHORIZATION CURRENT_USER"),
		  "00000");
	query_value(conn, "SELECT meter_ensure_sample_partitions('2026-12-03', '2026-12-03')", buf,
		    sizeof(buf));
	CHECK_STR(buf, "1");
	query_value(conn,
		    "SELECT (SELECT relnamespace FROM pg_class WHERE relname = 'samples_20261203')"
		    " = (SELECT relnamespace FROM pg_class WHERE oid = 'samples'::regclass)",
		    buf, sizeof(buf));
	CHECK_STR(buf, "t");
	query_value(conn, "SELECT meter_drop_sample_partitions('2100-01-01')", buf, sizeof(buf));
	CHECK_STR(buf, "1");
	CHECK_STR(testdb_exec_state(conn, "DO $$ BEGIN EXECUTE format('DROP SCHEMA %I',"
					  " current_user); END $$; RESET search_path"),
		  "00000");
}

int main(void)
{
	struct testdb db;

	if (testdb_create(&db, "migrate") != 0) {
		CHECK(0);
		return check_done();
	}
	test_first_run(db.conn);
	test_rerun(db.conn);
	test_zone_abbreviations(db.conn);
	test_partitions(db.conn);
	test_keepalives(db.url);
	test_notices(db.url);
	test_waits_named(db.url);
	test_session_timeouts(db.url);
	test_session_defaults(&db);
	test_schema_names();
	test_schema_pinned(&db);
	testdb_drop(&db);
	test_schema_own();
	test_concurrent();
	return check_done();
}
