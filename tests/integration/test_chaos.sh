#!/usr/bin/env bash
# Crash survival under mixed load, through the real binaries. Two runs of
# the same load side by side, each with its own meterd and database: one
# uninterrupted, one with meterd killed by SIGKILL at seeded random moments
# (and restarted each time). The load, all of it at once:
# - a simulated fleet pushing its documents (meterctl simulate --push, a
#   frozen simulated clock, every POST retried until answered 2xx);
# - a control plane deciding create and wake checks with holds, pausing,
#   stopping, renewing, hitting its daily limit and maxCostMicros, reusing
#   an idempotency key, every request retried with the same body (and
#   idempotency key, event time) until it is answered;
# - a reader streaming usage exports and statements with a read-only key.
# Afterwards: every row ingestion wrote, every hold, the key-day ledger
# (spent and held), the answers the control plane got and the final
# exports equal the uninterrupted run's, to the microdollar; the ledger
# invariants hold; no hold is open past its lease; nothing answered 500.
#   METER_CHAOS_SEED=N picks the kill schedule (printed on every run);
#   METER_TEST_KEEP=1 keeps the logs and answers of a passing run too.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
export PGTZ=UTC
work=$bin/test-chaos-$$
mkdir -p "$work"
seed=${METER_CHAOS_SEED:-20261130}
token=chaos-control-plane-token-0123456789
ro_secret=chaosReadOnlySecret0123456789abcdefghij
nchecks=36
pid=
ref_pid=
loads=()
ref_loads=()

stop_all() {
	local p
	for p in "${loads[@]}" "${ref_loads[@]}"; do
		kill -0 "$p" 2>/dev/null && kill -TERM "$p"
	done
	loads=()
	ref_loads=()
	for p in $pid $ref_pid; do
		kill -0 "$p" 2>/dev/null && kill -KILL "$p"
	done
	pid=
	ref_pid=
	return 0
}
cleanup_fns+=(stop_all)

