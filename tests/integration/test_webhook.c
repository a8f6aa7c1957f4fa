/* API: the control plane's webhook. A receiver of the test's own (an
 * in-process libmicrohttpd server) gets the events two meterd processes
 * deliver from the outbox: spend_limit_crossed once per crossing of a
 * key-day's limit (a limit raised and reached again is a new event, more
 * spend over it is not), hold_outrun once per hold; every request signed
 * (Meter-Signature: t=...,v1=HMAC-SHA256(secret, "t.body")) and carrying
 * Meter-Event-Id; a failing receiver is retried with backoff; a process
 * POSTs several events at once, over connections it keeps; after a
 * restart nothing is delivered twice and nothing is lost; with a slow
 * receiver and many due events, meterd still stops on SIGTERM after the
 * round in flight; and killed (SIGKILL) there, it has recorded every
 * event answered 2xx but those in flight, which alone are sent again;
 * its database session ended during a round, it records the round's
 * answers on a new one; a database that took no writes for a while does
 * not stop delivery once it takes them again.
 * /metrics counts the POSTs by outcome and shows the events not delivered
 * yet and the age of the oldest. */
#include <microhttpd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checks_util.h"
#include "webhook.h"

#define SECRET	"whsec-test-0123456789abcdefghijklmn"
#define MAX_REQ 512

struct received {
	char event_id[64];
	char signature[160];
	char *body;
	unsigned status; /* what the receiver answered */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct received reqs[MAX_REQ];
static int nreqs;
static int fail_next;		   /* answer 500 to this many more requests */
static int refuse_bad_sig;	   /* answer 401 to a request signed with another secret */
static int refusals;		   /* requests answered 401 so */
static int slow_ms;		   /* answer after this long */
static int slow_body;		   /* answer 200 with a body of 10 bytes every 200 ms; 2: 1 byte,
				      then nothing for 6 s */
static int inflight, max_inflight; /* requests being answered at once, and the most */
static int connections;		   /* TCP connections the receiver has taken */

/* Counts the connections meterd opens to the receiver. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	(void)cls;
	(void)conn;
	(void)socket_context;
	if (code != MHD_CONNECTION_NOTIFY_STARTED)
		return;
	pthread_mutex_lock(&mu);
	connections++;
	pthread_mutex_unlock(&mu);
}

/* slow_body 2's body: of 100 bytes, 1, then nothing for 6 s, longer than
 * meterd waits. */
static ssize_t stall(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	if (pos == 0 && max > 0) {
		buf[0] = 'x';
		return 1;
	}
	cu_sleep_ms(6000);
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* slow_body's body: 1,000 bytes over 20 s, longer than meterd waits. */
static ssize_t trickle(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	if (pos >= 1000)
		return MHD_CONTENT_READER_END_OF_STREAM;
	cu_sleep_ms(200);
	if (max > 10)
		max = 10;
	memset(buf, 'x', max);
	return (ssize_t)max;
}

struct upload {
	char *buf;
	size_t len;
};

/* Verifies a Meter-Signature (NULL: none) against body (NULL: empty). */
static int signature_valid(const char *signature, const char *body)
{
	long long ts = 0;
	char v1[65] = "", msg[8192], hex[65];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	int n;

	if (!signature || sscanf(signature, "t=%lld,v1=%64[0-9a-f]", &ts, v1) != 2)
		return 0;
	n = snprintf(msg, sizeof(msg), "%lld.%s", ts, body ? body : "");
	if (n < 0 || (size_t)n >= sizeof(msg))
		return 0;
	if (!HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (unsigned char *)msg, (size_t)n, md,
		  &mdlen))
		return 0;
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return strcmp(hex, v1) == 0 && llabs(ts - (long long)apitest_now()) < 120;
}

static enum MHD_Result on_hook(void *cls, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version, const char *data,
			       size_t *data_size, void **con_cls)
{
	struct upload *u = *con_cls;
	struct MHD_Response *resp;
	unsigned status = 200;
	enum MHD_Result ret;

	(void)cls;
	(void)url;
	(void)version;
	if (!u) {
		u = calloc(1, sizeof(*u));
		*con_cls = u;
		return u ? MHD_YES : MHD_NO;
	}
	if (*data_size) {
		char *nb = realloc(u->buf, u->len + *data_size + 1);
		if (!nb)
			return MHD_NO;
		memcpy(nb + u->len, data, *data_size);
		u->buf = nb;
		u->len += *data_size;
		u->buf[u->len] = '\0';
		*data_size = 0;
		return MHD_YES;
	}
	pthread_mutex_lock(&mu);
	if (++inflight > max_inflight)
		max_inflight = inflight;
	if (slow_ms > 0) {
		int ms = slow_ms;
		pthread_mutex_unlock(&mu);
		cu_sleep_ms(ms);
		pthread_mutex_lock(&mu);
	}
	inflight--;
	if (fail_next > 0) {
		fail_next--;
		status = 500;
	}
	if (refuse_bad_sig &&
	    !signature_valid(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Meter-Signature"),
			     u->buf)) {
		status = 401;
		refusals++;
	}
	if (nreqs < MAX_REQ && strcmp(method, "POST") == 0) {
		struct received *r = &reqs[nreqs++];
		const char *id =
		    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Meter-Event-Id");
		const char *sig =
		    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Meter-Signature");
		snprintf(r->event_id, sizeof(r->event_id), "%s", id ? id : "");
		snprintf(r->signature, sizeof(r->signature), "%s", sig ? sig : "");
		r->body = u->buf ? u->buf : strdup("");
		u->buf = NULL;
		r->status = status;
	}
	pthread_mutex_unlock(&mu);
	free(u->buf);
	free(u);
	*con_cls = NULL;
	pthread_mutex_lock(&mu);
	if (slow_body == 2 && status == 200)
		resp = MHD_create_response_from_callback(100, 10, stall, NULL, NULL);
	else if (slow_body && status == 200)
		resp = MHD_create_response_from_callback(1000, 10, trickle, NULL, NULL);
	else
		resp = MHD_create_response_from_buffer(2, (void *)"ok", MHD_RESPMEM_PERSISTENT);
	pthread_mutex_unlock(&mu);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Number of 2xx deliveries of event id, and of all requests. */
static int delivered(const char *id)
{
	int n = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreqs; i++)
		if (reqs[i].status == 200 && strcmp(reqs[i].event_id, id) == 0)
			n++;
	pthread_mutex_unlock(&mu);
	return n;
}

static int total_requests(void)
{
	int n;

	pthread_mutex_lock(&mu);
	n = nreqs;
	pthread_mutex_unlock(&mu);
	return n;
}

/* Verifies r's Meter-Signature against its body. */
static int signature_ok(const struct received *r)
{
	return signature_valid(r->signature, r->body);
}

/* The receiver answers each POST after ms. */
static void set_slow(int ms)
{
	pthread_mutex_lock(&mu);
	slow_ms = ms;
	pthread_mutex_unlock(&mu);
}

/* Marks every event still to send delivered: a case starts from none. */
static void outbox_clear(PGconn *db)
{
	cu_sql(db, "UPDATE webhook_outbox SET delivered_at = clock_timestamp()"
		   " WHERE delivered_at IS NULL");
}

/* Puts n spend_limit_crossed events of key in the outbox, due now, with
 * dedup keys prefix1 .. prefixn. */
static void due_events(PGconn *db, const char *acc, const char *key, const char *prefix, int n)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)"
		 " SELECT '%s', '%s', 'spend_limit_crossed', '%s' || g, '{}'"
		 " FROM generate_series(1, %d) g",
		 acc, key, prefix, n);
	cu_sql(db, sql);
}

/* Waits until every outbox event is delivered (or timeout_ms). */
static long long wait_delivered(PGconn *db, int timeout_ms)
{
	long long pending = -1;

	for (int waited = 0; waited <= timeout_ms; waited += 100) {
		pending = cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE delivered_at IS"
					 " NULL");
		if (pending == 0)
			break;
		cu_sleep_ms(100);
	}
	return pending;
}

/* Polls server i's gauge until it is at least min and at most max (or
 * timeout_ms); returns the last value read. */
static long long wait_gauge(struct apitest *t, int i, const char *series, long long min,
			    long long max, int timeout_ms)
{
	long long v = -1;

	for (int waited = 0; waited <= timeout_ms; waited += 200) {
		v = apitest_metric(t, i, series);
		if (v >= min && v <= max)
			break;
		cu_sleep_ms(200);
	}
	return v;
}

/* /metrics: the POSTs so far by outcome, summed over both processes, are
 * the receiver's answers; an event the receiver keeps refusing shows as
 * pending with its age, and once delivered no longer. */
static void test_metrics(struct apitest *t, const char *acc, const char *key)
{
	static const char delivered_s[] = "meter_webhook_deliveries_total{outcome=\"delivered\"}";
	static const char failed_s[] = "meter_webhook_deliveries_total{outcome=\"failed\"}";
	static const char pending_s[] = "meter_webhook_pending_events";
	static const char oldest_s[] = "meter_webhook_oldest_pending_seconds";
	long long ok = 0, refused = 0, sum_ok = 0, sum_failed = 0, failed0;
	PGconn *db = t->db.conn;
	char sql[512];

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreqs; i++) {
		if (reqs[i].status >= 200 && reqs[i].status < 300)
			ok++;
		else
			refused++;
	}
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < 2; i++) {
		sum_ok += apitest_metric(t, i, delivered_s);
		sum_failed += apitest_metric(t, i, failed_s);
	}
	CHECK(ok > 0 && refused > 0);
	CHECK_I64(sum_ok, ok);
	CHECK_I64(sum_failed, refused);
	failed0 = apitest_metric(t, 0, failed_s) + apitest_metric(t, 1, failed_s);

	/* An event made 100 s ago that the receiver refuses. */
	pthread_mutex_lock(&mu);
	fail_next = 1000000;
	pthread_mutex_unlock(&mu);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload,"
		 " created_at) VALUES ('%s', '%s', 'spend_limit_crossed', 'metrics-1', '{}',"
		 " now() - interval '100 seconds')",
		 acc, key);
	cu_sql(db, sql);
	for (int i = 0; i < 2; i++) {
		CHECK_I64(wait_gauge(t, i, pending_s, 1, 1, 15000), 1);
		CHECK(wait_gauge(t, i, oldest_s, 100, 200, 15000) >= 100);
	}
	CHECK(apitest_metric(t, 0, failed_s) + apitest_metric(t, 1, failed_s) > failed0);

	/* The receiver takes it (due at once): nothing pending, on both. */
	pthread_mutex_lock(&mu);
	fail_next = 0;
	pthread_mutex_unlock(&mu);
	cu_sql(db, "UPDATE webhook_outbox SET next_attempt_at = now() WHERE delivered_at IS NULL");
	CHECK_I64(wait_delivered(db, 10000), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_I64(wait_gauge(t, i, pending_s, 0, 0, 15000), 0);
		CHECK_I64(wait_gauge(t, i, oldest_s, 0, 0, 15000), 0);
	}
	CHECK_I64(apitest_metric(t, 0, delivered_s) + apitest_metric(t, 1, delivered_s), ok + 1);
}

