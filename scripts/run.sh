#!/usr/bin/env bash
# Runs meter on this machine: installs what is missing, builds, starts the
# embedded PostgreSQL (or uses METER_DATABASE_URL), migrates, and starts
# meterd in the background. Prints where it listens.
#   scripts/run.sh         start (or restart meterd with a fresh build)
#   scripts/run.sh stop    stop meterd and the embedded PostgreSQL
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run=$root/.run
build=$root/build
mkdir -p "$run"

stop_meterd() {
	if [[ -f $run/meterd.pid ]] && kill -0 "$(cat "$run/meterd.pid")" 2>/dev/null; then
		kill -TERM "$(cat "$run/meterd.pid")"
		for _ in $(seq 100); do
			kill -0 "$(cat "$run/meterd.pid")" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$run/meterd.pid"
}

if [[ ${1:-} == stop ]]; then
	stop_meterd
	bash "$root/scripts/pg.sh" stop
	echo "meter stopped"
	exit 0
fi

bash "$root/scripts/setup.sh"
echo "building into $build ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
url=$(bash "$root/scripts/pg.sh" start)
export METER_DATABASE_URL=$url
"$build/meterctl" migrate

listen=${METER_LISTEN:-127.0.0.1:8080}
stop_meterd
nohup "$build/meterd" --listen "$listen" >>"$run/meterd.log" 2>&1 &
echo $! >"$run/meterd.pid"
for _ in $(seq 100); do
	if curl -fsS "http://$listen/healthz" >/dev/null 2>&1; then
		echo "meterd is listening on http://$listen/ (pid $(cat "$run/meterd.pid"), log $run/meterd.log)"
		echo "  curl http://$listen/healthz"
		echo "stop it with: scripts/run.sh stop"
		exit 0
	fi
	kill -0 "$(cat "$run/meterd.pid")" 2>/dev/null || break
	sleep 0.1
done
tail -20 "$run/meterd.log" >&2
echo "meterd did not start" >&2
exit 1
