/* meter: helpers of the db_* query files (see db_util.h). */
#include "db_util.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-events.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "parse.h"

static _Thread_local char failed_state[6];

/* The largest statement a tracked connection sent: its instance data for
 * this event procedure, freed with the connection. */
static int sent_events(PGEventId id, void *info, void *pass)
{
	(void)pass;
	if (id == PGEVT_CONNDESTROY)
		free(PQinstanceData(((const PGEventConnDestroy *)info)->conn, sent_events));
	return 1;
}

bool db_util_sent_track(PGconn *conn)
{
	size_t *most = calloc(1, sizeof(*most));

	if (!most || !PQregisterEventProc(conn, sent_events, "meter sent bytes", NULL) ||
	    !PQsetInstanceData(conn, sent_events, most)) {
		free(most);
		return false;
	}
	return true;
}

size_t db_util_sent_most(const PGconn *conn)
{
	const size_t *most = PQinstanceData(conn, sent_events);

	return most ? *most : 0;
}

const char *db_util_failed_state(void)
{
	return failed_state;
}

void db_util_failed_clear(void)
{
	failed_state[0] = '\0';
}

void db_util_failed_note(const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (state && strlen(state) == 5)
		memcpy(failed_state, state, 6);
	else
		failed_state[0] = '\0';
}

bool db_util_short_of_resources(const char *sqlstate)
{
	return sqlstate && strncmp(sqlstate, "53", 2) == 0 && strlen(sqlstate) == 5;
}

bool db_util_read_only(const char *sqlstate)
{
	return sqlstate && strcmp(sqlstate, "25006") == 0;
}

static atomic_long short_since; /* class-53 failures not yet told by a line */

void db_util_log_short(const char *what, const char *sqlstate, const char *msg)
{
	static _Atomic int64_t last_ms; /* clock_mono_ms() of the last line */
	atomic_long *since = &short_since;
	int64_t now = clock_mono_ms(), last = atomic_load(&last_ms);
	long more = atomic_fetch_add(since, 1);

	if (last && now - last < DB_SHORT_LOG_MS)
		return;
	if (!atomic_compare_exchange_strong(&last_ms, &last, now))
		return;
	atomic_fetch_sub(since, more + 1);
	log_error("db %s: the database is short of resources (SQLSTATE %s): %s (%ld more failures"
		  " so since the last line)",
		  what, sqlstate, msg, more);
}

static _Atomic int64_t short_ms; /* clock_mono_ms() of the last failure so; 0: none since */

void db_util_short_note(const char *sqlstate)
{
	if (db_util_short_of_resources(sqlstate))
		atomic_store(&short_ms, clock_mono_ms());
}

bool db_util_short_known(void)
{
	return atomic_load_explicit(&short_ms, memory_order_relaxed) != 0;
}

void db_util_wrote(void)
{
	int64_t s = atomic_load(&short_ms);

	/* The first batch held after a shortage ends it, and logs its end
	 * with what the last line did not count. */
	if (s == 0 || !atomic_compare_exchange_strong(&short_ms, &s, 0))
		return;
	log_info("checks are held again after the database lacked resources (%ld more failures"
		 " so since the last line)",
		 atomic_exchange(&short_since, 0));
}

bool db_util_short_lately(int64_t within_ms)
{
	int64_t s = atomic_load(&short_ms);

	return s != 0 && clock_mono_ms() - s < within_ms;
}

static _Atomic int64_t deadline_ms;

void db_util_set_deadline_ms(int64_t ms)
{
	deadline_ms = ms > 0 ? ms : 0;
}

bool db_util_await(PGconn *conn, int64_t ms)
{
	int64_t end = clock_mono_ms() + ms;

	if (ms <= 0)
		return true;
	while (PQisBusy(conn)) {
		struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
		int64_t left = end - clock_mono_ms();
		int pr = left > 0 ? poll(&pfd, 1, (int)(left < INT_MAX ? left : INT_MAX)) : 0;

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			shutdown(PQsocket(conn), SHUT_RDWR);
			(void)PQconsumeInput(conn); /* reads the end: the connection is bad */
			return false;
		}
		if (!PQconsumeInput(conn))
			break; /* the connection failed: PQgetResult says so */
	}
	return true;
}

