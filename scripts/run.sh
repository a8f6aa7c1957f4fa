#!/usr/bin/env bash
# Runs meter on this machine with a live simulated fleet: installs what is
# missing, builds, starts the embedded PostgreSQL (or uses
# METER_DATABASE_URL), migrates, creates a demo account with keys, pushes
# the last 24 hours of a simulated fleet's usage, then serves that fleet live
# to meterd's collector. Prints the dashboard's address and a read-only key.
#   scripts/run.sh         start (or restart with a fresh build)
#   scripts/run.sh stop    stop meterd, the simulator and the embedded PostgreSQL
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run=$root/.run
build=$root/build
listen=${METER_LISTEN:-127.0.0.1:8080}
mkdir -p "$run"

stop_pid() {
	local f=$run/$1.pid
	if [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; then
		kill -TERM "$(cat "$f")"
		for _ in $(seq 100); do
			kill -0 "$(cat "$f")" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$f"
}

if [[ $# -gt 1 || ( $# -eq 1 && $1 != stop ) ]]; then
	echo "usage: scripts/run.sh [stop]" >&2
	exit 2
fi

if [[ ${1:-} == stop ]]; then
	stop_pid meterd
	stop_pid simulate
	bash "$root/scripts/pg.sh" stop
	echo "meter stopped"
	exit 0
fi

bash "$root/scripts/setup.sh"
echo "building into $build ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
url=$(bash "$root/scripts/pg.sh" start)
export METER_DATABASE_URL=$url
if ! "$build/meterctl" migrate 2>"$run/migrate.log"; then
	cat "$run/migrate.log" >&2
	echo "run.sh: meterctl migrate failed (above); nothing started" >&2
	exit 1
fi

# Service secrets, made once and kept private in .run/secrets.env.
if [[ ! -f $run/secrets.env ]]; then
	(
		umask 077
		hex() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
		{
			echo "METER_OPERATOR_TOKEN=op_$(hex)"
			echo "METER_CONTROL_PLANE_TOKEN=cp_$(hex)"
			echo "METER_SESSION_SECRET=$(hex)"
		} >"$run/secrets.env"
	)
fi
# The agents' token, added to secrets made before there was one.
grep -q '^METER_AGENT_TOKEN=' "$run/secrets.env" ||
	echo "METER_AGENT_TOKEN=ag_$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >>"$run/secrets.env"
set -a
# shellcheck disable=SC1091
source "$run/secrets.env"
set +a

# The demo account and its keys, made once (again if the database is new).
json_field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
if [[ -f $run/demo.env ]]; then
	# shellcheck disable=SC1091
	source "$run/demo.env"
	exists=$(psql "$url" -Atqc "SELECT 1 FROM api_keys WHERE key_id = '${DEMO_READ_ONLY_KEY_ID:-}'" 2>/dev/null || true)
	[[ $exists == 1 ]] || rm -f "$run/demo.env"
fi
if [[ ! -f $run/demo.env ]]; then
	account=$("$build/meterctl" account create --name "Demo agents" | json_field account_id)
	ro=$("$build/meterctl" key create --account "$account" --role read_only)
	agents_key=$("$build/meterctl" key create --account "$account" --role full --daily-limit-micros 50000000 --time-zone Europe/Berlin)
	batch_key=$("$build/meterctl" key create --account "$account" --role full)
	(
		umask 077
		{
			echo "DEMO_ACCOUNT=$account"
			echo "DEMO_READ_ONLY_KEY_ID=$(json_field key_id <<<"$ro")"
			echo "DEMO_READ_ONLY_TOKEN=$(json_field secret <<<"$ro")"
			echo "DEMO_FLEET_KEYS=$(json_field key_id <<<"$agents_key"),$(json_field key_id <<<"$batch_key")"
		} >"$run/demo.env"
	)
	# shellcheck disable=SC1091
	source "$run/demo.env"
fi

stop_pid meterd
stop_pid simulate
fleet=(--hosts 4 --sandboxes-per-host 25 --seed 2026 --key-ids "$DEMO_FLEET_KEYS")

# meterd warns of a METER_ variable that names none of its options: the
# scripts' own (the embedded cluster's) are not passed on.
meterd=(env -u METER_PG_DIR -u METER_PG_PORT "$build/meterd")

# 1. meterd without sources takes the fleet's last 24 hours by push.
nohup "${meterd[@]}" --listen "$listen" >>"$run/meterd.log" 2>&1 &
echo $! >"$run/meterd.pid"
ready() { curl -fsS "http://$listen/readyz" >/dev/null 2>&1; }
for _ in $(seq 100); do ready && break; sleep 0.1; done
ready || { tail -20 "$run/meterd.log" >&2; echo "meterd did not start" >&2; exit 1; }
now=$(date -u +%s)
start=$(date -u -d "@$((now - now % 300 - 86400))" +%Y-%m-%dT%H:%M:%SZ)
echo "pushing the fleet's last 24 hours ..."
"$build/meterctl" simulate "${fleet[@]}" --push "http://$listen/v1/samples" \
	--token "$METER_AGENT_TOKEN" --start "$start" --speed 0 --period-s 300 \
	--steps 288 >>"$run/simulate.log" 2>&1

# 2. The same fleet, live: host agents the collector reads every 10 s.
rm -f "$run/agents.txt"
nohup "$build/meterctl" simulate "${fleet[@]}" --listen 127.0.0.1:0 \
	--urls-file "$run/agents.txt" >>"$run/simulate.log" 2>&1 &
echo $! >"$run/simulate.pid"
for _ in $(seq 100); do [[ -s $run/agents.txt ]] && break; sleep 0.1; done
stop_pid meterd
nohup "${meterd[@]}" --listen "$listen" --agents-file "$run/agents.txt" \
	--collector-period-s 10 >>"$run/meterd.log" 2>&1 &
echo $! >"$run/meterd.pid"
for _ in $(seq 100); do ready && break; sleep 0.1; done
ready || { tail -20 "$run/meterd.log" >&2; echo "meterd did not start" >&2; exit 1; }

cat <<MSG

meterd is listening on http://$listen/ (pid $(cat "$run/meterd.pid"), log $run/meterd.log),
metering a simulated fleet of 100 sandboxes on 4 host agents.

  dashboard:      http://$listen/dashboard/
  read-only key:  $DEMO_READ_ONLY_TOKEN
  account:        $DEMO_ACCOUNT
  health:         curl http://$listen/healthz
  operator, control-plane and agent tokens: $run/secrets.env

stop it with: scripts/run.sh stop
MSG
