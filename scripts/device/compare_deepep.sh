#!/usr/bin/env bash
# DeepEP and epkit.deep_ep side by side, in one device call, the same scripts
# for both libraries (the module taken by name), rounds alternating which
# library goes first:
#   host      tests/python/device/host_cost.py (host us per call), ROUNDS rounds,
#             plus the engine's C++ API figure (epkit_ep_call_overhead), then
#             both libraries in one process, call by call (--interleave);
#   intranode DeepEP's tests/test_intranode.py, once as it is and once with
#             `import deep_ep` changed to epkit.deep_ep, at INTRANODE_ARGS;
#             then `epkit bench ep` at the same sizes.
# Usage: scripts/device/compare_deepep.sh DEEPEP_SRC [RANKS]
#   DEEPEP_SRC: a DeepEP snapshot (e.g. `git -C MIRROR archive 29d31c0 | tar -x -C .deepep`),
#   built here in place (python setup.py build_ext --inplace; never committed).
#   EPKIT_BUILD_DIR (default build/): where epkit, lib/libepkit_ep.so and
#   tests/gpu/epkit_ep_call_overhead are (a CUDA build, as python_suite.sh). STEPS (default build,host,intranode),
#   ROUNDS (3 host rounds), INTRANODE_ROUNDS (1), INTRANODE_ARGS (DeepEP's defaults:
#   --num-tokens 4096 --hidden 7168 --num-topk 8 --num-experts 256). Logs and a
#   summary under $OUT (or ./compare).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deepep=$(cd "${1:?usage: compare_deepep.sh DEEPEP_SRC [RANKS]}" && pwd)
ranks=${2:-2}
out=${OUT:-./compare}
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=${EPKIT_BUILD_DIR:-$here/build}
lib=$build/lib/libepkit_ep.so
epkit_exe=$build/epkit
overhead=$build/tests/gpu/epkit_ep_call_overhead
rounds=${ROUNDS:-3}
steps=,${STEPS:-build,host,intranode},
want() { [[ $steps == *,$1,* ]]; }
export NCCL_NVLS_ENABLE=0 PYTHONDONTWRITEBYTECODE=1 EPKIT_LIBRARY=$lib
export PYTHONPATH=$here/tests/python/shim:$here/python:$here/tests/python/device:$deepep${PYTHONPATH:+:$PYTHONPATH}
status=0
note() { echo "$*" | tee -a "$out/summary.txt"; }

