#!/usr/bin/env bash
# Configure and build meter into a build directory.
#   build.sh DIR [cmake options...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$1
shift
mkdir -p "$dir"
cmake -S "$root" -B "$dir" "$@" >"$dir/configure.log" 2>&1 || {
	cat "$dir/configure.log" >&2
	exit 1
}
cmake --build "$dir" -j"$(nproc)" -- --no-print-directory >"$dir/build.log" 2>&1 || {
	grep -E "error|Error|warning" "$dir/build.log" | head -40 >&2
	echo "build failed: see $dir/build.log" >&2
	exit 1
}
