/* meter: the SQL of the check engine, lifecycle events and the sweeper
 * (see db_checks.h; the functions called are in sql/0005_checks.sql). */
#include "db_checks.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "db_util.h"
#include "log.h"

/* Everything a batch needs to know about its checks, one row per check in
 * input order: the sandbox, the key (create's, or the sandbox's for a wake)
 * and the stored first answer under the idempotency key. A default wake key
 * (the sandbox id) is stale once the lease its answer granted is over: its
 * end has passed, or the sandbox is not running, or no hold of that lease
 * (begun when the answer was stored) is open and unsettled any more: a
 * pause or stop settled it. The database's own record, not the two
 * clocks': a pause dated ahead of the engine's clock, then a wake, leaves
 * the wake's hold alone and its retry is replayed. A renewal under a key of
 * its own does not end it either, so a retry of the first wake after one
 * is still that wake's answer. Only an answer of this sandbox's is stale:
 * one stored for another sandbox's wake under a key of its caller's own that
 * is this sandbox's id stays, and this default wake is its conflict (409)
 * rather than a new decision that drops it. */
static const char sql_read[] =
    "WITH c AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])"
    "  WITH ORDINALITY AS c(op, key_id, sandbox_id, idem, i))"
    " SELECT c.i, sb.sandbox_id IS NOT NULL, sb.account_id, sb.key_id IS NOT NULL,"
    "  sb.vcpus, sb.memory_mib, sb.state,"
    "  k.key_id IS NOT NULL, k.revoked_at IS NOT NULL, k.account_id, k.key_id,"
    "  k.daily_limit_micros, k.time_zone,"
    "  ik.idempotency_key IS NOT NULL, encode(ik.request_sha256, 'hex'), ik.status_code,"
    "  ik.response,"
    "  (c.op = 'wake' AND c.idem = c.sandbox_id AND ik.idempotency_key IS NOT NULL"
    "   AND ik.response::jsonb->>'sandbox_id' IS NOT DISTINCT FROM c.sandbox_id"
    "   AND NOT COALESCE(sb.state = 'running'"
    "       AND (ik.response::jsonb->>'lease_ends_at')::timestamptz > $5::timestamptz"
    "       AND EXISTS (SELECT 1 FROM holds h WHERE h.account_id = sb.account_id"
    "        AND h.sandbox_id = sb.sandbox_id AND h.status = 'open' AND h.settles_at IS NULL"
    "        AND h.lease_starts_at = ik.created_at), false)),"
    "  ik.row_xmin, k.role = 'read_only'"
    " FROM c"
    " LEFT JOIN sandboxes sb ON sb.sandbox_id = c.sandbox_id"
    " LEFT JOIN api_keys k ON k.key_id = CASE WHEN c.op = 'create' THEN c.key_id"
    "  ELSE sb.key_id END"
    /* LATERAL: so all three columns are the index condition. A create's
     * answer under the default key is on its sandbox row (sql/0017), as
     * its numbers since sql/0025. */
    " LEFT JOIN LATERAL (SELECT x.idempotency_key, x.request_sha256, x.status_code,"
    "   x.response, x.xmin::text AS row_xmin, x.created_at FROM idempotency_keys x"
    "  WHERE x.account_id = k.account_id"
    "  AND x.operation = c.op AND x.idempotency_key = c.idem"
    "  AND NOT (c.op = 'create' AND c.idem = c.sandbox_id)"
    "  UNION ALL"
    "  SELECT sb.sandbox_id, sb.create_request_sha256, 200, COALESCE(sb.create_response,"
    "   meter_create_answer(sb.sandbox_id, sb.key_id, sb.create_answer)),"
    "   sb.xmin::text, sb.created_at WHERE c.op = 'create' AND c.idem = c.sandbox_id"
    "   AND sb.create_request_sha256 IS NOT NULL AND sb.account_id = k.account_id"
    "  LIMIT 1) ik ON true"
    " ORDER BY c.i";

/* The price-book versions in force at some time in [$1, $2], oldest first,
 * at most DB_CHECKS_PRICES_MAX rows. A check's worst case takes each rate's
 * highest over the versions that start before its lease ends, so when more
 * versions than that fall in the span, the last row stands for all of them
 * from its own on: each rate its highest over them. A lease that ends past
 * that row's start is then priced at its own versions' highest rates or
 * above, never below. */
#define PRICES_MAX_S DB_STR(DB_CHECKS_PRICES_MAX)
static const char sql_prices[] = "SELECT " DB_USEC(
    "effective_from") ","
		      " CASE WHEN n < " PRICES_MAX_S " THEN cpu ELSE max(cpu) OVER rest END,"
		      " CASE WHEN n < " PRICES_MAX_S " THEN mem ELSE max(mem) OVER rest END,"
		      " CASE WHEN n < " PRICES_MAX_S " THEN sto ELSE max(sto) OVER rest END,"
		      " CASE WHEN n < " PRICES_MAX_S " THEN flo ELSE max(flo) OVER rest END,"
		      " (SELECT max(version) FROM price_book)"
		      " FROM (SELECT effective_from, cpu_micros_per_vcpu_hour AS cpu,"
		      "  memory_micros_per_gib_hour AS mem, storage_micros_per_gib_hour AS sto,"
		      "  floor_millicores AS flo, row_number() OVER (ORDER BY effective_from) AS n"
		      "  FROM price_book WHERE effective_from <= $2::timestamptz"
		      "  AND effective_from >= (SELECT max(effective_from) FROM price_book"
		      "   WHERE effective_from <= $1::timestamptz)) v"
		      " WINDOW rest AS (ORDER BY effective_from ROWS BETWEEN CURRENT ROW AND "
		      "UNBOUNDED FOLLOWING)"
		      " ORDER BY effective_from LIMIT " PRICES_MAX_S;

static const char sql_days[] = "SELECT (d.d0 + g)::text, " DB_USEC(
    "meter_day_start($1, d.d0 + g)") " FROM (SELECT meter_key_day($1, $2::timestamptz) AS d0) d, "
				     "generate_series(0, 5) g"
				     " ORDER BY g";

static const char sql_lock[] =
    "SELECT account_id, key_id, day::text, spent_micros, held_micros, limit_micros"
    " FROM meter_checks_lock($1::text[], $2::text[], $3::date[], $4::bigint[])";

/* The keys' daily limits and zones now: run after the ledger rows are
 * locked, in a statement (so a snapshot) of its own. */
static const char sql_limits[] =
    "SELECT k.account_id, k.key_id, k.daily_limit_micros, k.time_zone FROM api_keys k"
    " JOIN (SELECT DISTINCT * FROM unnest($1::text[], $2::text[])) v(a, k)"
    "  ON k.account_id = v.a AND k.key_id = v.k";

