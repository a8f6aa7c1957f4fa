/* Throwaway databases for integration tests. */
#include "testdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"

#define TESTDB_URL_MAX 4096

/* Databases created by this process so far: a second one with the same tag
 * gets another name. */
static unsigned testdb_seq;

/* Reads the admin URL (first line of the file named by
 * METER_TEST_PG_URL_FILE) into url. Returns 0, or -1 after printing why. */
static int testdb_admin_url(char *url, size_t len)
{
	const char *path = getenv("METER_TEST_PG_URL_FILE");
	FILE *f = NULL;
	int ret = -1;

	if (!path || !*path) {
		fprintf(stderr, "testdb: METER_TEST_PG_URL_FILE is not set\n");
		goto out;
	}
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "testdb: cannot open %s\n", path);
		goto out;
	}
	if (!fgets(url, (int)len, f)) {
		fprintf(stderr, "testdb: %s is empty\n", path);
		goto out;
	}
	url[strcspn(url, "\r\n")] = '\0';
	if (!*url) {
		fprintf(stderr, "testdb: %s holds no URL\n", path);
		goto out;
	}
	ret = 0;
out:
	if (f)
		fclose(f);
	return ret;
}

/* Appends s to buf (of size len, holding *n characters); -1 when it does
 * not fit. */
static int testdb_append(char *buf, size_t len, size_t *n, const char *s)
{
	size_t sl = strlen(s);

	if (*n + sl + 1 > len)
		return -1;
	memcpy(buf + *n, s, sl + 1);
	*n += sl;
	return 0;
}

/* Appends key='value' to buf, with ' and \ escaped as libpq expects. */
static int testdb_append_kv(char *buf, size_t len, size_t *n, const char *key, const char *val)
{
	char esc[2] = {0, 0};

	if ((*n > 0 && testdb_append(buf, len, n, " ") < 0) ||
	    testdb_append(buf, len, n, key) < 0 || testdb_append(buf, len, n, "='") < 0)
		return -1;
	for (const char *p = val; *p; p++) {
		if ((*p == '\'' || *p == '\\') && testdb_append(buf, len, n, "\\") < 0)
			return -1;
		esc[0] = *p;
		if (testdb_append(buf, len, n, esc) < 0)
			return -1;
	}
	return testdb_append(buf, len, n, "'");
}

/* A new key=value connection string: admin's settings with dbname
 * replaced. Returns a malloc'd string (caller frees) or NULL after printing
 * why. */
static char *testdb_url_for(const char *admin, const char *dbname)
{
	PQconninfoOption *opts = NULL;
	char *perr = NULL;
	char *buf = NULL;
	size_t n = 0;

	opts = PQconninfoParse(admin, &perr);
	if (!opts) {
		fprintf(stderr, "testdb: cannot parse the admin URL\n");
		goto out;
	}
	buf = malloc(TESTDB_URL_MAX);
	if (!buf)
		goto out;
	buf[0] = '\0';
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val || strcmp(o->keyword, "dbname") == 0)
			continue;
		if (testdb_append_kv(buf, TESTDB_URL_MAX, &n, o->keyword, o->val) < 0)
			goto fail;
	}
	if (testdb_append_kv(buf, TESTDB_URL_MAX, &n, "dbname", dbname) < 0)
		goto fail;
	goto out;
fail:
	fprintf(stderr, "testdb: connection string too long\n");
	free(buf);
	buf = NULL;
out:
	PQconninfoFree(opts);
	PQfreemem(perr);
	return buf;
}

/* Runs one statement on conn; returns 0, or -1 after printing the error. */
static int testdb_run(PGconn *conn, const char *sql)
{
	PGresult *res = PQexec(conn, sql);
	int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;

	if (!ok)
		fprintf(stderr, "testdb: %s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	return ok ? 0 : -1;
}

/* Connects to the cluster's admin database, or prints why and returns NULL. */
static PGconn *testdb_admin_connect(void)
{
	char url[TESTDB_URL_MAX];
	char err[512];
	PGconn *conn = NULL;

	if (testdb_admin_url(url, sizeof(url)) < 0)
		return NULL;
	if (db_connect(url, &conn, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "testdb: cannot connect to the test cluster: %s\n", err);
		return NULL;
	}
	return conn;
}

/* Sets db->name to t_<tag>_<pid>_<seq>, tag lower-cased and reduced to
 * [a-z0-9_] and cut to fit PostgreSQL's 63-byte names. */
static void testdb_name(struct testdb *db, const char *tag)
{
	char clean[32];
	size_t n = 0;

	for (const char *p = tag ? tag : ""; *p && n + 1 < sizeof(clean); p++) {
		char c = *p;

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
			c = '_';
		clean[n++] = c;
	}
	clean[n] = '\0';
	snprintf(db->name, sizeof(db->name), "t_%s_%ld_%u", clean, (long)getpid(), testdb_seq++);
}

int testdb_create(struct testdb *db, const char *tag)
{
	char admin_url[TESTDB_URL_MAX];
	char sql[256];
	char err[512];
	PGconn *admin = NULL;
	int ret = -1;

	memset(db, 0, sizeof(*db));
	testdb_name(db, tag);
	if (testdb_admin_url(admin_url, sizeof(admin_url)) < 0)
		goto out;
	admin = testdb_admin_connect();
	if (!admin)
		goto out;
	/* A database of a dead process that had our pid would be in the way. */
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", db->name);
	if (testdb_run(admin, "SET client_min_messages = warning") < 0 ||
	    testdb_run(admin, sql) < 0)
		goto out;
	snprintf(sql, sizeof(sql), "CREATE DATABASE \"%s\" TEMPLATE template0", db->name);
	if (testdb_run(admin, sql) < 0)
		goto out;
	db->url = testdb_url_for(admin_url, db->name);
	if (!db->url)
		goto out;
	if (db_connect(db->url, &db->conn, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "testdb: cannot connect to %s: %s\n", db->name, err);
		goto out;
	}
	ret = 0;
out:
	PQfinish(admin);
	if (ret < 0) {
		free(db->url);
		db->url = NULL;
	}
	return ret;
}

void testdb_drop(struct testdb *db)
{
	char sql[256];
	PGconn *admin;

	PQfinish(db->conn);
	db->conn = NULL;
	free(db->url);
	db->url = NULL;
	if (!db->name[0])
		return;
	admin = testdb_admin_connect();
	if (!admin)
		return;
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", db->name);
	if (testdb_run(admin, sql) < 0)
		fprintf(stderr, "testdb: %s left behind\n", db->name);
	PQfinish(admin);
	db->name[0] = '\0';
}

const char *testdb_exec_state(PGconn *conn, const char *sql)
{
	static _Thread_local char state[6];
	PGresult *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);
	const char *code;

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		code = "00000";
	} else {
		code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (!code || strlen(code) != 5)
			code = "?????"; /* no server answer: the connection failed */
	}
	memcpy(state, code, 6);
	PQclear(res);
	return state;
}

void testdb_query_text(PGconn *conn, const char *sql, char *out, size_t len)
{
	PGresult *res = PQexec(conn, sql);

	out[0] = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
	else
		fprintf(stderr, "query failed: %s: %s", sql, PQresultErrorMessage(res));
	PQclear(res);
}

long long testdb_query_int(PGconn *conn, const char *sql)
{
	char v[32];

	testdb_query_text(conn, sql, v, sizeof(v));
	return v[0] ? strtoll(v, NULL, 10) : -1;
}
