/* meter: schema migrations from sql/, compiled into the binary.
 *
 * Every step that reads or writes schema_migrations runs under one
 * transaction-scoped advisory lock, so any number of migrators (several
 * meterd processes starting at once, a meterctl migrate beside them) apply
 * each migration exactly once: the loser of the race waits, re-checks and
 * finds the work done. */
#include "migrate.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "db_util.h"
#include "keys.h"
#include "log.h"

/* pg_advisory_xact_lock key of the migrators: "meter_mg" in ASCII; in
 * pg_locks, its high and low 32 bits are classid and objid. */
#define MIGRATE_LOCK_KEY   "7882834701841296743"
#define MIGRATE_LOCK_CLASS "1835365477"
#define MIGRATE_LOCK_OBJ   "1918856551"

#define MIGRATE_SHA_HEX 65 /* 64 hex digits and a NUL */

static const char migrate_create_table_sql[] = "CREATE TABLE IF NOT EXISTS schema_migrations ("
					       " version integer PRIMARY KEY,"
					       " name text NOT NULL,"
					       " sha256 text NOT NULL,"
					       " applied_at timestamptz NOT NULL DEFAULT now())";

/* Writes "what: first line of the server's message" into err. res may be
 * NULL (then the connection's message is used). */
static void migrate_error(char *err, size_t errlen, const char *what, PGconn *conn,
			  const PGresult *res)
{
	const char *msg = NULL;
	size_t n;

	if (!err || errlen == 0)
		return;
	if (res)
		msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	if (!msg)
		msg = PQerrorMessage(conn);
	if (!msg || !*msg)
		msg = "unknown error";
	n = strcspn(msg, "\r\n");
	snprintf(err, errlen, "%s: %.*s", what, (int)n, msg);
}

/* Runs one statement that returns no rows (or rows nobody reads).
 * METER_EDB with err filled ("what: reason") on failure. */
static enum meter_rc migrate_exec(PGconn *conn, const char *sql, const char *what, char *err,
				  size_t errlen)
{
	PGresult *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);
	enum meter_rc rc = METER_OK;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		migrate_error(err, errlen, what, conn, res);
		rc = METER_EDB;
	}
	PQclear(res);
	return rc;
}

/* Ends a failed transaction; the original error is what the caller reports. */
static void migrate_rollback(PGconn *conn)
{
	PGresult *res = PQexec(conn, "ROLLBACK");

	PQclear(res);
}

/* Opens a transaction holding the migrators' lock. Notices (such as
 * "relation already exists, skipping") are kept off stderr. Another
 * migrator holding the lock is waited for, and the first wait of a run
 * (*told false) is logged, naming that session as far as this role may see
 * it: a killed meterctl's server process may hold the lock until the
 * server notices, and is ended by that pid. The lookup is best effort (a
 * role denied pg_stat_activity still migrates). */
static enum meter_rc migrate_begin(PGconn *conn, const char *what, bool *told, char *err,
				   size_t errlen)
{
	PGresult *res;
	enum meter_rc rc;
	bool got;

	rc = migrate_exec(conn, "BEGIN", what, err, errlen);
	if (rc == METER_OK)
		rc = migrate_exec(conn, "SET LOCAL client_min_messages = warning", what, err,
				  errlen);
	if (rc != METER_OK)
		goto out;
	res = PQexec(conn, "SELECT pg_try_advisory_xact_lock(" MIGRATE_LOCK_KEY ")");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		migrate_error(err, errlen, what, conn, res);
		PQclear(res);
		rc = METER_EDB;
		goto out;
	}
	got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (got)
		return METER_OK;
	if (!*told) {
		const char *who = "its session not shown";

		*told = true;
		rc = migrate_exec(conn, "SAVEPOINT meter_who", what, err, errlen);
		if (rc != METER_OK)
			goto out;
		res = PQexec(
		    conn,
		    "SELECT format('server pid %s, application %L', a.pid, a.application_name)"
		    "  || COALESCE(', since ' || date_trunc('second', a.xact_start), '')"
		    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
		    " WHERE l.locktype = 'advisory' AND l.granted"
		    "  AND l.database = (SELECT oid FROM pg_database"
		    "   WHERE datname = current_database())"
		    "  AND l.classid = " MIGRATE_LOCK_CLASS " AND l.objid = " MIGRATE_LOCK_OBJ
		    "  AND l.objsubid = 1 AND l.pid <> pg_backend_pid() LIMIT 1");
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			who = PQgetvalue(res, 0, 0);
		log_info("%s: waiting for another migration of this database to finish (%s)", what,
			 who);
		rc = migrate_exec(conn,
				  PQresultStatus(res) == PGRES_TUPLES_OK
				      ? "RELEASE SAVEPOINT meter_who"
				      : "ROLLBACK TO SAVEPOINT meter_who",
				  what, err, errlen);
		PQclear(res);
		if (rc != METER_OK)
			goto out;
	}
	rc = migrate_exec(conn, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK_KEY ")", what, err,
			  errlen);