static const char sql_apply[] =
    "SELECT meter_checks_apply($1::timestamptz,"
    " $2::text[], $3::text[], $4::date[], $5::bigint[], $6::bigint[],"
    " $7::text[], $8::text[], $9::text[], $10::text[],"
    " $11::text[], $12::text[], $13::text[], $14::text[], $15::integer[], $16::text[],"
    " $17::text[], $18::text[], $19::text[], $20::integer[], $21::bigint[], $22::bigint[],"
    " $23::timestamptz[], $24::text[], $25::text[],"
    " $26::text[], $27::text[], $28::timestamptz[],"
    " $29::text[], $30::text[], $31::text[], $32::date[], $33::bigint[],"
    " $34::timestamptz[])";

/* A stored answer under a refused check's idempotency key that the batch
 * did not read (none was read, or another row version): raises MTR01. Run
 * after the ledger rows are locked, so a first attempt that took them
 * before this batch is visible. The refusals listed are under default keys
 * (one under a key of the caller's own is stored instead, and its insert
 * is its guard): a create's answer is on its sandbox row, a wake's in
 * idempotency_keys. A create's default key is not looked up there: an
 * answer stored under a key of its caller's own that happens to be this
 * sandbox's id is another request's, and taking it for this one's made
 * every attempt conflict (503 for the whole batch). */
static const char sql_refused[] =
    "SELECT meter_checks_conflict('answer of a refused check')"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(a, o, k, x)"
    " JOIN LATERAL (SELECT i.xmin::text AS xm FROM idempotency_keys i"
    "   WHERE v.o <> 'create' AND i.account_id = v.a AND i.operation = v.o"
    "   AND i.idempotency_key = v.k"
    "  UNION ALL"
    "  SELECT s.xmin::text FROM sandboxes s WHERE v.o = 'create' AND s.sandbox_id = v.k"
    "   AND s.account_id = v.a AND s.create_request_sha256 IS NOT NULL) i ON true"
    " WHERE v.x IS NULL OR i.xm <> v.x";

/* A batch decided on the engine's figures (sql/0018): $1 the time, $2 the
 * price version assumed, then the expected ledger figures, the keys, the
 * refused checks' idempotency keys and meter_checks_apply's arrays. */
static const char sql_fast[] =
    "SELECT account_id, key_id, day::text, spent_micros, held_micros, limit_micros"
    " FROM meter_checks_fast($1::timestamptz, $2::integer, $3::integer, $4::integer,"
    " $5::integer[],"
    " $6::bigint[], $7::bigint[], $8::bigint[],"
    " $9::text[], $10::text[], $11::bigint[], $12::text[],"
    " $13::text[], $14::text[], $15::text[],"
    " $16::text[], $17::text[], $18::date[], $19::bigint[], $20::bigint[],"
    " $21::text[], $22::text[], $23::text[], $24::text[],"
    " $25::text[], $26::text[], $27::text[], $28::text[], $29::integer[], $30::text[],"
    " $31::text[], $32::text[], $33::text[], $34::integer[], $35::bigint[], $36::bigint[],"
    " $37::timestamptz[], $38::text[], $39::text[],"
    " $40::text[], $41::text[], $42::timestamptz[],"
    " $43::text[], $44::text[], $45::text[], $46::date[], $47::bigint[],"
    " $48::timestamptz[])";

static const char sql_event[] = "SELECT known, recorded, state, " DB_USEC(
    "state_since") ", holds_settled, released_micros, tail_held_micros"
		   " FROM meter_sandbox_event($1, $2, $3::timestamptz, $4::integer)";

static const char sql_expire[] = "SELECT meter_holds_expire($1::timestamptz, $2::integer)";
static const char sql_settle[] =
    "SELECT meter_holds_settle($1::timestamptz, $2::integer, $3::integer)";
static const char sql_stop_tails[] =
    "SELECT sandbox_id, at, cpu_usec, memory_mib, storage_mib, vcpus"
    " FROM meter_stop_tails($1::timestamptz, $2::integer, $3::integer)";
static const char sql_outrun[] =
    "SELECT meter_leases_outrun($1::timestamptz, $2::integer, $3::integer)";
static const char sql_sweeper_seen[] =
    "SELECT grace_s, retention_days FROM meter_sweeper_seen($1, $2::integer, $3::integer, "
    "$4::integer)";
static const char sql_sweeper_gone[] = "DELETE FROM meterd_sweepers WHERE sweeper_id = $1";

struct prepared {
	const char *name;
	const char *sql;
};

static const struct prepared prepared[] = {
    {"chk_read", sql_read},	  {"chk_prices", sql_prices}, {"chk_days", sql_days},
    {"chk_lock", sql_lock},	  {"chk_limits", sql_limits}, {"chk_apply", sql_apply},
    {"chk_refused", sql_refused}, {"chk_fast", sql_fast},
};

void db_check_read_release(struct db_check_read *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++) {
		free(rows[i].idem_response);
		rows[i].idem_response = NULL;
	}
}

/* Runs one statement synchronously; true when its status is want. */
static bool session_exec(PGconn *conn, const char *sql, ExecStatusType want)
{
	PGresult *res = PQexec(conn, sql);
	bool ok = PQresultStatus(res) == want;

	if (!ok)
		log_warn("checks: session set-up failed: %s", PQresultErrorMessage(res));
	PQclear(res);
	return ok;
}

enum meter_rc db_checks_session(PGconn *conn, int64_t statement_timeout_ms)
{
	if (db_util_session_timeouts(conn, "checks session", statement_timeout_ms,
				     db_util_idle_tx_ms(statement_timeout_ms)) != METER_OK ||
	    /* The batch statements are point look-ups by key taking arrays:
	     * planned once per connection (not per batch), and never as
	     * sequential scans, so a plan made while the tables were small
	     * stays right as they grow. */
	    !session_exec(conn, "SET plan_cache_mode = force_generic_plan", PGRES_COMMAND_OK) ||
	    !session_exec(conn, "SET enable_seqscan = off", PGRES_COMMAND_OK) ||
	    /* Nor hashing or sorting a whole index to join it with a
	     * batch's arrays: a plan made from statistics of a tiny table
	     * would do that and keep doing it as the table grows. */
	    !session_exec(conn, "SET enable_hashjoin = off", PGRES_COMMAND_OK) ||
	    /* (A plan priced with a disabled node's cost is not compiled
	     * for being "expensive": db_connect turns JIT off.) */
	    !session_exec(conn, "SET enable_mergejoin = off", PGRES_COMMAND_OK))
		return METER_EDB;
	for (size_t i = 0; i < sizeof(prepared) / sizeof(prepared[0]); i++) {
		PGresult *res = PQprepare(conn, prepared[i].name, prepared[i].sql, 0, NULL);
		bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;

		if (!ok)
			log_error("checks: cannot prepare %s: %s", prepared[i].name,
				  PQresultErrorMessage(res));
		PQclear(res);
		if (!ok)
			return METER_EDB;
	}
	return METER_OK;
}