/* A 2xx whose body comes slower than meterd waits (or never ends): the
 * status line says the event is delivered, once; the body is not read. */
static void test_slow_body(struct apitest *t, const char *acc, const char *key)
{
	char sql[512];

	pthread_mutex_lock(&mu);
	slow_body = 1;
	pthread_mutex_unlock(&mu);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)"
		 " VALUES ('%s', '%s', 'spend_limit_crossed', 'slow-body-1', '{}')",
		 acc, key);
	cu_sql(t->db.conn, sql);
	CHECK_I64(wait_delivered(t->db.conn, 10000), 0);
	cu_sleep_ms(7000); /* past meterd's 5 s wait and a retry's backoff */
	CHECK_I64(cu_sql_int(t->db.conn,
			     "SELECT count(*) FROM webhook_outbox WHERE delivered_at IS NULL"),
		  0);
	{
		PGresult *res = PQexec(t->db.conn, "SELECT event_id FROM webhook_outbox"
						   " WHERE dedup_key = 'slow-body-1'");

		CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			CHECK_I64(delivered(PQgetvalue(res, 0, 0)), 1);
		PQclear(res);
	}
	/* A 2xx body that stalls after its first byte is cut as soon as one
	 * that trickles, not at the end of meterd's 5 s wait. */
	pthread_mutex_lock(&mu);
	slow_body = 2;
	pthread_mutex_unlock(&mu);
	{
		struct timespec a, b;
		long long ms;

		clock_gettime(CLOCK_MONOTONIC, &a);
		due_events(t->db.conn, acc, key, "stall-body-", 1);
		CHECK_I64(wait_delivered(t->db.conn, 10000), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		ms = (long long)(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
		printf("webhook: a stalled 2xx body, recorded delivered after %lld ms\n", ms);
		CHECK(ms < 4500);
	}
	pthread_mutex_lock(&mu);
	slow_body = 0;
	pthread_mutex_unlock(&mu);
}

/* Events POSTed at once, over kept connections. The two meterd processes
 * run with the default webhook_concurrency, 4. With the receiver slow (0.6
 * s an answer) and 8 events due, more than one process's one at a time
 * are answered at once; then 24 quick events come over the connections
 * opened before, or at most one a process's slot: not one connection an
 * event. Each event is delivered once. */
static void test_rounds(struct apitest *t, const char *acc, const char *key)
{
	int conns0, conns1, most;

	pthread_mutex_lock(&mu);
	slow_ms = 600;
	max_inflight = 0;
	pthread_mutex_unlock(&mu);
	due_events(t->db.conn, acc, key, "round-slow-", 8);
	CHECK_I64(wait_delivered(t->db.conn, 20000), 0);
	pthread_mutex_lock(&mu);
	slow_ms = 0;
	most = max_inflight;
	conns0 = connections;
	pthread_mutex_unlock(&mu);
	printf("webhook: at most %d events answered at once\n", most);
	CHECK(most >= 3);
	CHECK(most <= 8);

	due_events(t->db.conn, acc, key, "round-quick-", 24);
	CHECK_I64(wait_delivered(t->db.conn, 20000), 0);
	pthread_mutex_lock(&mu);
	conns1 = connections;
	pthread_mutex_unlock(&mu);
	printf("webhook: 24 events over %d new connections\n", conns1 - conns0);
	CHECK(conns1 - conns0 <= 8);
	{
		PGresult *res = PQexec(t->db.conn, "SELECT event_id FROM webhook_outbox"
						   " WHERE dedup_key LIKE 'round-%'");

		CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 32);
		for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
			CHECK_I64(delivered(PQgetvalue(res, i, 0)), 1);
		PQclear(res);
	}
}

/* The schema gate closing on a backlog (a newer migration recorded, as an
 * upgrade does, and read by /readyz at once): each process ends the round
 * it has under way and sends nothing more until the gate opens again;
 * then the rest, each event once. Before, a process delivered its whole
 * backlog past the gate's closing. */
static void test_gate_closes(struct apitest *t, const char *acc, const char *key)
{
	struct apitest_resp r;
	int before, at_close, later;

	set_slow(400);
	before = total_requests();
	due_events(t->db.conn, acc, key, "gate-", 60);
	for (int waited = 0; total_requests() == before && waited < 10000; waited += 10)
		cu_sleep_ms(10);
	CHECK(total_requests() > before);
	cu_sql(t->db.conn, "INSERT INTO schema_migrations (version, name, sha256)"
			   " VALUES (9999, '9999_newer', repeat('0', 64))");
	for (int i = 0; i < 2; i++) {
		CHECK(apitest_call(t, i, "GET", "/readyz", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 503);
		apitest_resp_release(&r);
	}
	at_close = total_requests();
	cu_sleep_ms(2000);
	later = total_requests();
	printf("webhook: %d events sent after the gate closed\n", later - at_close);
	/* At most the rounds under way: webhook_concurrency (4) a process;
	 * the backlog's 2 s would have taken some 40 more. */
	CHECK(later - at_close <= 8);
	CHECK(cu_sql_int(t->db.conn,
			 "SELECT count(*) FROM webhook_outbox"
			 " WHERE dedup_key LIKE 'gate-%%' AND delivered_at IS NULL") > 0);
	cu_sql(t->db.conn, "DELETE FROM schema_migrations WHERE version = 9999");
	for (int i = 0; i < 2; i++) {
		CHECK(apitest_call(t, i, "GET", "/readyz", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
	}
	set_slow(0);
	CHECK_I64(wait_delivered(t->db.conn, 20000), 0);
	{
		PGresult *res = PQexec(t->db.conn, "SELECT event_id FROM webhook_outbox"
						   " WHERE dedup_key LIKE 'gate-%'");

		CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 60);
		for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
			CHECK_I64(delivered(PQgetvalue(res, i, 0)), 1);
		PQclear(res);
	}
}

/* A failed POST whose claim lapsed while it was sent (its process stopped
 * past the claim: here another claim is written over it meanwhile): the
 * other claim stands, untouched, and the log says so instead of announcing
 * a retry that will not happen. */
static void test_lapsed_claim(struct apitest *t, const char *acc, const char *key)
{
	char sql[512];
	int found = 0;

	pthread_mutex_lock(&mu);
	slow_ms = 2000;
	fail_next = 1;
	pthread_mutex_unlock(&mu);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)"
		 " VALUES ('%s', '%s', 'spend_limit_crossed', 'lapsed-1', '{}')",
		 acc, key);
	cu_sql(t->db.conn, sql);
	for (int i = 0; i < 100 && cu_sql_int(t->db.conn, "SELECT attempts FROM webhook_outbox"
							  " WHERE dedup_key = 'lapsed-1'") < 1;
	     i++)
		cu_sleep_ms(20);
	/* The POST is in flight (the receiver answers 500 in 2 s). */
	cu_sql(t->db.conn, "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at ="
			   " now() + interval '1 hour' WHERE dedup_key = 'lapsed-1'");
	cu_sleep_ms(3500);
	CHECK_I64(cu_sql_int(t->db.conn, "SELECT count(*) FROM webhook_outbox WHERE dedup_key ="
					 " 'lapsed-1' AND attempts = 2 AND last_error IS NULL"
					 " AND next_attempt_at > now() + interval '50 minutes'"),
		  1);
	for (int i = 0; i < 2; i++) {
		char *log = apitest_read_log(t, i);

		if (log &&
		    strstr(log, "its claim had lapsed; left to the process that holds it now"))
			found++;
		free(log);
	}
	CHECK_I64(found, 1);
	pthread_mutex_lock(&mu);
	slow_ms = 0;
	fail_next = 0;
	pthread_mutex_unlock(&mu);
	cu_sql(t->db.conn, "UPDATE webhook_outbox SET delivered_at = now() WHERE dedup_key ="
			   " 'lapsed-1'");
}

static void spend(PGconn *db, const char *acc, const char *key, const char *sandbox,
		  const char *day, long long micros)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "SELECT * FROM meter_ledger_spend(ARRAY['%s'], ARRAY['%s'], ARRAY['%s'],"
		 " ARRAY[%s], ARRAY[%lld::bigint])",
		 acc, key, sandbox, day, micros);
	cu_sql(db, sql);
}

/* A meterd of its own on the same database (a restart), posting at most
 * concurrency events at once, signed with secret. */
