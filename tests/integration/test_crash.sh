#!/usr/bin/env bash
# Crash safety of ingestion, through the real binaries: a simulated fleet
# pushes its documents (at-least-once: every POST is retried until answered
# 2xx) to meterd, which is killed with SIGKILL at random moments and
# restarted each time. The result must equal, to the microdollar and row for
# row, an uninterrupted run of the same seed into a second database.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
export PGTZ=UTC
work=$bin/test-crash-$$
mkdir -p "$work"
pid=
sim=
token=crash-test-token-0123456789abcdefghij

stop_all() {
	[[ -n $sim ]] && kill -0 "$sim" 2>/dev/null && kill -TERM "$sim"
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	sim=
	pid=
	return 0
}
cleanup_fns+=(stop_all)

# A database with the schema, an account and two keys (UTC, Asia/Kolkata).
setup_db() {
	local url
	url=$(make_db "$1")
	"$bin/meterctl" migrate --database-url "$url" >/dev/null
	psql "$url" -Atq -c "INSERT INTO accounts (account_id, name) VALUES ('acct_c', 'crash')" \
		-c "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone) VALUES
		    ('acct_c', 'kc1', decode(repeat('ab', 32), 'hex'), 'full', 'UTC'),
		    ('acct_c', 'kc2', decode(repeat('cd', 32), 'hex'), 'full', 'Asia/Kolkata')"
	echo "$url"
}

# start_meterd URL PORT LOG: meterd with the push route and the collector.
start_meterd() {
	METER_DATABASE_URL=$1 METER_CONTROL_PLANE_TOKEN=$token "$bin/meterd" \
		--listen "127.0.0.1:$2" --collector on --db-pool-size 2 >>"$3" 2>&1 &
	pid=$!
	wait_for 20 curl -fs "http://127.0.0.1:$2/healthz" || {
		tail -20 "$3" >&2
		fail "meterd did not start"
		finish
	}
}

# run_sim PORT LOG: the simulated fleet in push mode, in the background.
run_sim() {
	"$bin/meterctl" simulate --push "http://127.0.0.1:$1/v1/samples" --token "$token" \
		--steps 240 --seed 7 --hosts 5 --sandboxes-per-host 20 --key-ids kc1,kc2 \
		--start 2026-11-29T18:25:00Z --period-s 10 --speed 0 >"$2" 2>&1 &
	sim=$!
}

# Everything ingestion writes, in a stable order, without the write times.
digest() {
	psql "$1" -Atq -c "SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
	  $usage_digest_rows
	  UNION ALL SELECT format('l %s %s %s %s %s %s', account_id, key_id, day, spent_micros,
	    held_micros, limit_micros) FROM key_day_ledger
	  UNION ALL SELECT format('m %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s',
	    account_id, sandbox_id, last_sampled_at, last_state, last_cpu_usec, last_memory_mib,
	    last_storage_mib, last_vcpus, price_version, cpu_rem, memory_rem, storage_rem,
	    cpu_cum_micros, memory_cum_micros, storage_cum_micros, day, day_running_usec,
	    day_cpu_used_mcus, day_cpu_billed_mcus, day_total_micros, month, month_total_micros,
	    day_ends_at)
	    FROM sandbox_meter
	  UNION ALL SELECT format('a %s %s %s', account_id, hour, total_micros)
	    FROM usage_account_hourly
	  UNION ALL SELECT format('s %s %s %s %s %s %s %s %s %s', account_id, sandbox_id,
	    sampled_at, state, cpu_usec, memory_mib, storage_mib, vcpus, host_id) FROM samples
	  UNION ALL SELECT format('b %s %s %s %s %s %s', account_id, sandbox_id, key_id, vcpus,
	    memory_mib, storage_mib) FROM sandboxes
	  UNION ALL SELECT format('w %s %s %s', host_id, last_sampled_at, batches)
	    FROM ingest_watermarks) d"
}

totals() {
	psql "$1" -Atq -c "SELECT (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly)
	  || ' ' || (SELECT COALESCE(sum(spent_micros), 0) FROM key_day_ledger)
	  || ' ' || (SELECT count(*) FROM usage_hourly)
	  || ' ' || (SELECT count(*) FROM samples)"
}

# --- the reference: an uninterrupted run ----------------------------------------
ref_url=$(setup_db crash_ref)
cleanup_fns+=("drop_db crash_ref")
port=$(free_port)
start_meterd "$ref_url" "$port" "$work/meterd-ref.log"
t0=$SECONDS
run_sim "$port" "$work/sim-ref.log"
wait "$sim" || fail "reference simulator failed: $(tail -3 "$work/sim-ref.log")"
sim=
ref_secs=$((SECONDS - t0))
kill -TERM "$pid"
wait "$pid" || true
pid=

# --- the same seed, with meterd killed at random moments -------------------------
url=$(setup_db crash_kill)
cleanup_fns+=("drop_db crash_kill")
port=$(free_port)
start_meterd "$url" "$port" "$work/meterd-kill.log"
run_sim "$port" "$work/sim-kill.log"
# Spread 8 kills over the first half of the reference run's duration, so a
# run that goes faster than the reference (a busy machine slowed that one)
# still takes them all.
span_ms=$(((ref_secs < 8 ? 8 : ref_secs) * 1000 / 16))
kills=0
while ((kills < 8)) && kill -0 "$sim" 2>/dev/null; do
	sleep "$(printf '0.%03d' $((RANDOM % 1000)))"
	sleep "$((RANDOM % (span_ms / 1000 + 1)))"
	kill -0 "$sim" 2>/dev/null || break
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	kills=$((kills + 1))
	echo "kill $kills at $(date +%T.%N)" >>"$work/meterd-kill.log"
	# Sometimes the daemon stays down a while: the simulator retries.
	((RANDOM % 2)) && sleep 0.5
	start_meterd "$url" "$port" "$work/meterd-kill.log"
done
wait "$sim" || fail "simulator failed: $(tail -3 "$work/sim-kill.log")"
sim=
kill -TERM "$pid"
wait "$pid" || true
pid=
echo "meterd killed $kills times; simulator: $(tail -1 "$work/sim-kill.log")"
((kills >= 3)) && ok || fail "only $kills kills happened"
# The kills hit the fleet: POSTs were refused or cut and sent again.
retries=$(sed -n 's/.* \([0-9][0-9]*\) retries).*/\1/p' "$work/sim-kill.log" | tail -1)
[[ ${retries:-0} -gt 0 ]] && ok || fail "no POST was retried: the kills missed"

ref_totals=$(totals "$ref_url")
got_totals=$(totals "$url")
echo "reference: total_micros spent_micros usage_rows samples = $ref_totals"
echo "killed:    total_micros spent_micros usage_rows samples = $got_totals"
expect "totals" "$got_totals" "$ref_totals"
expect "digest of every row" "$(digest "$url")" "$(digest "$ref_url")"
# Something was metered at all, and the ledger agrees with the rollups.
[[ ${ref_totals%% *} -gt 0 ]] && ok || fail "nothing metered"
expect "ledger = rollups" "$(psql "$url" -Atq -c "SELECT count(*) FROM key_day_ledger l
  WHERE spent_micros <> (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly u
  WHERE u.account_id = l.account_id AND u.key_id = l.key_id AND u.day = l.day)")" 0
finish