out:
	if (rc != METER_OK)
		migrate_rollback(conn);
	return rc;
}

/* Lower-case hex SHA-256 of the NUL-terminated text into hex (65 bytes). */
static enum meter_rc migrate_sha256_hex(const char *text, char hex[MIGRATE_SHA_HEX])
{
	unsigned char md[KEYS_HASH_LEN];

	if (keys_sha256(text, strlen(text), md) != METER_OK)
		return METER_ENOMEM;
	keys_hex(md, sizeof(md), hex);
	return METER_OK;
}

/* The compiled migrations' hashes for migrate_verify, computed by the first
 * call that needs them (again by a later one, should that fail). */
static pthread_mutex_t migrate_hex_lock = PTHREAD_MUTEX_INITIALIZER;
static char (*migrate_hex)[MIGRATE_SHA_HEX];

/* The hashes, or NULL when they cannot be computed (out of memory). */
static const char (*migrate_hashes(void))[MIGRATE_SHA_HEX]
{
	char(*hex)[MIGRATE_SHA_HEX];

	pthread_mutex_lock(&migrate_hex_lock);
	hex = migrate_hex;
	if (!hex) {
		hex = calloc(migrations_count > 0 ? (size_t)migrations_count : 1, sizeof(*hex));
		for (int i = 0; hex && i < migrations_count; i++) {
			if (migrate_sha256_hex(migrations_src[i].sql, hex[i]) != METER_OK) {
				free(hex);
				hex = NULL;
			}
		}
		migrate_hex = hex;
	}
	pthread_mutex_unlock(&migrate_hex_lock);
	return (const char(*)[MIGRATE_SHA_HEX])hex;
}

/* The compiled migrations must be numbered strictly increasing from 1 up;
 * anything else is a build mistake. */
static enum meter_rc migrate_check_compiled(char *err, size_t errlen)
{
	for (int i = 0; i < migrations_count; i++) {
		if (migrations_src[i].version < 1 ||
		    (i > 0 && migrations_src[i].version <= migrations_src[i - 1].version)) {
			snprintf(err, errlen, "compiled migration %s is out of order",
				 migrations_src[i].name);
			return METER_EINVAL;
		}
	}
	return METER_OK;
}

/* What to do about a database another build migrated (its migrations'
 * texts or numbers differ from this binary's): said after what differs. */
#define MIGRATE_OTHER_BUILD                                                                        \
	"the database was migrated by another build: use that build's meterctl and meterd,"        \
	" or restore a backup taken before it migrated and run this build's meterctl migrate"

/* A text of migration version that an earlier build applied, changed in
 * place later (sha256, lower-case hex). */
struct migrate_old_text {
	int version;
	const char *sha256;
};

#define MIGRATE_OLD_MAX 2 /* old texts in one state, at most */

/* The databases earlier builds migrated that recorded texts since changed,
 * whose schema this build's later migrations still bring to the very one a
 * fresh database gets: each state is the set of old texts one such build
 * recorded. scripts/migration-history.sh checked each: it migrates a
 * database as every commit that changed sql/ did, then with this build's
 * later migrations, and compares its pg_dump schema with a fresh
 * database's (the changes touched function bodies, not data). A database
 * is taken as migrated when the texts it records that differ from this
 * build's are exactly the set of one state; any other difference is
 * another build's schema, refused (the other states that script lists
 * end with a schema of their own). */