static pid_t spawn_meterd_secret(const struct apitest *t, const char *hook_url, const char *log,
				 int concurrency, const char *secret)
{
	char conc[16];
	const char *bin = getenv("METER_BIN_DIR");
	char exe[512];
	pid_t pid;

	snprintf(exe, sizeof(exe), "%s/meterd", bin ? bin : ".");
	pid = fork();
	if (pid == 0) {
		FILE *f = freopen(log, "w", stderr);
		(void)f;
		setenv("METER_DATABASE_URL", t->db.url, 1);
		setenv("METER_WEBHOOK_URL", hook_url, 1);
		setenv("METER_WEBHOOK_SECRET", secret, 1);
		snprintf(conc, sizeof(conc), "%d", concurrency);
		setenv("METER_WEBHOOK_CONCURRENCY", conc, 1);
		setenv("METER_CONTROL_PLANE_TOKEN", t->control_plane_token, 1);
		execl(exe, "meterd", "--listen", "127.0.0.1:0", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The same, signed with the receiver's secret. */
static pid_t spawn_meterd(const struct apitest *t, const char *hook_url, const char *log,
			  int concurrency)
{
	return spawn_meterd_secret(t, hook_url, log, concurrency, SECRET);
}

/* Stops a meterd spawned so (pid > 0): SIGTERM, and it exits 0. */
static void stop_meterd(pid_t pid)
{
	int status = -1;

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Waits up to 20 s until the receiver answers want requests at once;
 * returns how many it does. */
static int wait_inflight(int want)
{
	int busy = 0;

	for (int waited = 0; waited < 20000 && busy < want; waited += 20) {
		cu_sleep_ms(20);
		pthread_mutex_lock(&mu);
		busy = inflight;
		pthread_mutex_unlock(&mu);
	}
	return busy;
}

/* A process whose webhook_secret the receiver refuses (401) claims every
 * event first (it runs alone) and fails each; then a process with the
 * right secret starts beside it and delivers them all as they fall due
 * again, rather than the first keeping them on their backoff (sql/0062). */
static void test_wrong_secret(struct apitest *t, const char *hook_url, const char *acc,
			      const char *key)
{
	char log[512], log2[512];
	PGconn *db = t->db.conn;
	int refused;
	long long pending, failed = 0;
	pid_t bad, good;

	outbox_clear(db);
	pthread_mutex_lock(&mu);
	refuse_bad_sig = 1;
	refusals = 0;
	pthread_mutex_unlock(&mu);
	snprintf(log, sizeof(log), "%s/test-webhook-wrong-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	bad = spawn_meterd_secret(t, hook_url, log, 4, "whsec-wrong-0123456789abcdefghijklmnop");
	CHECK(bad > 0);
	due_events(db, acc, key, "wrong-", 12);
	for (int waited = 0; waited <= 15000 && failed < 12; waited += 100) {
		cu_sleep_ms(100);
		failed = cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE dedup_key LIKE"
					" 'wrong-%%' AND last_error IS NOT NULL");
	}
	CHECK_I64(failed, 12);
	snprintf(log2, sizeof(log2), "%s/test-webhook-right-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	good = spawn_meterd(t, hook_url, log2, 4);
	CHECK(good > 0);
	pending = wait_delivered(db, 10000);
	pthread_mutex_lock(&mu);
	refused = refusals;
	refuse_bad_sig = 0;
	pthread_mutex_unlock(&mu);
	printf("webhook: %d POSTs of the wrong secret refused; %lld events left\n", refused,
	       pending);
	CHECK(refused >= 12);
	CHECK_I64(pending, 0);
	for (int i = 0; i < 2; i++) {
		pid_t pid = i ? good : bad;

		stop_meterd(pid);
	}
}

/* Leases of one second, a grace of three (METER_LEASE_GRACE_S): a sandbox
 * left running past its lease gets hold_outrun (reason lease_ended) once;
 * one paused at its lease end, one renewed by a wake, and one whose hold
 * was already outrun by consumption get none (more). */
static void test_lease_ended(struct apitest *t, const char *acc)
{
	static const char *const sandboxes[] = {"wh-late", "wh-paused", "wh-renewed", "wh-both"};
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX], now[40], day[40] = "", zone[16];
	long long late_hold, both_hold, n = 0;

	CHECK(apitest_create_key(t, acc, "full", -1, apitest_midday_zone(zone, sizeof(zone)), key,
				 token) == 0);
	for (int i = 0; i < 4; i++) {
		CHECK_I64(cu_create(t, i % 2, key, sandboxes[i], 1, 1024, i == 3 ? 2 : 1, NULL, &r),
			  200);
		if (i == 3)
			snprintf(day, sizeof(day), "'%s'::date", apitest_json_str(&r, "day") ?: "");
		apitest_resp_release(&r);
	}
	/* wh-both: metering outruns its hold while the lease runs. */
	spend(db, acc, key, "wh-both", day, 50000);
	/* wh-paused: paused about its lease end (the event's time is in whole
	 * seconds: one after the create's), maybe after the sweeper took it. */
	cu_sleep_ms(1100);
	cu_rfc3339(apitest_now(), now, sizeof(now));
	CHECK_I64(cu_event(t, 1, "wh-paused", "paused", now, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wh-renewed", 900, "\"idempotency_key\":\"renew-1\"", &r), 200);
	apitest_resp_release(&r);
	late_hold = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'wh-late'");
	both_hold = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'wh-both'");
	for (int waited = 0; waited < 15000 && n < 2; waited += 100) {
		n = cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				   " AND payload->>'sandbox_id' LIKE 'wh-%%' AND"
				   " payload->>'sandbox_id' <> 'wh-1'");
		cu_sleep_ms(100);
	}
	/* Every lease is past its end and grace, and swept at least twice. */
	cu_sleep_ms(3000);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds h JOIN sandboxes s USING (account_id,"
				 " sandbox_id) WHERE s.sandbox_id LIKE 'wh-%%' AND"
				 " h.status = 'open' AND s.lease_ends_at < now()"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM lease_watch"), 0);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun' AND"
			     " payload->>'sandbox_id' = 'wh-late' AND payload->>'reason' ="
			     " 'lease_ended' AND (payload->>'hold_id')::bigint = %lld AND"
			     " dedup_key = '%lld' AND key_id = '%s'",
			     late_hold, late_hold, key),
		  1);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun' AND"
			     " payload->>'sandbox_id' = 'wh-both' AND payload->>'reason' ="
			     " 'hold_consumed' AND (payload->>'hold_id')::bigint = %lld",
			     both_hold),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' IN ('wh-paused', 'wh-renewed',"
				 " 'wh-late', 'wh-both')"),
		  2);
	CHECK_I64(wait_delivered(db, 10000), 0);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreqs; i++) {
		json_t *b = json_loads(reqs[i].body, 0, NULL);
		json_t *data = json_object_get(b, "data");
		const char *sb = json_string_value(json_object_get(data, "sandbox_id"));

		if (reqs[i].status == 200 && sb && strcmp(sb, "wh-late") == 0) {
			CHECK(signature_ok(&reqs[i]));
			CHECK_STR(json_string_value(json_object_get(b, "type")), "hold_outrun");
			CHECK_STR(json_string_value(json_object_get(data, "reason")),
				  "lease_ended");
			CHECK_I64(cu_jint(data, "hold_id"), late_hold);
			CHECK(cu_jint(data, "amount_micros") > 0);
			CHECK_I64(cu_jint(data, "consumed_micros"), 0);
			CHECK(json_string_value(json_object_get(data, "lease_ends_at")) != NULL);
		}
		json_decref(b);
	}
	pthread_mutex_unlock(&mu);
	/* Stopped, so the rest of the test sees wh-1's lease open alone. */
	cu_rfc3339(apitest_now(), now, sizeof(now));
	CHECK_I64(cu_event(t, 0, "wh-renewed", "stopped", now, &r), 200);
	apitest_resp_release(&r);
}

/* hold_outrun events of sandbox sb with reason why. */
static long long outruns(PGconn *db, const char *sb, const char *why)
{
	return cu_sql_int(db,
			  "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
			  " AND payload->>'sandbox_id' = '%s' AND payload->>'reason' = '%s'",
			  sb, why);
}

/* Posts event type of sandbox sb dated at; must be 200. */
static void post_event(struct apitest *t, const char *sb, const char *type, const char *at)
{
	struct apitest_resp r;

	CHECK_I64(cu_event(t, 0, sb, type, at, &r), 200);
	apitest_resp_release(&r);
}

/* Posts event type of sandbox sb dated now + ahead seconds. */
static void event_at(struct apitest *t, const char *sb, const char *type, int ahead)
{
	char at[40];

	cu_rfc3339(apitest_now() + ahead, at, sizeof(at));
	post_event(t, sb, type, at);
}

/* Posts event type of sandbox sb dated usec microseconds after its create
 * check. */
static void event_after_create(struct apitest *t, const char *sb, const char *type, long long usec)
{
	char sql[256], at[48];

	snprintf(sql, sizeof(sql),
		 "SELECT to_char((created_at + %lld * interval '1 microsecond') AT TIME ZONE 'UTC',"
		 " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM sandboxes WHERE sandbox_id = '%s'",
		 usec, sb);
	testdb_query_text(t->db.conn, sql, at, sizeof(at));
	post_event(t, sb, type, at);
}

/* Create checks of each of the n sandboxes sbs under key; each must be 200. */
static void create_each(struct apitest *t, const char *key, const char *const *sbs, size_t n)
{
	struct apitest_resp r;

	for (size_t i = 0; i < n; i++) {
		CHECK_I64(cu_create(t, 0, key, sbs[i], 1, 1024, 900, NULL, &r), 200);
		apitest_resp_release(&r);
	}
}

/* resumed_without_wake reports of sb: 1 when there is exactly one, it
 * names the latest hold begun at or before it, and its at is the time of
 * sb's one running event (counted as at the create when dated before it). */
static long long resumed_at_event(PGconn *db, const char *sb)
{
	return cu_sql_int(
	    db,
	    "SELECT count(*) FROM webhook_outbox o, sandboxes s, lifecycle_events e"
	    " WHERE o.type = 'hold_outrun' AND o.payload->>'reason' = 'resumed_without_wake'"
	    " AND o.payload->>'sandbox_id' = '%s' AND s.sandbox_id = '%s'"
	    " AND e.sandbox_id = '%s' AND e.type = 'running'"
	    " AND (o.payload->>'at')::timestamptz = GREATEST(e.at, s.created_at)"
	    " AND (o.payload->>'hold_id')::bigint = (SELECT h.hold_id FROM holds h"
	    "  WHERE h.sandbox_id = '%s' AND h.lease_starts_at <= GREATEST(e.at, s.created_at)"
	    "  ORDER BY h.lease_starts_at DESC, h.day DESC, h.hold_id DESC LIMIT 1)"
	    " AND (SELECT count(*) FROM webhook_outbox x WHERE x.type = 'hold_outrun'"
	    "  AND x.payload->>'sandbox_id' = '%s') = 1",
	    sb, sb, sb, sb, sb);
}

/* A sandbox paused (its lease's hold settled by the pause), put back to
 * running by an event with no wake, then woken for a lease shorter than
 * what was left of the settled one: the wake's lease is the sandbox's (not
 * the settled lease's later end), and running past it is reported
 * lease_ended, by the wake's hold. */