mps_started=0
if [[ ${EPKIT_MPS:-1} == 1 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps_started=1
fi
# shellcheck disable=SC2317  # called by the EXIT trap
stop_mps() { ((mps_started)) && echo quit | nvidia-cuda-mps-control; }
trap stop_mps EXIT

if want build; then
  start=$SECONDS
  if ! (cd "$deepep" && CPATH=/usr/local/cuda/include/cccl${CPATH:+:$CPATH} TORCH_CUDA_ARCH_LIST=9.0 \
        python3 setup.py build_ext --inplace) >"$out/build_deepep.txt" 2>&1; then
    note "== DeepEP build failed"; tail -n 20 "$out/build_deepep.txt"; exit 1
  fi
  if ! python3 -m epkit._build_ext >"$out/build_ext.txt" 2>&1; then
    note "== epkit._C build failed"; tail -n 30 "$out/build_ext.txt"; exit 1
  fi
  note "== built DeepEP and epkit._C in $((SECONDS - start)) s"
fi
python3 -c "import deep_ep, epkit.deep_ep" || { note "== import failed"; exit 1; }

if want host; then
  port=29700
  for ((r = 1; r <= rounds; r++)); do
    # The C++ API's figure in every round too: the machine's noise moves all three.
    if [[ -x $overhead ]]; then
      timeout 120 "$overhead" "$ranks" 8 400 >"$out/host_cpp_$r.txt" 2>&1 || status=1
      note "round $r $(grep -h '^cpp ' "$out/host_cpp_$r.txt" || tail -n 3 "$out/host_cpp_$r.txt")"
    fi
    order=(deep_ep epkit.deep_ep)
    ((r % 2 == 0)) && order=(epkit.deep_ep deep_ep)
    for m in "${order[@]}"; do
      extra=()
      [[ $m == epkit.deep_ep ]] && extra=(--low-latency)
      log=$out/host_${m}_$r.txt
      EPKIT_SHARE_GPU=1 timeout 240 python3 "$here/tests/python/device/host_cost.py" --module "$m" \
        --num-processes "$ranks" --port $((port++)) "${extra[@]}" >"$log" 2>&1 || status=1
      note "round $r $(grep -h '^host_cost ' "$log" || tail -n 5 "$log")"
    done
  done
  # Both libraries in one process, call by call (no order between runs).
  log=$out/host_interleaved.txt
  EPKIT_SHARE_GPU=1 timeout 240 python3 "$here/tests/python/device/host_cost.py" --interleave deep_ep,epkit.deep_ep \
    --num-processes "$ranks" --port $((port++)) >"$log" 2>&1 || status=1
  note "$(grep -h '^host_cost_interleaved ' "$log" || tail -n 5 "$log")"
fi

if want intranode; then
  args=${INTRANODE_ARGS:---num-tokens 4096 --hidden 7168 --num-topk 8 --num-experts 256}
  # DeepEP's tests as they are, and a copy with only the import line changed
  # (test_intranode.py imports test_low_latency.py, which imports deep_ep too).
  for which in deep_ep epkit; do
    rm -rf "$out/tests_$which" && mkdir -p "$out/tests_$which"
    cp "$deepep"/tests/*.py "$out/tests_$which/"
  done
  sed -i 's/^import deep_ep$/import epkit.deep_ep as deep_ep/' "$out"/tests_epkit/test_*.py
  port=8461
  for ((r = 1; r <= ${INTRANODE_ROUNDS:-1}; r++)); do
    order=(deep_ep epkit)
    ((r % 2 == 0)) && order=(epkit deep_ep)
    for which in "${order[@]}"; do
      log=$out/test_intranode_${which}_${ranks}_$r.txt
      # shellcheck disable=SC2086  # args is a list of flags
      (cd "$out/tests_$which" && EPKIT_SHARE_GPU=1 MASTER_PORT=$((port++)) timeout 280 python3 test_intranode.py \
        --num-processes "$ranks" $args) >"$log" 2>&1
      rc=$?
      ((rc)) && status=1
      note "== test_intranode.py through $which, round $r ($ranks ranks, $args): exit $rc, $(grep -c ' passed' "$log") cases passed"
      grep -h "Best\|\[layout\]" "$log" | tee -a "$out/summary.txt"
      ((rc)) && tail -n 15 "$log"
    done
  done
  if [[ -x $epkit_exe ]]; then
    tokens=$(sed -n 's/.*--num-tokens \([0-9]*\).*/\1/p' <<<"$args")
    hidden=$(sed -n 's/.*--hidden \([0-9]*\).*/\1/p' <<<"$args")
    topk=$(sed -n 's/.*--num-topk \([0-9]*\).*/\1/p' <<<"$args")
    experts=$(sed -n 's/.*--num-experts \([0-9]*\).*/\1/p' <<<"$args")
    timeout 200 "$epkit_exe" bench ep --nproc-per-node "$ranks" --oversubscribe --tokens "${tokens:-4096}" \
      --hidden "${hidden:-7168}" --topk "${topk:-8}" --experts "${experts:-256}" --sms 24 \
      >"$out/bench_ep_$ranks.txt" 2>&1 || status=1
    grep -h "tuning\|Best\|FAIL\|error" "$out/bench_ep_$ranks.txt" | tail -n 12 | tee -a "$out/summary.txt"
  fi
fi
note "== compare: $([[ $status == 0 ]] && echo PASS || echo FAIL)"
exit $status
