/* Exports and statements against a real database with known usage rows:
 * CSV and NDJSON agree with each other and with SQL sums, hours and days,
 * empty ranges, a key with no sandboxes, a range across a month, and the
 * free-hours credit applied once, earliest first, across two months. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "csv.h"
#include "export.h"
#include "migrate.h"
#include "statement.h"
#include "testdb.h"

/* An hour of usage: running_s running seconds (the rest paused), the
 * money of its parts. */
static void usage_row(PGconn *c, const char *acc, const char *sbx, const char *key,
		      const char *hour, const char *day, int64_t running_s, int64_t cpu,
		      int64_t mem, int64_t sto)
{
	char sql[1024];
	int64_t paused_s = 3600 - running_s;

	snprintf(sql, sizeof(sql),
		 "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id,"
		 " day, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus,"
		 " storage_mibus, cpu_micros, memory_micros, storage_micros, total_micros,"
		 " cpu_cum_micros, memory_cum_micros, storage_cum_micros) VALUES"
		 " ('%s', '%s', '%s', 1, %s%s%s, '%s', %lld, %lld, %lld, %lld, %lld, %lld,"
		 " %lld, %lld, %lld, %lld, 100000, 100000, 100000)",
		 acc, sbx, hour, key ? "'" : "", key ? key : "NULL", key ? "'" : "", day,
		 (long long)running_s * 1000000, (long long)paused_s * 1000000,
		 (long long)running_s * 20 * 1000000, (long long)running_s * 50 * 1000000 + 999999,
		 (long long)running_s * 4096 * 1000000, (long long)paused_s * 100 * 1000000,
		 (long long)cpu, (long long)mem, (long long)sto, (long long)cpu + mem + sto);
	CHECK_STR(testdb_exec_state(c, sql), "00000");
}

/* Runs an export to a malloc'd string; fills totals. */
static char *run_export(PGconn *c, struct export_params *p, struct export_totals *t)
{
	struct export_cursor *cur = NULL;
	char err[256], buf[16384];
	char *all = NULL;
	size_t alen = 0, n;
	FILE *mem = open_memstream(&all, &alen);

	if (export_open(c, p, &cur, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "export_open: %s\n", err);
		fclose(mem);
		free(all);
		return NULL;
	}
	for (;;) {
		if (export_next(cur, buf, sizeof(buf), &n) != METER_OK) {
			fprintf(stderr, "export_next failed\n");
			break;
		}
		if (n == 0)
			break;
		fwrite(buf, 1, n, mem);
	}
	export_totals_get(cur, t);
	export_close(cur);
	fclose(mem);
	return all;
}

static int64_t sql_i64(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	int64_t v = -1;

	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

static int64_t at(const char *rfc3339)
{
	/* Whole hours of 2026 only, enough for the fixtures. */
	struct tm tm = {0};
	int y, mo, d, h;

	if (sscanf(rfc3339, "%d-%d-%dT%d", &y, &mo, &d, &h) != 4)
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	return (int64_t)timegm(&tm) * 1000000;
}

/* An hourly CSV export of account acc over [from, to) (at()'s form). */
static void hourly_csv(struct export_params *p, const char *acc, const char *from, const char *to)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->account_id, sizeof(p->account_id), "%s", acc);
	p->from_usec = at(from);
	p->to_usec = at(to);
	p->granularity = EXPORT_HOUR;
	p->format = EXPORT_CSV;
	p->lock_timeout_ms = 1500;
}