/* Waits until a result can be read without blocking, or the deadline.
 * METER_EIO on timeout, METER_EDB when the connection failed. */
static enum meter_rc wait_ready(PGconn *conn, int64_t deadline_ms)
{
	while (PQisBusy(conn)) {
		struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
		int64_t left = deadline_ms - clock_mono_ms();
		int pr;

		if (pfd.fd < 0)
			return METER_EDB;
		if (left <= 0)
			return METER_EIO;
		pr = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
		if (pr < 0)
			continue;
		if (pr > 0 && !PQconsumeInput(conn))
			return METER_EDB;
	}
	return METER_OK;
}

/* One statement of a pipeline: a prepared statement's name, or SQL text
 * (sql) without parameters. A parameter is text, or binary (an array:
 * arrs_params) where formats says so, of the length lengths gives. */
struct pipe_q {
	const char *stmt;
	const char *sql;
	int n;
	const char *const *params;
	const int *lengths;
	const int *formats;
};

static void copy_state(const PGresult *res, char *sqlstate)
{
	const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (sqlstate && st && strlen(st) == 5 && sqlstate[0] == '\0')
		memcpy(sqlstate, st, 6);
}

/* A statement's result that is not a success: records its SQLSTATE (the
 * first one met) and logs it when it has none; a statement skipped after
 * an earlier failure of its pipeline (PGRES_PIPELINE_ABORTED) adds
 * nothing. */
static void statement_failed(const PGresult *r, char *sqlstate)
{
	if (PQresultStatus(r) == PGRES_PIPELINE_ABORTED)
		return;
	copy_state(r, sqlstate);
	if (!sqlstate || sqlstate[0] == '\0')
		log_warn("checks: statement failed: %s", PQresultErrorMessage(r));
}

/* Reads a pipeline up to its sync: the NULLs that end statements' results,
 * and any error result on the way (statement_failed() records it; *failed
 * set, if failed is not NULL). METER_OK at the sync, METER_EIO at the
 * deadline or when the connection failed. */
static enum meter_rc await_sync(PGconn *conn, int64_t deadline_ms, char *sqlstate, bool *failed)
{
	for (;;) {
		PGresult *r;

		if (wait_ready(conn, deadline_ms) != METER_OK)
			return METER_EIO;
		r = PQgetResult(conn);
		if (!r)
			continue;
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			return METER_OK;
		}
		statement_failed(r, sqlstate);
		if (failed)
			*failed = true;
		PQclear(r);
	}
}

/* Sends qs[0..nq) in one pipeline with one sync and collects one result per
 * statement into res (caller PQclear()s each; NULL where none). METER_EDB
 * when a statement failed (sqlstate gets the first SQLSTATE) or the
 * connection did, METER_EIO at the deadline (the connection is then left
 * unusable: the caller drops it). */
static enum meter_rc pipe_run(PGconn *conn, const struct pipe_q *qs, int nq, PGresult **res,
			      int64_t deadline_ms, char *sqlstate)
{
	enum meter_rc rc = METER_OK;
	bool synced = false;

	for (int i = 0; i < nq; i++)
		res[i] = NULL;
	if (sqlstate)
		sqlstate[0] = '\0';
	if (!PQenterPipelineMode(conn))
		return METER_EDB;
	for (int i = 0; i < nq; i++) {
		int ok = qs[i].stmt
			     ? PQsendQueryPrepared(conn, qs[i].stmt, qs[i].n, qs[i].params,
						   qs[i].lengths, qs[i].formats, 0)
			     : PQsendQueryParams(conn, qs[i].sql, 0, NULL, NULL, NULL, NULL, 0);
		if (!ok) {
			rc = METER_EDB;
			goto out;
		}
	}
	if (!PQpipelineSync(conn)) {
		rc = METER_EDB;
		goto out;
	}
	for (int i = 0; i < nq; i++) {
		PGresult *r;

		rc = wait_ready(conn, deadline_ms);
		if (rc != METER_OK)
			goto out;
		r = PQgetResult(conn);
		if (!r) {
			rc = METER_EDB;
			goto out;
		}
		res[i] = r;
		if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
			statement_failed(r, sqlstate);
			rc = METER_EDB;
		}
		/* The NULL that ends this statement's results. */
		rc = wait_ready(conn, deadline_ms) == METER_OK ? rc : METER_EIO;
		if (rc == METER_EIO)
			goto out;
		while ((r = PQgetResult(conn)) != NULL) {
			copy_state(r, sqlstate);
			PQclear(r);
			if (wait_ready(conn, deadline_ms) != METER_OK) {
				rc = METER_EIO;
				goto out;
			}
		}
	}
	/* The sync. */
	if (await_sync(conn, deadline_ms, sqlstate, NULL) != METER_OK) {
		rc = METER_EIO;
		goto out;
	}
	synced = true;
out:
	if (synced) {
		if (!PQexitPipelineMode(conn))
			rc = METER_EDB;
	}
	if (!synced && rc == METER_OK)
		rc = METER_EDB;
	if (PQstatus(conn) != CONNECTION_OK && rc != METER_EIO)
		rc = METER_EDB;
	if (rc != METER_OK) {
		for (int i = 0; i < nq; i++) {
			PQclear(res[i]);
			res[i] = NULL;
		}
	}
	return rc;
}

/* Reads a bigint column; *v = 0 and false for NULL. */
static bool col_i64(const PGresult *res, int row, int col, int64_t *v)
{
	bool is_null = false;

	if (db_util_i64(res, row, col, v, &is_null) != METER_OK || is_null) {
		*v = 0;
		return false;
	}
	return true;
}

/* Closes arr[0..n) and makes them the binary parameters params[0..n)
 * (their lengths and formats alike); false when one ran out of memory or
 * was given an element of another type. */
static bool arrs_params(struct db_arr *arr, int n, const char **params, int *lengths, int *formats)
{
	for (int i = 0; i < n; i++) {
		db_arr_close(&arr[i]);
		if (arr[i].oom || arr[i].a.b.n > INT32_MAX)
			return false;
		params[i] = arr[i].a.b.p;
		lengths[i] = (int)arr[i].a.b.n;
		formats[i] = 1;
	}
	return true;
}

