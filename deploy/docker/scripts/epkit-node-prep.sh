#!/usr/bin/env bash
# The node-prep DaemonSet's loop, on every GPU node: optionally load what the
# node lacks (nvidia_peermem), then run `epkit doctor` at start and every
# EPKIT_INTERVAL seconds and publish the result where operators look:
#   $EPKIT_STATE_DIR/doctor.json, doctor.exit, doctor.summary  (read by the
#       node-problem-detector plugin, epkit-npd-check.sh)
#   $EPKIT_TEXTFILE_DIR/epkit_doctor.prom  (node-exporter textfile collector)
#   node label epkit/doctor=ok|warn|fail|unknown and, with
#   EPKIT_NODE_CONDITION=1, the node condition EpkitDoctorProblem
# Needs NODE_NAME (downward API spec.nodeName) and, for the label and the
# condition, the ClusterRole of deploy/k8s/node-prep (patch nodes, nodes/status).
set -euo pipefail

interval=${EPKIT_INTERVAL:-300}
state=${EPKIT_STATE_DIR:-/var/lib/epkit}
textfile=${EPKIT_TEXTFILE_DIR:-/var/lib/node-exporter/textfile}
node=${NODE_NAME:-}
sa=/var/run/secrets/kubernetes.io/serviceaccount
mkdir -p "$state" "$textfile"

log() { echo "epkit-node-prep ${node:-?}: $*"; }

load_peermem() {
  [[ ${EPKIT_LOAD_PEERMEM:-0} == 1 ]] || return 0
  if [[ -d /sys/module/nvidia_peermem ]]; then
    log "nvidia_peermem already loaded"
  elif modprobe nvidia_peermem 2>/dev/null; then
    log "loaded nvidia_peermem"
  elif [[ -n ${EPKIT_PEERMEM_KO:-} ]] && insmod "$EPKIT_PEERMEM_KO"; then
    log "loaded nvidia_peermem from $EPKIT_PEERMEM_KO"
  else
    log "could not load nvidia_peermem (no module for this kernel, or not privileged); epkit doctor names what GPUDirect RDMA lacks"
  fi
}

# PATCH the API server as this pod's service account; quiet unless it fails.
api_patch() {
  local path=$1 type=$2 body=$3
  [[ -n $node && -r $sa/token ]] || return 0
  local api="https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}"
  curl -fsS --max-time 10 --cacert "$sa/ca.crt" -o /dev/null -X PATCH \
    -H "Authorization: Bearer $(cat "$sa/token")" -H "Content-Type: $type" \
    --data "$body" "$api$path" || log "PATCH $path failed (RBAC?)"
}

publish() {
  local code=$1 word summary now
  case "$code" in
    0) word=ok ;;
    1) word=warn ;;
    2) word=fail ;;
    *) word=unknown ;;
  esac
  summary=$(jq -r '[.checks[] | select(.status == "fail" or .status == "warn" or .status == "unknown")
                    | "\(.status | ascii_upcase) \(.id)"] | join(", ")' "$state/doctor.json" 2>/dev/null || true)
  summary=${summary:-all checks pass}
  printf '%s\n' "$code" >"$state/doctor.exit.tmp" && mv "$state/doctor.exit.tmp" "$state/doctor.exit"
  printf '%s\n' "$summary" >"$state/doctor.summary.tmp" && mv "$state/doctor.summary.tmp" "$state/doctor.summary"
  api_patch "/api/v1/nodes/$node" application/merge-patch+json \
    "{\"metadata\":{\"labels\":{\"epkit/doctor\":\"$word\"}}}"
  if [[ ${EPKIT_NODE_CONDITION:-1} == 1 ]]; then
    now=$(date -u +%FT%TZ)
    local problem=False
    [[ $code == 0 || $code == 1 ]] || problem=True
    api_patch "/api/v1/nodes/$node/status" application/strategic-merge-patch+json \
      "$(jq -cn --arg s "$problem" --arg t "$now" --arg r "EpkitDoctor${word^}" --arg m "$summary" \
        '{status: {conditions: [{type: "EpkitDoctorProblem", status: $s, reason: $r, message: $m,
                                 lastHeartbeatTime: $t, lastTransitionTime: $t}]}}')"
  fi
  log "doctor exit $code ($word): $summary"
}

run_doctor() {
  local code=0
  epkit doctor --json >"$state/doctor.json.tmp" || code=$?
  mv "$state/doctor.json.tmp" "$state/doctor.json"
  # Written whole, then renamed: the collector never reads half a file.
  epkit doctor --format prometheus >"$textfile/epkit_doctor.prom.tmp" || true
  mv "$textfile/epkit_doctor.prom.tmp" "$textfile/epkit_doctor.prom"
  publish "$code"
}

load_peermem
while true; do
  run_doctor
  [[ ${EPKIT_ONCE:-0} == 1 ]] && exit 0
  sleep "$interval"
done