static void test_exports(PGconn *c)
{
	struct export_params p;
	struct export_totals t = {0}, t2 = {0}; /* read even when an export failed */
	char *csv, *nd, *line, *save = NULL;
	int64_t want_total, lines = 0, nd_total = 0;

	hourly_csv(&p, "acc_r", "2026-10-01T00", "2026-12-01T00");
	want_total = sql_i64(c, "SELECT sum(total_micros) FROM usage_hourly"
				" WHERE account_id = 'acc_r'");
	CHECK_I64(want_total, 165 + 301 + 570);

	csv = run_export(c, &p, &t);
	CHECK(csv != NULL);
	if (!csv)
		return;
	CHECK(
	    strncmp(csv,
		    "period_start,account_id,key_id,sandbox_id,running_seconds,paused_seconds,"
		    "cpu_used_millicore_seconds,cpu_billed_millicore_seconds,memory_mib_seconds,"
		    "storage_mib_seconds,cpu_micros,memory_micros,storage_micros,total_micros\r\n",
		    200) == 0);
	CHECK_I64(t.total_micros, want_total);
	CHECK_I64(t.rows, 4);
	/* The export's lock timeout ends with it: the connection goes back to
	 * a pool, to requests that set their own. */
	{
		PGresult *r = PQexec(c, "SHOW lock_timeout");

		CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
		      strcmp(PQgetvalue(r, 0, 0), "0") == 0);
		PQclear(r);
	}
	/* Every record ends with CRLF, and there are header + 4 of them. */
	for (char *q = csv; *q; q++) {
		if (*q == '\n') {
			CHECK(q > csv && q[-1] == '\r');
			lines++;
		}
	}
	CHECK_I64(lines, 5);
	/* A known row, whole seconds rounded down (billed has +999999 µs). */
	CHECK(strstr(csv, "2026-10-31T23:00:00Z,acc_r,key_a,sbx_a,1800,1800,36000,90000,"
			  "7372800,180000,30,10,5,45\r\n") != NULL);

	p.format = EXPORT_NDJSON;
	nd = run_export(c, &p, &t2);
	CHECK(nd != NULL);
	CHECK_I64(t2.total_micros, want_total);
	for (line = strtok_r(nd, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_error_t e;
		json_t *o = json_loads(line, 0, &e);
		CHECK(o != NULL);
		if (!o)
			continue;
		nd_total +=
		    json_integer_value(json_object_get(json_object_get(o, "cost"), "total_micros"));
		CHECK(json_is_integer(
		    json_object_get(json_object_get(o, "usage"), "running_seconds")));
		json_decref(o);
	}
	CHECK_I64(nd_total, want_total);
	free(nd);
	free(csv);

	/* Days: same money, fewer rows; a day of the key, not of UTC. */
	p.format = EXPORT_CSV;
	p.granularity = EXPORT_DAY;
	csv = run_export(c, &p, &t);
	CHECK_I64(t.total_micros, want_total);
	/* New York's Oct 31 runs to Nov 1 04:00 UTC: one day row a sandbox. */
	CHECK_I64(t.rows, 2);
	CHECK(csv && strstr(csv, "\r\n2026-10-31,acc_r,key_a,sbx_a,9000,1800,") != NULL);
	free(csv);

	/* Only November (crossing nothing), a key filter, a key with no sandboxes. */
	p.granularity = EXPORT_HOUR;
	p.from_usec = at("2026-11-01T00");
	csv = run_export(c, &p, &t);
	CHECK_I64(t.rows, 2);
	CHECK_I64(t.total_micros, 301 + 570);
	free(csv);
	/* Unattributed usage: exported with an empty key. */
	snprintf(p.account_id, sizeof(p.account_id), "unattributed");
	csv = run_export(c, &p, &t);
	CHECK_I64(t.rows, 1);
	CHECK(csv && strstr(csv, "2026-11-01T01:00:00Z,unattributed,,sbx_u,") != NULL);
	free(csv);
	snprintf(p.account_id, sizeof(p.account_id), "acc_r");
	snprintf(p.key_id, sizeof(p.key_id), "key_empty");
	csv = run_export(c, &p, &t);
	CHECK_I64(t.rows, 0);
	CHECK(csv && strchr(csv, '\n') == csv + strlen(csv) - 1); /* the header alone */
	free(csv);
	p.key_id[0] = '\0';
	/* An empty range. */
	p.from_usec = at("2026-06-01T00");
	p.to_usec = at("2026-06-02T00");
	csv = run_export(c, &p, &t);
	CHECK_I64(t.rows, 0);
	free(csv);
}

