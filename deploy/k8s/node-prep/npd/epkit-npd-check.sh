#!/bin/sh
# node-problem-detector custom plugin (deploy/k8s/node-prep/npd): reports the
# latest `epkit doctor` result that the node-prep DaemonSet wrote. NPD's
# plugin protocol is exit 0 OK, 1 NonOK (the problem is there), 2 Unknown;
# epkit's is 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN. WARN is not a node problem
# (the node works, slower or with a risk), so:
#   epkit 0, 1 -> NPD 0;  epkit 2 -> NPD 1;  epkit 3, a missing or stale
#   result -> NPD 2.
state=${EPKIT_STATE_DIR:-/var/lib/epkit}
max_age=${EPKIT_MAX_AGE:-900}

if [ ! -r "$state/doctor.exit" ]; then
  echo "no epkit doctor result in $state (is the epkit-node-prep DaemonSet on this node?)"
  exit 2
fi
age=$(( $(date +%s) - $(stat -c %Y "$state/doctor.exit") ))
if [ "$age" -gt "$max_age" ]; then
  echo "epkit doctor result is ${age}s old (limit ${max_age}s)"
  exit 2
fi
code=$(cat "$state/doctor.exit")
summary=$(cat "$state/doctor.summary" 2>/dev/null)
case "$code" in
  0|1) echo "epkit doctor exit $code: $summary"; exit 0 ;;
  2) echo "epkit doctor FAIL: $summary"; exit 1 ;;
  *) echo "epkit doctor exit $code: $summary"; exit 2 ;;
esac
