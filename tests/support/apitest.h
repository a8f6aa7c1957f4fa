/* API test harness: real meterd processes on loopback ports, driven with
 * libcurl, against a throwaway database.
 *
 * A test does:
 *
 *     struct apitest t;
 *     if (apitest_start(&t, "tag", 2, NULL, NULL) < 0)   // db + 2 servers
 *             return 1;
 *     struct apitest_resp r;
 *     apitest_call(&t, 0, "GET", "/v1/prices", t.operator_token, NULL, &r);
 *     CHECK_I64(r.status, 200);
 *     apitest_resp_release(&r);
 *     CHECK(apitest_stop(&t) == 0);   // SIGTERM, every exit status 0
 *     apitest_drop(&t);               // drop the database
 *
 * The database is created in the test cluster (testdb.h) and migrated with
 * the compiled migrations. Each server is $METER_BIN_DIR/meterd with
 * METER_DATABASE_URL, METER_OPERATOR_TOKEN and METER_CONTROL_PLANE_TOKEN set
 * (the two tokens random per apitest), listening on 127.0.0.1 on a port the
 * kernel picks (--listen 127.0.0.1:0; the port is read from its log), its
 * stderr going to a log file t.servers[i].log_path. apitest_start returns
 * once every server's /readyz says 200.
 *
 * Requests: apitest_do / apitest_call are thread-safe (one curl handle per
 * call, nothing in struct apitest modified), so a test may fire concurrent
 * requests from many threads at several servers. */
#ifndef METER_TEST_APITEST_H
#define METER_TEST_APITEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "testdb.h"

#define APITEST_SERVERS_MAX 8
#define APITEST_TOKEN_MAX   160 /* a bearer token: "<key_id>.<secret>" fits */

struct apitest_server {
	pid_t pid; /* 0 once stopped */
	int port;
	char base[64];	    /* "http://127.0.0.1:PORT" */
	char log_path[256]; /* meterd's stderr (its log and access log) */
};

struct apitest {
	struct testdb db; /* db.url, db.conn: use db.conn to insert rows by SQL */
	char operator_token[65];
	char control_plane_token[65];
	char agent_token[65];
	int nservers;
	struct apitest_server servers[APITEST_SERVERS_MAX];
};

/* Creates and migrates a database tagged tag, then starts nservers meterd
 * (1..APITEST_SERVERS_MAX). extra_args: NULL-terminated list of more
 * command-line arguments for every meterd (e.g. an option switching the
 * collector off), may be NULL. extra_env: NULL-terminated "NAME=VALUE"
 * strings added to (or replacing in) every meterd's environment, may be
 * NULL. Returns 0 when all are ready; otherwise prints why, stops what it
 * started, drops the database and returns -1. */
int apitest_start(struct apitest *t, const char *tag, int nservers, const char *const *extra_args,
		  const char *const *extra_env);

/* Sends SIGTERM to every running server and waits (up to 10 s each, then
 * SIGKILL). Returns 0 when every one exited with status 0, else -1 (and
 * prints which did not). Servers are gone afterwards either way. */
int apitest_stop(struct apitest *t);

/* Stops any server still running (without judging its status) and drops the
 * database. Safe after apitest_stop and after a failed apitest_start. */
void apitest_drop(struct apitest *t);

/* Stops server i only (SIGTERM, wait); returns its exit status, or -1. */
int apitest_stop_one(struct apitest *t, int i);

/* One response. Everything owned; apitest_resp_release frees. */
struct apitest_resp {
	long status;   /* HTTP status, 0 when the request failed */
	char *headers; /* raw response header lines, NUL-terminated */
	char *body;    /* NUL-terminated (body_len bytes before the NUL) */
	size_t body_len;
	json_t *json;	 /* the body parsed as JSON, NULL when it is not JSON */
	char error[256]; /* curl's reason when status is 0 */
};

/* A request. body == NULL sends no body; body_len bytes are sent as they
 * are (NUL bytes included). token == NULL sends no Authorization header;
 * otherwise "Authorization: Bearer <token>". headers: NULL-terminated extra
 * raw header lines ("Authorization: Basic x" replaces ours; "Name:" removes
 * one curl would add), may be NULL. A body has Content-Type
 * application/json unless headers say otherwise. */
