/* Integration: a sandbox's line of running and paused items
 * (meter_sandbox_event, sql/0049, 0051, 0054).
 *
 * The line is the sandbox's creation and each hold's lease start (running,
 * rank 0) and each recorded running or paused event (rank 1) at the later
 * of its time and the creation, ordered by that time, the rank, the
 * event's own time and its id. The sandbox row's state is the line's last
 * item, and its state_since the start of the run that item ends.
 *
 * 1. Random histories: holds of every status, some begun before the
 *    creation, and events (stops among them) dated before and after it,
 *    with ties to the second, each sent in a random order. After every
 *    event the row must be what a reference query makes of the whole line,
 *    every item ordered (pg_temp.line_end below, the definition as 0049
 *    and 0051 computed it directly).
 * 2. A long history: 10,000 pauses, 10,000 running events and 10,000 holds
 *    of one sandbox, and a twin with ten of each, among 2,000 others; the
 *    same again with released holds instead of settled ones. The same
 *    events go to both of a pair: a pause, a running event, late ones
 *    dated back in the history, and two late ones that may report a resume
 *    without a wake (each asking first whether a hold covered its time),
 *    then a sample that finds the paused sandbox running (the report of
 *    its latest hold). Each reads at most MORE_PAGES pages of the database
 *    more for the long history than for the twin (counted with EXPLAIN
 *    (ANALYZE, BUFFERS), triggers included), where reading that history
 *    takes over 2,000; and each leaves the row as the reference query
 *    says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "migrate.h"
#include "testdb.h"

#define SCENARIOS  600
#define CYCLES	   10000
#define MORE_PAGES 60 /* pages more an event may read in the long history */

static const char fixture[] =
    "INSERT INTO accounts (account_id, name) VALUES ('acc', 'Line');"
    "INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
    " VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full');"
    /* Room for the open holds the scenarios make, settled by pauses. */
    "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros)"
    " VALUES ('acc', 'key', date '2026-12-05', 1000000000);"
    /* The reference: every item of the line, ordered. */
    "CREATE FUNCTION pg_temp.line_end(p_sandbox text, OUT kind text, OUT since timestamptz)"
    " LANGUAGE sql AS $$"
    " WITH c AS (SELECT s.account_id, s.created_at FROM sandboxes s"
    "            WHERE s.sandbox_id = p_sandbox),"
    " line AS ("
    "  SELECT c.created_at AS t, 0 AS rank, c.created_at AS at, 0::bigint AS id,"
    "         'running'::text AS kind FROM c"
    "  UNION ALL"
    "  SELECT h.lease_starts_at, 0, h.lease_starts_at, 0, 'running' FROM holds h, c"
    "  WHERE h.account_id = c.account_id AND h.sandbox_id = p_sandbox"
    "  UNION ALL"
    "  SELECT GREATEST(e.at, c.created_at), 1, e.at, e.event_id, e.type::text"
    "  FROM lifecycle_events e, c"
    "  WHERE e.account_id = c.account_id AND e.sandbox_id = p_sandbox"
    "    AND e.type IN ('running', 'paused')),"
    " o AS (SELECT l.*, row_number() OVER (ORDER BY l.t, l.rank, l.at, l.id) AS pos"
    "       FROM line l),"
    " f AS (SELECT o.kind FROM o ORDER BY o.pos DESC LIMIT 1)"
    " SELECT f.kind, (SELECT o.t FROM o WHERE o.pos = 1 + COALESCE("
    "   (SELECT max(x.pos) FROM o x WHERE x.kind <> f.kind), 0))"
    " FROM f $$;";

/* Random histories, each event checked against the reference as it
 * comes; raises (SQLSTATE P0001) at the first row that differs. */