static const struct migrate_old_state {
	int n;
	struct migrate_old_text t[MIGRATE_OLD_MAX];
} migrate_old_states[] = {
    {1, {{10, "99c90b39aac016db368581ff52ed6c6ddabd4b5ecf9afbe43bd75fc5c33ee95f"}}},
    {1, {{13, "4334098ae2eafcf641fa97399533aa9eaec0e60c63e48bb6cd7c5804c3f5fbb8"}}},
    {2,
     {{13, "51adcbe94d5cd2e44be281866f7e303851e38444828f4f8372f4b66dfd42d360"},
      {14, "af5018e9fa515a288dc8502a116d0cbce89663909c0ee1aaaf86f686e6025001"}}},
    {1, {{14, "551c18b83411031c0ea96928c2d8dcebae2d019bfad35527b219d86046ad4d98"}}},
    {1, {{14, "04f16c000d7e76d1c54c7e2157b490928b3fe7bc1716bb56ebff7ee9d0fa15ac"}}},
    {2,
     {{32, "0b0034d00bd705bb927e0c26c670ad16bdaa1807f3f18ae6c37e3e543c2aad5a"},
      {33, "3f9ce6182102e35f6e02602d44db5de08c95e09fec6b8613e224a839dbe323a4"}}},
    {1, {{33, "6bff6ab3cd0fdfb4b21647dfec04a1f6394284a197bbc8544b16222ec82e54cf"}}},
    {2,
     {{33, "6bff6ab3cd0fdfb4b21647dfec04a1f6394284a197bbc8544b16222ec82e54cf"},
      {35, "51b4b262f7d463f2232da9e3a298598dcb13a5bb90987e0973d8b5fd7d30883e"}}},
    {1, {{35, "e192eb307e8eaa4ebb1dfb681b45ea3fa9a1959fbf406c3138c4219b07b17bd1"}}},
    {1, {{42, "4335c926a9cf666fd7035590b5ddd0638b5776288c28ac305f3f22a137b0a2f3"}}},
    {1, {{44, "c8d7a9c950b0a5c2596c56964ccc3343359f25b9ad08f7156af334185a7cbd2c"}}},
    {1, {{49, "10ecb4cf287818d0078809a54d5036ecfb37f1d57de05a567e71f59513530e8a"}}},
    {1, {{49, "edf925dc3028c9e18fe18c945bb8993161fce235cc8b8e406b57a342acffdc1f"}}},
    {1, {{51, "ac0940b98dfbadb0eb408f9f2fa1be1fb10e3c37c7fe0ad53c8b1c7baa984da8"}}},
    {1, {{51, "64200584fdf494ecdce5fadc7f530c03c9e69ce33c0709920773d72f424ed589"}}},
    {1, {{51, "8b3af2d1abef173c23ee997fdc4afe68ab80d065c26d9208ab9ffadd17284d16"}}},
    {1, {{57, "6d22defbb18cf6ae24e20bd2bbf2cf1213740fcdf078856c34d4a16491798a30"}}},
};

/* Whether the n old texts a database records (versions v, hashes sha, in
 * version order) are exactly one state of migrate_old_states. */
static bool migrate_old_state_known(int n, const int *v, const char *const *sha)
{
	size_t count = sizeof(migrate_old_states) / sizeof(migrate_old_states[0]);

	for (size_t k = 0; k < count; k++) {
		const struct migrate_old_state *st = &migrate_old_states[k];
		int j = 0;

		if (st->n != n)
			continue;
		while (j < n && st->t[j].version == v[j] && strcmp(st->t[j].sha256, sha[j]) == 0)
			j++;
		if (j == n)
			return true;
	}
	return false;
}

/* Index of the compiled migration numbered version, or -1. */
static int migrate_find(int version)
{
	for (int i = 0; i < migrations_count; i++)
		if (migrations_src[i].version == version)
			return i;
	return -1;
}

