#!/usr/bin/env bash
# Runs a test command that must both exit with the expected status and print a line matching
# each pattern (Perl regexes, one line each). CTest's PASS_REGULAR_EXPRESSION alone ignores the
# exit status: a rank that crashes after printing its summary line would pass.
#   expect_output.sh [--status N] --match REGEX [--match REGEX]... -- COMMAND [ARG]...
# An exit status of 77 from COMMAND passes through (CTest: skipped, with SKIP_RETURN_CODE 77).
set -uo pipefail
want=0
patterns=()
while (($#)); do
  case $1 in
    --status) want=$2; shift 2 ;;
    --match) patterns+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "expect_output.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#patterns[@]} && $#)) || { echo "expect_output.sh: needs --match and a command" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [[ $status == 77 && $want != 77 ]]; then exit 77; fi
failed=0
if [[ $status != "$want" ]]; then
  echo "FAILED (expect_output.sh): exit status $status, expected $want: $*"
  failed=1
fi
for p in "${patterns[@]}"; do
  if ! grep -Pq -- "$p" "$log"; then
    echo "FAILED (expect_output.sh): no line matches '$p'"
    failed=1
  fi
done
exit $failed