static const char scenarios[] =
    "SELECT setseed(0.25);"
    "DO $$"
    "DECLARE"
    " t0 timestamptz := timestamptz '2026-12-05 12:00:00+00';"
    " sb text; nh int; ne int; ls timestamptz; st text;"
    " evs text[]; ats timestamptz[]; row_state text; row_since timestamptz; ref record;"
    " paused_ends int := 0; late int := 0;"
    "BEGIN"
    " FOR i IN 1 .. " /* SCENARIOS */;
static const char scenarios_rest[] =
    " LOOP"
    "  sb := 'line-' || i;"
    "  INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "    created_at, state_since, lease_ends_at)"
    "  VALUES ('acc', sb, 'key', 1, 1024, 'running', t0, t0, t0 + interval '60 s');"
    "  nh := floor(random() * 5)::int;"
    "  FOR j IN 1 .. nh LOOP"
    "   ls := t0 + make_interval(secs => floor(random() * 43)::int - 2);"
    "   st := (ARRAY['open', 'settled', 'released'])[1 + floor(random() * 3)::int];"
    "   INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
    "     lease_starts_at, lease_ends_at, settled_at)"
    "   VALUES ('acc', 'key', sb, date '2026-12-05', 1000, st, ls,"
    "     ls + make_interval(secs => 3 + floor(random() * 30)::int),"
    "     CASE WHEN st <> 'open' THEN ls + interval '5 s' END);"
    "  END LOOP;"
    "  ne := 1 + floor(random() * 7)::int;"
    "  evs := '{}'; ats := '{}';"
    "  FOR j IN 1 .. ne LOOP"
    "   evs := evs || (CASE WHEN random() < 0.08 THEN 'stopped'"
    "                       WHEN random() < 0.5 THEN 'running' ELSE 'paused' END);"
    "   ats := ats || (t0 + make_interval(secs => floor(random() * 48)::int - 3));"
    "  END LOOP;"
    "  FOR j IN 1 .. ne LOOP"
    "   PERFORM meter_sandbox_event(sb, evs[j], ats[j], 3);"
    "   IF j > 1 AND ats[j] < ats[j - 1] THEN late := late + 1; END IF;"
    "   SELECT s.state, s.state_since INTO row_state, row_since FROM sandboxes s"
    "    WHERE s.sandbox_id = sb;"
    "   CONTINUE WHEN row_state = 'stopped';"
    "   SELECT * INTO ref FROM pg_temp.line_end(sb);"
    "   IF (row_state, row_since) IS DISTINCT FROM (ref.kind, ref.since) THEN"
    "    RAISE EXCEPTION 'sandbox % after event % of %: row % since %, line % since %"
    " (events %, at %)', sb, j, ne, row_state, row_since, ref.kind, ref.since, evs, ats;"
    "   END IF;"
    "  END LOOP;"
    "  IF row_state = 'paused' THEN paused_ends := paused_ends + 1; END IF;"
    " END LOOP;"
    /* The histories reach both ends and late events. */
    " IF paused_ends < 100 OR paused_ends > " /* SCENARIOS */;
static const char scenarios_end[] =
    " - 100 OR late < 100 THEN"
    "  RAISE EXCEPTION 'too few kinds: % paused, % late', paused_ends, late;"
    " END IF;"
    "END $$;";

/* A history: a pause then a running event each two minutes, n of each,
 * each running event but the last with a hold, closed, the last running
 * event 11 minutes ago. The same for 'long' (CYCLES) and 'twin' (10), with
 * settled holds, and for 'rel' and 'rtwin', with released ones (a sandbox
 * that ran on past its leases' ends), so that each event can be sent to
 * both of a pair and their reads compared. */