/* Compares what schema_migrations records (a result of version, sha256)
 * with the compiled migrations. METER_ECONFLICT, with err, when the
 * database is newer than this binary, records a version this binary does
 * not know, or records a text that has since changed (but for the known
 * states of migrate_old_states), or when one of this
 * binary's below the newest recorded is not there (skipped by the build
 * that migrated, or its record deleted: applying it after the later ones
 * would not make the schema they were written for); versions past this
 * binary's are skipped when newer_ok. Sets done[i] for every compiled
 * migration already applied. */
static enum meter_rc migrate_compare(const PGresult *res, const char (*hex)[MIGRATE_SHA_HEX],
				     bool newer_ok, bool *done, char *err, size_t errlen)
{
	int newest = migrations_count > 0 ? migrations_src[migrations_count - 1].version : 0;
	long recorded = 0; /* the newest version recorded */
	/* Recorded texts that differ from this build's (migrate_old_states). */
	int nold = 0, first_old = 0, old_v[MIGRATE_OLD_MAX];
	const char *old_sha[MIGRATE_OLD_MAX];

	for (int r = 0; r < PQntuples(res); r++) {
		const char *vtext = PQgetvalue(res, r, 0);
		const char *sha = PQgetvalue(res, r, 1);
		char *end = NULL;
		long v = strtol(vtext, &end, 10);
		int i;

		if (end == vtext || *end != '\0') {
			snprintf(err, errlen, "schema_migrations holds a bad version \"%s\"",
				 vtext);
			return METER_ECONFLICT;
		}
		if (v > recorded)
			recorded = v;
		if (v > newest && newer_ok)
			continue;
		if (v > newest) {
			snprintf(err, errlen,
				 "database schema is newer than this binary (version %ld, binary "
				 "knows up to %d): use the meterctl that migrated it",
				 v, newest);
			return METER_ECONFLICT;
		}
		i = migrate_find((int)v);
		if (i < 0) {
			snprintf(err, errlen,
				 "database records migration %ld, which this binary does not "
				 "have: " MIGRATE_OTHER_BUILD,
				 v);
			return METER_ECONFLICT;
		}
		if (strcmp(sha, hex[i]) != 0) {
			if (nold == 0)
				first_old = i;
			if (nold < MIGRATE_OLD_MAX) {
				old_v[nold] = (int)v;
				old_sha[nold] = sha;
			}
			nold++;
		}
		done[i] = true;
	}
	if (nold > 0 &&
	    (nold > MIGRATE_OLD_MAX || !migrate_old_state_known(nold, old_v, old_sha))) {
		snprintf(err, errlen,
			 "migration %s was changed after it was applied (sha256 "
			 "differs): " MIGRATE_OTHER_BUILD,
			 migrations_src[first_old].name);
		return METER_ECONFLICT;
	}
	for (int i = 0; i < migrations_count && migrations_src[i].version < recorded; i++) {
		if (!done[i]) {
			snprintf(err, errlen, "migration %s is not applied: " MIGRATE_OTHER_BUILD,
				 migrations_src[i].name);
			return METER_ECONFLICT;
		}
	}
	return METER_OK;
}

/* Reads schema_migrations and compares it (see migrate_compare). Runs inside
 * the caller's transaction. */
static enum meter_rc migrate_read(PGconn *conn, const char (*hex)[MIGRATE_SHA_HEX], bool *done,
				  char *err, size_t errlen)
{
	PGresult *res;
	enum meter_rc rc;

	for (int i = 0; i < migrations_count; i++)
		done[i] = false;
	res = PQexec(conn, "SELECT version, sha256 FROM schema_migrations ORDER BY version");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		migrate_error(err, errlen, "reading schema_migrations", conn, res);
		rc = METER_EDB;
		goto out;
	}
	rc = migrate_compare(res, hex, false, done, err, errlen);
out:
	PQclear(res);
	return rc;
}

enum meter_rc migrate_elsewhere(PGconn *conn, char *out, size_t outlen)
{
	const char *schema = db_schema();
	PGresult *res =
	    PQexecParams(conn,
			 "SELECT n.nspname FROM pg_namespace n WHERE n.nspname <> $1"
			 " AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid"
			 " AND c.relname = 'schema_migrations' AND c.relkind = 'r')"
			 " AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid"
			 " AND c.relname = 'key_day_ledger' AND c.relkind = 'r')"
			 " ORDER BY n.nspname COLLATE \"C\" LIMIT 1",
			 1, NULL, &schema, NULL, NULL, 0);
	enum meter_rc rc = METER_EDB;

