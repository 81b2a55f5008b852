#!/usr/bin/env bash
# Run a command and record how long it took: `bash tools/timed.sh NAME COMMAND...`.
#
# When $CI_TIMES names a file (`.ci/run` sets it, and prints the file at the end), appends one
# line to it: NAME, the seconds, and the exit status when it failed. Exits with the command's
# status either way.
set -uo pipefail
name=$1
shift
start=$SECONDS
"$@"
status=$?
if [[ -n ${CI_TIMES:-} ]]; then
    failed=""
    ((status == 0)) || failed="  (failed: exit $status)"
    printf '%-16s %5d s%s\n' "$name" $((SECONDS - start)) "$failed" >>"$CI_TIMES"
fi
exit $status