# A time zone whose local hour is at most 21 now: a 1-hour lease taken in the
# next minutes stays on one day, in both runs.
pick_zone() {
	local tz
	for tz in "$@"; do
		((10#$(TZ=$tz date +%H) <= 21)) && { echo "$tz"; return; }
	done
	echo "$1"
}
zone1=$(pick_zone UTC America/New_York Asia/Tokyo)
zone2=$(pick_zone Asia/Kolkata America/Los_Angeles Europe/Berlin)

# A database with the schema and two accounts: acct_c for the fleet (kc1
# UTC, kc2 Asia/Kolkata, kr a read-only key for the exports) and acct_k for
# the checks (kk1 with a daily limit, kk2 without).
setup_db() {
	local url
	url=$(make_db "$1")
	"$bin/meterctl" migrate --database-url "$url" >/dev/null 2>&1 || { fail "migrate"; finish; }
	psql "$url" -Atq -v ON_ERROR_STOP=1 \
		-c "INSERT INTO accounts (account_id, name) VALUES ('acct_c', 'fleet'), ('acct_k', 'checks')" \
		-c "INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros, time_zone) VALUES
		    ('acct_c', 'kc1', sha256('unused1'::bytea), 'full', NULL, 'UTC'),
		    ('acct_c', 'kc2', sha256('unused2'::bytea), 'full', NULL, 'Asia/Kolkata'),
		    ('acct_c', 'kr', sha256('$ro_secret'::bytea), 'read_only', NULL, 'UTC'),
		    ('acct_k', 'kk1', sha256('unused3'::bytea), 'full', 200000, '$zone1'),
		    ('acct_k', 'kk2', sha256('unused4'::bytea), 'full', NULL, '$zone2')"
	echo "$url"
}

# start_meterd URL PORT LOG: meterd (API, push route, collector, lease-end
# sweeper) on 127.0.0.1:PORT; sets pid.
start_meterd() {
	METER_DATABASE_URL=$1 METER_CONTROL_PLANE_TOKEN=$token "$bin/meterd" \
		--listen "127.0.0.1:$2" --collector on --db-pool-size 4 --lease-grace-s 2 \
		>>"$3" 2>&1 &
	pid=$!
	wait_for 20 curl -fs "http://127.0.0.1:$2/healthz" || {
		tail -20 "$3" >&2
		fail "meterd did not start"
		finish
	}
}

# --- the load ----------------------------------------------------------------

# run_sim PORT LOG: the simulated fleet, in push mode.
run_sim() {
	exec "$bin/meterctl" simulate --push "http://127.0.0.1:$1/v1/samples" --token "$token" \
		--steps 200 --seed 11 --hosts 2 --sandboxes-per-host 20 --key-ids kc1,kc2 \
		--start 2026-11-29T18:05:00Z --period-s 30 --speed 0 >"$2" 2>&1
}

# The control plane. cp_call PATH BODY: POSTs BODY until it is answered
# (connection refused or cut and 503 are retried with the same body); sets
# st and body (one line of JSON). Counts the retries in cp_retries; no
# answer within 600 tries is recorded as a failure. (Few processes per
# request: the machine running this has two cores.)
cp_call() {
	local tries=0 curl_rc
	while :; do
		curl_rc=0
		: >"$cp_tmp"
		st=$(curl -s -o "$cp_tmp" -w '%{http_code}' --max-time 15 -X POST \
			-H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
			--data "$2" "$cp_base$1") || curl_rc=$?
		((curl_rc == 0)) || st=000
		body=
		IFS= read -r body <"$cp_tmp" || true
		if [[ $st == 503 ]]; then
			[[ $body == *'"code":"metering_unavailable"'* ]] ||
				echo "BAD 503 $1 ${body:0:300}" >>"$cp_out.bad"
		elif [[ $st != 000 ]]; then
			return
		fi
		tries=$((tries + 1))
		cp_retries=$((cp_retries + 1))
		((tries < 600)) || { echo "GAVE UP $1 $2" >>"$cp_out.bad"; st=000; body='{}'; return; }
		sleep 0.05
	done
}

# rec MODE WHAT: one line of the raw answer log (mode, what, status, body);
# project turns it into the figures that must not depend on timing: for
# kk1 (mode full: only this client touches its day) all but the day's held,
# which holds the unmetered tails of pauses and stops (their worst case
# from the lease start to the event, a kill may delay the event) until the
# sweeper releases them; for kk2 (mode short) not the day's held either,
# which the sweeper changes any time.
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$st" "$body" >>"$cp_out"; }
project() {
	jq -rR 'split("\t") as $f | ($f[3] | fromjson? // {}) as $b |
	  "\($f[1]) \($f[2]) " + ($b | if $f[0] == "full" then {allowed, hold_micros,
	    lease_max_cost_micros, day, day_spent_micros, daily_limit_micros,
	    code: .error.code}
	  elif $f[0] == "short" then {allowed, hold_micros, lease_max_cost_micros, day,
	    code: .error.code}
	  else {state, code: .error.code} end | tojson)' "$1"
}

check_create() { # KEY SANDBOX VCPUS MEMORY LEASE IDEM [EXTRA]
	cp_call /v1/checks/create "{\"key_id\":\"$1\",\"sandbox_id\":\"$2\",\"vcpus\":$3,\"memory_mib\":$4,\"lease_seconds\":$5,\"idempotency_key\":\"$6\"${7:+,$7}}"
}
check_wake() { # SANDBOX LEASE IDEM
	cp_call /v1/checks/wake "{\"sandbox_id\":\"$1\",\"lease_seconds\":$2,\"idempotency_key\":\"$3\"}"
}
event() { # SANDBOX TYPE: at the current time, kept for the retries
	local now=$EPOCHREALTIME at
	TZ=UTC printf -v at '%(%Y-%m-%dT%H:%M:%S)T.%sZ' "${now%.*}" "${now#*.}"
	cp_call "/v1/sandboxes/$1/events" "{\"type\":\"$2\",\"at\":\"$at\"}"
	rec event "event-$2 $1"
}

# run_checks PORT OUT: nchecks sandboxes in four patterns, one request at a
# time (so the decisions are the same in every run).
run_checks() {
	cp_base=http://127.0.0.1:$1
	cp_out=$2
	cp_tmp=$2.tmp
	cp_retries=0
	local i sb v
	for ((i = 0; i < nchecks; i++)); do
		sb=chk-$i
		v=$((1 + i / 4 % 2))
		case $((i % 4)) in
		0) # create, pause (settles), wake, stop (settles), wake refused
			check_create kk1 "$sb" "$v" 1024 3600 "c-$i"
			rec full "create $sb"
			[[ $st == 200 ]] || continue
			event "$sb" paused
			check_wake "$sb" 1800 "w-$i"
			rec full "wake $sb"
			event "$sb" stopped
			check_wake "$sb" 60 "w2-$i"
			rec full "wake-stopped $sb"
			;;
		1) # short leases without a limit: settled by the sweeper
			check_create kk2 "$sb" 2 2048 2 "c-$i"
			rec short "create $sb"
			check_wake "$sb" 2 "w-$i"
			rec short "renew $sb"
			check_create kk2 "$sb" 2 2048 3 "c-$i"
			rec short "idem-conflict $sb"
			;;
		2) # a 1-hour lease left open: the limit fills up
			check_create kk1 "$sb" "$v" 1024 3600 "c-$i"
			rec full "create $sb"
			;;
		3) # maxCostMicros refuses, a smaller ask passes, then a stop
			check_create kk1 "$sb" 1 512 600 "c-$i" '"max_cost_micros":1000'
			rec full "create-maxcost $sb"
			check_create kk1 "$sb" 1 512 600 "c2-$i"
			rec full "create $sb"
			[[ $st == 200 ]] && event "$sb" stopped
			;;
		esac
	done
	echo "$cp_retries" >"${2%.raw}.retries"
}