static const char long_history[] =
    "CREATE FUNCTION pg_temp.history(p_sandbox text, n int, p_status text) RETURNS void"
    " LANGUAGE sql AS $$"
    " INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "   created_at, state_since, lease_ends_at)"
    " SELECT 'acc', p_sandbox, 'key', 1, 1024, 'running',"
    "   now() - (n * 2 + 10) * interval '1 minute', now() - interval '11 minutes',"
    "   now() + interval '6 minutes';"
    " INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
    " SELECT 'acc', p_sandbox, k.type,"
    "   now() - (n * 2 + 10) * interval '1 minute' + (g * 2 + k.o) * interval '1 minute'"
    " FROM generate_series(0, n - 1) g, (VALUES ('paused', 0), ('running', 1)) k(type, o);"
    " INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
    "   lease_starts_at, lease_ends_at, settled_at)"
    " SELECT 'acc', 'key', p_sandbox, current_date - 1, 1000, p_status,"
    "   now() - (n * 2 + 10) * interval '1 minute' + (g * 2 + 1) * interval '1 minute',"
    "   now() - (n * 2 + 10) * interval '1 minute' + (g * 2 + 16) * interval '1 minute',"
    "   now() - (n * 2 + 10) * interval '1 minute' + (g * 2 + 2) * interval '1 minute'"
    " FROM generate_series(0, n - 2) g $$;"
    /* First 2,000 sandboxes of twenty cycles each, the last hold open,
     * and the planner's statistics of them: one sandbox is a small share
     * of a service's holds and events, and the statistics stay so
     * (autovacuum is off for these tables here). With 'long' a third of
     * the holds, PostgreSQL took a sandbox's open holds from the index of
     * every open hold (holds_due_idx), which reads more pages than the
     * line itself. */
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " SELECT 'acc', 'm-' || g, 'key', 1, 1024, 'running', now() - interval '2 hours',"
    "  now() - interval '2 hours', now() + interval '10 minutes'"
    " FROM generate_series(1, 2000) g;"
    "INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
    " SELECT 'acc', 'm-' || g, k.type,"
    "  now() - interval '2 hours' + (i * 2 + k.o) * interval '1 minute'"
    " FROM generate_series(1, 2000) g, generate_series(0, 19) i,"
    "  (VALUES ('paused', 0), ('running', 1)) k(type, o);"
    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
    "  lease_starts_at, lease_ends_at, settled_at)"
    " SELECT 'acc', 'key', 'm-' || g, current_date, 1000,"
    "  CASE WHEN i = 19 THEN 'open' ELSE 'settled' END,"
    "  now() - interval '2 hours' + (i * 2 + 1) * interval '1 minute',"
    "  now() - interval '2 hours' + (i * 2 + 16) * interval '1 minute',"
    "  CASE WHEN i < 19 THEN now() - interval '2 hours' + (i * 2 + 2) * interval '1 minute' END"
    " FROM generate_series(1, 2000) g, generate_series(0, 19) i;"
    "ANALYZE holds; ANALYZE lifecycle_events; ANALYZE sandboxes;"
    "ALTER TABLE holds SET (autovacuum_enabled = false);"
    "ALTER TABLE lifecycle_events SET (autovacuum_enabled = false);"
    "ALTER TABLE sandboxes SET (autovacuum_enabled = false);"
    "SELECT pg_temp.history('long', %d, 'settled'), pg_temp.history('twin', 10, 'settled'),"
    " pg_temp.history('rel', %d, 'released'), pg_temp.history('rtwin', 10, 'released');"
    "CREATE FUNCTION pg_temp.pages(q text) RETURNS bigint LANGUAGE plpgsql AS $$"
    " DECLARE j json; BEGIN"
    " EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;"
    " RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint"
    " + (j->0->'Plan'->>'Shared Read Blocks')::bigint; END $$;"
    /* A sample that finds sb running, as ingestion takes it in (the rule
     * of sql/0057 for the resume, then the meter row), in a function so
     * that the pages they read are counted with the statement's. */
    "CREATE FUNCTION pg_temp.sample_running(sb text) RETURNS void LANGUAGE plpgsql AS $$"
    " BEGIN PERFORM meter_outbox_paused_running_at(ARRAY[m.account_id],"
    " ARRAY[m.sandbox_id], ARRAY[m.last_sampled_at], ARRAY[now() + interval '4 s'])"
    " FROM sandbox_meter m WHERE m.sandbox_id = sb;"
    " UPDATE sandbox_meter SET last_state = 'running',"
    " last_sampled_at = now() + interval '4 s' WHERE sandbox_id = sb; END $$;";

