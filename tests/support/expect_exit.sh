#!/bin/sh
# expect_exit.sh CODE [-e PATTERN]... -- COMMAND [ARG...]: runs COMMAND and
# passes when it exits with CODE and its output (stdout and stderr) has a
# line matching each extended regular expression PATTERN. For ctest entries
# that test a test runner itself: a runner asked to run something that is not
# there must fail, a check that cannot run must say SKIP and why.
set -u
want=$1
shift
patterns=$(mktemp)
out=$(mktemp)
trap 'rm -f "$patterns" "$out"' EXIT
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  if [ "$1" != "-e" ] || [ "$#" -lt 2 ]; then
    echo "usage: expect_exit.sh CODE [-e PATTERN]... -- COMMAND"
    exit 2
  fi
  printf '%s\n' "$2" >>"$patterns"
  shift 2
done
[ "$#" -ge 2 ] || { echo "usage: expect_exit.sh CODE [-e PATTERN]... -- COMMAND"; exit 2; }
shift
"$@" >"$out" 2>&1
got=$?
tail -n 25 "$out"
status=0
if [ "$got" -ne "$want" ]; then
  echo "expect_exit: exit $got, expected $want: $*"
  status=1
fi
while IFS= read -r pattern; do
  if ! grep -Eq -- "$pattern" "$out"; then
    echo "expect_exit: no line matches '$pattern'"
    status=1
  fi
done <"$patterns"
[ "$status" -eq 0 ] && echo "expect_exit: exit $got and every pattern as expected"
exit "$status"