# run_reader PORT OUT: exports and statements with the read-only key until
# the file OUT.stop exists; one line per response: what, status, curl's exit.
run_reader() {
	local base=http://127.0.0.1:$1 what path st rc
	local range='from=2026-11-29T00:00:00Z&to=2026-12-01T00:00:00Z'
	while [[ ! -e $2.stop ]]; do
		for what in csv ndjson statement; do
			case $what in
			csv) path="/v1/reports/usage.csv?$range" ;;
			ndjson) path="/v1/reports/usage.ndjson?$range&granularity=day" ;;
			statement) path="/v1/reports/statement.csv?month=2026-11" ;;
			esac
			rc=0
			st=$(curl -s -o /dev/null -w '%{http_code}' --max-time 15 \
				-H "Authorization: Bearer kr.$ro_secret" "$base$path") || rc=$?
			echo "$what $st $rc" >>"$2"
		done
		sleep 0.5
	done
}

# run_load PORT DIR ARRAY: starts the three loads in the background; their
# pids go to the array named ARRAY.
run_load() {
	local -n started=$3
	run_sim "$1" "$2/sim.log" &
	started=($!)
	run_checks "$1" "$2/answers.raw" &
	started+=($!)
	run_reader "$1" "$2/reads" &
	started+=($!)
}

# wait_load DIR ARRAY: waits for the simulator and the control plane, then
# stops the reader.
wait_load() {
	local -n running=$2
	wait "${running[0]}" || fail "simulator failed: $(tail -3 "$1/sim.log")"
	wait "${running[1]}" || fail "control plane client failed"
	project "$1/answers.raw" >"$1/answers"
	touch "$1/reads.stop"
	wait "${running[2]}" || true
	running=()
}

# --- what is compared ------------------------------------------------------------

# Every row the load wrote, in a stable order, without write times, hold
# ids or lease instants.
digest() {
	psql "$1" -Atq -c "SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
	  $usage_digest_rows
	  UNION ALL SELECT format('m %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s', account_id,
	    sandbox_id, last_sampled_at, last_state, last_cpu_usec, last_memory_mib,
	    last_storage_mib, last_vcpus, price_version, cpu_rem, memory_rem, storage_rem,
	    cpu_cum_micros, memory_cum_micros, storage_cum_micros) FROM sandbox_meter
	  UNION ALL SELECT format('s %s %s %s %s %s %s %s %s %s', account_id, sandbox_id,
	    sampled_at, state, cpu_usec, memory_mib, storage_mib, vcpus, host_id) FROM samples
	  UNION ALL SELECT format('w %s %s %s', host_id, last_sampled_at, batches)
	    FROM ingest_watermarks
	  UNION ALL SELECT format('b %s %s %s %s %s %s %s %s', account_id, sandbox_id, key_id,
	    vcpus, memory_mib, storage_mib, state, max_cost_micros) FROM sandboxes
	  UNION ALL SELECT format('h %s %s %s %s %s %s %s', account_id, key_id, sandbox_id, day,
	    COALESCE(reserved_micros, amount_micros), consumed_micros, status) FROM holds
	  UNION ALL SELECT format('i %s %s %s %s', account_id, operation, idempotency_key,
	    status_code) FROM check_answers
	  UNION ALL SELECT format('e %s %s %s', account_id, sandbox_id, type)
	    FROM lifecycle_events) d"
}