PGresult *db_util_exec_within(PGconn *conn, const char *sql, int n, const Oid *types,
			      const char *const *values, const int *lengths, const int *formats,
			      int result_format, int64_t ms, bool *timed_out)
{
	PGresult *out = NULL, *r;
	size_t *most = PQinstanceData(conn, sent_events); /* NULL: not tracked */

	if (most) {
		size_t sent = strlen(sql);

		for (int i = 0; i < n; i++)
			if (values[i])
				sent +=
				    formats && formats[i] ? (size_t)lengths[i] : strlen(values[i]);
		if (sent > *most)
			*most = sent;
	}
	*timed_out = false;
	if (ms <= 0)
		return PQexecParams(conn, sql, n, types, values, lengths, formats, result_format);
	if (!PQsendQueryParams(conn, sql, n, types, values, lengths, formats, result_format))
		return NULL;
	*timed_out = !db_util_await(conn, ms);
	while ((r = PQgetResult(conn)) != NULL) {
		if (*timed_out || (out && PQresultStatus(out) != PGRES_TUPLES_OK &&
				   PQresultStatus(out) != PGRES_COMMAND_OK)) {
			PQclear(r); /* the first error stands */
			continue;
		}
		PQclear(out);
		out = r;
	}
	if (*timed_out) {
		PQclear(out);
		return NULL;
	}
	return out;
}

int64_t db_util_idle_tx_ms(int64_t statement_timeout_ms)
{
	if (statement_timeout_ms <= 0)
		return 0;
	return statement_timeout_ms / 2 > 1000 ? statement_timeout_ms / 2 : 1000;
}

enum meter_rc db_util_session_timeouts(PGconn *conn, const char *what, int64_t statement_timeout_ms,
				       int64_t idle_tx_ms)
{
	char st[24], idle[24];
	const char *params[2] = {st, idle};

	snprintf(st, sizeof(st), "%lld",
		 (long long)(statement_timeout_ms > 0 ? statement_timeout_ms : 0));
	snprintf(idle, sizeof(idle), "%lld", (long long)(idle_tx_ms > 0 ? idle_tx_ms : 0));
	return db_util_exec(conn, what,
			    "SELECT set_config('statement_timeout', $1, false),"
			    " set_config('idle_in_transaction_session_timeout', $2, false)",
			    2, params, NULL, NULL);
}

enum meter_rc db_util_exec(PGconn *conn, const char *what, const char *sql, int n,
			   const char *const *params, PGresult **res, char *sqlstate)
{
	const int64_t ms = deadline_ms;
	bool timed_out = false;
	PGresult *r =
	    db_util_exec_within(conn, sql, n, NULL, params, NULL, NULL, 0, ms, &timed_out);
	ExecStatusType st = PQresultStatus(r);
	const char *state;

	if (res)
		*res = NULL;
	if (sqlstate)
		sqlstate[0] = '\0';
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
		if (res)
			*res = r;
		else
			PQclear(r);
		return METER_OK;
	}
	if (timed_out) {
		failed_state[0] = '\0';
		log_warn("db %s: no answer within %lld ms: connection dropped", what,
			 (long long)ms);
		return METER_EDB;
	}
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (sqlstate && state && strlen(state) == 5)
		memcpy(sqlstate, state, 6);
	db_util_failed_note(r);
	/* A constraint refusing a value is the caller's to judge; a data
	 * error usually comes from the client's input; the rest is news. */
	if (db_util_short_of_resources(state))
		db_util_log_short(what, state,
				  r && PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
				      ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
				      : PQerrorMessage(conn));
	else if (!state || strncmp(state, "23", 2) != 0)
		log_msg(state && strncmp(state, "22", 2) == 0 ? LOG_INFO : LOG_WARN, "db %s: %s %s",
			what, state ? state : "-",
			r && PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
			    ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
			    : PQerrorMessage(conn));
	PQclear(r);
	return METER_EDB;
}

enum meter_rc db_util_exists(PGconn *conn, const char *what, const char *sql, int n,
			     const char *const *params)
{
	PGresult *res = NULL;
	enum meter_rc rc = db_util_exec(conn, what, sql, n, params, &res, NULL);

	if (rc != METER_OK)
		return rc;
	rc = PQntuples(res) > 0 ? METER_OK : METER_ENOTFOUND;
	PQclear(res);
	return rc;
}

enum meter_rc db_util_i64(const PGresult *res, int row, int col, int64_t *out, bool *is_null)
{
	if (PQgetisnull(res, row, col)) {
		if (!is_null)
			return METER_EINVAL;
		*is_null = true;
		*out = 0;
		return METER_OK;
	}
	if (is_null)
		*is_null = false;
	if (parse_int64(PQgetvalue(res, row, col), INT64_MIN, INT64_MAX, out) != METER_OK)
		return METER_ERANGE;
	return METER_OK;
}

void db_util_str(const PGresult *res, int row, int col, char *out, size_t len)
{
	if (len == 0)
		return;
	if (PQgetisnull(res, row, col))
		out[0] = '\0';
	else
		snprintf(out, len, "%s", PQgetvalue(res, row, col));
}

