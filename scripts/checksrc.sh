#!/usr/bin/env bash
# Source checks of the house style, run by ctest (test_checksrc):
#  - no sprintf, vsprintf, strcpy, strcat, gets, atoi, atol, atoll, strtok
#    (unbounded or unchecked): snprintf, memcpy with a checked length, and
#    parse_int64 instead;
#  - no floating point (float, double) anywhere in meter/, api/, reports/:
#    money and usage are integers, and so is everything beside them;
#  - secrets compared only in constant time (CRYPTO_memcmp);
#  - the code is formatted with .clang-format (when clang-format is installed).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
status=0
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' | grep -v '^build')

banned='\b(sprintf|vsprintf|strcpy|strcat|gets|atoi|atol|atoll|strtok)[[:space:]]*\('
if hits=$(grep -nE "$banned" "${files[@]}" 2>/dev/null | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)'); then
	echo "checksrc: banned functions:"
	echo "$hits"
	status=1
fi

core=()
for f in "${files[@]}"; do
	case "$f" in meter/* | api/* | reports/*) core+=("$f") ;; esac
done
if hits=$(grep -nE '\b(float|double|long double)\b' "${core[@]}" 2>/dev/null | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)'); then
	echo "checksrc: floating point in meter/, api/ or reports/:"
	echo "$hits"
	status=1
fi

# Secrets (tokens, key secrets and their hashes, MACs, signatures, session
# cookies) are compared in constant time, with OpenSSL's CRYPTO_memcmp only:
# an early-exit comparison (memcmp, strcmp, ...) of a secret tells an
# attacker, by its timing, how much of a guess was right. String literals are
# left out first, so comparing a name with "password" is not flagged.
cmpfn='\b(memcmp|bcmp|strcmp|strncmp|strcasecmp|strncasecmp)[[:space:]]*\('
secretish='(secret|token|hash|mac|signature|sig\b|passw|cookie|fingerprint|\bfp\b|digest|nonce|hmac)'
src=()
for f in "${files[@]}"; do
	case "$f" in meter/* | api/* | reports/* | cmd/*) src+=("$f") ;; esac
done
if hits=$(grep -nE "$cmpfn" "${src[@]}" 2>/dev/null | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)' |
	sed -E 's/"([^"\\]|\\.)*"//g' | grep -iE "$cmpfn.*$secretish"); then
	echo "checksrc: a secret compared with an early-exit function (use CRYPTO_memcmp):"
	echo "$hits"
	status=1
fi

if command -v clang-format >/dev/null; then
	for f in "${files[@]}"; do
		if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
			echo "checksrc: $f is not formatted (clang-format -i $f)"
			status=1
		fi
	done
fi
if ((status == 0)); then
	echo "checksrc: ${#files[@]} files clean"
fi
exit $status
