#!/usr/bin/env bash
# Init container of the epkit JobSet: writes this pod's placement for
# `epkit place` to ${EPKIT_RUN_DIR:-/run/epkit}/placement.env.
#
# The downward API exposes the pod's own labels, not its node's, so the
# topology labels GKE puts on nodes (cloud.google.com/gce-topology-block,
# -subblock, -host) are read from the Node object through the API server with
# the pod's service account (the base ships a ClusterRole allowing
# `get nodes`, nothing else). NODE_NAME comes from the downward API
# (spec.nodeName). Without the labels or the permission the placement is the
# node name alone, and the order falls back to node names: the job still runs.
set -euo pipefail

run_dir=${EPKIT_RUN_DIR:-/run/epkit}
out="$run_dir/placement.env"
node=${NODE_NAME:-}
sa=/var/run/secrets/kubernetes.io/serviceaccount
mkdir -p "$run_dir"

block="" subblock="" host=""
if [[ -z $node ]]; then
  echo "epkit-node-placement: NODE_NAME is unset (downward API spec.nodeName); ordering by index" >&2
elif [[ ! -r $sa/token ]]; then
  echo "epkit-node-placement: no service account token; ordering by node name" >&2
else
  api="https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}"
  if json=$(curl -fsS --max-time 10 --cacert "$sa/ca.crt" \
      -H "Authorization: Bearer $(cat "$sa/token")" "$api/api/v1/nodes/$node"); then
    label() { jq -r --arg k "$1" '.metadata.labels[$k] // ""' <<<"$json"; }
    block=$(label cloud.google.com/gce-topology-block)
    subblock=$(label cloud.google.com/gce-topology-subblock)
    host=$(label cloud.google.com/gce-topology-host)
  else
    echo "epkit-node-placement: cannot read node $node (RBAC 'get nodes' missing?); ordering by node name" >&2
  fi
fi

{
  printf 'export EPKIT_NODE_NAME=%q\n' "$node"
  printf 'export EPKIT_TOPOLOGY_BLOCK=%q\n' "$block"
  printf 'export EPKIT_TOPOLOGY_SUBBLOCK=%q\n' "$subblock"
  printf 'export EPKIT_TOPOLOGY_HOST=%q\n' "$host"
} >"$out"
echo "epkit-node-placement: node=${node:--} block=${block:--} subblock=${subblock:--} host=${host:--}"
