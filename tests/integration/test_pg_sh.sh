#!/usr/bin/env bash
# scripts/pg.sh on a cluster directory whose path is too long for a Unix
# socket (80 characters or more): its socket goes in a /tmp/meter-pg-sock.*
# directory, and destroy removes that directory with the cluster.
# METER_PGSH_TEST_PORT chooses the cluster's port (default: a free one).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
pg=$here/../../scripts/pg.sh
unset METER_DATABASE_URL

work=$(mktemp -d /tmp/meter-pgsh.XXXXXX)
chmod 755 "$work" # as root, the cluster's user must reach it
long=$work/$(printf 'cluster%.0s' $(seq 12))
export METER_PG_DIR=$long
METER_PG_PORT=${METER_PGSH_TEST_PORT:-$(free_port)}
export METER_PG_PORT
cleanup_fns+=("bash $pg destroy" "rm -rf $work")

((${#long} >= 80)) && ok || fail "the cluster's path is only ${#long} characters"
bash "$pg" start >/dev/null || fail "pg.sh start failed"
sock=$(sed -n "s/^unix_socket_directories = '\(.*\)'$/\1/p" "$long/data/postgresql.conf")
[[ $sock == /tmp/meter-pg-sock.* ]] && ok || fail "the socket directory is '$sock'"
[[ -S $sock/.s.PGSQL.$METER_PG_PORT ]] && ok || fail "no socket in $sock"
bash "$pg" destroy || fail "pg.sh destroy failed"
[[ -e $long ]] && fail "destroy left the cluster" || ok
[[ -e $sock ]] && fail "destroy left the socket directory $sock" || ok
finish
