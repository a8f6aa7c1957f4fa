/* The collector over two host agents (libmicrohttpd servers in this process)
 * while a sandbox moves from one host to the other: in one round, host A
 * reports it for the last time and host B for the first, with B's CPU
 * counter started over. The collector ingests over two connections, its
 * hosts split between them; a sandbox seen on both must still be ingested in
 * one call, its samples in time order, so that A's last interval is billed
 * and B's counter is taken as a reset. In two concurrent calls B's could
 * commit first, A's later samples be ignored as out of order, and A's CPU
 * never be billed. Real PostgreSQL, real HTTP on 127.0.0.1. */
#include <curl/curl.h>
#include <limits.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "check.h"
#include "collector.h"
#include "migrate.h"
#include "testdb.h"

#define SEC INT64_C(1000000)

static PGconn *conn;
static atomic_int served[2];	     /* requests taken by A and B */
static atomic_int move_at = INT_MAX; /* a host's request of this number on: the move */
static int64_t t0;		     /* the first sample's time */

static int64_t real_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0)
		;
}

static int64_t q64(const char *sql)
{
	PGresult *r = PQexec(conn, sql);
	int64_t v = -1;

	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

#define FILLERS 3000 /* other sandboxes of host A: its call takes longer than B's */

/* Host A: the sandbox at t0 (cpu 0), then at t0 + 10 s (8 s of CPU used),
 * beside FILLERS others. Host B: nothing, then the sandbox at t0 + 20 s with
 * its counter at 1 s. In two concurrent calls B's, much the smaller, would
 * update the sandbox first. */
static char *doc(char host, int ph)
{
	char at[40];
	int64_t when = host == 'A' ? (ph ? t0 + 10 * SEC : t0) : t0 + 20 * SEC;
	int64_t cpu = host == 'A' ? (ph ? 8 * SEC : 0) : 1 * SEC;
	size_t cap = 256 + (size_t)FILLERS * 160, n = 0;
	char *text = malloc(cap);

	if (!text)
		return NULL;
	agent_doc_format_time(when, at, sizeof(at));
	n += (size_t)snprintf(text + n, cap - n,
			      "{\"host_id\":\"host-%c\",\"sampled_at\":\"%s\",\"sandboxes\":[",
			      host == 'A' ? 'a' : 'b', at);
	if (host == 'A' || ph)
		n += (size_t)snprintf(text + n, cap - n,
				      "{\"sandbox_id\":\"sbx_moving\",\"key_id\":\"km\","
				      "\"state\":\"running\",\"vcpus\":2,\"memory_mib\":1024,"
				      "\"cpu_usec\":%lld}",
				      (long long)cpu);
	for (int i = 0; host == 'A' && i < FILLERS; i++)
		n += (size_t)snprintf(text + n, cap - n,
				      ",{\"sandbox_id\":\"sbx_fill_%d\",\"key_id\":\"km\","
				      "\"state\":\"running\",\"vcpus\":1,\"memory_mib\":256,"
				      "\"cpu_usec\":%lld}",
				      i, (long long)(ph ? SEC : 0));
	snprintf(text + n, cap - n, "]}");
	return text;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **state)
{
	const char *host = cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char *text;

	(void)url;
	(void)method;
	(void)version;
	(void)upload;
	(void)upload_size;
	if (!*state) {
		*state = c; /* headers seen; answer on the next call */
		return MHD_YES;
	}
	/* The n-th request of each host is of the n-th round (no request
	 * fails here), so both hosts switch in the same round. */
	text = doc(*host,
		   atomic_fetch_add(&served[*host == 'A' ? 0 : 1], 1) + 1 >= atomic_load(&move_at));
	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

static struct MHD_Daemon *serve(const char *host, int *port)
{
	struct MHD_Daemon *d =
	    MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
			     on_request, (void *)host, MHD_OPTION_SOCK_ADDR, NULL, MHD_OPTION_END);
	const union MHD_DaemonInfo *info;

	*port = 0;
	if (!d)
		return NULL;
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : 0;
	return d;
}

/* Waits up to 20 s for sql to answer want. */
static bool wait_for(const char *sql, int64_t want)
{
	for (int i = 0; i < 200; i++) {
		if (q64(sql) == want)
			return true;
		sleep_ms(100);
	}
	return false;
}

int main(void)
{
	struct testdb db;
	struct MHD_Daemon *a = NULL, *b = NULL;
	struct collector *coll = NULL;
	char agents[128], err[512], sql[256];
	int pa, pb, applied;

	if (testdb_create(&db, "collector_moved") != 0)
		return 1;
	conn = db.conn;
	CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
	CHECK(migrate_apply(conn, &applied, err, sizeof(err)) == METER_OK);
	CHECK_STR(testdb_exec_state(conn, "INSERT INTO accounts (account_id, name)"
					  " VALUES ('acct_m', 'm')"),
		  "00000");
	CHECK_STR(testdb_exec_state(conn, "INSERT INTO api_keys (account_id, key_id, secret_hash,"
					  " role) VALUES ('acct_m', 'km',"
					  " decode(repeat('ab', 32), 'hex'), 'full')"),
		  "00000");
	t0 = (real_usec() / SEC - 300) * SEC; /* whole seconds, 5 minutes ago */
	a = serve("A", &pa);
	b = serve("B", &pb);
	CHECK(a && b && pa > 0 && pb > 0);
	snprintf(agents, sizeof(agents), "http://127.0.0.1:%d/a,http://127.0.0.1:%d/b", pa, pb);
	{
		struct collector_opts o = {.database_url = db.url,
					   .statement_timeout_ms = 10000,
					   .period_s = 1,
					   .agents = agents,
					   .agent_timeout_ms = 2000,
					   .backlog_max = 100000,
					   .connections = 2};
		CHECK(collector_start(&o, &coll, err, sizeof(err)) == METER_OK);
		CHECK(coll != NULL);
	}
	/* The first sample, from A alone, then the round of the move. */
	CHECK(wait_for("SELECT count(*) FROM sandbox_meter WHERE sandbox_id = 'sbx_moving'", 1));
	/* The move two rounds on: each host's request of that number, so that
	 * one round serves both new documents whatever the threads' timing. */
	atomic_store(&move_at, atomic_load(&served[0]) + 2);
	snprintf(sql, sizeof(sql),
		 "SELECT extract(epoch FROM last_sampled_at)::bigint FROM sandbox_meter"
		 " WHERE sandbox_id = 'sbx_moving'");
	CHECK(wait_for(sql, (t0 + 20 * SEC) / SEC));
	collector_stop(coll);
	coll = NULL;
	/* Both samples of the move stored; A's 8 s and B's 1 s (a reset) billed. */
	CHECK_I64(q64("SELECT count(*) FROM samples WHERE sandbox_id = 'sbx_moving'"), 3);
	CHECK_I64(
	    q64("SELECT sum(cpu_used_mcus) FROM usage_hourly WHERE sandbox_id = 'sbx_moving'"),
	    9 * INT64_C(1000) * SEC);
	CHECK_I64(q64("SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id = 'sbx_moving'"),
		  20 * SEC);
	MHD_stop_daemon(a);
	MHD_stop_daemon(b);
	curl_global_cleanup();
	testdb_drop(&db);
	return check_done();
}