static void test_woken_after_resume(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX], zone[16];
	long long hold, n = 0;

	CHECK(apitest_create_key(t, acc, "full", -1, apitest_midday_zone(zone, sizeof(zone)), key,
				 token) == 0);
	CHECK_I64(cu_create(t, 0, key, "wh-rewoken", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(1100);
	event_at(t, "wh-rewoken", "paused", 0);
	cu_sleep_ms(1100);
	event_at(t, "wh-rewoken", "running", 0);
	CHECK_I64(outruns(db, "wh-rewoken", "resumed_without_wake"), 1);
	cu_sleep_ms(1100);
	CHECK_I64(cu_wake(t, 1, "wh-rewoken", 1, NULL, &r), 200);
	apitest_resp_release(&r);
	hold = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'wh-rewoken'"
			      " ORDER BY lease_starts_at DESC, day DESC, hold_id DESC LIMIT 1");
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM sandboxes s JOIN holds h USING (account_id,"
			     " sandbox_id) WHERE s.sandbox_id = 'wh-rewoken' AND h.hold_id = %lld"
			     " AND s.lease_ends_at = h.lease_ends_at",
			     hold),
		  1);
	/* Its lease of a second, the grace of three, a sweep or two. */
	for (int waited = 0; waited < 15000 && n < 1; waited += 100) {
		n = outruns(db, "wh-rewoken", "lease_ended");
		if (n < 1)
			cu_sleep_ms(100);
	}
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
			     " AND payload->>'sandbox_id' = 'wh-rewoken' AND payload->>'reason' ="
			     " 'lease_ended' AND (payload->>'hold_id')::bigint = %lld",
			     hold),
		  1);
	event_at(t, "wh-rewoken", "stopped", 0);
}

/* A paused sandbox put back to running by an event, with no wake (its
 * hold settled by the pause): hold_outrun "resumed_without_wake" at once,
 * by that hold, once per hold. One woken by a wake first: none. */