/* The elements of a text array from in[]; field picks the string. */
enum in_field { IN_OP, IN_KEY, IN_SANDBOX, IN_IDEM };

static void arr_from_in(struct db_arr *a, const struct db_check_in *in, size_t n, enum in_field f)
{
	for (size_t i = 0; i < n; i++) {
		switch (f) {
		case IN_OP:
			db_arr_str(a, in[i].wake ? "wake" : "create");
			break;
		case IN_KEY:
			db_arr_str(a, in[i].wake ? NULL : in[i].key_id);
			break;
		case IN_SANDBOX:
			db_arr_str(a, in[i].sandbox_id);
			break;
		case IN_IDEM:
			db_arr_str(a, in[i].idem);
			break;
		}
	}
}

enum meter_rc db_checks_read(PGconn *conn, const struct db_check_in *in, size_t n, int64_t now_usec,
			     int64_t max_end_usec, struct db_check_read *rows,
			     struct db_price_version *prices, int *nprices, int64_t *price_version,
			     int64_t deadline_ms, char *sqlstate)
{
	struct db_arr arr[4];
	char now_s[40], end_s[40];
	const char *p_read[5], *p_prices[2];
	int len_read[5] = {0}, fmt_read[5] = {0};
	struct pipe_q qs[3];
	PGresult *res[3] = {NULL, NULL, NULL};
	enum meter_rc rc;

	for (int i = 0; i < 4; i++)
		db_arr_init(&arr[i], DB_ARR_TEXT);
	memset(rows, 0, n * sizeof(*rows));
	arr_from_in(&arr[0], in, n, IN_OP);
	arr_from_in(&arr[1], in, n, IN_KEY);
	arr_from_in(&arr[2], in, n, IN_SANDBOX);
	arr_from_in(&arr[3], in, n, IN_IDEM);
	rc = METER_ENOMEM;
	if (!arrs_params(arr, 4, p_read, len_read, fmt_read))
		goto out;
	db_util_time_param(now_usec, now_s, sizeof(now_s));
	db_util_time_param(max_end_usec, end_s, sizeof(end_s));
	p_read[4] = now_s;
	p_prices[0] = now_s;
	p_prices[1] = end_s;
	qs[0] = (struct pipe_q){.sql = "BEGIN"};
	qs[1] = (struct pipe_q){
	    .stmt = "chk_read", .n = 5, .params = p_read, .lengths = len_read, .formats = fmt_read};
	qs[2] = (struct pipe_q){.stmt = "chk_prices", .n = 2, .params = p_prices};
	rc = pipe_run(conn, qs, 3, res, deadline_ms, sqlstate);
	if (rc != METER_OK)
		goto out;
	rc = METER_EDB;
	if (PQntuples(res[1]) != (int)n) {
		log_error("checks: read returned %d rows for %zu checks", PQntuples(res[1]), n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct db_check_read *r = &rows[i];
		int row = (int)i;
		int64_t v;

		r->sb_exists = db_util_bool(res[1], row, 1);
		db_util_str(res[1], row, 2, r->sb_account, sizeof(r->sb_account));
		r->sb_has_key = db_util_bool(res[1], row, 3);
		col_i64(res[1], row, 4, &r->sb_vcpus);
		col_i64(res[1], row, 5, &r->sb_memory_mib);
		db_util_str(res[1], row, 6, r->sb_state, sizeof(r->sb_state));
		r->key_exists = db_util_bool(res[1], row, 7);
		r->key_revoked = db_util_bool(res[1], row, 8);
		db_util_str(res[1], row, 9, r->account_id, sizeof(r->account_id));
		db_util_str(res[1], row, 10, r->key_id, sizeof(r->key_id));
		r->has_limit = col_i64(res[1], row, 11, &r->limit_micros);
		db_util_str(res[1], row, 12, r->time_zone, sizeof(r->time_zone));
		r->idem_exists = db_util_bool(res[1], row, 13);
		db_util_str(res[1], row, 14, r->idem_sha_hex, sizeof(r->idem_sha_hex));
		col_i64(res[1], row, 15, &v);
		r->idem_status = (int)v;
		if (r->idem_exists && !PQgetisnull(res[1], row, 16)) {
			r->idem_response = strdup(PQgetvalue(res[1], row, 16));
			if (!r->idem_response) {
				rc = METER_ENOMEM;
				goto out;
			}
		}
		r->idem_stale = db_util_bool(res[1], row, 17);
		db_util_str(res[1], row, 18, r->idem_xmin, sizeof(r->idem_xmin));
		r->key_read_only = db_util_bool(res[1], row, 19);
	}
	*nprices = 0;
	for (int i = 0; i < PQntuples(res[2]) && i < DB_CHECKS_PRICES_MAX; i++) {
		struct db_price_version *p = &prices[i];

		if (!col_i64(res[2], i, 0, &p->from_usec) ||
		    !col_i64(res[2], i, 1, &p->rates.cpu_micros_per_vcpu_hour) ||
		    !col_i64(res[2], i, 2, &p->rates.memory_micros_per_gib_hour) ||
		    !col_i64(res[2], i, 3, &p->rates.storage_micros_per_gib_hour) ||
		    !col_i64(res[2], i, 4, &p->rates.floor_millicores) ||
		    !col_i64(res[2], i, 5, price_version))
			goto out;
		*nprices = i + 1;
	}
	if (*nprices == 0) {
		log_error("checks: no price-book version in force");
		goto out;
	}
	rc = METER_OK;
out:
	for (int i = 0; i < 3; i++)
		PQclear(res[i]);
	for (int i = 0; i < 4; i++)
		db_arr_release(&arr[i]);
	return rc;
}

enum meter_rc db_checks_days(PGconn *conn, const char *tz, int64_t at_usec, char days[][11],
			     int64_t *bounds, int64_t deadline_ms, char *sqlstate)
{
	char at_s[40];
	const char *params[2] = {tz, at_s};
	struct pipe_q q = {.stmt = "chk_days", .n = 2, .params = params};
	PGresult *res = NULL;
	enum meter_rc rc;

	db_util_time_param(at_usec, at_s, sizeof(at_s));
	rc = pipe_run(conn, &q, 1, &res, deadline_ms, sqlstate);
	if (rc != METER_OK)
		return rc;
	rc = METER_EDB;
	if (PQntuples(res) != LEDGER_BOUNDS)
		goto out;
	for (int i = 0; i < LEDGER_BOUNDS; i++) {
		db_util_str(res, i, 0, days[i], 11);
		if (!col_i64(res, i, 1, &bounds[i]))
			goto out;
	}
	rc = METER_OK;
out:
	PQclear(res);
	return rc;
}

/* The keys as chk_limits read them after the locks (res): each row's
 * current limit into rows[0..n); DB_CHECKS_SQLSTATE_CONFLICT when a key's
 * zone is not the one the batch read (or the key is gone). */
static enum meter_rc keys_now(const PGresult *res, struct db_ledger_row *rows, size_t n,
			      char *sqlstate)
{
	size_t seen = 0;

	for (int r = 0; r < PQntuples(res); r++) {
		int64_t limit = 0;
		bool has = col_i64(res, r, 2, &limit);

		for (size_t i = 0; i < n; i++) {
			if (strcmp(rows[i].account_id, PQgetvalue(res, r, 0)) != 0 ||
			    strcmp(rows[i].key_id, PQgetvalue(res, r, 1)) != 0)
				continue;
			seen++;
			if (!rows[i].time_zone ||
			    strcmp(rows[i].time_zone, PQgetvalue(res, r, 3)) != 0) {
				log_debug("checks: a key's time zone changed while its ledger rows"
					  " were awaited; read again");
				if (sqlstate)
					memcpy(sqlstate, DB_CHECKS_SQLSTATE_CONFLICT, 6);
				return METER_EDB;
			}
			rows[i].has_limit = has;
			rows[i].limit_micros = limit;
		}
	}
	if (seen != n) {
		if (sqlstate)
			memcpy(sqlstate, DB_CHECKS_SQLSTATE_CONFLICT, 6);
		return METER_EDB;
	}
	return METER_OK;
}

enum meter_rc db_checks_lock(PGconn *conn, struct db_ledger_row *rows, size_t n,
			     int64_t deadline_ms, char *sqlstate)
{
	struct db_arr arr[4];
	const char *params[4];
	int lengths[4], formats[4];
	struct pipe_q qs[2] = {
	    {.stmt = "chk_lock", .n = 4, .params = params, .lengths = lengths, .formats = formats},
	    {.stmt = "chk_limits",
	     .n = 2,
	     .params = params,
	     .lengths = lengths,
	     .formats = formats}};
	PGresult *res[2] = {NULL, NULL};
	enum meter_rc rc = METER_ENOMEM;

	db_arr_init(&arr[0], DB_ARR_TEXT);
	db_arr_init(&arr[1], DB_ARR_TEXT);
	db_arr_init(&arr[2], DB_ARR_DATE);
	db_arr_init(&arr[3], DB_ARR_INT8);
	for (size_t i = 0; i < n; i++) {
		db_arr_str(&arr[0], rows[i].account_id);
		db_arr_str(&arr[1], rows[i].key_id);
		db_arr_str(&arr[2], rows[i].day);
		if (rows[i].has_limit)
			db_arr_i64(&arr[3], rows[i].limit_micros);
		else
			db_arr_null(&arr[3]);
		rows[i].found = false;
	}
	if (!arrs_params(arr, 4, params, lengths, formats))
		goto out;
	/* The locks, then the keys in a statement of its own (a snapshot
	 * taken once the locks are held), in one round trip. */
	rc = pipe_run(conn, qs, 2, res, deadline_ms, sqlstate);
	if (rc != METER_OK)
		goto out;
	for (int r = 0; r < PQntuples(res[0]); r++) {
		const char *a = PQgetvalue(res[0], r, 0), *k = PQgetvalue(res[0], r, 1),
			   *d = PQgetvalue(res[0], r, 2);

		for (size_t i = 0; i < n; i++) {
			struct db_ledger_row *lr = &rows[i];

			if (lr->found || strcmp(lr->account_id, a) != 0 ||
			    strcmp(lr->key_id, k) != 0 || strcmp(lr->day, d) != 0)
				continue;
			col_i64(res[0], r, 3, &lr->state.spent_micros);
			col_i64(res[0], r, 4, &lr->state.held_micros);
			lr->found = true;
			break;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!rows[i].found) {
			log_error("checks: ledger row %s/%s/%s not locked", rows[i].account_id,
				  rows[i].key_id, rows[i].day);
			rc = METER_EDB;
		}
	if (rc == METER_OK)
		rc = keys_now(res[1], rows, n, sqlstate);
	/* The key's current limit is the one that applies (and is written to
	 * the rows). */
	for (size_t i = 0; rc == METER_OK && i < n; i++) {
		rows[i].state.has_limit = rows[i].has_limit;
		rows[i].state.limit_micros = rows[i].has_limit ? rows[i].limit_micros : 0;
	}
out:
	PQclear(res[0]);
	PQclear(res[1]);
	for (int i = 0; i < 4; i++)
		db_arr_release(&arr[i]);
	return rc;
}

enum meter_rc db_checks_apply(PGconn *conn, int64_t now_usec, struct db_arr *arrs,
			      int64_t deadline_ms, char *sqlstate)
{
	enum { NREFUSED = DB_BATCH_NARR - DB_APPLY_NARR };
	const char *params[DB_APPLY_NARR + 1];
	const char *refused[NREFUSED];
	int len[DB_APPLY_NARR + 1] = {0}, fmt[DB_APPLY_NARR + 1] = {0};
	int len_r[NREFUSED], fmt_r[NREFUSED];
	char now_s[40];
	struct pipe_q qs[3];
	PGresult *res[3] = {NULL, NULL, NULL};
	enum meter_rc rc;
	int nq = 0;

	db_util_time_param(now_usec, now_s, sizeof(now_s));
	params[0] = now_s;
	if (!arrs_params(arrs, DB_APPLY_NARR, params + 1, len + 1, fmt + 1) ||
	    !arrs_params(arrs + DB_APPLY_NARR, NREFUSED, refused, len_r, fmt_r))
		return METER_ENOMEM;
	if (arrs[DB_R_ACCOUNT].n > 0)
		qs[nq++] = (struct pipe_q){.stmt = "chk_refused",
					   .n = NREFUSED,
					   .params = refused,
					   .lengths = len_r,
					   .formats = fmt_r};
	qs[nq++] = (struct pipe_q){.stmt = "chk_apply",
				   .n = DB_APPLY_NARR + 1,
				   .params = params,
				   .lengths = len,
				   .formats = fmt};
	qs[nq++] = (struct pipe_q){.sql = "COMMIT"};
	rc = pipe_run(conn, qs, nq, res, deadline_ms, sqlstate);
	for (int i = 0; i < nq; i++)
		PQclear(res[i]);
	return rc;
}

enum meter_rc db_checks_fast_send(PGconn *conn, int64_t now_usec, int64_t price_version,
				  const struct db_fast_ticket *ticket,
				  const struct ledger_day *expect, size_t nexpect,
				  const struct db_fast_key *keys, size_t nkeys, struct db_arr *arrs)
{
	enum { FAST_OWN = 11 }; /* the function's own arrays before apply's */
	static const enum db_arr_type own_types[FAST_OWN] = {
	    DB_ARR_INT4, DB_ARR_INT8, DB_ARR_INT8, DB_ARR_INT8, DB_ARR_TEXT, DB_ARR_TEXT,
	    DB_ARR_INT8, DB_ARR_TEXT, DB_ARR_TEXT, DB_ARR_TEXT, DB_ARR_TEXT};
	enum { NPARAMS = 4 + FAST_OWN + DB_APPLY_NARR };
	struct db_arr own[FAST_OWN];
	const char *params[NPARAMS];
	int lengths[NPARAMS] = {0}, formats[NPARAMS] = {0};
	char now_s[40], ver_s[24], engine_s[24], ticket_s[24];
	enum meter_rc rc = METER_ENOMEM;

	for (int i = 0; i < FAST_OWN; i++)
		db_arr_init(&own[i], own_types[i]);
	for (int i = 0; i < ticket->nafter; i++)
		db_arr_i64(&own[0], ticket->after[i]);
	for (size_t i = 0; i < nexpect; i++) {
		db_arr_i64(&own[1], expect[i].spent_micros);
		db_arr_i64(&own[2], expect[i].held_micros);
		if (expect[i].has_limit)
			db_arr_i64(&own[3], expect[i].limit_micros);
		else
			db_arr_null(&own[3]);
	}
	for (size_t i = 0; i < nkeys; i++) {
		db_arr_str(&own[4], keys[i].account_id);
		db_arr_str(&own[5], keys[i].key_id);
		if (keys[i].has_limit)
			db_arr_i64(&own[6], keys[i].limit_micros);
		else
			db_arr_null(&own[6]);
		db_arr_str(&own[7], keys[i].time_zone);
	}
	/* The refused checks' keys: meter_checks_fast takes them without the
	 * row version (the batch read none). */
	for (int i = 0; i < 3; i++) {
		own[8 + i] = arrs[DB_R_ACCOUNT + i];
		db_arr_init(&arrs[DB_R_ACCOUNT + i], DB_ARR_TEXT);
	}
	db_util_time_param(now_usec, now_s, sizeof(now_s));
	db_util_i64_param(price_version, ver_s, sizeof(ver_s));
	db_util_i64_param(ticket->engine, engine_s, sizeof(engine_s));
	db_util_i64_param(ticket->ticket, ticket_s, sizeof(ticket_s));
	params[0] = now_s;
	params[1] = ver_s;
	params[2] = engine_s;
	params[3] = ticket_s;
	if (!arrs_params(own, FAST_OWN, params + 4, lengths + 4, formats + 4) ||
	    !arrs_params(arrs, DB_APPLY_NARR, params + 4 + FAST_OWN, lengths + 4 + FAST_OWN,
			 formats + 4 + FAST_OWN))
		goto out;
	rc = METER_EDB;
	/* One statement and a sync: an implicit transaction of its own,
	 * committed (durably) at the sync, or rolled back there if the
	 * statement failed; the next batch's runs on its own either way.
	 * Between them a flush request: the server sends the statement's
	 * result as soon as it has it, while the commit's WAL flush is still
	 * to come, so the engine can send the next batch then. */
	if (PQpipelineStatus(conn) == PQ_PIPELINE_OFF && !PQenterPipelineMode(conn))
		goto out;
	if (!PQsendQueryPrepared(conn, "chk_fast", NPARAMS, params, lengths, formats, 0) ||
	    !PQsendFlushRequest(conn) || !PQpipelineSync(conn))
		goto out;
	rc = METER_OK;
out:
	for (int i = 0; i < FAST_OWN; i++)
		db_arr_release(&own[i]);
	return rc;
}

enum meter_rc db_checks_fast_executed(PGconn *conn, size_t nexpect, struct db_ledger_row *differ,
				      size_t *ndiffer, char (*differ_day)[11],
				      char (*differ_ids)[2][PARSE_ID_MAX + 1], int64_t deadline_ms,
				      char *sqlstate)
{
	PGresult *res = NULL;
	int nulls = 0;

	*ndiffer = 0;
	if (sqlstate)
		sqlstate[0] = '\0';
	/* The statement's result, flushed by the server at the batch's
	 * flush request, before the sync commits. More than one NULL first
	 * would be a pipeline out of step: as a broken connection. */
	while (!res) {
		if (wait_ready(conn, deadline_ms) != METER_OK)
			return METER_EIO;
		res = PQgetResult(conn);
		if (!res && ++nulls > 1)
			return METER_EIO;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		statement_failed(res, sqlstate);
		PQclear(res);
		return METER_EDB;
	}
	for (int i = 0; i < PQntuples(res) && (size_t)i < nexpect; i++) {
		struct db_ledger_row *d = &differ[i];

		snprintf(differ_ids[i][0], PARSE_ID_MAX + 1, "%s", PQgetvalue(res, i, 0));
		snprintf(differ_ids[i][1], PARSE_ID_MAX + 1, "%s", PQgetvalue(res, i, 1));
		snprintf(differ_day[i], 11, "%s", PQgetvalue(res, i, 2));
		*d = (struct db_ledger_row){.account_id = differ_ids[i][0],
					    .key_id = differ_ids[i][1],
					    .day = differ_day[i]};
		d->found = !PQgetisnull(res, i, 3);
		col_i64(res, i, 3, &d->state.spent_micros);
		col_i64(res, i, 4, &d->state.held_micros);
		d->state.has_limit = col_i64(res, i, 5, &d->state.limit_micros);
		(*ndiffer)++;
	}
	PQclear(res);
	return METER_OK;
}

enum meter_rc db_checks_fast_synced(PGconn *conn, int64_t deadline_ms, char *sqlstate)
{
	bool failed = false;

	if (sqlstate)
		sqlstate[0] = '\0';
	/* The NULL that ends the statement's results, then the sync; an
	 * error in between is the commit's. */
	if (await_sync(conn, deadline_ms, sqlstate, &failed) != METER_OK)
		return METER_EIO;
	return failed ? METER_EDB : METER_OK;
}

bool db_checks_fast_idle(PGconn *conn)
{
	if (PQpipelineStatus(conn) == PQ_PIPELINE_OFF)
		return true;
	return PQexitPipelineMode(conn) == 1;
}

void db_checks_rollback(PGconn *conn)
{
	PGresult *res;

	if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) == PQTRANS_IDLE)
		return;
	res = PQexec(conn, "ROLLBACK");
	PQclear(res);
}

