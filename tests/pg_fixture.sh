#!/usr/bin/env bash
# ctest fixture: a throwaway PostgreSQL cluster for the test run, so tests
# never touch the demo's data. Writes the admin URL to <dir>/url; tests read
# it (METER_TEST_PG_URL_FILE) and create databases of their own in it.
# With METER_DATABASE_URL set, that server is used and nothing is started.
#   pg_fixture.sh start|stop <dir>
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
action=$1
dir=$2
export METER_PG_DIR=$dir

free_port() {
	local p
	# Below the kernel's ephemeral range (32768 up): no client socket can
	# hold the port when the server binds it.
	for p in $(seq 25432 25532); do
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	echo "pg_fixture.sh: no free port in 25432-25532" >&2
	exit 1
}

case "$action" in
start)
	mkdir -p "$dir"
	if [[ -n ${METER_DATABASE_URL:-} ]]; then
		echo "$METER_DATABASE_URL" >"$dir/url"
		exit 0
	fi
	# A fresh cluster every run: nothing left over from an earlier one.
	bash "$here/../scripts/pg.sh" destroy 2>/dev/null || true
	rm -rf "$dir"
	METER_PG_PORT=$(free_port) bash "$here/../scripts/pg.sh" start >"$dir.url.tmp"
	mv "$dir.url.tmp" "$dir/url"
	echo "test cluster at $(sed 's/:[^:@]*@/:***@/' "$dir/url")"
	;;
stop)
	[[ -n ${METER_DATABASE_URL:-} ]] && exit 0
	bash "$here/../scripts/pg.sh" stop
	;;
*)
	echo "usage: pg_fixture.sh start|stop <dir>" >&2
	exit 2
	;;
esac
