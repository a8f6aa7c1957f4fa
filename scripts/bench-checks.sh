#!/usr/bin/env bash
# Benchmark of the check engine (POST /v1/checks/create, group commit)
# beside the naive baseline, in one run on this machine, loopback only:
#   (a) wrk, 32 connections, ~15 s: every check on one hot key;
#   (b) wrk, 32 connections, ~15 s: checks spread over 1,000 keys;
#   (c) pgbench, 32 clients, ~15 s: the naive single-statement conditional
#       UPDATE of one key's row, one transaction per check.
# Then two bounds of this machine, not checks, for what a faster design
# could reach:
#   (d) wrk, 32 connections: checks that fail validation (400), so meterd's
#       HTTP path (auth, body, JSON) with wrk and no database work;
#   (e) pgbench, 1 client: per transaction, lock a ledger row, insert 16 lean
#       check rows (a primary key and nothing else), update the row, commit.
# First a warm-up as long as one run (create checks on the hot key, with
# leases that outlast the benchmark), so that the runs meet the cluster as
# it runs for real rather than as initdb left it: a fresh cluster has no
# WAL files to reuse and writes and flushes a new 16 MB one for about
# every second of checks, and its tables go through one autovacuum after
# another while they are small.
# Durable throughout: fsync on, synchronous_commit on (PostgreSQL defaults,
# and the engine sets it on its connection). Each run starts right after a
# CHECKPOINT, so that none of them pays for the writes of the one before it
# (the full-page images a checkpoint in the middle of a run makes every
# first change of a page write to the WAL). A Release build into
# build-bench/ and a PostgreSQL cluster of its own, removed at the end.
#   scripts/bench-checks.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-15}
conns=32
build=${METER_BENCH_BUILD:-$root/build-bench}
work=$(mktemp -d /tmp/meter-bench-checks.XXXXXX)
chmod 755 "$work"
meterd_pid=

# A port no one listens on, below the kernel's range of ports for outgoing
# connections: one of those may be bound by a client (a connection to the
# database, say) and so refuse a listener.
free_port() {
	local low p
	low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	((low > 22000)) || low=32768
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % (low - 20000)))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	return 1
}

export METER_PG_DIR=$work/pg
METER_PG_PORT=$(free_port)
export METER_PG_PORT
cleanup() {
	[[ -n $meterd_pid ]] && kill -TERM "$meterd_pid" 2>/dev/null && wait "$meterd_pid" 2>/dev/null
	cp "$work/meterd.log" "${TMPDIR:-/tmp}/meter-bench-checks-meterd.log" 2>/dev/null || true
	bash "$root/scripts/pg.sh" destroy >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

bash "$root/scripts/setup.sh" bench
echo "building Release into $build ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DMETER_WERROR=ON
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

url=$(bash "$root/scripts/pg.sh" start)
"$build/meterctl" migrate --database-url "$url" >/dev/null 2>&1
psql "$url" -qAt -v ON_ERROR_STOP=1 <<'SQL'
SELECT 'fsync=' || current_setting('fsync') || ' synchronous_commit=' ||
       current_setting('synchronous_commit');
INSERT INTO accounts (account_id, name) VALUES ('bench', 'Benchmark');
INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros)
	SELECT 'bench', 'k' || g, sha256(('k' || g)::bytea), 'full', 1000000000000000
	FROM generate_series(0, 999) g;
INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros)
	VALUES ('bench', 'hot', sha256('hot'::bytea), 'full', 1000000000000000);
-- The naive baseline: one row per key, one conditional UPDATE per check.
CREATE TABLE naive_ledger (key_id text PRIMARY KEY, spent bigint NOT NULL, held bigint NOT NULL,
			   lim bigint NOT NULL);
INSERT INTO naive_ledger VALUES ('hot', 0, 0, 1000000000000000);
-- (e): one lean row per check, no foreign key, no domain, one index.
CREATE TABLE lean_checks (account_id text NOT NULL, sandbox_id text NOT NULL,
			  key_id text NOT NULL, day date NOT NULL, amount_micros bigint NOT NULL,
			  lease_ends_at timestamptz NOT NULL, created_at timestamptz NOT NULL,
			  request_sha256 bytea NOT NULL, response jsonb NOT NULL,
			  PRIMARY KEY (account_id, sandbox_id));
CREATE SEQUENCE lean_seq;
SQL

token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
port=$(free_port)
METER_DATABASE_URL=$url METER_CONTROL_PLANE_TOKEN=$token METER_LOG_LEVEL=${METER_BENCH_LOG_LEVEL:-warn} \
	"$build/meterd" --listen "127.0.0.1:$port" >"$work/meterd.log" 2>&1 &
meterd_pid=$!
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done

checkpoint() { psql "$url" -qAt -c CHECKPOINT; }
run_wrk() {
	checkpoint
	METER_BENCH_TOKEN=$token wrk -t2 -c"$conns" -d"${secs}s" --latency \
		-s "$root/scripts/bench/checks.lua" "http://127.0.0.1:$port" -- "$1" |
		grep '^RESULT'
}
echo "warm-up, ${secs}s ..."
METER_BENCH_TOKEN=$token wrk -t2 -c"$conns" -d"${secs}s" -s "$root/scripts/bench/checks.lua" \
	"http://127.0.0.1:$port" -- warm >/dev/null
echo "(a) hot key, $conns connections, ${secs}s ..."
hot=$(run_wrk hot)
echo "(b) 1,000 keys, $conns connections, ${secs}s ..."
spread=$(run_wrk spread)