# The key-day ledger, one line per row.
ledger() {
	psql "$1" -Atq -c "SELECT account_id, key_id, day, spent_micros, held_micros,
	  COALESCE(limit_micros::text, '-') FROM key_day_ledger ORDER BY 1, 2, 3"
}

totals() {
	psql "$1" -Atq -c "SELECT (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly)
	  || ' ' || (SELECT COALESCE(sum(spent_micros), 0) FROM key_day_ledger)
	  || ' ' || (SELECT COALESCE(sum(held_micros), 0) FROM key_day_ledger)
	  || ' ' || (SELECT count(*) FROM usage_hourly)
	  || ' ' || (SELECT count(*) FROM samples)
	  || ' ' || (SELECT count(*) FROM holds)"
}

# sql URL QUERY: the one value of a query.
sql() { psql "$1" -Atq -c "$2"; }

# settle URL: waits until the sweeper closed every hold whose lease ended
# (it runs every second) and every hold a pause or stop kept for its
# unmetered tail (lease_grace_s, 2 s, after the event: these sandboxes get
# no samples); false when one is still open 6 s later.
settle() {
	local last
	last=$(sql "$1" "SELECT COALESCE(max(lease_ends_at), now()) FROM holds
	  WHERE lease_ends_at < now() + interval '10 s'")
	sql "$1" "SELECT pg_sleep(GREATEST(0, EXTRACT(epoch FROM
	  '$last'::timestamptz - now()) + 0.2))" >/dev/null
	wait_for 6 none_overdue "$1"
}
none_overdue() {
	[[ $(sql "$1" "SELECT count(*) FROM holds WHERE status = 'open'
	  AND (lease_ends_at <= now() OR settles_at IS NOT NULL)") == 0 ]]
}

# finals URL PORT DIR: the exports once everything is in.
finals() {
	local base=http://127.0.0.1:$2 a="Authorization: Bearer kr.$ro_secret"
	local range='from=2026-11-29T00:00:00Z&to=2026-12-01T00:00:00Z'
	curl -fs -H "$a" "$base/v1/reports/usage.csv?$range" >"$3/final.csv" ||
		fail "final csv export"
	curl -fs -H "$a" "$base/v1/reports/usage.ndjson?$range&granularity=day" \
		>"$3/final.ndjson" || fail "final ndjson export"
	curl -fs -H "$a" "$base/v1/reports/statement.csv?month=2026-11" >"$3/final-statement.csv" ||
		fail "final statement"
}

# invariants URL DIR NAME CUT: what must hold in any one run. CUT: 1 when
# kills may have refused or cut export reads.
invariants() {
	expect "$3: held = open holds' remainders" "$(sql "$1" "SELECT count(*) FROM key_day_ledger l
	  WHERE held_micros <> (SELECT COALESCE(sum(GREATEST(amount_micros - consumed_micros, 0)), 0)
	  FROM holds h WHERE h.account_id = l.account_id AND h.key_id = l.key_id
	  AND h.day = l.day AND h.status = 'open')")" 0
	expect "$3: committed within the limit" "$(sql "$1" "SELECT count(*) FROM key_day_ledger
	  WHERE limit_micros IS NOT NULL AND spent_micros + held_micros > limit_micros
	  AND key_id LIKE 'kk%'")" 0
	expect "$3: ledger spent = rollups" "$(sql "$1" "SELECT count(*) FROM key_day_ledger l
	  WHERE spent_micros <> (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly u
	  WHERE u.account_id = l.account_id AND u.key_id = l.key_id AND u.day = l.day)")" 0
	# Every allowed check placed exactly one hold (every lease is on one
	# day), and nothing else did.
	expect "$3: one hold per allowed check" \
		"$(sql "$1" "SELECT sandbox_id || ' ' || count(*) FROM holds GROUP BY sandbox_id ORDER BY 1")" \
		"$(awk '$1 !~ /^event/ && $3 == 200 {n[$2]++} END {for (s in n) print s " " n[s]}' \
			"$2/answers" | LC_ALL=C sort)"
	expect "$3: sandboxes of the checks = allowed creates" \
		"$(sql "$1" "SELECT count(*) FROM sandboxes WHERE account_id = 'acct_k'")" \
		"$(awk '$1 == "create" && $3 == 200' "$2/answers" | wc -l)"
	expect "$3: no request given up, every 503 metering_unavailable" \
		"$(head -3 "$2/answers.raw.bad" 2>/dev/null)" ""
	expect "$3: exports answered 200 (or cut by a kill)" \
		"$(awk -v cut="$4" '!(($2 == 200 && $3 == 0) || (cut && ($2 == 200 || $2 == "000")))' \
			"$2/reads" | head -3)" ""
	expect "$3: no 5xx but 503 in meterd's access log" \
		"$(grep -E 'status=5[0-9][0-9]' "$2/meterd.log" | grep -v 'status=503' | head -3)" ""
	expect "$3: no sanitizer report" \
		"$(grep -c -E 'AddressSanitizer|runtime error|LeakSanitizer' "$2/meterd.log")" 0
}

# --- two runs side by side: uninterrupted, and killed ---------------------------
echo "kill schedule seed $seed; check keys in $zone1 and $zone2"
ref=$work/ref
run=$work/kill
mkdir -p "$ref" "$run"
ref_url=$(setup_db chaos_ref)
cleanup_fns+=("drop_db chaos_ref")
url=$(setup_db chaos_kill)
cleanup_fns+=("drop_db chaos_kill")
ref_port=$(free_port)
start_meterd "$ref_url" "$ref_port" "$ref/meterd.log"
ref_pid=$pid
port=$(free_port)
start_meterd "$url" "$port" "$run/meterd.log"
t0=$SECONDS
run_load "$ref_port" "$ref" ref_loads
run_load "$port" "$run" loads
rng=$seed
next_rand() { rng=$(((rng * 1103515245 + 12345) % 2147483648)); }
served() { grep -c ' access rid=' "$run/meterd.log" || true; }
# Each life of meterd serves 4 to 19 requests (drawn from the seed) and
# then, 0 to 0.3 s later, mid-request or between requests, gets SIGKILL; it
# stays down 0 to 0.5 s. Counting requests rather than seconds puts the kills
# at the same places of the load on a fast or a busy machine.
kills=0
deadline=$((SECONDS + 150))
while kill -0 "${loads[0]}" 2>/dev/null || kill -0 "${loads[1]}" 2>/dev/null; do
	((SECONDS < deadline)) || { fail "the load did not finish in 150 s"; break; }
	next_rand
	until_n=$(($(served) + 4 + rng % 16))
	while (($(served) < until_n)) && { kill -0 "${loads[0]}" 2>/dev/null ||
		kill -0 "${loads[1]}" 2>/dev/null; }; do
		sleep 0.02
	done
	kill -0 "${loads[0]}" 2>/dev/null || kill -0 "${loads[1]}" 2>/dev/null || break
	next_rand
	sleep "0.$(printf '%03d' $((rng % 300)))"
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	kills=$((kills + 1))
	echo "--- kill $kills at $(date +%T.%N)" >>"$run/meterd.log"
	next_rand
	sleep "0.$(printf '%03d' $((rng % 500)))"
	start_meterd "$url" "$port" "$run/meterd.log"
done
wait_load "$ref" ref_loads
wait_load "$run" loads
echo "both runs done in $((SECONDS - t0)) s: $(wc -l <"$ref/answers") answers each," \
	"$(wc -l <"$ref/reads") and $(wc -l <"$run/reads") export reads"
settle "$ref_url" && ok || fail "reference: a hold stayed open past its lease"
settle "$url" && ok || fail "a hold stayed open past its lease (after $kills kills)"
finals "$ref_url" "$ref_port" "$ref"
finals "$url" "$port" "$run"
kill -TERM "$ref_pid"
wait "$ref_pid" || fail "reference meterd did not stop cleanly"
ref_pid=
kill -TERM "$pid"
wait "$pid" || fail "meterd did not stop cleanly after the kills"
pid=
sim_retries=$(sed -n 's/.* \([0-9][0-9]*\) retries).*/\1/p' "$run/sim.log" | tail -1)
cp_retries=$(cat "$run/answers.retries")
# curl's exit 7: refused (meterd down); 18, 52, 56: cut mid-answer.
refused_reads=$(awk '$3 == 7' "$run/reads" | wc -l)
cut_reads=$(awk '$3 != 0 && $3 != 7' "$run/reads" | wc -l)
echo "meterd killed $kills times: simulator retried ${sim_retries:-0} POSTs, control plane" \
	"retried $cp_retries requests; of $(wc -l <"$run/reads") export reads $refused_reads were" \
	"refused and $cut_reads cut"
((kills >= 6)) && ok || fail "only $kills kills happened"
[[ ${sim_retries:-0} -gt 0 ]] && ok || fail "no simulator POST was retried: the kills missed"
[[ $cp_retries -gt 0 ]] && ok || fail "no control-plane request was retried: the kills missed"

# --- the verdict -------------------------------------------------------------------
invariants "$ref_url" "$ref" reference 0
invariants "$url" "$run" killed 1
ref_totals=$(totals "$ref_url")
got_totals=$(totals "$url")
echo "reference: usage_micros spent_micros held_micros usage_rows samples holds = $ref_totals"
echo "killed:    usage_micros spent_micros held_micros usage_rows samples holds = $got_totals"
expect "totals" "$got_totals" "$ref_totals"
expect "ledger per key and day" "$(ledger "$url")" "$(ledger "$ref_url")"
expect "digest of every row" "$(digest "$url")" "$(digest "$ref_url")"
expect "the control plane's answers" "$(cat "$run/answers")" "$(cat "$ref/answers")"
for f in final.csv final.ndjson final-statement.csv; do
	expect "$f" "$(md5sum <"$run/$f")" "$(md5sum <"$ref/$f")"
done
# The load did what it is meant to: usage, refusals at the limit and by
# maxCostMicros, settlements, settlements at lease end and holds still open.
[[ ${ref_totals%% *} -gt 0 ]] && ok || fail "nothing metered"
grep -q '^create chk-[0-9]* 402 .*spending_limit_reached' "$ref/answers" && ok ||
	fail "the daily limit never refused a check"
grep -q '^create-maxcost chk-[0-9]* 402 .*max_cost_exceeded' "$ref/answers" && ok ||
	fail "maxCostMicros never refused a check"
grep -q '^idem-conflict chk-[0-9]* 409 .*idempotency_conflict' "$ref/answers" && ok ||
	fail "no idempotency conflict"
grep -q '^wake-stopped chk-[0-9]* 409 .*sandbox_stopped' "$ref/answers" && ok ||
	fail "no wake of a stopped sandbox refused"
expect "hold statuses" "$(sql "$url" "SELECT string_agg(status || '=' || n, ' ' ORDER BY status)
  FROM (SELECT status, count(*) n FROM holds GROUP BY 1) s")" \
	"$(sql "$ref_url" "SELECT string_agg(status || '=' || n, ' ' ORDER BY status)
  FROM (SELECT status, count(*) n FROM holds GROUP BY 1) s")"
echo "holds: $(sql "$url" "SELECT string_agg(status || '=' || n, ' ' ORDER BY status)
  FROM (SELECT status, count(*) n FROM holds GROUP BY 1) s")"
for s in open settled; do
	[[ $(sql "$url" "SELECT count(*) FROM holds WHERE status = '$s'") -gt 0 ]] && ok ||
		fail "no $s hold"
done
# Settled at lease end by the sweeper (never metered: kept whole for the
# grace, then closed).
[[ $(sql "$url" "SELECT count(*) FROM holds WHERE status <> 'open'
  AND settles_at = lease_ends_at") -gt 0 ]] && ok || fail "no hold settled at lease end"
[[ $failed -eq 0 && -z ${METER_TEST_KEEP:-} ]] && rm -rf "$work"
finish
