#!/usr/bin/env bash
# Static checks, run by ctest (test_lint) and so by scripts/test.sh:
#  1. clang builds the whole project, tests included, with -Werror and the
#     same warning flags as gcc (CMakeLists.txt sets them for both);
#  2. clang-tidy (.clang-tidy, tests/.clang-tidy) over every C file of the
#     project in that build's compile database;
#  3. cppcheck over the same files, each with its own include dirs and
#     defines (scripts/cppcheck-suppressions.txt: the justified exceptions).
# Any warning or finding fails. Needs clang, clang-tidy, cppcheck and jq
# (bash scripts/setup.sh lint).
#   lint.sh [BUILD_DIR]     (default: build-lint in the source tree)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(mkdir -p "${1:-$root/build-lint}" && cd "${1:-$root/build-lint}" && pwd)
jobs=$(nproc)
# The project's own code; generated sources (in the build dir) are not.
dirs='^(meter|api|reports|cmd|tests|fuzz)/'

for tool in clang clang-tidy cppcheck jq; do
	if ! command -v "$tool" >/dev/null; then
		echo "lint: $tool is missing (bash scripts/setup.sh lint)" >&2
		exit 1
	fi
done

# 1. clang, warnings as errors.
t=$SECONDS
CC=clang bash "$root/scripts/build.sh" "$build" -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=Debug -DMETER_WERROR=ON -DMETER_SANITIZE=OFF \
	-DCMAKE_EXPORT_COMPILE_COMMANDS=ON
mapfile -t files < <(jq -r --arg root "$root/" --arg dirs "$dirs" \
	'.[].file | select(startswith($root)) | ltrimstr($root) | select(test($dirs))' \
	"$build/compile_commands.json" | sort -u)
if ((${#files[@]} == 0)); then
	echo "lint: no project files in $build/compile_commands.json" >&2
	exit 1
fi
echo "lint: clang -Werror build clean ($((SECONDS - t)) s)"

# 2. clang-tidy, a file per process; the output of a failing file is
# printed whole, after it finished.
t=$SECONDS
# shellcheck disable=SC2016
if ! printf '%s\n' "${files[@]}" | (cd "$root" && xargs -P "$jobs" -I{} bash -c '
	out=$(clang-tidy -p "$0" --quiet "$1" 2>&1) && exit 0
	printf "%s\n" "$out" | grep -vE "^[0-9]+ warnings? (generated|treated as errors)\.$"
	exit 1' "$build" {}); then
	echo "lint: clang-tidy found the problems above (.clang-tidy says what is checked)" >&2
	exit 1
fi
echo "lint: clang-tidy clean on ${#files[@]} files ($((SECONDS - t)) s)"

# 3. cppcheck, from the compile database narrowed to the project's files and
# without -isystem (parsing every system header would take minutes).
# The libraries tell it how libc, POSIX, libcurl and OpenSSL behave;
# jansson's header brings its iteration macros.
t=$SECONDS
jq --arg root "$root/" --arg dirs "$dirs" \
	'[.[] | select(.file | startswith($root) and (ltrimstr($root) | test($dirs)))
	  | .command |= gsub("-isystem [^ ]+"; "")] | unique_by(.file)' \
	"$build/compile_commands.json" >"$build/cppcheck-commands.json"
mkdir -p "$build/cppcheck"
jansson_h=$(pkg-config --variable=includedir jansson)/jansson.h
if ! cppcheck --project="$build/cppcheck-commands.json" --cppcheck-build-dir="$build/cppcheck" \
	-j"$jobs" --quiet --std=c11 --enable=warning,performance,portability \
	--library=posix,gnu,libcurl,openssl --include="$jansson_h" \
	--inline-suppr --suppressions-list="$root/scripts/cppcheck-suppressions.txt" \
	--error-exitcode=1 --template='{file}:{line}:{column}: {severity}: {message} [{id}]'; then
	echo "lint: cppcheck found the problems above" >&2
	exit 1
fi
echo "lint: cppcheck clean on ${#files[@]} files ($((SECONDS - t)) s)"