echo "(c) pgbench: naive conditional UPDATE of one key's row, $conns clients, ${secs}s ..."
cat >"$work/naive.sql" <<'SQL'
UPDATE naive_ledger SET held = held + 1000
	WHERE key_id = 'hot' AND spent + held + 1000 <= lim;
SQL
checkpoint
(cd "$work" && PGPASSWORD=$(cat "$METER_PG_DIR/password") "$pgbin/pgbench" -n -h 127.0.0.1 \
	-p "$METER_PG_PORT" -U meter -c "$conns" -j 2 -T "$secs" -f "$work/naive.sql" -l \
	--log-prefix="$work/pgb" meter >"$work/pgbench.out" 2>&1) ||
	{ cat "$work/pgbench.out" >&2; exit 1; }
pg_tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.out" | head -1)
cat "$work"/pgb.* | awk '{print $3}' | sort -n >"$work/lat"
n=$(wc -l <"$work/lat")
pg_p50=$(awk -v n="$n" 'NR == int(n * 0.50) + 1 {printf "%.2f", $1 / 1000}' "$work/lat")
pg_p99=$(awk -v n="$n" 'NR == int(n * 0.99) + 1 {printf "%.2f", $1 / 1000}' "$work/lat")

echo "(d) bound: meterd's HTTP path alone, $conns connections, ${secs}s ..."
invalid=$(run_wrk invalid)
echo "(e) bound: 16 lean rows per transaction, 1 pgbench client, ${secs}s ..."
cat >"$work/lean.sql" <<'SQL'
BEGIN;
SELECT held, lim FROM naive_ledger WHERE key_id = 'hot' FOR UPDATE;
INSERT INTO lean_checks
	SELECT 'bench', 's' || s.n || '-' || g, 'hot', current_date, 1000,
	       now() + interval '60 s', now(), sha256(g::text::bytea),
	       '{"allowed":true,"hold_micros":1000,"lease_max_cost_micros":1000,"day":"2026-11-30","day_spent_micros":0,"day_held_micros":1000,"daily_limit_micros":1000000000000000}'
	FROM generate_series(1, 16) g, (SELECT nextval('lean_seq') AS n) s;
UPDATE naive_ledger SET held = held + 16000 WHERE key_id = 'hot';
COMMIT;
SQL
checkpoint
(cd "$work" && PGPASSWORD=$(cat "$METER_PG_DIR/password") "$pgbin/pgbench" -n -h 127.0.0.1 \
	-p "$METER_PG_PORT" -U meter -c 1 -j 1 -T "$secs" -f "$work/lean.sql" meter \
	>"$work/lean.out" 2>&1) || { cat "$work/lean.out" >&2; exit 1; }
lean_tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/lean.out" | head -1)

# What the engine wrote must match what it answered.
# Sandbox ids carry the run's name (b-hot-..., b-spread-...).
made() {
	psql "$url" -qAt -c "SELECT count(DISTINCT sandbox_id) FROM holds WHERE sandbox_id LIKE 'b-$1-%'"
}
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

echo
printf '%-44s %12s %9s %9s\n' "run ($conns connections, ${secs}s, durable)" "checks/s" "p50 ms" "p99 ms"
printf '%-44s %12s %9s %9s\n' "(a) meterd group commit, one hot key" "$(field "$hot" rps)" \
	"$(field "$hot" p50_ms)" "$(field "$hot" p99_ms)"
printf '%-44s %12s %9s %9s\n' "(b) meterd group commit, 1,000 keys" "$(field "$spread" rps)" \
	"$(field "$spread" p50_ms)" "$(field "$spread" p99_ms)"
printf '%-44s %12.0f %9s %9s\n' "(c) pgbench naive UPDATE, one hot key" "$pg_tps" "$pg_p50" "$pg_p99"
echo
echo "ratio (a) / (c): $(awk -v a="$(field "$hot" rps)" -v c="$pg_tps" 'BEGIN {printf "%.1fx", a / c}')"
echo "ratio (b) / (c): $(awk -v a="$(field "$spread" rps)" -v c="$pg_tps" 'BEGIN {printf "%.1fx", a / c}')"
# The issue's target, judged on the hot key: at least 10x (c), p99 at most 10 ms.
echo "target (a) >= 10x (c) and (a) p99 <= 10 ms: $(awk -v a="$(field "$hot" rps)" -v c="$pg_tps" \
	-v p="$(field "$hot" p99_ms)" 'BEGIN {print (a >= 10 * c && p <= 10) ? "met" : "not met"}')"
echo "non-2xx answers: hot $(field "$hot" non2xx), spread $(field "$spread" non2xx);" \
	"socket errors: hot $(field "$hot" errors), spread $(field "$spread" errors)"
echo "sandboxes held: (a) $(made hot) for $(($(field "$hot" requests) - $(field "$hot" non2xx)))" \
	"allowed answers wrk counted, (b) $(made spread) for" \
	"$(($(field "$spread" requests) - $(field "$spread" non2xx))) (wrk does not count the" \
	"answers still in flight when it stops: up to $conns a run)"
echo
echo "bounds of this machine, not checks (same run):"
printf '%-52s %9s/s\n' "(d) meterd HTTP path alone (400 answers)" "$(field "$invalid" rps)"
printf '%-52s %9.0f/s\n' "(e) lean check rows, 16 per transaction, 1 client" "$(awk -v t="$lean_tps" 'BEGIN {print t * 16}')"