bool db_checks_retryable(const char *sqlstate)
{
	return sqlstate && (strcmp(sqlstate, DB_CHECKS_SQLSTATE_CONFLICT) == 0 ||
			    strcmp(sqlstate, "40P01") == 0 || /* deadlock_detected */
			    strcmp(sqlstate, "40001") == 0 || /* serialization_failure */
			    strcmp(sqlstate, "23505") == 0);  /* unique_violation */
}

bool db_checks_timed_out(const char *sqlstate)
{
	return sqlstate && (strcmp(sqlstate, "57014") == 0 || /* query_canceled */
			    strcmp(sqlstate, "55P03") == 0);  /* lock_not_available */
}

bool db_checks_session_ended(const char *sqlstate)
{
	return sqlstate &&
	       (strncmp(sqlstate, "08", 2) == 0 ||   /* connection_exception */
		strncmp(sqlstate, "57P0", 4) == 0 || /* admin or crash shutdown, idle session */
		strcmp(sqlstate, "25P03") == 0 ||    /* idle_in_transaction_session_timeout */
		/* a session made while the database took no writes keeps
		 * that for life; made again it takes the default as it is */
		db_util_read_only(sqlstate));
}

enum meter_rc db_checks_event(PGconn *conn, const char *sandbox_id, const char *type,
			      int64_t at_usec, int64_t grace_s, struct db_event_result *out)
{
	char at_s[40], grace[24], sqlstate[6];
	const char *params[4] = {sandbox_id, type, at_s, grace};
	PGresult *res = NULL;
	enum meter_rc rc = METER_EDB;

	memset(out, 0, sizeof(*out));
	db_util_time_param(at_usec, at_s, sizeof(at_s));
	snprintf(grace, sizeof(grace), "%lld", (long long)grace_s);
	/* One statement: its own transaction. A deadlock with a concurrent
	 * writer is retried. */
	for (int attempt = 0; attempt < 5; attempt++) {
		rc = db_util_exec(conn, "sandbox event", sql_event, 4, params, &res, sqlstate);
		if (rc == METER_OK || !db_checks_retryable(sqlstate) ||
		    PQstatus(conn) != CONNECTION_OK)
			break;
	}
	if (rc != METER_OK)
		return rc;
	rc = METER_EDB;
	if (PQntuples(res) != 1)
		goto out;
	out->known = db_util_bool(res, 0, 0);
	if (!out->known) {
		rc = METER_ENOTFOUND;
		goto out;
	}
	out->recorded = db_util_bool(res, 0, 1);
	db_util_str(res, 0, 2, out->state, sizeof(out->state));
	col_i64(res, 0, 3, &out->state_since_usec);
	col_i64(res, 0, 4, &out->holds_settled);
	col_i64(res, 0, 5, &out->released_micros);
	col_i64(res, 0, 6, &out->tail_held_micros);
	rc = METER_OK;
out:
	PQclear(res);
	return rc;
}