	if (outlen)
		out[0] = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK) {
		if (PQntuples(res) == 1 && outlen)
			snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
		rc = METER_OK;
	} else {
		db_util_failed_note(res);
	}
	PQclear(res);
	return rc;
}

/* In the migrators' transaction, before schema_migrations is made: meter's
 * schema made when missing, and refused (METER_ECONFLICT) when it has no
 * schema_migrations while another schema has meter's tables. */
static enum meter_rc migrate_schema(PGconn *conn, char *err, size_t errlen)
{
	const char *schema = db_schema();
	const char *what = "meter's schema";
	char other[256], sql[DB_SCHEMA_MAX + 32];
	PGresult *res;
	bool has_schema, has_table;
	enum meter_rc rc;

	res = PQexecParams(conn,
			   "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),"
			   " to_regclass(quote_ident($1) || '.schema_migrations') IS NOT NULL",
			   1, NULL, &schema, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		migrate_error(err, errlen, what, conn, res);
		PQclear(res);
		return METER_EDB;
	}
	has_schema = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	has_table = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	if (has_table)
		return METER_OK;
	rc = migrate_elsewhere(conn, other, sizeof(other));
	if (rc != METER_OK) {
		migrate_error(err, errlen, what, conn, NULL);
		return rc;
	}
	if (other[0]) {
		snprintf(err, errlen,
			 "meter's tables are in schema \"%s\", not in \"%s\""
			 " (database_schema, METER_DATABASE_SCHEMA): set it to %s",
			 other, schema, other);
		return METER_ECONFLICT;
	}
	if (has_schema)
		return METER_OK;
	/* db_schema_name_ok's names need no quoting; quoted all the same. */
	snprintf(sql, sizeof(sql), "CREATE SCHEMA \"%s\"", schema);
	return migrate_exec(conn, sql, what, err, errlen);
}

/* Applies compiled migration i in one transaction with its record, unless
 * another migrator did it first. *applied_now says whether this call did;
 * *told, whether the run logged a wait for another (migrate_begin). */
static enum meter_rc migrate_one(PGconn *conn, int i, const char (*hex)[MIGRATE_SHA_HEX],
				 bool *done, bool *applied_now, bool *told, char *err,
				 size_t errlen)
{
	const struct migration_src *m = &migrations_src[i];
	char version[16];
	const char *params[3];
	PGresult *res = NULL;
	enum meter_rc rc;

	*applied_now = false;
	rc = migrate_begin(conn, m->name, told, err, errlen);
	if (rc != METER_OK)
		return rc;
	/* Re-check under the lock: another migrator may have been first. */
	rc = migrate_read(conn, hex, done, err, errlen);
	if (rc != METER_OK)
		goto out;
	if (done[i]) {
		rc = migrate_exec(conn, "COMMIT", m->name, err, errlen);
		goto out;
	}
	rc = migrate_exec(conn, m->sql, m->name, err, errlen);
	if (rc != METER_OK)
		goto out;

	snprintf(version, sizeof(version), "%d", m->version);
	params[0] = version;
	params[1] = m->name;
	params[2] = hex[i];
	res = PQexecParams(
	    conn, "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)", 3,
	    NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		migrate_error(err, errlen, m->name, conn, res);
		rc = METER_EDB;
		goto out;
	}
	rc = migrate_exec(conn, "COMMIT", m->name, err, errlen);
	if (rc != METER_OK)
		goto out;
	done[i] = true;
	*applied_now = true;
out:
	PQclear(res);
	if (rc != METER_OK && PQtransactionStatus(conn) != PQTRANS_IDLE)
		migrate_rollback(conn);
	return rc;
}

/* See migrate.h. The connection must not be inside a transaction; it is
 * left outside one whatever the outcome. */