static void test_params(void)
{
	struct export_params p;
	char err[128];

	memset(&p, 0, sizeof(p));
	snprintf(p.account_id, sizeof(p.account_id), "acc_r");
	p.from_usec = at("2026-11-01T00");
	p.to_usec = at("2026-11-02T00");
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_OK);
	p.to_usec = p.from_usec;
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_EINVAL);
	CHECK(strncmp(err, "to:", 3) == 0);
	p.to_usec = p.from_usec + 1800000000;
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_EINVAL);
	p.to_usec = p.from_usec + EXPORT_MAX_RANGE_USEC + 3600000000;
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_ERANGE);
	/* Before 1970: said so, not "not a whole hour" (it is one). */
	p.from_usec = -INT64_C(3600000000);
	p.to_usec = INT64_C(3600000000);
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_EINVAL);
	CHECK(strcmp(err, "from: must be 1970-01-01T00:00:00Z or later") == 0);
	p.from_usec = at("2026-11-01T00");
	p.to_usec = at("2026-11-02T00");
	snprintf(p.key_id, sizeof(p.key_id), "bad key");
	CHECK(export_params_check(&p, err, sizeof(err)) == METER_EINVAL);
	CHECK(strncmp(err, "key_id:", 7) == 0);
}

static void test_statement(PGconn *c)
{
	struct statement s;
	char err[256], *text = NULL;
	size_t len = 0;
	FILE *mem;
	int y, m;

	CHECK(statement_build(c, "acc_r", 2026, 10, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.free_sandbox_hours, 2);
	CHECK_I64(s.n, 1);
	/* October: sbx_a's 1 h (100 + 20) and 0.5 h (30 + 10) fully credited. */
	CHECK_I64(s.total.total_micros, 100 + 20 + 0 + 30 + 10 + 5);
	CHECK_I64(s.total.credit_micros, 160);
	CHECK_I64(s.total.due_micros, 165 - 160);
	statement_release(&s);

	CHECK(statement_build(c, "acc_r", 2026, 11, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.n, 2);
	/* November: 0.5 h of credit left: sbx_a's Nov 1 00:00 hour comes first
	 * (hour, then sandbox id) and is running the whole hour: half of its
	 * running money, rounded down: (301 + 0) / 2 = 150. */
	CHECK_I64(s.total.credit_micros, 150);
	CHECK_STR(s.lines[0].sandbox_id, "sbx_a");
	CHECK_I64(s.lines[0].credit_micros, 150);
	CHECK_I64(s.lines[1].credit_micros, 0);
	CHECK_I64(s.total.total_micros, 301 + 570);
	CHECK_I64(s.total.due_micros, s.total.total_micros - 150);

	mem = open_memstream(&text, &len);
	CHECK(statement_write_csv(&s, mem) == METER_OK);
	fclose(mem);
	CHECK(text && strstr(text, "\r\ntotal,,,") != NULL);
	free(text);
	text = NULL;
	mem = open_memstream(&text, &len);
	CHECK(statement_write_html(&s, mem) == METER_OK);
	fclose(mem);
	/* The account's name is free text: escaped. */
	CHECK(text && strstr(text, "<bdi>&lt;b&gt;Reports &amp; Co&lt;/b&gt;</bdi>") != NULL);
	CHECK(text && strstr(text, "<b>Reports") == NULL);
	free(text);
	statement_release(&s);

	/* A name of 200 two-byte characters (400 bytes; up to 800 for four-
	 * byte ones) comes out whole, not cut inside a character. */
	CHECK_STR(testdb_exec_state(c, "INSERT INTO accounts (account_id, name) VALUES"
				       " ('acc_long', repeat(U&'\\00e9', 200))"),
		  "00000");
	CHECK(statement_build(c, "acc_long", 2026, 11, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(strlen(s.account_name), 400);
	statement_release(&s);

	/* The unattributed account is no customer: no free hours, all due. */
	CHECK(statement_build(c, "unattributed", 2026, 11, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.n, 1);
	CHECK_I64(s.free_sandbox_hours, 0);
	CHECK_I64(s.total.total_micros, 7 + 8);
	CHECK_I64(s.total.credit_micros, 0);
	CHECK_I64(s.total.due_micros, 7 + 8);
	statement_release(&s);

	CHECK(statement_build(c, "acc_none", 2026, 11, &s, err, sizeof(err)) == METER_ENOTFOUND);
	CHECK(statement_parse_month("2026-11", &y, &m) == METER_OK && y == 2026 && m == 11);
	CHECK(statement_parse_month("2026-13", &y, &m) == METER_EINVAL);
	CHECK(statement_parse_month("2026-1", &y, &m) == METER_EINVAL);
	CHECK(statement_parse_month("20x6-01", &y, &m) == METER_EINVAL);
	CHECK(statement_parse_month("1999-12", &y, &m) == METER_EINVAL);
}

/* The credit read a page at a time: ten sandboxes running 3 s in each of
 * 300 hours (7 µ$ an hour), so the account's two free hours (7,200 s)
 * cover the first 2,400 rows (240 hours of all ten), over three pages of
 * the cursor, and no more. */
static void test_statement_pages(PGconn *c)
{
	struct statement s;
	char err[256];

	CHECK_STR(testdb_exec_state(
		      c, "INSERT INTO accounts (account_id, name) VALUES ('acc_p', 'Pages');"
			 "INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
			 " VALUES ('acc_p', 'key_p', decode(repeat('22', 32), 'hex'), 'full');"
			 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
			 " state) SELECT 'acc_p', 'sbx_p' || i, 'key_p', 1, 512, 'running'"
			 " FROM generate_series(0, 9) i;"
			 "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version,"
			 " key_id, day, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus,"
			 " memory_mibus, storage_mibus, cpu_micros, memory_micros, storage_micros,"
			 " total_micros, cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
			 " SELECT 'acc_p', 'sbx_p' || i, x.hour, 1, 'key_p', x.hour::date,"
			 " 3000000, 3597000000, 0, 0, 0, 0, 7, 0, 0, 7, 7, 0, 0"
			 " FROM generate_series(0, 9) i, LATERAL (SELECT timestamptz"
			 " '2026-03-01 00:00Z' + h * interval '1 hour' AS hour"
			 " FROM generate_series(0, 299) h) x"),
		  "00000");
	CHECK(statement_build(c, "acc_p", 2026, 3, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.n, 10);
	CHECK_I64(s.total.total_micros, 3000 * 7);
	CHECK_I64(s.total.credit_micros, 2400 * 7);
	CHECK_I64(s.total.due_micros, 600 * 7);
	for (size_t i = 0; i < s.n; i++)
		CHECK_I64(s.lines[i].credit_micros, 240 * 7);
	statement_release(&s);
	/* The connection is left idle, outside any transaction. */
	CHECK(PQtransactionStatus(c) == PQTRANS_IDLE);
	CHECK(statement_build(c, "acc_p", 2026, 4, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.n, 0);
	CHECK_I64(s.total.credit_micros, 0);
	statement_release(&s);
	CHECK(statement_build(c, "acc_nope", 2026, 4, &s, err, sizeof(err)) == METER_ENOTFOUND);
	CHECK(PQtransactionStatus(c) == PQTRANS_IDLE);

	/* In a caller's transaction: the same statement, and the transaction
	 * goes on with what it wrote. */
	CHECK_STR(testdb_exec_state(c, "BEGIN; INSERT INTO accounts (account_id, name)"
				       " VALUES ('acc_tx', 'Written before')"),
		  "00000");
	CHECK(statement_build(c, "acc_p", 2026, 3, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.total.credit_micros, 2400 * 7);
	statement_release(&s);
	CHECK(statement_build(c, "acc_nope", 2026, 3, &s, err, sizeof(err)) == METER_ENOTFOUND);
	CHECK(PQtransactionStatus(c) == PQTRANS_INTRANS);
	CHECK_STR(testdb_exec_state(c, "COMMIT"), "00000");
	CHECK_I64(sql_i64(c, "SELECT count(*) FROM accounts WHERE account_id = 'acc_tx'"), 1);
	/* A failed transaction is left alone, for its owner to roll back. */
	CHECK_STR(testdb_exec_state(c, "BEGIN"), "00000");
	CHECK(strcmp(testdb_exec_state(c, "SELECT 1 / 0"), "00000") != 0);
	CHECK(statement_build(c, "acc_p", 2026, 3, &s, err, sizeof(err)) == METER_EINVAL);
	CHECK(PQtransactionStatus(c) == PQTRANS_INERROR);
	CHECK_STR(testdb_exec_state(c, "ROLLBACK"), "00000");
}

/* The free hours go to usage in the order of its hour, then its sandbox
 * id in byte order, whatever the database's collation: the same usage is
 * credited the same on a database restored under another locale. Three
 * sandboxes run the same whole hour, so the account's two free hours
 * cover two of them: "CE_x" and "ca_x" in byte order, where an English
 * collation would put "ca_x", "cb_x", then "CE_x". The sandbox
 * ids are collated so here for the length of a transaction. */
static void test_statement_collation(PGconn *c)
{
	struct statement s;
	char err[256];

	CHECK_STR(testdb_exec_state(
		      c, "INSERT INTO accounts (account_id, name) VALUES ('acc_c', 'Collation');"
			 "INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
			 " VALUES ('acc_c', 'key_c', decode(repeat('33', 32), 'hex'), 'full');"
			 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
			 " state) VALUES ('acc_c', 'CE_x', 'key_c', 1, 512, 'running'),"
			 " ('acc_c', 'ca_x', 'key_c', 1, 512, 'running'),"
			 " ('acc_c', 'cb_x', 'key_c', 1, 512, 'running')"),
		  "00000");
	usage_row(c, "acc_c", "CE_x", "key_c", "2026-05-01T00:00:00Z", "2026-05-01", 3600, 100, 0,
		  0);
	usage_row(c, "acc_c", "ca_x", "key_c", "2026-05-01T00:00:00Z", "2026-05-01", 3600, 200, 0,
		  0);
	usage_row(c, "acc_c", "cb_x", "key_c", "2026-05-01T00:00:00Z", "2026-05-01", 3600, 400, 0,
		  0);
	CHECK_STR(testdb_exec_state(c, "BEGIN; ALTER TABLE usage_hourly ALTER COLUMN sandbox_id"
				       " TYPE text COLLATE \"en-US-x-icu\""),
		  "00000");
	CHECK(statement_build(c, "acc_c", 2026, 5, &s, err, sizeof(err)) == METER_OK);
	CHECK_I64(s.n, 3);
	CHECK_I64(s.total.credit_micros, 100 + 200);
	CHECK_I64(s.total.due_micros, 400);
	if (s.n == 3) {
		CHECK_STR(s.lines[0].sandbox_id, "CE_x");
		CHECK_I64(s.lines[0].credit_micros, 100);
		CHECK_I64(s.lines[1].credit_micros, 200);
		CHECK_I64(s.lines[2].credit_micros, 0);
	}
	statement_release(&s);
	CHECK_STR(testdb_exec_state(c, "ROLLBACK"), "00000");
}

/* Money past INT64_MAX in all (each row within it): the export writes
 * every row, and its totals stop at INT64_MAX, saying so (it stopped at
 * the first such row before). Its own account, after the others' tests. */
static void test_export_overflow(PGconn *c)
{
	struct export_params p;
	struct export_totals t = {0};
	char *csv;
	const int64_t half = INT64_C(1) << 62; /* two of them: 2^63 */

	CHECK_STR(testdb_exec_state(c, "INSERT INTO accounts (account_id, name) VALUES"
				       " ('acc_big', 'Big')"),
		  "00000");
	/* A key each: no one key's day is past INT64_MAX. */
	CHECK_STR(testdb_exec_state(
		      c, "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
			 " VALUES ('acc_big', 'key_big1', decode(repeat('22', 32), 'hex'), 'full',"
			 " 'UTC'), ('acc_big', 'key_big2', decode(repeat('33', 32), 'hex'), 'full',"
			 " 'UTC')"),
		  "00000");
	CHECK_STR(testdb_exec_state(c, "INSERT INTO sandboxes (account_id, sandbox_id, key_id,"
				       " vcpus, memory_mib, state) VALUES"
				       " ('acc_big', 'sbx_big1', 'key_big1', 1, 512, 'running'),"
				       " ('acc_big', 'sbx_big2', 'key_big2', 1, 512, 'running')"),
		  "00000");
	usage_row(c, "acc_big", "sbx_big1", "key_big1", "2026-11-02T01:00:00Z", "2026-11-02", 3600,
		  0, 0, 0);
	usage_row(c, "acc_big", "sbx_big2", "key_big2", "2026-11-02T01:00:00Z", "2026-11-02", 3600,
		  0, 0, 0);
	{
		char sql[256];

		snprintf(sql, sizeof(sql),
			 "UPDATE usage_hourly SET cpu_micros = %lld, total_micros = %lld,"
			 " cpu_cum_micros = %lld WHERE account_id = 'acc_big'",
			 (long long)half, (long long)half, (long long)half);
		CHECK_STR(testdb_exec_state(c, sql), "00000");
	}
	hourly_csv(&p, "acc_big", "2026-11-01T00", "2026-11-03T00");
	csv = run_export(c, &p, &t);
	CHECK(csv && strstr(csv, ",sbx_big1,") && strstr(csv, ",sbx_big2,"));
	CHECK_I64(t.rows, 2);
	CHECK(t.overflow);
	CHECK_I64(t.total_micros, INT64_MAX);
	CHECK_I64(t.memory_micros, 0);
	free(csv);
}

int main(void)
{
	struct testdb db;
	int applied;
	char err[256];

	test_params();
	if (testdb_create(&db, "reports") != 0)
		return 1;
	CHECK(migrate_apply(db.conn, &applied, err, sizeof(err)) == METER_OK);
	/* Two free hours for accounts created from 2000 on. */
	CHECK_STR(testdb_exec_state(
		      db.conn, "INSERT INTO price_book (effective_from, cpu_micros_per_vcpu_hour,"
			       " memory_micros_per_gib_hour, storage_micros_per_gib_hour,"
			       " floor_millicores, free_sandbox_hours) VALUES"
			       " ('2000-01-01T00:00:00Z', 25000, 7500, 100, 50, 2)"),
		  "00000");
	CHECK_STR(testdb_exec_state(db.conn, "INSERT INTO accounts (account_id, name) VALUES"
					     " ('acc_r', '<b>Reports & Co</b>')"),
		  "00000");
	CHECK_STR(testdb_exec_state(
		      db.conn,
		      "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
		      " VALUES ('acc_r', 'key_a', decode(repeat('00', 32), 'hex'), 'full',"
		      " 'America/New_York'), ('acc_r', 'key_empty', decode(repeat('11', 32),"
		      " 'hex'), 'read_only', 'UTC')"),
		  "00000");
	CHECK_STR(testdb_exec_state(
		      db.conn, "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus,"
			       " memory_mib, state) VALUES ('acc_r', 'sbx_a', 'key_a', 2, 4096,"
			       " 'running'), ('acc_r', 'sbx_b', 'key_a', 1, 1024, 'running')"),
		  "00000");
	/* New York's Oct 31 runs to Nov 1 04:00 UTC: the Nov 1 00:00 UTC hour is
	 * still the key's Oct 31. */
	usage_row(db.conn, "acc_r", "sbx_a", "key_a", "2026-10-31T22:00:00Z", "2026-10-31", 3600,
		  100, 20, 0);
	usage_row(db.conn, "acc_r", "sbx_a", "key_a", "2026-10-31T23:00:00Z", "2026-10-31", 1800,
		  30, 10, 5);
	usage_row(db.conn, "acc_r", "sbx_a", "key_a", "2026-11-01T00:00:00Z", "2026-10-31", 3600,
		  301, 0, 0);
	usage_row(db.conn, "acc_r", "sbx_b", "key_a", "2026-11-01T00:00:00Z", "2026-10-31", 3600,
		  500, 70, 0);
	CHECK_STR(testdb_exec_state(db.conn,
				    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus,"
				    " memory_mib, state) VALUES ('unattributed', 'sbx_u', NULL, 1,"
				    " 512, 'running')"),
		  "00000");
	usage_row(db.conn, "unattributed", "sbx_u", NULL, "2026-11-01T01:00:00Z", "2026-11-01",
		  3600, 7, 8, 0);
	test_exports(db.conn);
	test_statement(db.conn);
	test_statement_collation(db.conn);
	test_statement_pages(db.conn);
	test_export_overflow(db.conn);
	testdb_drop(&db);
	return check_done();
}