static void test_resumed_without_wake(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX];
	long long hold;

	CHECK(apitest_create_key(t, acc, "full", -1, NULL, key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "wh-resumed", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "wh-woken", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	/* Its latest hold: a lease made in the last 15 minutes of the key's
	 * day has a part on each day, and the report names the later one. */
	hold = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'wh-resumed'"
			      " ORDER BY day DESC, hold_id DESC LIMIT 1");
	event_at(t, "wh-resumed", "paused", 0);
	event_at(t, "wh-woken", "paused", 0);
	CHECK_I64(cu_wake(t, 0, "wh-woken", 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(outruns(db, "wh-resumed", "resumed_without_wake"), 0);
	event_at(t, "wh-resumed", "running", 2);
	event_at(t, "wh-woken", "running", 2);
	CHECK_I64(outruns(db, "wh-resumed", "resumed_without_wake"), 1);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
			     " AND payload->>'sandbox_id' = 'wh-resumed' AND"
			     " (payload->>'hold_id')::bigint = %lld AND key_id = '%s'"
			     " AND payload ? 'at' AND payload ? 'lease_ends_at'",
			     hold, key),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'wh-woken'"),
		  0);
	/* Paused and resumed again on the same settled hold: told already. */
	event_at(t, "wh-resumed", "paused", 4);
	event_at(t, "wh-resumed", "running", 6);
	CHECK_I64(outruns(db, "wh-resumed", "resumed_without_wake"), 1);
	event_at(t, "wh-resumed", "stopped", 8);
	event_at(t, "wh-woken", "stopped", 8);

	/* The same resume with its two events sent out of order: the
	 * running one first (the sandbox runs already: nothing changes),
	 * then the pause dated before it. As in order: running since the
	 * running event, the hold settled, the resume reported. */
	CHECK_I64(cu_create(t, 0, key, "wh-late-pause", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	{
		char at_run[40], at_pause[40];
		time_t now = apitest_now();

		cu_rfc3339(now + 4, at_run, sizeof(at_run));
		cu_rfc3339(now + 2, at_pause, sizeof(at_pause));
		CHECK_I64(cu_event(t, 0, "wh-late-pause", "running", at_run, &r), 200);
		apitest_resp_release(&r);
		CHECK_I64(outruns(db, "wh-late-pause", "resumed_without_wake"), 0);
		CHECK_I64(cu_event(t, 0, "wh-late-pause", "paused", at_pause, &r), 200);
		CHECK_STR(apitest_json_str(&r, "state"), "running");
		apitest_resp_release(&r);
		CHECK_I64(
		    cu_sql_int(db,
			       "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'wh-late-pause'"
			       " AND state = 'running' AND state_since = '%s'::timestamptz",
			       at_run),
		    1);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM holds WHERE sandbox_id = 'wh-late-pause'"
				     " AND status = 'open' AND settles_at IS NULL"),
			  0);
		CHECK_I64(outruns(db, "wh-late-pause", "resumed_without_wake"), 1);
		CHECK_I64(
		    cu_sql_int(db,
			       "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
			       " AND payload->>'sandbox_id' = 'wh-late-pause'"
			       " AND (payload->>'at')::timestamptz = '%s'::timestamptz",
			       at_run),
		    1);
		/* A second pause, later: paused since then, as in order. */
		event_at(t, "wh-late-pause", "paused", 6);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM sandboxes"
				     " WHERE sandbox_id = 'wh-late-pause' AND state = 'paused'"),
			  1);
		event_at(t, "wh-late-pause", "stopped", 8);
	}
	/* More orders, each left as in the order of the events' times (here
	 * and in the next block, seconds after each sandbox's create check, so
	 * that a second passing between two posts cannot move one event onto
	 * another's time):
	 * - wh-between: pauses at +1 and +8, then a running event at +4:
	 *   paused since +8 (not running), and the resume at +4 reported;
	 * - wh-tie: a running event at -2 s, then a pause at -4 s, both
	 *   before the create (so both at the create): running, and the
	 *   resume reported;
	 * - wh-runs: a pause at +1, running events at +3 then +2: running
	 *   since +2. */
	{
		static const char *const sbs[] = {"wh-between", "wh-tie", "wh-runs"};

		create_each(t, key, sbs, 3);
		event_after_create(t, "wh-between", "paused", 1 * 1000000LL);
		event_after_create(t, "wh-between", "paused", 8 * 1000000LL);
		event_after_create(t, "wh-between", "running", 4 * 1000000LL);
		CHECK_I64(cu_sql_int(
			      db,
			      "SELECT count(*) FROM sandboxes s JOIN lifecycle_events e"
			      " USING (account_id, sandbox_id) WHERE s.sandbox_id = 'wh-between'"
			      " AND s.state = 'paused' AND e.type = 'paused'"
			      " AND s.state_since = e.at AND e.at > s.created_at + interval '5 s'"),
			  1);
		CHECK_I64(resumed_at_event(db, "wh-between"), 1);
		event_after_create(t, "wh-tie", "running", -2 * 1000000LL);
		event_after_create(t, "wh-tie", "paused", -4 * 1000000LL);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'wh-tie'"
				     " AND state = 'running' AND state_since = created_at"),
			  1);
		CHECK_I64(outruns(db, "wh-tie", "resumed_without_wake"), 1);
		event_after_create(t, "wh-runs", "paused", 1 * 1000000LL);
		event_after_create(t, "wh-runs", "running", 3 * 1000000LL);
		event_after_create(t, "wh-runs", "running", 2 * 1000000LL);
		CHECK_I64(
		    cu_sql_int(db, "SELECT count(*) FROM sandboxes s WHERE s.sandbox_id = 'wh-runs'"
				   " AND s.state = 'running' AND s.state_since ="
				   " (SELECT min(e.at) FROM lifecycle_events e"
				   "  WHERE e.sandbox_id = 'wh-runs' AND e.type = 'running')"),
		    1);
		for (size_t i = 0; i < 3; i++)
			event_at(t, sbs[i], "stopped", 10);
	}
	/* A stretch of running between a pause and a later event, its
	 * running event sent last (or its pause), each reported as in order:
	 * - wh-stop-late: a pause at +1, a stop at +8, a running event at +4;
	 * - wh-wake-late: a pause and a running event dated before the
	 *   create (so at it), sent around a wake: running since the create,
	 *   the resume reported by the create's hold, not the wake's;
	 * - wh-pause-late: a running event at +2 (running already), a pause
	 *   at +4, then a pause at +1: paused since +4; the create's hold
	 *   keeps the tail to +4 that the first pause cut (not reordered, as
	 *   README says), so it covers +2 as the holds record it and nothing
	 *   is reported;
	 * - wh-after-stop: a pause at +1, a stop at +3, a running event at +5:
	 *   stopped by then, nothing reported. */
	{
		static const char *const sbs[] = {"wh-stop-late", "wh-wake-late", "wh-pause-late",
						  "wh-after-stop"};

		create_each(t, key, sbs, 4);
		event_after_create(t, "wh-stop-late", "paused", 1 * 1000000LL);
		event_after_create(t, "wh-stop-late", "stopped", 8 * 1000000LL);
		event_after_create(t, "wh-stop-late", "running", 4 * 1000000LL);
		CHECK_I64(resumed_at_event(db, "wh-stop-late"), 1);
		event_after_create(t, "wh-wake-late", "paused", -4 * 1000000LL);
		CHECK_I64(cu_wake(t, 0, "wh-wake-late", 900, NULL, &r), 200);
		apitest_resp_release(&r);
		event_after_create(t, "wh-wake-late", "running", -2 * 1000000LL);
		CHECK_I64(cu_sql_int(
			      db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'wh-wake-late'"
				  " AND state = 'running' AND state_since = created_at"),
			  1);
		CHECK_I64(resumed_at_event(db, "wh-wake-late"), 1);
		event_after_create(t, "wh-pause-late", "running", 2 * 1000000LL);
		event_after_create(t, "wh-pause-late", "paused", 4 * 1000000LL);
		event_after_create(t, "wh-pause-late", "paused", 1 * 1000000LL);
		CHECK_I64(
		    cu_sql_int(
			db, "SELECT count(*) FROM sandboxes s WHERE s.sandbox_id = 'wh-pause-late'"
			    " AND s.state = 'paused' AND s.state_since = (SELECT max(e.at)"
			    "  FROM lifecycle_events e WHERE e.sandbox_id = 'wh-pause-late')"),
		    1);
		CHECK_I64(outruns(db, "wh-pause-late", "resumed_without_wake"), 0);
		event_after_create(t, "wh-after-stop", "paused", 1 * 1000000LL);
		event_after_create(t, "wh-after-stop", "stopped", 3 * 1000000LL);
		event_after_create(t, "wh-after-stop", "running", 5 * 1000000LL);
		CHECK_I64(outruns(db, "wh-after-stop", "resumed_without_wake"), 0);
		for (size_t i = 1; i < 3; i++)
			event_at(t, sbs[i], "stopped", 10);
	}
	/* A pause dated ahead of meterd's clock (+5 s), recorded before a
	 * wake it is dated after: the wake's hold stays whole (as README
	 * says), and a resume is reported as in order:
	 * - wh-skew-open: then a running event at +6 s and a pause at +0.1 s:
	 *   in order, the running event met the wake's hold open, and nothing
	 *   is reported;
	 * - wh-skew-cut: then pauses at +0.1 s, a running event at +6 s, and
	 *   a pause at +4 s that cuts the wake's hold: in order, the running
	 *   event met no hold open, and the resume is reported by the wake's
	 *   hold;
	 * - wh-skew-later: then a pause at +10 s that cuts the wake's hold,
	 *   and a running event at +6 s: the hold covered +6 (cut after it),
	 *   and nothing is reported, as in order. */
	{
		static const char *const sbs[] = {"wh-skew-open", "wh-skew-cut", "wh-skew-later"};

		create_each(t, key, sbs, 3);
		for (size_t i = 0; i < 3; i++)
			event_after_create(t, sbs[i], "paused", 5000000);
		cu_sleep_ms(300);
		for (size_t i = 0; i < 3; i++) {
			CHECK_I64(cu_wake(t, 0, sbs[i], 900, NULL, &r), 200);
			apitest_resp_release(&r);
		}
		event_after_create(t, "wh-skew-open", "running", 6000000);
		event_after_create(t, "wh-skew-open", "paused", 100000);
		CHECK_I64(outruns(db, "wh-skew-open", "resumed_without_wake"), 0);
		event_after_create(t, "wh-skew-cut", "paused", 100000);
		event_after_create(t, "wh-skew-cut", "running", 6000000);
		CHECK_I64(outruns(db, "wh-skew-cut", "resumed_without_wake"), 0);
		event_after_create(t, "wh-skew-cut", "paused", 4000000);
		CHECK_I64(resumed_at_event(db, "wh-skew-cut"), 1);
		CHECK_I64(
		    cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				   " AND payload->>'sandbox_id' = 'wh-skew-cut'"
				   " AND (payload->>'hold_id')::bigint = (SELECT max(hold_id)"
				   "  FROM holds WHERE sandbox_id = 'wh-skew-cut')"),
		    1);
		event_after_create(t, "wh-skew-later", "paused", 10000000);
		event_after_create(t, "wh-skew-later", "running", 6000000);
		CHECK_I64(outruns(db, "wh-skew-later", "resumed_without_wake"), 0);
		for (size_t i = 0; i < 3; i++)
			event_at(t, sbs[i], "stopped", 12);
	}
	/* wh-woken-late: paused, woken, the wake's hold released (as at its
	 * lease's end), then a pause dated before the wake: woken after it,
	 * the sandbox runs since the wake. */
	CHECK_I64(cu_create(t, 0, key, "wh-woken-late", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	event_at(t, "wh-woken-late", "paused", 0);
	CHECK_I64(cu_wake(t, 0, "wh-woken-late", 900, NULL, &r), 200);
	apitest_resp_release(&r);
	/* One hold, or two when the lease crosses the key's midnight. */
	CHECK(cu_sql_int(db, "SELECT count(meter_hold_close(account_id, hold_id, 'released'))"
			     " FROM holds WHERE sandbox_id = 'wh-woken-late' AND status = 'open'"
			     " AND settles_at IS NULL") >= 1);
	event_at(t, "wh-woken-late", "paused", -10);
	CHECK_I64(
	    cu_sql_int(db,
		       "SELECT count(*) FROM sandboxes s WHERE s.sandbox_id = 'wh-woken-late'"
		       " AND s.state = 'running' AND s.state_since = (SELECT max(h.lease_starts_at)"
		       "  FROM holds h WHERE h.sandbox_id = 'wh-woken-late')"),
	    1);
	event_at(t, "wh-woken-late", "stopped", 10);
}

/* Pushes a sample of sandbox sb under key (1 vCPU, 1 GiB) dated now +
 * ahead seconds, in state; must be 200. */
static void sample_at(struct apitest *t, const char *key, const char *sb, const char *state,
		      int ahead, long long cpu_usec)
{
	struct apitest_resp r;
	char body[512], at[40];

	cu_rfc3339(apitest_now() + ahead, at, sizeof(at));
	snprintf(body, sizeof(body),
		 "{\"host_id\":\"h-wh\",\"sampled_at\":\"%s\",\"sandboxes\":[{\"sandbox_id\":"
		 "\"%s\",\"key_id\":\"%s\",\"state\":\"%s\",\"vcpus\":1,\"memory_mib\":1024,"
		 "\"cpu_usec\":%lld}]}",
		 at, sb, key, state, cpu_usec);
	CHECK(cu_post(t, 0, "/v1/samples", body, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

/* A paused sandbox its agent finds running again with neither a wake nor
 * an event (its hold settled by the pause): hold_outrun
 * "running_while_paused" at the sample, by that hold, once per hold. None
 * for one woken first, nor for a resume the samples show before the
 * pause, nor for samples that stay running (no resume seen). */
static void test_paused_running(struct apitest *t, const char *acc)
{
	static const char *const sbs[] = {"wh-pr", "wh-pr-woken", "wh-pr-early"};
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX];
	long long hold;

	CHECK(apitest_create_key(t, acc, "full", -1, NULL, key, token) == 0);
	create_each(t, key, sbs, 3);
	hold = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'wh-pr'"
			      " ORDER BY day DESC, hold_id DESC LIMIT 1");
	/* wh-pr-early: its pause event first, then samples that saw it
	 * paused and running before the pause's time (they came late), and
	 * running after it. */
	event_at(t, "wh-pr-early", "paused", 3);
	sample_at(t, key, "wh-pr-early", "paused", 1, 0);
	sample_at(t, key, "wh-pr-early", "running", 2, 0);
	sample_at(t, key, "wh-pr-early", "running", 4, 1000000);
	/* wh-pr: paused by its event, seen paused, then running. */
	event_at(t, "wh-pr", "paused", 0);
	sample_at(t, key, "wh-pr", "paused", 1, 0);
	CHECK_I64(outruns(db, "wh-pr", "running_while_paused"), 0);
	sample_at(t, key, "wh-pr", "running", 2, 0);
	CHECK_I64(outruns(db, "wh-pr", "running_while_paused"), 1);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
			     " AND payload->>'sandbox_id' = 'wh-pr' AND"
			     " (payload->>'hold_id')::bigint = %lld AND key_id = '%s'"
			     " AND payload->>'reason' = 'running_while_paused'"
			     " AND (payload->>'at')::timestamptz = (SELECT last_sampled_at"
			     " FROM sandbox_meter WHERE sandbox_id = 'wh-pr')",
			     hold, key),
		  1);
	/* Seen paused and running again on the same settled hold: told. */
	sample_at(t, key, "wh-pr", "paused", 3, 0);
	sample_at(t, key, "wh-pr", "running", 4, 0);
	CHECK_I64(outruns(db, "wh-pr", "running_while_paused"), 1);
	/* wh-pr-woken: paused, seen paused, woken, then seen running. */
	event_at(t, "wh-pr-woken", "paused", 0);
	sample_at(t, key, "wh-pr-woken", "paused", 1, 0);
	CHECK_I64(cu_wake(t, 0, "wh-pr-woken", 900, NULL, &r), 200);
	apitest_resp_release(&r);
	sample_at(t, key, "wh-pr-woken", "running", 2, 0);
	CHECK_I64(outruns(db, "wh-pr-woken", "running_while_paused"), 0);
	CHECK_I64(outruns(db, "wh-pr-early", "running_while_paused"), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' IN ('wh-pr-woken', 'wh-pr-early')"),
		  0);
	/* wh-pr-wake: seen paused, woken (between two samples), paused
	 * again by an event that came before the agent saw it: the next
	 * sample finds it running after the pause, on a lease honoured. */
	CHECK_I64(cu_create(t, 0, key, "wh-pr-wake", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	event_at(t, "wh-pr-wake", "paused", 0);
	sample_at(t, key, "wh-pr-wake", "paused", 0, 0);
	cu_sleep_ms(1100);
	CHECK_I64(cu_wake(t, 0, "wh-pr-wake", 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(1100);
	event_at(t, "wh-pr-wake", "paused", 0);
	sample_at(t, key, "wh-pr-wake", "running", 1, 0);
	CHECK_I64(outruns(db, "wh-pr-wake", "running_while_paused"), 0);
	event_at(t, "wh-pr-wake", "stopped", 8);
	for (size_t i = 0; i < 3; i++)
		event_at(t, sbs[i], "stopped", 8);
}

/* Rows of holds the test's own connection has read by any scan, counted
 * from before (pending counts may carry earlier transactions' reads until
 * they are flushed, so a figure is read as a difference within one
 * transaction). */
static long long holds_read(PGconn *db)
{
	return cu_sql_int(db, "SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0)"
			      " FROM pg_stat_xact_user_tables WHERE relname = 'holds'");
}

/* Statements on holds read the holds they need, not every hold ever made:
 * with 20,000 settled holds of other sandboxes of the account, each of
 * these reads at most a few dozen rows or pages, in the test's own
 * transaction.
 * - The two reports that name a sandbox's latest hold, whatever its status
 *   (resumed_without_wake, running_while_paused). (With only a partial
 *   index of open holds by sandbox, each read all 20,000.)
 * - A key's open holds (a change of its time zone; 409 open_holds while
 *   any) and the latest end of an open hold's cover (PUT /v1/prices), each
 *   with the figures of a plain query over holds. (Asked for status =
 *   'open' alone, neither statement could use the open holds' partial
 *   indexes: the price book's read the table, and the key's every index
 *   entry of the account's holds, which pg_stat counts as no rows read, so
 *   its pages are counted.) */
static void test_holds_reads(struct apitest *t)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], sql[1024], at[40];
	long long before;

	CHECK(apitest_create_account(t, "Busy", acc) == 0);
	CHECK(apitest_create_key(t, acc, "full", -1, NULL, key, token) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " state, created_at, state_since, lease_ends_at)"
		 " SELECT '%s', 'wh-old-' || g, '%s', 1, 1024, 'stopped',"
		 " now() - interval '2 days', now() - interval '2 days',"
		 " now() - interval '47 hours' FROM generate_series(1, 20000) g",
		 acc, key);
	cu_sql(db, sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
		 " lease_starts_at, lease_ends_at, settled_at)"
		 " SELECT '%s', '%s', 'wh-old-' || g, current_date - 2, 1000, 'settled',"
		 " now() - interval '2 days', now() - interval '47 hours',"
		 " now() - interval '47 hours' FROM generate_series(1, 20000) g",
		 acc, key);
	cu_sql(db, sql);
	cu_sql(db, "ANALYZE holds");

	/* A resume with no wake, its report fired at once rather than at
	 * commit. */
	CHECK_I64(cu_create(t, 0, key, "wh-busy-resumed", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	event_at(t, "wh-busy-resumed", "paused", 0);
	cu_rfc3339(apitest_now() + 2, at, sizeof(at));
	cu_sql(db, "BEGIN");
	before = holds_read(db);
	snprintf(sql, sizeof(sql),
		 "SELECT state FROM meter_sandbox_event('wh-busy-resumed', 'running', '%s', 3)",
		 at);
	cu_sql(db, sql);
	cu_sql(db, "SET CONSTRAINTS ALL IMMEDIATE");
	CHECK_I64(outruns(db, "wh-busy-resumed", "resumed_without_wake"), 1);
	CHECK(holds_read(db) - before < 50);
	cu_sql(db, "COMMIT");

	/* A paused sandbox its samples find running: ingestion's call of
	 * the rule (sql/0057) for a running sample 1 s after the paused one,
	 * made here by hand. */
	CHECK_I64(cu_create(t, 0, key, "wh-busy-pr", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	event_at(t, "wh-busy-pr", "paused", 0);
	sample_at(t, key, "wh-busy-pr", "paused", 1, 0);
	cu_sql(db, "BEGIN");
	before = holds_read(db);
	cu_sql(db, "SELECT meter_outbox_paused_running_at(ARRAY[account_id], ARRAY[sandbox_id],"
		   " ARRAY[last_sampled_at], ARRAY[last_sampled_at + interval '1 s'])"
		   " FROM sandbox_meter WHERE sandbox_id = 'wh-busy-pr'");
	CHECK_I64(outruns(db, "wh-busy-pr", "running_while_paused"), 1);
	CHECK(holds_read(db) - before < 50);
	cu_sql(db, "COMMIT");

	/* The key's open holds: wh-busy-open's plain one, wh-busy-tail's kept
	 * for its tail by a pause (never metered: its whole hold, until
	 * lease_grace_s after the pause, which is dated a minute ahead). One
	 * snapshot for the function and the plain query beside it. */
	for (int i = 0; i < 2; i++) {
		CHECK_I64(cu_create(t, 0, key, i ? "wh-busy-tail" : "wh-busy-open", 1, 1024, 900,
				    NULL, &r),
			  200);
		apitest_resp_release(&r);
	}
	event_at(t, "wh-busy-tail", "paused", 60);
	cu_sql(db, "BEGIN ISOLATION LEVEL REPEATABLE READ");
	CHECK(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wh-busy-tail'"
			     " AND status = 'open' AND settles_at IS NOT NULL") >= 1);
	before = holds_read(db);
	CHECK(cu_sql_int(db, "SELECT open_holds FROM meter_key_open_holds('%s', '%s')", acc, key) >=
	      2);
	CHECK(holds_read(db) - before < 50);
	cu_sql(db, "CREATE FUNCTION pg_temp.pages(q text) RETURNS bigint LANGUAGE plpgsql AS $$"
		   " DECLARE j json; BEGIN"
		   " EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;"
		   " RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint"
		   " + (j->0->'Plan'->>'Shared Read Blocks')::bigint; END $$");
	{
		long long fn, plain, open;

		/* Every open hold of the database may be read once (each set's
		 * index holds every account's), and a few index pages. */
		open = cu_sql_int(db, "SELECT count(*) FROM holds WHERE status = 'open'");
		fn = cu_sql_int(
		    db,
		    "SELECT pg_temp.pages('SELECT * FROM meter_key_open_holds(''%s'', ''%s'')')",
		    acc, key);
		plain =
		    cu_sql_int(db,
			       "SELECT pg_temp.pages('SELECT count(*) FROM holds WHERE account_id ="
			       " ''%s'' AND key_id = ''%s'' AND status = ''open''')",
			       acc, key);
		fprintf(stderr,
			"meter_key_open_holds read %lld pages (a plain query: %lld; open holds:"
			" %lld)\n",
			fn, plain, open);
		/* The history is large enough to tell: a plain query's pages. */
		CHECK(plain > open + 100);
		CHECK(fn >= 0 && fn <= open + 10);
	}
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM meter_key_open_holds('%s', '%s') f,"
			     " (SELECT count(*) AS n, max(lease_ends_at) AS e FROM holds"
			     "  WHERE account_id = '%s' AND key_id = '%s' AND status = 'open') x"
			     " WHERE f.open_holds = x.n AND f.latest_end = x.e",
			     acc, key, acc, key),
		  1);
	cu_sql(db, "COMMIT");

	/* The price book's bound, with a start before it (nothing inserted):
	 * the later of now, the open holds' covers and the samples taken. */
	cu_sql(db, "BEGIN ISOLATION LEVEL REPEATABLE READ");
	before = holds_read(db);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM meter_price_add(now() - interval '1 day',"
				 " 1, 1, 1, 50, 0, false, 1000) WHERE version IS NULL"),
		  1);
	CHECK(holds_read(db) - before < 50);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM meter_price_add(now() - interval '1 day',"
			     " 1, 1, 1, 50, 0, false, 1000) p WHERE p.earliest = GREATEST(now(),"
			     " (SELECT max(LEAST(h.lease_ends_at, COALESCE(h.settles_at,"
			     "  h.lease_ends_at))) FROM holds h WHERE h.status = 'open'),"
			     " (SELECT max(w.last_sampled_at) FROM ingest_watermarks w))"),
		  1);
	cu_sql(db, "ROLLBACK");
	for (int i = 0; i < 4; i++) {
		static const char *const sbs[] = {"wh-busy-resumed", "wh-busy-pr", "wh-busy-open",
						  "wh-busy-tail"};

		event_at(t, sbs[i], "stopped", 8);
	}
}

/* A lease the sweeper released while its sandbox ran, with its unmetered
 * tail kept open (a sample came before the lease end, none after: the
 * host lags): reported once the grace has passed, not when metering
 * catches up, and still reported when a pause dated after the grace
 * comes first. */
static void test_lease_ended_lagging(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX];
	long long n = 0;

	CHECK(apitest_create_key(t, acc, "full", -1, NULL, key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "wh-lag", 1, 1024, 1, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sql(db, "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at,"
		   " last_state, last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus,"
		   " price_version) SELECT account_id, sandbox_id, created_at, 'running', 0, 1024,"
		   " 0, 1, 1 FROM sandboxes WHERE sandbox_id = 'wh-lag'");
	/* Past the lease's end (1 s) and the grace (3 s), swept; the pause's
	 * time is in whole seconds, so over a second past that. */
	cu_sleep_ms(6000);
	event_at(t, "wh-lag", "paused", 0);
	for (int waited = 0; waited < 10000 && n == 0; waited += 100) {
		n = outruns(db, "wh-lag", "lease_ended");
		cu_sleep_ms(100);
	}
	CHECK_I64(n, 1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wh-lag'"
				 " AND status = 'open' AND settles_at IS NOT NULL"),
		  1);
	event_at(t, "wh-lag", "stopped", 1);
}

/* Sets key's daily limit (PUT /v1/keys/{id}/limits, as the operator). */
static void set_limit(struct apitest *t, const char *key, long long micros)
{
	struct apitest_resp r;
	char path[128], body[64];

	snprintf(path, sizeof(path), "/v1/keys/%s/limits", key);
	snprintf(body, sizeof(body), "{\"daily_limit_micros\":%lld}", micros);
	CHECK(apitest_call(t, 0, "PUT", path, t->operator_token, body, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

static long long crossings(PGconn *db, const char *key)
{
	return cu_sql_int(db,
			  "SELECT count(*) FROM webhook_outbox WHERE type = 'spend_limit_crossed'"
			  " AND key_id = '%s'",
			  key);
}

/* Every crossing of a key-day's limit is an event of its own; more spend
 * while over a limit already reported is none. Limit 10,000: spend 12,000
 * crosses it; raised to 50,000, spend 57,000 crosses that (sql/0005 keyed
 * the event by key-day: no second event). Lowered back to 10,000 (reported
 * already), nothing; raised to 100,000 (under), lowered to 58,000 below the
 * spend (never reported): one event at the next spend; raised to 100,000
 * and reached: one more. */
static void test_crossings(struct apitest *t, const char *acc)
{
	static const long long want[4][2] = {
	    {10000, 12000}, {50000, 57000}, {58000, 58700}, {100000, 100000}};
	const char *day = "current_date + 10";
	char key[65], token[APITEST_TOKEN_MAX], ids[4][64] = {"", "", "", ""};
	PGconn *db = t->db.conn;
	int seen = 0, per[4] = {0, 0, 0, 0};

	CHECK(apitest_create_key(t, acc, "full", 10000, NULL, key, token) == 0);
	spend(db, acc, key, "wh-cross", day, 12000);
	CHECK_I64(crossings(db, key), 1);
	spend(db, acc, key, "wh-cross", day, 1000); /* 13,000: still over 10,000 */
	CHECK_I64(crossings(db, key), 1);
	set_limit(t, key, 50000);
	spend(db, acc, key, "wh-cross", day, 30000); /* 43,000: under */
	CHECK_I64(crossings(db, key), 1);
	spend(db, acc, key, "wh-cross", day, 14000); /* 57,000: crossed again */
	CHECK_I64(crossings(db, key), 2);
	spend(db, acc, key, "wh-cross", day, 500);
	spend(db, acc, key, "wh-cross", day, 100);
	CHECK_I64(crossings(db, key), 2);
	set_limit(t, key, 10000);
	spend(db, acc, key, "wh-cross", day, 100); /* 57,700 */
	CHECK_I64(crossings(db, key), 2);
	set_limit(t, key, 100000);
	spend(db, acc, key, "wh-cross", day, 900); /* 58,600: under */
	CHECK_I64(crossings(db, key), 2);
	set_limit(t, key, 58000);
	spend(db, acc, key, "wh-cross", day, 100); /* 58,700 */
	CHECK_I64(crossings(db, key), 3);
	spend(db, acc, key, "wh-cross", day, 100);
	CHECK_I64(crossings(db, key), 3);
	set_limit(t, key, 100000);
	spend(db, acc, key, "wh-cross", day, 41200); /* 100,000: reached */
	CHECK_I64(crossings(db, key), 4);
	spend(db, acc, key, "wh-cross", day, 1);
	CHECK_I64(crossings(db, key), 4);
	CHECK_I64(wait_delivered(db, 10000), 0);

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreqs; i++) {
		json_t *b = json_loads(reqs[i].body, 0, NULL);
		json_t *data = json_object_get(b, "data");
		const char *k = json_string_value(json_object_get(b, "key_id"));

		if (reqs[i].status == 200 && k && strcmp(k, key) == 0) {
			CHECK(signature_ok(&reqs[i]));
			CHECK_STR(json_string_value(json_object_get(b, "type")),
				  "spend_limit_crossed");
			for (int j = 0; j < 4; j++) {
				if (cu_jint(data, "limit_micros") != want[j][0])
					continue;
				CHECK_I64(cu_jint(data, "spent_micros"), want[j][1]);
				snprintf(ids[j], sizeof(ids[j]), "%.63s", reqs[i].event_id);
				per[j]++;
			}
			seen++;
		}
		json_decref(b);
	}
	pthread_mutex_unlock(&mu);
	/* Delivered in any order (two processes): one of each, ids apart. */
	CHECK_I64(seen, 4);
	for (int i = 0; i < 4; i++) {
		CHECK_I64(per[i], 1);
		CHECK_I64(delivered(ids[i]), 1);
		for (int j = 0; j < i; j++)
			CHECK(strcmp(ids[i], ids[j]) != 0);
	}
}

#define KILL_EVENTS 48
#define KILL_CONC   3 /* the killed meterd's webhook_concurrency */

/* SIGKILL while the receiver is slow (0.5 s an answer), after four events
 * were answered 2xx: every event answered before the kill is recorded as
 * delivered but at most KILL_CONC (the round in flight), and after a
 * restart only those are sent again (same event ids, once their claims
 * lapse); none is lost. The events: ten of the test's own and whatever the
 * SIGTERM case left due. No meterd may be running. */
#define SLOW_CONC 2 /* webhook_concurrency of the meterd stopped with a slow receiver */

static void test_kill(struct apitest *t, const char *hook_url, const char *acc, const char *key)
{
	char log[512], ids[KILL_EVENTS][40];
	int base[KILL_EVENTS], answered = 0, recorded = 0, again = 0, n = 0, status = -1;
	bool done[KILL_EVENTS];
	PGconn *db = t->db.conn;
	PGresult *res;
	pid_t pid;

	due_events(db, acc, key, "kill-", 10);
	res = PQexec(db, "SELECT event_id FROM webhook_outbox WHERE delivered_at IS NULL");
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		for (n = 0; n < PQntuples(res) && n < KILL_EVENTS; n++) {
			snprintf(ids[n], sizeof(ids[n]), "%s", PQgetvalue(res, n, 0));
			base[n] = delivered(ids[n]);
		}
	CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == n && n >= 10);
	PQclear(res);

	set_slow(500);
	snprintf(log, sizeof(log), "%s/test-webhook-kill-%d.log", getenv("METER_BIN_DIR") ?: "/tmp",
		 (int)getpid());
	pid = spawn_meterd(t, hook_url, log, KILL_CONC);
	CHECK(pid > 0);
	for (int waited = 0; waited < 30000 && answered < 4; waited += 50) {
		cu_sleep_ms(50);
		answered = 0;
		for (int i = 0; i < n; i++)
			answered += delivered(ids[i]) > base[i];
	}
	CHECK(answered >= 4);
	cu_sleep_ms(250); /* the next request is in flight */
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	}
	cu_sleep_ms(1000); /* the receiver answers it, to nobody */
	set_slow(0);
	answered = 0;
	for (int i = 0; i < n; i++) {
		done[i] = cu_sql_int(db,
				     "SELECT count(*) FROM webhook_outbox WHERE event_id = '%s'"
				     " AND delivered_at IS NOT NULL",
				     ids[i]) == 1;
		answered += delivered(ids[i]) > base[i];
		recorded += done[i];
		CHECK(!done[i] || delivered(ids[i]) > base[i]);
	}
	printf("webhook: killed after %d of %d events were answered 2xx; %d recorded as"
	       " delivered\n",
	       answered, n, recorded);
	CHECK(answered >= 4);
	CHECK(recorded >= answered - KILL_CONC);

	/* Restarted: what was recorded is not sent again, the rest is sent,
	 * those in flight too once their claims have lapsed. */
	snprintf(log, sizeof(log), "%s/test-webhook-restart-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	pid = spawn_meterd(t, hook_url, log, 1);
	CHECK(pid > 0);
	CHECK_I64(wait_delivered(db, WEBHOOK_CLAIM_MS + 15000), 0);
	cu_sleep_ms(500);
	for (int i = 0; i < n; i++) {
		int d = delivered(ids[i]) - base[i];

		CHECK(d >= 1);
		if (done[i])
			CHECK_I64(d, 1);
		if (d > 1) {
			CHECK_I64(d, 2);
			again++;
		}
	}
	printf("webhook: after the restart %d event(s) sent again\n", again);
	CHECK_I64(again, answered - recorded);
	CHECK(again <= KILL_CONC);
	stop_meterd(pid);
}

/* One record of a round that fails (its event's row locked past meterd's
 * 1 s statement timeout while the round's POSTs were answered) leaves the
 * others recorded, not sent again: only its own event stays due. No
 * meterd may be running. */
static void test_record_failed(struct apitest *t, const char *hook_url, const char *acc,
			       const char *key)
{
	char log[512], id[64] = "";
	PGconn *db = t->db.conn, *locker = PQconnectdb(t->db.url);
	PGresult *res;
	pid_t pid;

	CHECK(PQstatus(locker) == CONNECTION_OK);
	outbox_clear(db);
	set_slow(1500);
	due_events(db, acc, key, "record-", 4);
	/* The round's first, as the claim most likely takes them. */
	res = PQexec(db, "SELECT event_id FROM webhook_outbox WHERE dedup_key LIKE 'record-%'"
			 " ORDER BY ctid LIMIT 1");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	snprintf(log, sizeof(log), "%s/test-webhook-record-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	setenv("METER_DB_STATEMENT_TIMEOUT_MS", "1000", 1);
	pid = spawn_meterd(t, hook_url, log, 4);
	unsetenv("METER_DB_STATEMENT_TIMEOUT_MS");
	CHECK(pid > 0);
	CHECK_I64(wait_inflight(4), 4);
	/* Claimed and being answered: its row now locked until after the
	 * answers come (1.5 s) and its record times out (1 s). */
	{
		char sql[200];

		snprintf(sql, sizeof(sql),
			 "BEGIN; SELECT 1 FROM webhook_outbox WHERE event_id = '%s' FOR UPDATE",
			 id);
		cu_sql(locker, sql);
	}
	cu_sleep_ms(3500);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE dedup_key LIKE 'record-%%'"
			     " AND delivered_at IS NOT NULL AND event_id <> '%s'",
			     id),
		  3);
	cu_sql(locker, "COMMIT");
	PQfinish(locker);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE event_id = '%s'"
			     " AND delivered_at IS NULL",
			     id),
		  1);
	set_slow(0);
	stop_meterd(pid);
}