struct apitest_req {
	const char *method;
	const char *path; /* with the query string, e.g. "/v1/usage?window=day" */
	const char *token;
	const char *body;
	size_t body_len;
	const char *const *headers;
};

/* Sends rq to server i and fills *out (release it even on failure).
 * Returns 0 when a response arrived, -1 otherwise (out->status 0). */
int apitest_do(const struct apitest *t, int i, const struct apitest_req *rq,
	       struct apitest_resp *out);

/* apitest_do with body a NUL-terminated string (or NULL for none). */
int apitest_call(const struct apitest *t, int i, const char *method, const char *path,
		 const char *token, const char *body, struct apitest_resp *out);

void apitest_resp_release(struct apitest_resp *r);

/* The error code of an error response ({"error":{"code":...}}), borrowed
 * from r->json, or "" when the body is not one. */
const char *apitest_error_code(const struct apitest_resp *r);

/* A string member of r->json (top level), borrowed, or NULL. */
const char *apitest_json_str(const struct apitest_resp *r, const char *name);

/* The member at path a.b.c (names joined by dots) of o as an integer; -1
 * when absent or not an integer. */
long long apitest_jpath(json_t *o, const char *path);

/* A string member of o, borrowed, or "" when absent or not a string. */
const char *apitest_jstr(json_t *o, const char *name);

/* One webhook POST a test's receiver took (headers as raw "Name: value"
 * lines, body as received) held to api/openapi.json's webhooks
 * (openapi_check_webhook); prints why when it does not conform. */
bool apitest_webhook_conforms(const char *headers, const char *body);

/* The value of a series in server i's GET /metrics, at its integer part:
 * series is the name with its labels, e.g. `meter_x_total{outcome="ok"}`
 * (the whole text before the value); 0 when the series is absent (as a
 * counter not yet counted), -1 when the scrape fails. */
long long apitest_metric(const struct apitest *t, int i, const char *series);

/* Creates an account named name through POST /v1/accounts (operator) on
 * server 0; its id goes to account_id (65 bytes). Returns 0 or -1. */
int apitest_create_account(const struct apitest *t, const char *name, char *account_id);

/* Creates a key of account_id through POST /v1/accounts/{id}/keys on
 * server 0. role: "full" or "read_only". daily_limit_micros < 0: no limit.
 * time_zone NULL: the default (UTC). key_id gets the key id (65 bytes),
 * token the whole bearer token (APITEST_TOKEN_MAX bytes). Returns 0 or -1. */
int apitest_create_key(const struct apitest *t, const char *account_id, const char *role,
		       long long daily_limit_micros, const char *time_zone, char *key_id,
		       char *token);

/* Signs in to the dashboard on server 0 with a read-only key's token
 * (POST /dashboard/sign-in, 303) and writes the "Cookie: meter_session=..."
 * header to send with its pages into header (len bytes). Returns 0 or -1. */
int apitest_sign_in(const struct apitest *t, const char *token, char *header, size_t len);

/* The wall clock's whole seconds, read as meterd reads it. time() can trail
 * that clock by up to a kernel tick at a second's turn (it reads the copy
 * the tick updates), so a test that dates an event "a second from now" with
 * it can date it before what meterd just did. */
time_t apitest_now(void);

/* Fixed-offset time zones, for tests whose holds must not meet a key's
 * midnight, whatever the hour they run at. apitest_fixed_zone writes the
 * name of the zone utc_offset_h hours ahead of UTC (-12 to 14) into buf (16
 * bytes at least) and returns buf: an "Etc/GMT" name, whose sign POSIX
 * inverts (Etc/GMT-5 is UTC+5). apitest_midday_offset is the offset (-11 to
 * 12) at which it is now between 12:00 and 13:00, and apitest_midday_zone
 * that zone: a key in it sees no midnight for eleven hours. */
const char *apitest_fixed_zone(char *buf, size_t len, int utc_offset_h);
int apitest_midday_offset(void);
const char *apitest_midday_zone(char *buf, size_t len);

/* The whole log of server i, malloc'd and NUL-terminated (caller frees), or
 * NULL. */
char *apitest_read_log(const struct apitest *t, int i);

/* A field of /proc/PID/status given in kB ("VmRSS", "VmHWM"), in KiB, or
 * -1 when it cannot be read. */
long long apitest_proc_kib(pid_t pid, const char *field);

#endif
