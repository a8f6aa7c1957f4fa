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
 *    of one sandbox. A pause, a running event, a running event dated back
 *    in the history and a pause dated back there each read a few dozen
 *    pages of the database, counted with EXPLAIN (ANALYZE, BUFFERS), not
 *    the sandbox's every event and hold (hundreds of pages); and each
 *    leaves the row as the reference query says. A sample that finds the
 *    paused sandbox running reports its latest hold, reading a few of its
 *    holds, not all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "migrate.h"
#include "testdb.h"

#define SCENARIOS  600
#define CYCLES	   10000
#define MOST_PAGES 150 /* pages one event may read in the long history */

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

/* The long history: a pause then a running event each two minutes, each
 * running event with a settled hold, the last one 10 minutes ago. */
static const char long_history[] =
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " SELECT 'acc', 'long', 'key', 1, 1024, 'running',"
    "  now() - (%d * 2 + 10) * interval '1 minute', now() - interval '9 minutes',"
    "  now() + interval '6 minutes';"
    "INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)"
    " SELECT 'acc', 'long', k.type,"
    "  now() - (%d * 2 + 10) * interval '1 minute' + (g * 2 + k.o) * interval '1 minute'"
    " FROM generate_series(0, %d - 1) g, (VALUES ('paused', 0), ('running', 1)) k(type, o);"
    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, status,"
    "  lease_starts_at, lease_ends_at, settled_at)"
    " SELECT 'acc', 'key', 'long', current_date - 1, 1000, 'settled',"
    "  now() - (%d * 2 + 10) * interval '1 minute' + (g * 2 + 1) * interval '1 minute',"
    "  now() - (%d * 2 + 10) * interval '1 minute' + (g * 2 + 16) * interval '1 minute',"
    "  now() - (%d * 2 + 10) * interval '1 minute' + (g * 2 + 2) * interval '1 minute'"
    " FROM generate_series(0, %d - 1) g;"
    /* And one with no history, whose first event plans the function. */
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " VALUES ('acc', 'short', 'key', 1, 1024, 'running', now() - interval '1 hour',"
    "  now() - interval '1 hour', now() + interval '6 minutes');"
    "ANALYZE holds; ANALYZE lifecycle_events; ANALYZE sandboxes;"
    "CREATE FUNCTION pg_temp.pages(q text) RETURNS bigint LANGUAGE plpgsql AS $$"
    " DECLARE j json; BEGIN"
    " EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;"
    " RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint"
    " + (j->0->'Plan'->>'Shared Read Blocks')::bigint; END $$;";

static long long sql_int(PGconn *conn, const char *sql)
{
	char v[32];

	testdb_query_text(conn, sql, v, sizeof(v));
	return v[0] ? strtoll(v, NULL, 10) : -1;
}

/* Records an event of 'long' at `at` (an SQL expression), and checks the
 * pages it read and the row it left. */
static void long_event(PGconn *conn, const char *type, const char *at)
{
	char sql[512], row[128], ref[128];
	long long pages;

	snprintf(sql, sizeof(sql),
		 "SELECT pg_temp.pages(format('SELECT * FROM meter_sandbox_event(''long'', %%L,"
		 " %%L, 3)', '%s', %s))",
		 type, at);
	pages = sql_int(conn, sql);
	fprintf(stderr, "%s at %s: %lld pages\n", type, at, pages);
	CHECK(pages > 0 && pages <= MOST_PAGES);
	testdb_query_text(
	    conn, "SELECT state || ' ' || state_since FROM sandboxes WHERE sandbox_id = 'long'",
	    row, sizeof(row));
	testdb_query_text(conn, "SELECT kind || ' ' || since FROM pg_temp.line_end('long')", ref,
			  sizeof(ref));
	CHECK_STR(row, ref);
}

/* Rows of holds read in this transaction. */
static const char holds_read[] = "SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0)"
				 " FROM pg_stat_xact_user_tables WHERE relname = 'holds'";

static void test_long_history(PGconn *conn)
{
	char sql[sizeof(long_history) + 64];
	long long all, before, read;

	snprintf(sql, sizeof(sql), long_history, CYCLES, CYCLES, CYCLES, CYCLES, CYCLES, CYCLES,
		 CYCLES - 1);
	CHECK_STR(testdb_exec_state(conn, sql), "00000");
	/* What reading the whole history takes. */
	all = sql_int(conn,
		      "SELECT pg_temp.pages('SELECT count(*) FROM lifecycle_events"
		      " WHERE sandbox_id = ''long''')"
		      " + pg_temp.pages('SELECT count(*) FROM holds WHERE sandbox_id = ''long''')");
	fprintf(stderr, "the whole history: %lld pages\n", all);
	CHECK(all > 2 * MOST_PAGES);

	CHECK_STR(testdb_exec_state(conn, "BEGIN"), "00000");
	/* Planned once beside the history, so that the counts below are the
	 * events' reads, not the catalog's. */
	CHECK_STR(
	    testdb_exec_state(conn, "SELECT meter_sandbox_event('short', 'paused', now(), 3)"),
	    "00000");
	long_event(conn, "paused", "now()");
	long_event(conn, "running", "now() + interval '1 s'");
	/* Dated back in the history: between a running event and the next
	 * pause, and between a pause and the next running event. */
	long_event(conn, "running", "now() - interval '30 minutes 30 s'");
	long_event(conn, "paused", "now() - interval '20 minutes 30 s'");

	/* Paused again, and then a sample finds it running with nothing to
	 * explain it: running_while_paused names the latest hold, found
	 * without reading the sandbox's holds (rows read, counted in this
	 * transaction; each of its 10,000 holds before). */
	long_event(conn, "paused", "now() + interval '2 s'");
	CHECK_STR(testdb_exec_state(
		      conn, "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at,"
			    " last_state, last_cpu_usec, last_memory_mib, last_storage_mib,"
			    " last_vcpus, price_version)"
			    " VALUES ('acc', 'long', now() + interval '3 s', 'paused', 0, 1024, 0,"
			    " 1, 1)"),
		  "00000");
	before = sql_int(conn, holds_read);
	CHECK_STR(testdb_exec_state(conn, "UPDATE sandbox_meter SET last_state = 'running',"
					  " last_sampled_at = now() + interval '4 s'"
					  " WHERE sandbox_id = 'long'"),
		  "00000");
	read = sql_int(conn, holds_read) - before;
	fprintf(stderr, "running_while_paused: %lld holds read\n", read);
	CHECK(read >= 0 && read < 50);
	CHECK_I64(sql_int(conn,
			  "SELECT count(*) FROM webhook_outbox o JOIN holds h"
			  " ON 'paused-running/' || h.hold_id = o.dedup_key"
			  " WHERE h.sandbox_id = 'long' AND h.lease_starts_at ="
			  " (SELECT max(lease_starts_at) FROM holds WHERE sandbox_id = 'long')"),
		  1);
	CHECK_STR(testdb_exec_state(conn, "ROLLBACK"), "00000");
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