/* The deliverer's connection ended (the server restarted, say) while a
 * round's POSTs were answered: it connects again and records them, so
 * none is sent again (before, each was, once its claim lapsed 15 s
 * later). No meterd may be running. */
static void test_record_reconnect(struct apitest *t, const char *hook_url, const char *acc,
				  const char *key)
{
	char log[512], ids[3][40];
	PGconn *db = t->db.conn;
	PGresult *res;
	int n = 0;
	long long recorded = -1;
	pid_t pid;

	outbox_clear(db);
	set_slow(1500);
	due_events(db, acc, key, "reconnect-", 3);
	res = PQexec(db, "SELECT event_id FROM webhook_outbox WHERE dedup_key LIKE 'reconnect-%'");
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		for (n = 0; n < PQntuples(res) && n < 3; n++)
			snprintf(ids[n], sizeof(ids[n]), "%s", PQgetvalue(res, n, 0));
	PQclear(res);
	CHECK_I64(n, 3);
	snprintf(log, sizeof(log), "%s/test-webhook-reconnect-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	pid = spawn_meterd(t, hook_url, log, 3);
	CHECK(pid > 0);
	CHECK_I64(wait_inflight(3), 3);
	/* The session that claimed them, ended while they are answered. */
	CHECK_I64(cu_sql_int(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
				 " WHERE datname = current_database() AND pid <> pg_backend_pid()"
				 " AND query LIKE 'WITH due AS (SELECT account_id, event_id FROM"
				 " webhook_outbox%%'"),
		  1);
	/* Answered after 1.5 s, recorded at once, far within the claim. */
	for (int waited = 0; waited < 4000 && recorded != 3; waited += 100) {
		cu_sleep_ms(100);
		recorded = cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE dedup_key LIKE"
					  " 'reconnect-%%' AND delivered_at IS NOT NULL");
	}
	CHECK_I64(recorded, 3);
	for (int i = 0; i < n; i++)
		CHECK_I64(delivered(ids[i]), 1);
	set_slow(0);
	stop_meterd(pid);
}

