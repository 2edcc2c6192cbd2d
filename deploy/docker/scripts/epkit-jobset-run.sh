#!/usr/bin/env bash
# The epkit JobSet's pod script: one pod per node, GPUS_PER_NODE ranks each.
#   1. the environment from `epkit env` (NCCL/NVSHMEM/DeepEP variables for
#      this node; EPKIT_ENV_PROFILE picks the profile, default auto)
#   2. `epkit place`: topology-ordered node rank and rendezvous, no ssh (the
#      rendezvous secret: EPKIT_SECRET_FILE, mounted from the Secret
#      epkit-rendezvous; docs/deploy.md)
#   3. `epkit doctor`: FAIL or UNKNOWN stops the job (EPKIT_DOCTOR_GATE=fail,
#      the default; warn also stops at WARN; off never stops)
#   4. `epkit test`, `epkit bench nccl alltoall` across every node
#   5. `epkit bench ep` on this node's GPUs
# Every step prints to stdout and writes JSON to $EPKIT_RESULTS_DIR/<pod>/.
# Required (the manifest sets them): JOB_COMPLETION_INDEX, NNODES,
# GPUS_PER_NODE, MASTER_ADDR, MASTER_PORT.
set -euo pipefail

: "${JOB_COMPLETION_INDEX:?set by the Indexed Job}"
: "${NNODES:?set it to the number of nodes (the JobSet parallelism)}"
: "${GPUS_PER_NODE:?set it to the GPUs per node}"
: "${MASTER_ADDR:?set it to the FQDN of index 0}"
: "${MASTER_PORT:?set it to the rendezvous port}"
run_dir=${EPKIT_RUN_DIR:-/run/epkit}
pod=$(hostname)
results=${EPKIT_RESULTS_DIR:-/results}/$pod
timeout=${EPKIT_TIMEOUT:-300}
mkdir -p "$run_dir" "$results"

step() { printf '\n=== epkit %s: %s (%s) ===\n' "$pod" "$*" "$(date -u +%FT%TZ)"; }
# Runs a step once with --json: the JSON goes to stdout and to the results
# volume; returns the step's exit code (pipefail) without stopping the script.
json_step() {
  local name=$1
  shift
  local code=0
  "$@" --json | tee "$results/$name.json" || code=$?
  echo "epkit $pod: $name exit $code (JSON: $results/$name.json)"
  return "$code"
}

step "environment"
epkit env --format sh --profile "${EPKIT_ENV_PROFILE:-auto}" >"$run_dir/env.sh"
# shellcheck source=/dev/null
. "$run_dir/env.sh"
epkit env --format dotenv --profile "${EPKIT_ENV_PROFILE:-auto}" >"$results/env.txt" || true

step "placement"
if [[ -r $run_dir/placement.env ]]; then
  # shellcheck source=/dev/null
  . "$run_dir/placement.env"
fi
# Read as data, never run: what the placement says came partly from other
# pods over the network (their secret-proven hello aside), so the JSON's three
# values are taken with jq and checked before use, not sourced or eval'd.
place_json=$(epkit place --format json --addr "$(hostname -f)" --timeout "$timeout")
EPKIT_NODE_RANK=$(jq -r '.node_rank' <<<"$place_json")
EPKIT_NNODES=$(jq -r '.nnodes' <<<"$place_json")
EPKIT_MASTER=$(jq -r '.master' <<<"$place_json")
number='^[0-9]+$'
endpoint='^[][A-Za-z0-9._:-]+$'
if [[ ! $EPKIT_NODE_RANK =~ $number || ! $EPKIT_NNODES =~ $number || ! $EPKIT_MASTER =~ $endpoint ]]; then
  echo "epkit $pod: epkit place gave an unusable placement (see $results/place.json); stopping" >&2
  printf '%s\n' "$place_json" >"$results/place.json"
  exit 2
fi
export EPKIT_NODE_RANK EPKIT_NNODES EPKIT_MASTER
launch=(--nnodes "$EPKIT_NNODES" --node-rank "$EPKIT_NODE_RANK" --master "$EPKIT_MASTER"
        --nproc-per-node "$GPUS_PER_NODE")

step "doctor"
doctor=0
epkit doctor || doctor=$?
epkit doctor --json >"$results/doctor.json" || true
case "${EPKIT_DOCTOR_GATE:-fail}:$doctor" in
  off:*|*:0|fail:1) ;;
  *)
    echo "epkit $pod: doctor exit $doctor stops the job (EPKIT_DOCTOR_GATE=${EPKIT_DOCTOR_GATE:-fail}); see $results/doctor.json" >&2
    exit "$doctor"
    ;;
esac

status=0
step "test ($EPKIT_NNODES nodes x $GPUS_PER_NODE GPUs)"
# Without connectivity no benchmark can run: a failed test ends the job.
json_step test epkit test "${launch[@]}" --timeout 120 || exit $?

step "bench nccl alltoall"
# shellcheck disable=SC2086 # EPKIT_NCCL_ARGS is a list of flags
json_step nccl-alltoall epkit bench nccl alltoall "${launch[@]}" ${EPKIT_NCCL_ARGS:--b 1M -e 1G -f 2} \
  || status=$?

step "bench ep (this node's $GPUS_PER_NODE GPUs)"
# shellcheck disable=SC2086 # EPKIT_EP_ARGS is a list of flags
# --nnodes 1: one node on its own, whatever JOB_COMPLETION_INDEX and NNODES say.
json_step ep epkit bench ep --nnodes 1 --node-rank 0 --nproc-per-node "$GPUS_PER_NODE" ${EPKIT_EP_ARGS:-} ||
  status=$?

echo "epkit $pod: node rank $EPKIT_NODE_RANK of $EPKIT_NNODES done, exit $status; results in $results"
exit "$status"
