#!/usr/bin/env bash
# The embedded PostgreSQL: a project-local cluster, created on first use.
#
#   pg.sh start   create (initdb) if needed, start, create the database; prints the URL
#   pg.sh stop    stop it cleanly (fast shutdown)
#   pg.sh status  exit 0 when it runs
#   pg.sh url     print the connection URL
#   pg.sh destroy stop it and delete the cluster, its password and its socket directory
#
# With METER_DATABASE_URL set, start/url just use that server and start nothing.
# METER_PG_DIR (default <project>/.run/pg) and METER_PG_PORT (default 54329)
# select the cluster; the tests use their own. PostgreSQL refuses to run as
# root, so as root the cluster belongs to, and runs as, the system user
# "meter" (created if missing). It listens on 127.0.0.1 and on a Unix socket,
# with password (SCRAM) authentication: the password is generated at initdb
# and kept in the cluster's directory, mode 0600.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${METER_PG_DIR:-$root/.run/pg}
port=${METER_PG_PORT:-54329}
db=meter
run_user=meter
[[ -L $dir ]] && dir=$(readlink -f "$dir")

die() { echo "pg.sh: $*" >&2; exit 1; }

pg_bin() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		[[ -x $d/pg_ctl ]] && { echo "$d"; return; }
	done
	die "no PostgreSQL server found; run scripts/setup.sh"
}

# Runs a command as the cluster's owner.
as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u "$run_user" -- "$@"
	else
		"$@"
	fi
}

ensure_user() {
	[[ $(id -u) -eq 0 ]] || return 0
	id "$run_user" >/dev/null 2>&1 ||
		useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$run_user"
}

url() {
	if [[ -n ${METER_DATABASE_URL:-} ]]; then
		echo "$METER_DATABASE_URL"
		return
	fi
	[[ -f $dir/password ]] || die "no cluster at $dir; run: scripts/pg.sh start"
	local p
	p=$(cat "$dir/port")
	echo "postgresql://meter:$(cat "$dir/password")@127.0.0.1:$p/$db"
}

status() {
	[[ -f $dir/data/PG_VERSION ]] || return 1
	as_owner "$(pg_bin)/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

start() {
	if [[ -n ${METER_DATABASE_URL:-} ]]; then
		url
		return
	fi
	local bin
	bin=$(pg_bin)
	ensure_user
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		chown "$run_user" "$dir"
		chmod 0700 "$dir"
		if ! as_owner test -w "$dir"; then
			# A parent directory is closed to the unprivileged user (a
			# clone under /root, say): keep the cluster where it can
			# reach, and point $dir there.
			local real
			real=/var/tmp/meter-pg-$(echo "$dir" | md5sum | cut -c1-16)
			mkdir -p "$real"
			chown "$run_user" "$real"
			chmod 0700 "$real"
			rmdir "$dir"
			ln -sfn "$real" "$dir"
			dir=$real
		fi
	fi
	if [[ ! -f $dir/data/PG_VERSION ]]; then
		rm -rf "$dir/data"
		as_owner sh -c "umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > '$dir/password'"
		as_owner "$bin/initdb" -D "$dir/data" -U meter --pwfile="$dir/password" \
			--auth=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
		# A Unix socket path is limited to 107 bytes: fall back to /tmp for deep trees.
		local sock=$dir
		((${#sock} < 80)) || sock=$(as_owner mktemp -d /tmp/meter-pg-sock.XXXXXX)
		cat >>"$dir/data/postgresql.conf" <<-CONF
			# meter's embedded cluster
			listen_addresses = '127.0.0.1'
			unix_socket_directories = '$sock'
			max_connections = 200
			shared_buffers = 256MB
			log_min_messages = warning
			log_line_prefix = '%m [%p] '
		CONF
	fi
	echo "$port" | as_owner tee "$dir/port" >/dev/null
	if ! status; then
		as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -o "-p $port" -w -t 60 start >/dev/null ||
			{ tail -20 "$dir/postgres.log" >&2; die "PostgreSQL did not start (port $port busy?)"; }
	fi
	PGPASSWORD=$(cat "$dir/password") "$bin/psql" -h 127.0.0.1 -p "$port" -U meter -d postgres -Atq \
		-c "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 ||
		PGPASSWORD=$(cat "$dir/password") "$bin/createdb" -h 127.0.0.1 -p "$port" -U meter "$db"
	url
}

stop() {
	[[ -n ${METER_DATABASE_URL:-} ]] && return 0
	status || return 0
	as_owner "$(pg_bin)/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
}

destroy() {
	[[ -n ${METER_DATABASE_URL:-} ]] && return 0
	stop || true
	local link=${METER_PG_DIR:-$root/.run/pg} sock
	# The socket directory start made in /tmp for a long path goes too.
	sock=$(sed -n "s|^unix_socket_directories = '\(/tmp/meter-pg-sock\.[A-Za-z0-9]*\)'\$|\1|p" \
		"$dir/data/postgresql.conf" 2>/dev/null || true)
	rm -rf "$dir"
	[[ -n $sock && -d $sock ]] && rm -rf "$sock"
	[[ -L $link ]] && rm -f "$link"
	return 0
}

case "${1:-}" in
destroy) destroy ;;
start) start ;;
stop) stop ;;
status) status ;;
url) url ;;
*) echo "usage: pg.sh start|stop|status|url|destroy" >&2; exit 2 ;;
esac