/* True when the file at path holds text. */
static bool file_has(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	char buf[65536];
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return strstr(buf, text) != NULL;
}

/* A database that took no writes for a while (default_transaction_read_only,
 * as on a standby), then takes them again with no restart: the deliverer,
 * whose session made meanwhile kept the setting for life, makes a new one
 * and delivers (before, it never did until its session broke). No meterd
 * may be running. */
static void test_read_only_database(struct apitest *t, const char *hook_url, const char *acc,
				    const char *key)
{
	char log[512], sql[256];
	PGconn *db = t->db.conn;
	bool refused = false;
	pid_t pid;

	outbox_clear(db);
	snprintf(log, sizeof(log), "%s/test-webhook-read-only-%d.log",
		 getenv("METER_BIN_DIR") ?: "/tmp", (int)getpid());
	pid = spawn_meterd(t, hook_url, log, 2);
	CHECK(pid > 0);
	cu_sleep_ms(1000);
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" SET default_transaction_read_only = on",
		 t->db.name);
	cu_sql(db, sql);
	/* Every session of meterd made again, read-only. */
	cu_sql(db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
		   " WHERE datname = current_database() AND pid <> pg_backend_pid()");
	for (int waited = 0; waited < 15000 && !refused; waited += 100) {
		cu_sleep_ms(100);
		refused = file_has(log, "webhook: the database takes no writes");
	}
	CHECK(refused);
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" RESET default_transaction_read_only",
		 t->db.name);
	cu_sql(db, sql);
	due_events(db, acc, key, "read-only-", 2);
	/* Within the deliverer's longest backoff (5 s) and a round. */
	CHECK_I64(wait_delivered(db, 10000), 0);
	CHECK(file_has(log, "webhook: the database takes writes again"));
	stop_meterd(pid);
}