enum meter_rc migrate_apply(PGconn *conn, int *applied, char *err, size_t errlen)
{
	char(*hex)[MIGRATE_SHA_HEX] = NULL;
	bool *done = NULL, told = false; /* a wait for another migrator logged */
	size_t n = migrations_count > 0 ? (size_t)migrations_count : 1;
	enum meter_rc rc;

	*applied = 0;
	if (err && errlen)
		err[0] = '\0';
	if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE) {
		snprintf(err, errlen, "migrate: connection is not idle");
		return METER_EINVAL;
	}
	rc = migrate_check_compiled(err, errlen);
	if (rc != METER_OK)
		return rc;
	hex = calloc(n, sizeof(*hex));
	done = calloc(n, sizeof(*done));
	if (!hex || !done) {
		snprintf(err, errlen, "migrate: out of memory");
		rc = METER_ENOMEM;
		goto out;
	}
	for (int i = 0; i < migrations_count; i++) {
		rc = migrate_sha256_hex(migrations_src[i].sql, hex[i]);
		if (rc != METER_OK) {
			snprintf(err, errlen, "migrate: sha256 of %s failed",
				 migrations_src[i].name);
			goto out;
		}
	}

	/* The table is created under the lock too: two first runs at once
	 * would otherwise race on CREATE TABLE IF NOT EXISTS. The recorded
	 * state is then checked before anything is applied. */
	rc = migrate_begin(conn, "creating schema_migrations", &told, err, errlen);
	if (rc != METER_OK)
		goto out;
	rc = migrate_schema(conn, err, errlen);
	if (rc == METER_OK)
		rc = migrate_exec(conn, migrate_create_table_sql, "creating schema_migrations", err,
				  errlen);
	if (rc == METER_OK)
		rc = migrate_read(conn, hex, done, err, errlen);
	if (rc == METER_OK)
		rc = migrate_exec(conn, "COMMIT", "creating schema_migrations", err, errlen);
	if (rc != METER_OK) {
		if (PQtransactionStatus(conn) != PQTRANS_IDLE)
			migrate_rollback(conn);
		goto out;
	}

	for (int i = 0; i < migrations_count; i++) {
		bool applied_now;

		if (done[i])
			continue;
		rc = migrate_one(conn, i, hex, done, &applied_now, &told, err, errlen);
		if (rc != METER_OK)
			goto out;
		if (applied_now) {
			(*applied)++;
			log_info("migration applied: %s (version %d)", migrations_src[i].name,
				 migrations_src[i].version);
		}
	}
	rc = METER_OK;
out:
	free(hex);
	free(done);
	return rc;
}

int migrate_latest(void)
{
	return migrations_count > 0 ? migrations_src[migrations_count - 1].version : 0;
}

enum meter_rc migrate_version(PGconn *conn, int *version)
{
	PGresult *res = PQexec(conn, "SELECT COALESCE(max(version), 0) FROM schema_migrations");
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	enum meter_rc rc = METER_EDB;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
		*version = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
		rc = METER_OK;
	} else if (state && strcmp(state, "42P01") == 0) { /* no schema_migrations */
		*version = 0;
		rc = METER_OK;
	} else {
		db_util_failed_note(res); /* a lock timeout told from the rest */
	}
	PQclear(res);
	return rc;
}

enum meter_rc migrate_verify(PGconn *conn, int *version, char *err, size_t errlen)
{
	const char(*hex)[MIGRATE_SHA_HEX];
	PGresult *res;
	bool *done;
	enum meter_rc rc;

	if (err && errlen)
		err[0] = '\0';
	rc = migrate_version(conn, version);
	if (rc != METER_OK || *version == 0)
		return rc;
	hex = migrate_hashes();
	done = calloc(migrations_count > 0 ? (size_t)migrations_count : 1, sizeof(*done));
	if (!hex || !done) {
		free(done);
		snprintf(err, errlen, "out of memory");
		return METER_ENOMEM;
	}
	res = PQexec(conn, "SELECT version, sha256 FROM schema_migrations ORDER BY version");
	if (PQresultStatus(res) == PGRES_TUPLES_OK) {
		rc = migrate_compare(res, hex, true, done, err, errlen);
	} else {
		db_util_failed_note(res);
		rc = METER_EDB;
	}
	PQclear(res);
	free(done);
	return rc;
}