/* Runs one of the sweeper's queries: params[0] is the time now_usec, the
 * rest (up to two) are integers; *res gets its answer. */
static enum meter_rc sweep_query(PGconn *conn, const char *what, const char *sql, int64_t now_usec,
				 const int64_t *ints, int nints, PGresult **res)
{
	char now_s[40], int_s[2][24];
	const char *params[3] = {now_s, int_s[0], int_s[1]};

	db_util_time_param(now_usec, now_s, sizeof(now_s));
	for (int i = 0; i < nints; i++)
		db_util_i64_param(ints[i], int_s[i], sizeof(int_s[i]));
	return db_util_exec(conn, what, sql, 1 + nints, params, res, NULL);
}

/* sweep_query for a function whose one integer answer *count gets. */
static enum meter_rc sweep_exec(PGconn *conn, const char *what, const char *sql, int64_t now_usec,
				const int64_t *ints, int nints, int64_t *count)
{
	PGresult *res = NULL;
	enum meter_rc rc = sweep_query(conn, what, sql, now_usec, ints, nints, &res);

	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1 || !col_i64(res, 0, 0, count))
		rc = METER_EDB;
	PQclear(res);
	return rc;
}

enum meter_rc db_checks_expire(PGconn *conn, int64_t now_usec, int max, int64_t *closed)
{
	const int64_t ints[1] = {max};