/* The pages an event of sb at `at` (an SQL expression) read; checks the
 * row it left against the reference. */
static long long event_pages(PGconn *conn, const char *sb, const char *type, const char *at)
{
	char sql[512], row[128], ref[128];
	long long pages;

	snprintf(sql, sizeof(sql),
		 "SELECT pg_temp.pages(format('SELECT * FROM meter_sandbox_event(%%L, %%L,"
		 " %%L, 3)', '%s', '%s', %s))",
		 sb, type, at);
	pages = testdb_query_int(conn, sql);
	snprintf(sql, sizeof(sql),
		 "SELECT state || ' ' || state_since FROM sandboxes WHERE sandbox_id = '%s'", sb);
	testdb_query_text(conn, sql, row, sizeof(row));
	snprintf(sql, sizeof(sql), "SELECT kind || ' ' || since FROM pg_temp.line_end('%s')", sb);
	testdb_query_text(conn, sql, ref, sizeof(ref));
	CHECK_STR(row, ref);
	return pages;
}

/* The same event to a sandbox with the long history and to its twin: the
 * long history may read a few pages more (a deeper index, a day of lease
 * starts), not its whole history. */
static void long_event(PGconn *conn, const char *const pair[2], const char *type, const char *at)
{
	long long twin = event_pages(conn, pair[1], type, at);
	long long pages = event_pages(conn, pair[0], type, at);

	fprintf(stderr, "%s: %s at %s: %lld pages (10 cycles: %lld)\n", pair[0], type, at, pages,
		twin);
	CHECK(twin > 0 && pages > 0 && pages <= twin + MORE_PAGES);
}

/* The resumes without a wake reported for sb. */
static long long resumes(PGconn *conn, const char *sb)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM webhook_outbox WHERE payload->>'sandbox_id' = '%s'"
		 " AND payload->>'reason' = 'resumed_without_wake'",
		 sb);
	return testdb_query_int(conn, sql);
}

/* A sample that finds sb running while it is recorded paused since
 * now() + 2 s: the pages it read, with its triggers'; checks that it
 * reported sb's latest hold. */
static long long paused_running(PGconn *conn, const char *sb)
{
	char sql[512];
	long long pages;

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
		 " last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version)"
		 " VALUES ('acc', '%s', now() + interval '3 s', 'paused', 0, 1024, 0, 1, 1)",
		 sb);
	CHECK_STR(testdb_exec_state(conn, sql), "00000");
	snprintf(sql, sizeof(sql), "SELECT pg_temp.pages('SELECT pg_temp.sample_running(''%s'')')",
		 sb);
	pages = testdb_query_int(conn, sql);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM webhook_outbox o JOIN holds h"
		 " ON 'paused-running/' || h.hold_id = o.dedup_key"
		 " WHERE h.sandbox_id = '%s' AND h.lease_starts_at ="
		 " (SELECT max(lease_starts_at) FROM holds WHERE sandbox_id = '%s')",
		 sb, sb);
	CHECK_I64(testdb_query_int(conn, sql), 1);
	return pages;
}

/* The same events to a pair, in a transaction rolled back after. With
 * settled holds, two of them report a resume without a wake; with
 * released ones, none (a released hold covers its whole lease). */
