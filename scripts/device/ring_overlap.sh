#!/usr/bin/env bash
# Ring mode's overlap of the network leg with the NVLink legs on the emulated
# NIC (issue 25's line: the leg alone about 1.5x the NVLink legs, the call
# within 1.15x of the leg alone). Three runs of epkit_ep_leg_host_time:
#   1. the cap at 1000 GB/s: the call with the network nearly free (the NVLink
#      legs and the leg's own machinery), T_fast per operation;
#   2. and 3. the cap set so that the bytes each rank's NIC carries per call
#      (the largest over the ranks, `nic_mb`) take 1.5 x T_fast, one run for
#      the cached dispatch's cap and one for the combine's; the call's time
#      over that leg-alone time is the figure.
# Device time per call: events around a batch of CALLS calls, the slowest
# rank's. Usage:
#   scripts/device/ring_overlap.sh BIN RANKS NODES [TOKENS [CALLS]]
# (BIN: the epkit_ep_leg_host_time program). Prints one "overlap" line.
set -u
BIN=$1
RANKS=$2
NODES=$3
TOKENS=${4:-4096}
CALLS=${5:-7}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
export NCCL_NVLS_ENABLE=0 EP_LEG_RINGS=1

# The largest device_us dispatch, combine and nic_mb dispatch, combine over
# the ranks' lines.
largest() {
  sed -n 's/.*device_us dispatch=\([0-9.]*\) combine=\([0-9.]*\) nic_mb dispatch=\([0-9.]*\) combine=\([0-9.]*\).*/\1 \2 \3 \4/p' "$LOG" |
    awk '{ for (i = 1; i <= 4; i++) if ($i > m[i]) m[i] = $i } END { print m[1] + 0, m[2] + 0, m[3] + 0, m[4] + 0 }'
}
run() {
  timeout 180 "$BIN" "$RANKS" "$NODES" "$1" "$TOKENS" 7168 "$CALLS" >"$LOG" 2>&1 ||
    { echo "epkit_ep_leg_host_time at $1 GB/s failed:"; tail -n 5 "$LOG"; exit 1; }
}
cap_for() { awk -v mb="$1" -v us="$2" 'BEGIN { printf "%.3f", mb / (1.5 * us / 1000) }'; }

run 1000
read -r fast_d fast_c nic_d nic_c < <(largest)
# A run that printed no figures (an older program, a changed line) must not
# become a division by zero and an empty cap.
if ! awk -v a="$fast_d" -v b="$fast_c" -v c="$nic_d" -v d="$nic_c" 'BEGIN { exit !(a > 0 && b > 0 && c > 0 && d > 0) }'; then
  echo "no device_us/nic_mb figures in the run at 1000 GB/s:"
  tail -n 5 "$LOG"
  exit 1
fi
cap_d=$(cap_for "$nic_d" "$fast_d")
cap_c=$(cap_for "$nic_c" "$fast_c")
run "$cap_d"
read -r capped_d _ _ _ < <(largest)
run "$cap_c"
read -r _ capped_c _ _ < <(largest)
awk -v r="$RANKS" -v n="$NODES" -v t="$TOKENS" -v fd="$fast_d" -v fc="$fast_c" -v nd="$nic_d" \
  -v nc="$nic_c" -v cd="$cap_d" -v cc="$cap_c" -v sd="$capped_d" -v sc="$capped_c" 'BEGIN {
  printf "overlap %s ranks on %s nodes, %s tokens | cached dispatch: fast %.2f ms, nic %.2f MB, cap %.2f GB/s, leg alone %.2f ms, call %.2f ms, over the leg %.3f | combine: fast %.2f ms, nic %.2f MB, cap %.2f GB/s, leg alone %.2f ms, call %.2f ms, over the leg %.3f\n",
    r, n, t, fd / 1000, nd, cd, nd / cd, sd / 1000, (sd / 1000) / (nd / cd),
    fc / 1000, nc, cc, nc / cc, sc / 1000, (sc / 1000) / (nc / cc) }'
