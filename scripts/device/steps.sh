# shellcheck shell=bash
# Sourced by the device suites: step NAME COMMAND... runs COMMAND, keeps its
# log as $OUT/NAME.txt, prints the verdict and the log's last lines, and
# never stops the suite.
step() {
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s ($*)"
  tail -n "${STEP_TAIL:-4}" "$OUT/$name.txt"
  return 0
}
