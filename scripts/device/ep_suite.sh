#!/usr/bin/env bash
# The intranode EP suite on every GPU of this node, in one go (issue: 8-GPU
# run): connectivity, the EP conformance suite, `epkit bench ep` at DeepEP's
# sizes with 24 and 12 SMs, and NCCL all-to-all as the baseline.
#   scripts/device/ep_suite.sh [EPKIT] [NPROC]
# Logs go to $OUT (or ./ep-suite-<host>) as <step>.txt / <step>.json.
set -u
EPKIT=${1:-epkit}
NPROC=${2:-$(nvidia-smi -L | wc -l)}
OUT=${OUT:-./ep-suite-$(hostname)}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on lent machines

# shellcheck source-path=SCRIPTDIR source=steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/steps.sh"

nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
step test "$EPKIT" test --nproc-per-node "$NPROC" --timeout 60
step test_ep "$EPKIT" test ep --nproc-per-node "$NPROC" --timeout 300
step bench_ep "$EPKIT" bench ep --nproc-per-node "$NPROC" --sms 24,12 --timeout 300
step bench_ep_json "$EPKIT" bench ep --nproc-per-node "$NPROC" --sms 24,12 --chunks 2,4,8 --json --timeout 300
step bench_alltoall "$EPKIT" bench nccl alltoall --nproc-per-node "$NPROC" -b 16M -e 1G -f 4 --timeout 120
grep -h "Best\|staged\|Non-cached" "$OUT/bench_ep.txt"
steps_end
