#!/usr/bin/env bash
# Every GPU check on a machine with fewer GPUs than ranks: starts MPS (so the
# ranks that share a GPU run at once instead of time-slicing), runs the `gpu`
# CTest label (cases that need more GPUs than there are use --oversubscribe),
# then `epkit test ep` (both modes) and a short `epkit bench ep` with 4 ranks
# sharing the GPUs, the same bench across two nodes faked on this machine, and
# stops MPS whatever happened.
#   scripts/device/one_gpu_suite.sh BUILD_DIR [RANKS]
# Logs go to $OUT (or ./one-gpu-<host>) as <step>.txt.
set -u
BUILD=${1:?usage: one_gpu_suite.sh BUILD_DIR [RANKS]}
RANKS=${2:-4}
EPKIT=$BUILD/epkit
OUT=${OUT:-./one-gpu-$(hostname)}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on lent machines

export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/nvidia-mps-log}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
mps=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
started_mps=0
if [[ -e $CUDA_MPS_PIPE_DIRECTORY/control ]]; then
  echo "MPS already running ($CUDA_MPS_PIPE_DIRECTORY)"
elif [[ -x $mps ]] && "$mps" -d; then
  started_mps=1
  echo "MPS started ($CUDA_MPS_PIPE_DIRECTORY)"
else
  echo "MPS could not be started: ranks sharing a GPU will time-slice"
fi
stop_mps() {
  if ((started_mps)); then echo quit | "$mps" && echo "MPS stopped"; fi
}
trap stop_mps EXIT

export STEP_TAIL=6  # read by step() in steps.sh
# shellcheck source-path=SCRIPTDIR source=steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/steps.sh"

# A build carried from another machine: its CTest file names the folder it
# was made in, and the test binary the epkit it was built beside.
tests=$BUILD/tests/gpu
made_in=$(sed -n 's/^# Build directory: //p' "$tests/CTestTestfile.cmake")
here=$(cd "$tests" && pwd)
if [[ -n $made_in && $made_in != "$here" ]]; then
  sed -i "s#$made_in#$here#g" "$tests/CTestTestfile.cmake"
fi
export EPKIT_BIN
EPKIT_BIN=$(cd "$BUILD" && pwd)/epkit

nvidia-smi -L >"$OUT/gpus.txt" 2>&1
step ctest_gpu ctest --test-dir "$tests" -L gpu --output-on-failure --timeout 900
grep -E "tests passed|Passed|Skipped|Failed|SKIP" "$OUT/ctest_gpu.txt" | tail -n 40
step test_ep "$EPKIT" test ep --nproc-per-node "$RANKS" --oversubscribe --timeout 300
step test_ep_low_latency "$EPKIT" test ep --mode low-latency --nproc-per-node "$RANKS" \
  --oversubscribe --timeout 300
step bench_ep "$EPKIT" bench ep --nproc-per-node "$RANKS" --oversubscribe --sms 24 --chunks 4 \
  -w 3 -n 10 --timeout 300
step bench_ep_low_latency "$EPKIT" bench ep --mode low-latency --nproc-per-node "$RANKS" \
  --oversubscribe -w 3 -n 20 --timeout 300

# Two nodes of 2 ranks faked on this machine: one node agent per NCCL_HOSTID,
# so the internode Buffer's network leg runs over NCCL's sockets. Node 1's
# lines go to bench_ep_nodes_node1.txt.
two_node_bench() {
  local common=(bench ep --nnodes 2 --nproc-per-node 2 --oversubscribe
    --master 127.0.0.1:29651 --tokens 1024 --sms 24 --chunks 4 -w 3 -n 10 --timeout 300)
  NCCL_HOSTID=fake-b "$EPKIT" "${common[@]}" --node-rank 1 >"$OUT/bench_ep_nodes_node1.txt" 2>&1 &
  local node1=$!
  NCCL_HOSTID=fake-a "$EPKIT" "${common[@]}" --node-rank 0
  local rc=$?
  wait "$node1"
  local rc1=$?
  return $((rc != 0 ? rc : rc1))
}
STEP_TAIL=16 step bench_ep_nodes two_node_bench
steps_end