int main(void)
{
	struct apitest t;
	struct apitest_resp r;
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *info;
	char hook_url[128], env_url[160], acc[65], key[65], token[APITEST_TOKEN_MAX], day[40],
	    zone[16];
	char ids[2][64] = {"", ""}, log[512];
	const char *env[4] = {env_url, "METER_WEBHOOK_SECRET=" SECRET, "METER_LEASE_GRACE_S=3",
			      NULL};
	int spend_events = 0, outrun_events = 0;
	pid_t pid;
	PGconn *db;

	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
			     NULL, NULL, on_hook, NULL, MHD_OPTION_SOCK_ADDR, NULL,
			     MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL, MHD_OPTION_END);
	if (!d)
		return 1;
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(hook_url, sizeof(hook_url), "http://127.0.0.1:%u/hook", (unsigned)info->port);
	snprintf(env_url, sizeof(env_url), "METER_WEBHOOK_URL=%s", hook_url);
	if (apitest_start(&t, "webhook", 2, NULL, env) < 0) {
		MHD_stop_daemon(d);
		return 1;
	}
	db = t.db.conn;
	/* Before any POST or check, each counter's series is listed at 0 (an
	 * alert on it sees a value, not a missing series). */
	for (int i = 0; i < 2; i++) {
		static const char *const zero[] = {
		    "\nmeter_webhook_deliveries_total{outcome=\"delivered\"} 0\n",
		    "\nmeter_webhook_deliveries_total{outcome=\"failed\"} 0\n",
		    "\nmeter_check_batches_total{path=\"fast\"} 0\n",
		    "\nmeter_check_batches_total{path=\"fast_differed\"} 0\n",
		    "\nmeter_check_batches_total{path=\"classic\"} 0\n",
		    "\nmeter_http_slow_requests_cut_total 0\n",
		    "\n# HELP meter_http_slow_requests_cut_total Connections cut off"};

		CHECK(apitest_call(&t, i, "GET", "/metrics", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		for (size_t z = 0; z < sizeof(zero) / sizeof(zero[0]); z++)
			if (!r.body || !strstr(r.body, zero[z])) {
				fprintf(stderr, "not listed at 0:%s", zero[z]);
				CHECK(false);
			}
		apitest_resp_release(&r);
	}
	CHECK(apitest_create_account(&t, "Hooked", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 100000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "wh-1", 2, 4096, 900, NULL, &r), 200); /* hold 20,000 */
	snprintf(day, sizeof(day), "'%s'::date", apitest_json_str(&r, "day") ?: "");
	apitest_resp_release(&r);

	/* The receiver fails twice; metering spends 150,000 on the hold of
	 * 20,000: the key-day passes its limit and the hold is outrun. */
	pthread_mutex_lock(&mu);
	fail_next = 2;
	pthread_mutex_unlock(&mu);
	spend(db, acc, key, "wh-1", day, 150000);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox"), 2);
	CHECK_I64(wait_delivered(db, 20000), 0);
	CHECK(total_requests() >= 4);
	CHECK_I64(cu_sql_int(db, "SELECT sum(attempts) FROM webhook_outbox"), total_requests());
	CHECK(cu_sql_int(db, "SELECT max(attempts) FROM webhook_outbox") >= 2);

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreqs; i++) {
		json_error_t je;
		json_t *b = json_loads(reqs[i].body, 0, &je);
		const char *type = json_string_value(json_object_get(b, "type"));
		json_t *data = json_object_get(b, "data");

		CHECK(signature_ok(&reqs[i]));
		CHECK_STR(json_string_value(json_object_get(b, "event_id")), reqs[i].event_id);
		CHECK_STR(json_string_value(json_object_get(b, "account_id")), acc);
		CHECK_STR(json_string_value(json_object_get(b, "key_id")), key);
		if (reqs[i].status == 200 && type && strcmp(type, "spend_limit_crossed") == 0) {
			spend_events++;
			CHECK_I64(cu_jint(data, "spent_micros"), 150000);
			/* As committed: the hold's 20,000 was consumed. */
			CHECK_I64(cu_jint(data, "held_micros"), 0);
			CHECK_I64(cu_jint(data, "limit_micros"), 100000);
			snprintf(ids[0], sizeof(ids[0]), "%.63s", reqs[i].event_id);
		} else if (reqs[i].status == 200 && type && strcmp(type, "hold_outrun") == 0) {
			outrun_events++;
			CHECK_I64(cu_jint(data, "amount_micros"), 20000);
			CHECK_I64(cu_jint(data, "outrun_micros"), 130000);
			CHECK_STR(json_string_value(json_object_get(data, "sandbox_id")), "wh-1");
			snprintf(ids[1], sizeof(ids[1]), "%.63s", reqs[i].event_id);
		}
		json_decref(b);
	}
	pthread_mutex_unlock(&mu);
	CHECK_I64(spend_events, 1);
	CHECK_I64(outrun_events, 1);
	CHECK_I64(delivered(ids[0]), 1);
	CHECK_I64(delivered(ids[1]), 1);

	/* More spend on the same key-day and hold: no new events. */
	spend(db, acc, key, "wh-1", day, 1000);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox"), 2);

	test_metrics(&t, acc, key);
	test_lease_ended(&t, acc);
	test_resumed_without_wake(&t, acc);
	test_paused_running(&t, acc);
	test_holds_reads(&t);
	test_lease_ended_lagging(&t, acc);
	test_woken_after_resume(&t, acc);
	test_crossings(&t, acc);
	test_slow_body(&t, acc, key);
	test_lapsed_claim(&t, acc, key);
	test_rounds(&t, acc, key);
	test_gate_closes(&t, acc, key);

	/* Restart: stop both servers, start another; nothing is sent again. */
	CHECK(apitest_stop(&t) == 0);
	snprintf(log, sizeof(log), "%s/test-webhook-%d.log", getenv("METER_BIN_DIR") ?: "/tmp",
		 (int)getpid());
	pid = spawn_meterd(&t, hook_url, log, SLOW_CONC);
	CHECK(pid > 0);
	{
		int before = total_requests();
		cu_sleep_ms(2500);
		CHECK_I64(total_requests(), before);
	}
	/* A new event (the next day's spend passes its limit at once) is
	 * delivered by the new process, once. */
	{
		long long events = cu_sql_int(db, "SELECT count(*) FROM webhook_outbox");

		spend(db, acc, key, "wh-1", "current_date + 5", 100000);
		CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox"), events + 1);
	}
	CHECK_I64(wait_delivered(db, 10000), 0);
	{
		char id[64] = "";
		PGresult *res = PQexec(db, "SELECT event_id FROM webhook_outbox ORDER BY created_at"
					   " DESC, event_id LIMIT 1");
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		cu_sleep_ms(1000);
		CHECK_I64(delivered(id), 1);
	}
	/* A slow receiver (3 s an answer) and 20 due events: sending them all
	 * takes a while, but SIGTERM stops meterd after the round in flight. */
	set_slow(3000);
	{
		int before = total_requests();
		long long t0;

		due_events(db, acc, key, "slow-", 20);
		for (int i = 0; i < 100 && total_requests() == before; i++)
			cu_sleep_ms(50);
		CHECK(total_requests() > before);
		t0 = (long long)apitest_now();
		stop_meterd(pid);
		printf("webhook: meterd stopped %lld s after SIGTERM with a slow receiver\n",
		       (long long)apitest_now() - t0);
		CHECK((long long)apitest_now() - t0 <= 8);
		/* What was not delivered is still due. */
		CHECK(cu_sql_int(
			  db, "SELECT count(*) FROM webhook_outbox WHERE delivered_at IS NULL") >=
		      20 - 2 * SLOW_CONC);
	}
	set_slow(0);
	test_kill(&t, hook_url, acc, key);
	test_record_failed(&t, hook_url, acc, key);
	test_record_reconnect(&t, hook_url, acc, key);
	test_read_only_database(&t, hook_url, acc, key);
	test_wrong_secret(&t, hook_url, acc, key);
	apitest_drop(&t);
	MHD_stop_daemon(d);
	pthread_mutex_lock(&mu);
	/* Every POST as api/openapi.json's webhooks describe it, but for the
	 * events this test wrote to the outbox itself (their data is {}). */
	{
		static const char *const kinds[] = {"spend_limit_crossed", "hold_consumed",
						    "lease_ended", "resumed_without_wake",
						    "running_while_paused"};
		int held = 0, seen[5] = {0};

		for (int i = 0; i < nreqs; i++) {
			char hdrs[320];
			int w;
			json_t *b = json_loads(reqs[i].body, 0, NULL);
			json_t *data = json_object_get(b, "data");
			bool own = json_is_object(data) && json_object_size(data) == 0;
			const char *kind = json_string_value(json_object_get(data, "reason"));

			if (!kind)
				kind = json_string_value(json_object_get(b, "type"));
			for (size_t k = 0; kind && k < sizeof(kinds) / sizeof(kinds[0]); k++)
				seen[k] += !own && strcmp(kind, kinds[k]) == 0;
			json_decref(b);
			if (own)
				continue;
			w = snprintf(hdrs, sizeof(hdrs),
				     "Meter-Event-Id: %s\r\nMeter-Signature: %s\r\n",
				     reqs[i].event_id, reqs[i].signature);
			CHECK(w > 0 && (size_t)w < sizeof(hdrs));
			CHECK(apitest_webhook_conforms(hdrs, reqs[i].body));
			held++;
		}
		/* Each kind of event was among them. */
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			fprintf(stderr, "webhook POSTs of %s held to the document: %d\n", kinds[k],
				seen[k]);
			CHECK(seen[k] > 0);
		}
		CHECK(held > 0);
	}
	for (int i = 0; i < nreqs; i++)
		free(reqs[i].body);
	pthread_mutex_unlock(&mu);
	return check_done();
}
