/* API: the database stopped in the middle of serving checks. A cluster of
 * the test's own (scripts/pg.sh with METER_PG_DIR / METER_PG_PORT) is
 * stopped under a running meterd: checks fail closed with 503
 * metering_unavailable, quickly and without a hold; once the cluster is back
 * the same meterd process decides checks again by itself. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "checks_util.h"

static char pg_dir[512];
static int pg_port;

/* A port nothing listens on now (the kernel's pick). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* scripts/pg.sh ACTION for the test's cluster; its stdout to out_path
 * (or /dev/null). Returns the exit status. */
static int pg(const char *action, const char *out_path)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "METER_PG_DIR='%s' METER_PG_PORT=%d bash '%s/scripts/pg.sh' %s >'%s'", pg_dir,
		 pg_port, METER_SOURCE_DIR, action, out_path ? out_path : "/dev/null");
	return system(cmd);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	struct apitest t;
	struct apitest_resp r;
	char url_file[600], acc[65], key[65], token[APITEST_TOKEN_MAX], sb[64], zone[16];
	const char *bin = getenv("METER_BIN_DIR");
	double t0;
	int recovered = 0;

	snprintf(pg_dir, sizeof(pg_dir), "%s/test-dbdown-pg-%d", bin ? bin : "/tmp", (int)getpid());
	snprintf(url_file, sizeof(url_file), "%s.url", pg_dir);
	pg_port = free_port();
	if (pg_port < 0 || pg("start", url_file) != 0) {
		fprintf(stderr, "cannot start a cluster of our own\n");
		return 1;
	}
	setenv("METER_TEST_PG_URL_FILE", url_file, 1);
	if (apitest_start(&t, "dbdown", 1, NULL, NULL) < 0) {
		pg("destroy", NULL);
		return 1;
	}
	CHECK(apitest_create_account(&t, "Outage", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "up-1", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);

	/* Stop the database under the running server. */
	CHECK(pg("stop", NULL) == 0);
	for (int i = 0; i < 5; i++) {
		snprintf(sb, sizeof(sb), "down-%d", i);
		t0 = now_s();
		CHECK_I64(cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r), 503);
		CHECK_STR(apitest_error_code(&r), "metering_unavailable");
		CHECK(now_s() - t0 < 6.0); /* fails fast, never hangs */
		apitest_resp_release(&r);
		CHECK_I64(cu_wake(&t, 0, "up-1", 60, NULL, &r), 503);
		apitest_resp_release(&r);
		cu_sleep_ms(200);
	}

	/* Back: the same process recovers on its own (backoff at most 5 s). */
	CHECK(pg("start", "/dev/null") == 0);
	t0 = now_s();
	for (int i = 0; i < 200 && now_s() - t0 < 30.0; i++) {
		snprintf(sb, sizeof(sb), "back-%d", i);
		cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r);
		if (r.status == 200)
			recovered = 1;
		else
			CHECK_I64(r.status, 503);
		apitest_resp_release(&r);
		if (recovered)
			break;
		cu_sleep_ms(250);
	}
	CHECK(recovered);

	/* A restart while no check runs: the engine's connection closed
	 * while idle is replaced at the next check, which is decided (not
	 * 503 until a backoff ends). */
	CHECK(pg("stop", NULL) == 0);
	CHECK(pg("start", "/dev/null") == 0);
	cu_sleep_ms(500);
	CHECK_I64(cu_create(&t, 0, key, "restarted-1", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(&t, 0, "restarted-1", 600, NULL, &r), 200);
	apitest_resp_release(&r);

	PQreset(t.db.conn);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds"), 4);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id LIKE "
					"'down-%%'"),
		  0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	pg("destroy", NULL);
	unlink(url_file);
	return check_done();
}
