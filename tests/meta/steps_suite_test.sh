#!/usr/bin/env bash
# scripts/device/steps.sh: a suite whose step failed exits non-zero naming
# it (it used to exit 0 whatever a step did), one whose steps all passed
# exits 0, and the suites run with EPKIT_REQUIRE_GPU=1.
set -u
steps=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/device" && pwd)/steps.sh
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OUT
fail=0
check() { # name expected-exit pattern script
  local got=0 text
  text=$(env -u EPKIT_REQUIRE_GPU bash -c "source '$steps'; $4" 2>&1) || got=$?
  if [[ $got != "$2" ]] || ! grep -qE -- "$3" <<<"$text"; then
    echo "FAIL  $1: exit $got (want $2), output:"
    printf '      %s\n' "${text//$'\n'/$'\n'      }"
    fail=1
  else
    echo "ok    $1"
  fi
}
check "a failed step fails the suite" 1 "^== FAIL: 1 step\(s\) failed: broken \(exit 3\)$" \
  "step fine true; step broken sh -c 'exit 3'; step after true; steps_end"
check "every step passed" 0 "^== PASS: every step exited 0$" "step fine true; step also true; steps_end"
check "the steps see EPKIT_REQUIRE_GPU=1" 0 "^== PASS" \
  "step env sh -c '[ \"\$EPKIT_REQUIRE_GPU\" = 1 ]'; steps_end"
exit $fail
