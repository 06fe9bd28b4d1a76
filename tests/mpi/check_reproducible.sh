#!/usr/bin/env bash
# Same inputs, same rank count, default settings: the same bits in every run (issue 41, item 5).
# Runs python/tests/reproducible_bits.py as three separate jobs with default settings and one
# with another chunk size, which must give other bits (so the fingerprint does see the order).
# Usage: check_reproducible.sh MPIRUN... -- PYTHON SCRIPT   (the environment carries the rest)
set -uo pipefail
launcher=()
while (($#)) && [[ $1 != -- ]]; do launcher+=("$1"); shift; done
shift
run() { "${launcher[@]}" "$@" 2>&1 | sed -n 's/^BITS //p'; }
unset PRIOCCL_CHUNK_BYTES PRIOCCL_ALGO PRIOCCL_CALIBRATE
a=$(run "$@"); b=$(run "$@"); c=$(run "$@")
d=$(PRIOCCL_CHUNK_BYTES=96K run -x PRIOCCL_CHUNK_BYTES "$@")
echo "default runs: '$a' '$b' '$c'; PRIOCCL_CHUNK_BYTES=96K: '$d'"
[[ -n $a && -n $d ]] || { echo "FAIL: a run printed no BITS line"; exit 1; }
[[ $a == "$b" && $a == "$c" ]] || { echo "FAIL: default runs ended with different bits"; exit 1; }
[[ $a != "$d" ]] || { echo "FAIL: another chunk size gave the same bits: the check cannot see the order"; exit 1; }
echo "PASS: default runs bitwise identical"
