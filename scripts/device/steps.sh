# shellcheck shell=bash
# Sourced by the device suites: step NAME COMMAND... runs COMMAND, keeps its
# log as $OUT/NAME.txt, prints the verdict and the log's last lines, and goes
# on with the suite; a failed step is remembered, and steps_end (the suite's
# last command, whose status is the script's) fails naming every failed step,
# so that a suite never exits 0 after a failure.
# The suites run on GPU machines: EPKIT_REQUIRE_GPU=1 turns a GPU test's skip
# for want of a GPU (a broken driver, a hidden device) into a failure.
export EPKIT_REQUIRE_GPU=${EPKIT_REQUIRE_GPU:-1}
STEPS_FAILED=()
step() {
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s ($*)"
  tail -n "${STEP_TAIL:-4}" "$OUT/$name.txt"
  if ((rc != 0)); then STEPS_FAILED+=("$name (exit $rc)"); fi
  return 0
}
# The suite's verdict: status 1 naming the failed steps, or 0.
steps_end() {
  if ((${#STEPS_FAILED[@]} > 0)); then
    echo "== FAIL: ${#STEPS_FAILED[@]} step(s) failed: ${STEPS_FAILED[*]}"
    return 1
  fi
  echo "== PASS: every step exited 0"
}