	return sweep_exec(conn, "expire holds", sql_expire, now_usec, ints, 1, closed);
}

enum meter_rc db_checks_settle(PGconn *conn, int64_t now_usec, int64_t grace_s, int max,
			       int64_t *closed)
{
	const int64_t ints[2] = {grace_s, max};

	return sweep_exec(conn, "settle holds", sql_settle, now_usec, ints, 2, closed);
}

enum meter_rc db_checks_sweeper_seen(PGconn *conn, const char *id, int64_t grace_s,
				     int64_t retention_days, int64_t lapse_s,
				     int64_t *grace_in_force, int64_t *retention_in_force)
{
	char int_s[3][24];
	const char *params[4] = {id, int_s[0], int_s[1], int_s[2]};
	PGresult *res = NULL;
	enum meter_rc rc;
	int64_t g, r;

	db_util_i64_param(grace_s, int_s[0], sizeof(int_s[0]));
	db_util_i64_param(retention_days, int_s[1], sizeof(int_s[1]));
	db_util_i64_param(lapse_s, int_s[2], sizeof(int_s[2]));
	rc = db_util_exec(conn, "sweep settings", sql_sweeper_seen, 4, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1 || !col_i64(res, 0, 0, &g) || !col_i64(res, 0, 1, &r)) {
		PQclear(res);
		return METER_EDB;
	}
	PQclear(res);
	*grace_in_force = g;
	*retention_in_force = r;
	return METER_OK;
}

enum meter_rc db_checks_sweeper_gone(PGconn *conn, const char *id)
{
	const char *params[1] = {id};

	return db_util_exec(conn, "sweep settings", sql_sweeper_gone, 1, params, NULL, NULL);
}

enum meter_rc db_checks_stop_tails(PGconn *conn, int64_t now_usec, int64_t grace_s, int max,
				   struct sample_batch *out)
{
	const int64_t ints[2] = {grace_s, max};
	PGresult *res = NULL;
	enum meter_rc rc;