bool db_util_bool(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && strcmp(PQgetvalue(res, row, col), "t") == 0;
}

enum meter_rc db_util_begin(PGconn *conn)
{
	return db_util_exec(conn, "begin", "BEGIN", 0, NULL, NULL, NULL);
}

enum meter_rc db_util_commit(PGconn *conn)
{
	return db_util_exec(conn, "commit", "COMMIT", 0, NULL, NULL, NULL);
}

void db_util_rollback(PGconn *conn)
{
	PGresult *r = PQexec(conn, "ROLLBACK");

	PQclear(r);
}

void db_util_time_param(int64_t usec, char *buf, size_t len)
{
	parse_format_time(usec, buf, len);
}

void db_util_i64_param(int64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId64, v);
}

/* Binary values ------------------------------------------------------------ */

void db_bin_put(struct db_bin *b, const void *data, size_t len)
{
	if (b->oom)
		return;
	if (b->n + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *np;

		while (cap < b->n + len + 1)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, len);
	b->n += len;
	b->p[b->n] = '\0';
}

void db_bin_str(struct db_bin *b, const char *s)
{
	db_bin_put(b, s, strlen(s));
}

void db_bin_reset(struct db_bin *b)
{
	b->n = 0;
	b->oom = false;
	if (b->p)
		b->p[0] = '\0';
}

void db_bin_release(struct db_bin *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void db_bin_be16(struct db_bin *b, int16_t v)
{
	uint16_t u = (uint16_t)v;
	unsigned char x[2] = {(unsigned char)(u >> 8), (unsigned char)u};

	db_bin_put(b, x, 2);
}

void db_bin_be32(struct db_bin *b, int32_t v)
{
	uint32_t u = (uint32_t)v;
	unsigned char x[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16),
			      (unsigned char)(u >> 8), (unsigned char)u};

	db_bin_put(b, x, 4);
}

void db_bin_be64(struct db_bin *b, int64_t v)
{
	uint64_t u = (uint64_t)v;
	unsigned char x[8];

	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char)(u >> (56 - 8 * i));
	db_bin_put(b, x, 8);
}

void db_bin_text(struct db_bin *b, const char *s)
{
	size_t n = strlen(s);

	db_bin_be32(b, (int32_t)n);
	db_bin_put(b, s, n);
}

void db_bin_null(struct db_bin *b)
{
	db_bin_be32(b, -1);
}

void db_bin_i64(struct db_bin *b, int64_t v)
{
	db_bin_be32(b, 8);
	db_bin_be64(b, v);
}

void db_bin_i32(struct db_bin *b, int32_t v)
{
	db_bin_be32(b, 4);
	db_bin_be32(b, v);
}

void db_bin_ts(struct db_bin *b, int64_t usec)
{
	db_bin_i64(b, usec - DB_PG_EPOCH_USEC);
}

void db_bin_date(struct db_bin *b, int32_t day)
{
	db_bin_i32(b, day - DB_PG_EPOCH_DAYS);
}

void db_barr_start(struct db_barr *a, Oid array_type, Oid elem)
{
	db_bin_reset(&a->b);
	a->array_type = array_type;
	a->n = 0;
	a->nulls = false;
	db_bin_be32(&a->b, 1);		   /* ndim */
	db_bin_be32(&a->b, 0);		   /* has nulls: patched */
	db_bin_be32(&a->b, (int32_t)elem); /* element type */
	db_bin_be32(&a->b, 0);		   /* length: patched */
	db_bin_be32(&a->b, 1);		   /* lower bound */
}

void db_barr_finish(struct db_barr *a)
{
	if (a->b.oom || a->b.n < 20)
		return;
	for (int i = 0; i < 4; i++) {
		a->b.p[4 + i] = (char)(i == 3 && a->nulls);
		a->b.p[12 + i] = (char)((uint32_t)a->n >> (24 - 8 * i));
	}
}

void db_barr_text(struct db_barr *a, const char *s)
{
	db_bin_text(&a->b, s);
	a->n++;
}

void db_barr_null(struct db_barr *a)
{
	db_bin_null(&a->b);
	a->nulls = true;
	a->n++;
}

void db_barr_i64(struct db_barr *a, int64_t v)
{
	db_bin_i64(&a->b, v);
	a->n++;
}

void db_barr_i32(struct db_barr *a, int32_t v)
{
	db_bin_i32(&a->b, v);
	a->n++;
}

void db_barr_ts(struct db_barr *a, int64_t usec)
{
	db_bin_ts(&a->b, usec);
	a->n++;
}

void db_barr_date(struct db_barr *a, int32_t day)
{
	db_bin_date(&a->b, day);
	a->n++;
}