static void pair_events(PGconn *conn, const char *const pair[2], long long resumed)
{
	long long twin, pages;

	CHECK_STR(testdb_exec_state(conn, "BEGIN"), "00000");
	/* Planned once, so that the counts below are the events' reads, not
	 * the catalog's. */
	CHECK_STR(testdb_exec_state(conn, "SELECT meter_sandbox_event('m-1', 'paused', now(), 3)"),
		  "00000");
	long_event(conn, pair, "paused", "now()");
	long_event(conn, pair, "running", "now() + interval '1 s'");
	/* Dated back: between a running event and the next pause, and between
	 * a pause and the next running event (the hold that starts with it
	 * comes first, so no resume is reported). */
	long_event(conn, pair, "running", "now() - interval '14 minutes 30 s'");
	long_event(conn, pair, "paused", "now() - interval '13 minutes 30 s'");
	CHECK_I64(resumes(conn, pair[0]), 0);
	/* Two that may report a resume without a wake, each after asking
	 * whether a hold covered its time: a running event right after a
	 * pause, and a pause right before the last running event (the one
	 * with no hold). */
	long_event(conn, pair, "running", "now() - interval '13 minutes 45 s'");
	CHECK_I64(resumes(conn, pair[0]), resumed ? 1 : 0);
	long_event(conn, pair, "paused", "now() - interval '11 minutes 30 s'");
	CHECK_I64(resumes(conn, pair[0]), resumed);
	CHECK_I64(resumes(conn, pair[1]), resumed);

	/* Paused again, then a sample finds it running with nothing to
	 * explain it: running_while_paused names the latest hold, found
	 * without reading the sandbox's holds. */
	long_event(conn, pair, "paused", "now() + interval '2 s'");
	twin = paused_running(conn, pair[1]);
	pages = paused_running(conn, pair[0]);
	fprintf(stderr, "%s: running_while_paused: %lld pages (10 cycles: %lld)\n", pair[0], pages,
		twin);
	CHECK(twin > 0 && pages > 0 && pages <= twin + MORE_PAGES);
	CHECK_STR(testdb_exec_state(conn, "ROLLBACK"), "00000");
}

static void test_long_history(PGconn *conn)
{
	static const char *const settled[2] = {"long", "twin"}, *const released[2] = {"rel",
										      "rtwin"};
	char sql[sizeof(long_history) + 32];
	long long all;

	snprintf(sql, sizeof(sql), long_history, CYCLES, CYCLES);
	CHECK_STR(testdb_exec_state(conn, sql), "00000");
	/* What reading the whole history takes. */
	all = testdb_query_int(
	    conn, "SELECT pg_temp.pages('SELECT count(*) FROM lifecycle_events"
		  " WHERE sandbox_id = ''long''')"
		  " + pg_temp.pages('SELECT count(*) FROM holds WHERE sandbox_id = ''long''')");
	fprintf(stderr, "the whole history: %lld pages\n", all);
	CHECK(all > 4 * MORE_PAGES);
	pair_events(conn, settled, 2);
	pair_events(conn, released, 0);
}

int main(void)
{
	struct testdb db = {0};
	char err[512] = "",
	     sql[sizeof(scenarios) + sizeof(scenarios_rest) + sizeof(scenarios_end) + 32];
	int applied = 0;
	const char *state;

	if (testdb_create(&db, "eventline") != 0 ||
	    migrate_apply(db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "eventline: %s\n", err);
		CHECK(0);
		return check_done();
	}
	CHECK_STR(testdb_exec_state(db.conn, fixture), "00000");

	snprintf(sql, sizeof(sql), "%s%d%s%d%s", scenarios, SCENARIOS, scenarios_rest, SCENARIOS,
		 scenarios_end);
	state = testdb_exec_state(db.conn, sql);
	if (strcmp(state, "00000") != 0)
		fprintf(stderr, "scenarios: %s\n", PQerrorMessage(db.conn));
	CHECK_STR(state, "00000");

	testdb_drop(&db);

	/* The long history in a database of its own, as in service: the
	 * random histories' open holds are no part of it. */
	if (testdb_create(&db, "eventlong") != 0 ||
	    migrate_apply(db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "eventlong: %s\n", err);
		CHECK(0);
		return check_done();
	}
	CHECK_STR(testdb_exec_state(db.conn, fixture), "00000");
	test_long_history(db.conn);
	testdb_drop(&db);
	return check_done();
}