	sample_batch_release(out);
	snprintf(out->host_id, sizeof(out->host_id), "%s", SAMPLE_HOST_STOP);
	/* This source has read everything up to now: its watermark. */
	out->sampled_at_usec = now_usec;
	rc = sweep_query(conn, "stop tails", sql_stop_tails, now_usec, ints, 2, &res);
	if (rc != METER_OK)
		return rc;
	for (int r = 0; r < PQntuples(res) && rc == METER_OK; r++) {
		struct meter_sample m;
		int64_t vcpus = 0;

		memset(&m, 0, sizeof(m));
		snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", PQgetvalue(res, r, 0));
		m.u.state = SANDBOX_STOPPED;
		if (!col_i64(res, r, 1, &m.u.at_usec) || !col_i64(res, r, 2, &m.u.cpu_usec) ||
		    !col_i64(res, r, 3, &m.u.memory_mib) || !col_i64(res, r, 4, &m.u.storage_mib) ||
		    !col_i64(res, r, 5, &vcpus) || vcpus < 1 || vcpus > INT32_MAX) {
			rc = METER_EDB;
			break;
		}
		m.u.vcpus = (int32_t)vcpus;
		rc = sample_batch_push(out, &m);
	}
	PQclear(res);
	return rc;
}

enum meter_rc db_checks_outrun(PGconn *conn, int64_t now_usec, int64_t grace_s, int max,
			       int64_t *taken)
{
	const int64_t ints[2] = {grace_s, max};

	return sweep_exec(conn, "leases outrun", sql_outrun, now_usec, ints, 2, taken);
}

/* Array parameters ------------------------------------------------------- */

/* Each type's array and element type oids. */
static const Oid arr_oids[][2] = {
    [DB_ARR_TEXT] = {DB_OID_TEXT_ARR, DB_OID_TEXT},
    [DB_ARR_INT8] = {DB_OID_INT8_ARR, DB_OID_INT8},
    [DB_ARR_INT4] = {DB_OID_INT4_ARR, DB_OID_INT4},
    [DB_ARR_DATE] = {DB_OID_DATE_ARR, DB_OID_DATE},
    [DB_ARR_TIMESTAMPTZ] = {DB_OID_TIMESTAMPTZ_ARR, DB_OID_TIMESTAMPTZ},
};

void db_arr_init(struct db_arr *a, enum db_arr_type type)
{
	memset(a, 0, sizeof(*a));
	a->type = type;
}

void db_arr_release(struct db_arr *a)
{
	db_bin_release(&a->a.b);
	db_arr_init(a, a->type);
}

/* An element the array's type cannot take, or one after its end: a bug of
 * the caller's, which fails the array. */
static void arr_wrong(struct db_arr *a, const char *what)
{
	log_error("checks: %s in an array of type %u", what, (unsigned)arr_oids[a->type][1]);
	a->oom = true;
}

/* True when an element may be appended (the header written first). */
static bool arr_open(struct db_arr *a)
{
	if (a->closed && !a->oom)
		arr_wrong(a, "an element after the end");
	if (a->closed || a->oom)
		return false;
	if (!a->started) {
		db_barr_start(&a->a, arr_oids[a->type][0], arr_oids[a->type][1]);
		a->started = true;
	}
	return true;
}

void db_arr_close(struct db_arr *a)
{
	if (a->closed)
		return;
	if (arr_open(a))
		db_barr_finish(&a->a);
	if (a->a.b.oom)
		a->oom = true;
	a->closed = true;
}

/* "YYYY-MM-DD" as days since 1970-01-01; false when it is not a date. */
static bool arr_day(const char *s, int32_t *day)
{
	int64_t y, m, d, days, yy, mm, dd;

	if (strlen(s) != 10 || s[4] != '-' || s[7] != '-')
		return false;
	for (int i = 0; i < 10; i++)
		if (i != 4 && i != 7 && (s[i] < '0' || s[i] > '9'))
			return false;
	y = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
	m = (s[5] - '0') * 10 + (s[6] - '0');
	d = (s[8] - '0') * 10 + (s[9] - '0');
	if (m < 1 || m > 12 || d < 1 || d > 31)
		return false;
	days = parse_days_from_civil(y, m, d);
	parse_civil_from_days(days, &yy, &mm, &dd);
	if (yy != y || mm != m || dd != d) /* the 30th of February */
		return false;
	*day = (int32_t)days;
	return true;
}

void db_arr_str(struct db_arr *a, const char *s)
{
	int32_t day;

	if (!s) {
		db_arr_null(a);
		return;
	}
	if (!arr_open(a))
		return;
	if (a->type == DB_ARR_TEXT) {
		db_barr_text(&a->a, s);
	} else if (a->type == DB_ARR_DATE && arr_day(s, &day)) {
		db_barr_date(&a->a, day);
	} else {
		arr_wrong(a, "a string");
		return;
	}
	a->n++;
}

void db_arr_null(struct db_arr *a)
{
	if (!arr_open(a))
		return;
	db_barr_null(&a->a);
	a->n++;
}

void db_arr_i64(struct db_arr *a, int64_t v)
{
	if (!arr_open(a))
		return;
	if (a->type == DB_ARR_INT8) {
		db_barr_i64(&a->a, v);
	} else if (a->type == DB_ARR_INT4 && v >= INT32_MIN && v <= INT32_MAX) {
		db_barr_i32(&a->a, (int32_t)v);
	} else {
		arr_wrong(a, "an integer");
		return;
	}
	a->n++;
}

void db_arr_time(struct db_arr *a, int64_t usec)
{
	if (!arr_open(a))
		return;
	if (a->type != DB_ARR_TIMESTAMPTZ) {
		arr_wrong(a, "a time");
		return;
	}
	db_barr_ts(&a->a, usec);
	a->n++;
}

void db_checks_arrs_init(struct db_arr *arrs)
{
	static const enum db_arr_type types[DB_BATCH_NARR] = {
	    [DB_L_DAY] = DB_ARR_DATE,
	    [DB_L_HELD] = DB_ARR_INT8,
	    [DB_L_LIMIT] = DB_ARR_INT8,
	    [DB_I_STATUS] = DB_ARR_INT4,
	    [DB_C_VCPUS] = DB_ARR_INT4,
	    [DB_C_MEMORY] = DB_ARR_INT8,
	    [DB_C_MAX_COST] = DB_ARR_INT8,
	    [DB_C_LEASE_END] = DB_ARR_TIMESTAMPTZ,
	    [DB_W_LEASE_END] = DB_ARR_TIMESTAMPTZ,
	    [DB_H_DAY] = DB_ARR_DATE,
	    [DB_H_AMOUNT] = DB_ARR_INT8,
	    [DB_H_LEASE_END] = DB_ARR_TIMESTAMPTZ,
	}; /* the rest text (DB_ARR_TEXT is 0) */

	for (int i = 0; i < DB_BATCH_NARR; i++)
		db_arr_init(&arrs[i], types[i]);
}
