#!/usr/bin/env bash
# Same inputs, same rank count, default settings: the same bits in every run (issue 41, item 5).
# Runs python/tests/reproducible_bits.py as three separate jobs with default settings and one
# with another chunk size, which must give other bits (so the fingerprint does see the order).
# Usage: check_reproducible.sh MPIRUN... -- PYTHON SCRIPT   (the environment carries the rest)
set -uo pipefail
launcher=()
while (($#)) && [[ $1 != -- ]]; do launcher+=("$1"); shift; done
shift
bits() { sed -n 's/^BITS //p' <<<"$1"; }
unset PRIOCCL_CHUNK_BYTES PRIOCCL_ALGO PRIOCCL_CALIBRATE
first=$("${launcher[@]}" "$@" 2>&1)
# The script says why it cannot run (no numpy): pass that on for CTest to report a skip.
if grep -m1 '^SKIPPED: ' <<<"$first"; then exit 0; fi
a=$(bits "$first")
b=$(bits "$("${launcher[@]}" "$@" 2>&1)")
c=$(bits "$("${launcher[@]}" "$@" 2>&1)")
d=$(bits "$(PRIOCCL_CHUNK_BYTES=96K "${launcher[@]}" -x PRIOCCL_CHUNK_BYTES "$@" 2>&1)")
echo "default runs: '$a' '$b' '$c'; PRIOCCL_CHUNK_BYTES=96K: '$d'"
[[ -n $a && -n $d ]] || { echo "FAIL: a run printed no BITS line"; exit 1; }
[[ $a == "$b" && $a == "$c" ]] || { echo "FAIL: default runs ended with different bits"; exit 1; }
[[ $a != "$d" ]] || { echo "FAIL: another chunk size gave the same bits: the check cannot see the order"; exit 1; }
echo "PASS: default runs bitwise identical"
