#!/usr/bin/env bash
# Upgrades from every schema an earlier build of meter could have left.
#
# For each commit that changed sql/, a database is migrated with the
# migrations as that commit had them, then brought to this checkout with
# this checkout's later migrations (as `meterctl migrate` would), and its
# schema (pg_dump --schema-only) is compared with a database migrated fresh
# from this checkout. One line a commit:
#   COMMIT max=N same|differs [VERSION:SHA256 ...]
# the recorded texts that differ from this checkout's. The states that end
# the same are the ones meter/migrate.c (migrate_old_states) accepts.
#
# Needs the git history and a PostgreSQL server whose role may create
# databases: METER_DATABASE_URL (postgresql://user:pass@host:port/db), or
# the cluster `scripts/pg.sh start` made. It creates and drops the
# databases meter_mh_head and meter_mh_at.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
url=${METER_DATABASE_URL:-$(bash scripts/pg.sh url)} || exit 1
base=${url%/*}
pgbin=/usr/lib/postgresql/15/bin
psql() { "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The migrations commit $1 compiled in, in order (CMakeLists.txt's list).
files_at() {
	if [ "$1" = WORKTREE ]; then cat CMakeLists.txt; else git show "$1:CMakeLists.txt"; fi |
		grep -o 'sql/[0-9]\{4\}_[a-z0-9_]*\.sql'
}
version_of() { local b=${1##*/}; echo $((10#${b:0:4})); }

fresh() {
	psql "$url" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" 2>/dev/null &&
		psql "$base/$1" -c "CREATE TABLE schema_migrations (version integer PRIMARY KEY,
			name text NOT NULL, sha256 text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())"
}

# apply DB COMMIT FILE: one migration, in one transaction, as meterctl does.
apply() {
	if [ "$2" = WORKTREE ]; then cat "$3"; else git show "$2:$3"; fi > "$work/m.sql"
	psql "$base/$1" -1 -f "$work/m.sql" > /dev/null 2> "$work/err" || {
		echo "$2 $3 failed: $(head -1 "$work/err")"
		return 1
	}
}

schema() { "$pgbin/pg_dump" --schema-only "$base/$1" | grep -v -e '^--' -e 'restrict '; }

fresh meter_mh_head || exit 1
for f in $(files_at WORKTREE); do apply meter_mh_head WORKTREE "$f" || exit 1; done
schema meter_mh_head > "$work/head.sql"

for c in $(git log --reverse --format=%h -- sql/); do
	fresh meter_mh_at || exit 1
	max=0
	old=""
	ok=1
	for f in $(files_at "$c"); do
		apply meter_mh_at "$c" "$f" || { ok=0; break; }
		max=$(version_of "$f")
		then_sha=$(git show "$c:$f" | sha256sum | cut -c1-64)
		now=$(ls sql/"$(basename "$f" | cut -c1-5)"*.sql 2>/dev/null | head -1)
		now_sha=$([ -n "$now" ] && sha256sum "$now" | cut -c1-64)
		[ "$then_sha" != "$now_sha" ] && old="$old $max:$then_sha"
	done
	if [ $ok = 1 ]; then
		for f in $(files_at WORKTREE); do
			[ "$(version_of "$f")" -gt "$max" ] || continue
			apply meter_mh_at WORKTREE "$f" || { ok=0; break; }
		done
	fi
	if [ $ok = 1 ] && cmp -s <(schema meter_mh_at) "$work/head.sql"; then
		echo "$c max=$max same$old"
	else
		echo "$c max=$max differs$old"
	fi
done
psql "$url" -c "DROP DATABASE IF EXISTS meter_mh_at" -c "DROP DATABASE IF EXISTS meter_mh_head"
