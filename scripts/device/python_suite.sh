#!/usr/bin/env bash
# The Python package on one GPU with ranks sharing it (issue: Python access):
#   1. DeepEP's tests/test_intranode.py (commit 29d31c0) with only
#      `import deep_ep` changed to epkit.deep_ep, with 2 and 4 ranks;
#   2. CUDA-graph capture and replay vs eager (tests/python/device/graph_replay.py), and the
#      low-latency calls' hook and handle objects (tests/python/device/low_latency_api.py);
#   3. host time per call: Python vs the C++ API (host_cost.py, epkit_ep_call_overhead);
#   4. (step internode, not in the default set) DeepEP's tests/test_internode.py,
#      import changed only, on 2 nodes x 8 ranks faked on this host: two
#      launches (WORLD_SIZE=2, RANK=0/1), 16 processes; INTERNODE_ARGS adds
#      the test's own flags (e.g. --num-tokens 256 to fit the 10 minutes);
#   5. (step lowlatency) DeepEP's tests/test_low_latency.py, import changed
#      only, with each RANKS count (its defaults: 128 tokens, hidden 7168,
#      top-8, 288 experts); (step lowlatency-nodes, not in the default set)
#      the same across faked nodes on the emulated NIC: LL_NODE_RUNS (default
#      "2x2 4x1") lists NxM = N launches (WORLD_SIZE=N, RANK=i) of M ranks,
#      EPKIT_RANKS_PER_NODE=M, EPKIT_NETWORK_LEG=emulated.
#   6. (step elastic, not in the default set) DeepEP V2's
#      tests/elastic/test_ep.py (commit dd758ca) against epkit.deep_ep.ElasticBuffer,
#      import line changed only; its `deep_ep.utils` helpers come from the V2
#      snapshot through the test-only shim tests/python/shim_v2 (never from
#      epkit). ELASTIC_RUNS (default: each RANKS count, then 2x2) lists the runs:
#      N = N ranks on one node, NxM = N faked nodes of M ranks (N launches,
#      EPKIT_RANKS_PER_NODE=M), a ":nosync" suffix adds --do-cpu-sync 0, and
#      "graph" runs tests/python/device/elastic_graph.py (2 ranks). The test runs
#      with --skip-perf-test (its timing part looks for V2's kernel names in the
#      profile, which epkit's kernels do not have); ELASTIC_ARGS adds its own
#      flags (e.g. --num-tokens 1024 to fit the 10 minutes).
#      The V2 snapshot: DEEPEP_V2_DIR (default .deepep-v2 in the repository root,
#      git-ignored), made where DeepEP's git mirror is with
#        mkdir -p .deepep-v2 && git -C MIRROR archive dd758ca tests/elastic deep_ep/utils | tar -x -C .deepep-v2
#      then carried to the device with the working tree (run's carry: .deepep-v2).
# Usage: scripts/device/python_suite.sh DEEPEP_DIR [RANKS...]
#   DEEPEP_DIR holds DeepEP's tests/ (test_intranode.py, test_low_latency.py,
#   utils.py), e.g. from `git -C MIRROR archive 29d31c0 tests | tar -x -C .deepep`.
# STEPS (default deepep,graph,overhead) picks steps: one device call has 10 minutes,
# so run e.g. STEPS=build first, then deepep with 2 ranks, deepep with 4, then graph,overhead.
# Builds libepkit_ep.so and epkit_ep_call_overhead into $EPKIT_BUILD_DIR (build/)
# when absent. Runs under MPS unless EPKIT_MPS=0. Logs: $OUT (or ./python-suite).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deepep=${1:?usage: python_suite.sh DEEPEP_DIR [RANKS...]}
shift
ranks=("$@")
((${#ranks[@]})) || ranks=(2 4)
build=${EPKIT_BUILD_DIR:-$here/build}
out=${OUT:-./python-suite}
mkdir -p "$out" && out=$(cd "$out" && pwd)
deepep=$(cd "$deepep" && pwd)
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on lent machines
export PYTHONDONTWRITEBYTECODE=1
# A GPU program that would skip for want of a GPU fails here (tests/support/gpu_gate.h).
export EPKIT_REQUIRE_GPU=${EPKIT_REQUIRE_GPU:-1}

lib=$build/lib/libepkit_ep.so
overhead_bin=$build/tests/gpu/epkit_ep_call_overhead
if [[ ! -f $lib || ! -x $overhead_bin ]]; then
  echo "== build: libepkit_ep.so, epkit_ep_call_overhead (log: $out/build.txt)"
  # The C++ timing program is a test target (needs GoogleTest to configure);
  # without it the library alone is built and the C++ column stays empty.
  { cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON &&
    cmake --build "$build" -j "$(nproc)" --target epkit_ep_c epkit_ep_call_overhead; } >"$out/build.txt" 2>&1 ||
    { cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
      cmake --build "$build" -j "$(nproc)" --target epkit_ep_c; } >>"$out/build.txt" 2>&1 ||
    { tail -n 20 "$out/build.txt"; exit 1; }
fi
steps=,${STEPS:-deepep,graph,overhead},
want() { [[ $steps == *,$1,* ]]; }
want build && { echo "== build: done"; exit 0; }
export EPKIT_LIBRARY=$lib
export PYTHONPATH=$here/tests/python/shim:$here/python:$here/tests/python/device${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import epkit; print('epkit:', epkit.library_path(), '|', epkit.why_unavailable() or 'ready')"

# MPS: the ranks' kernels run side by side instead of time-sliced. Started here,
# stopped here, with its own pipe folder.
mps_started=0
if [[ ${EPKIT_MPS:-1} == 1 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps_started=1 && echo "== MPS on"
fi
# shellcheck disable=SC2317  # called by the EXIT trap
stop_mps() { ((mps_started)) && echo quit | nvidia-cuda-mps-control; }
trap stop_mps EXIT

status=0
step() {  # step NAME COMMAND...: runs with a log, prints the verdict and tail
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  ((rc)) && status=1
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  return $rc
}

# DeepEP's tests with the import line changed only.
tests=$out/deepep-tests
rm -rf "$tests" && mkdir -p "$tests"
cp "$deepep"/tests/test_intranode.py "$deepep"/tests/test_internode.py "$deepep"/tests/test_low_latency.py \
  "$deepep"/tests/utils.py "$tests"/
sed -i 's/^import deep_ep$/import epkit.deep_ep as deep_ep/' "$tests"/test_*.py
for t in test_intranode test_internode test_low_latency; do
  diff "$deepep/tests/$t.py" "$tests/$t.py"
done >"$out/import-change.diff"

# 1. test_intranode.py.
if want deepep; then
port=8361
for n in "${ranks[@]}"; do
  (cd "$tests" && EPKIT_SHARE_GPU=1 MASTER_PORT=$port \
    timeout 540 python3 test_intranode.py --num-processes "$n") >"$out/test_intranode_$n.txt" 2>&1
  rc=$?
  ((rc)) && status=1
  passed=$(grep -c " passed" "$out/test_intranode_$n.txt")
  echo "== test_intranode.py, $n ranks: exit $rc, $passed/24 cases passed"
  grep -h "\[layout\]\|Best" "$out/test_intranode_$n.txt"
  ((rc)) && tail -n 15 "$out/test_intranode_$n.txt"
  port=$((port + 1))
done
fi

# 4. test_internode.py on two faked nodes of 8 ranks (the test asserts 8 per node).
if want internode; then
  pids=()
  for node in 1 0; do
    # shellcheck disable=SC2086  # INTERNODE_ARGS is a list of flags
    (cd "$tests" && EPKIT_SHARE_GPU=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=8391 WORLD_SIZE=2 RANK=$node \
      timeout 560 python3 test_internode.py --num-processes 8 ${INTERNODE_ARGS:-}) \
      >"$out/test_internode_node$node.txt" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  ((rc)) && status=1
  log=$out/test_internode_node0.txt
  passed=$(grep -c " passed" "$log")
  echo "== test_internode.py, 2 nodes x 8 ranks: exit $rc, $passed/32 cases passed"
  grep -h "\[config\]\|\[layout\]\|Best" "$log"
  ((rc)) && tail -n 15 "$out"/test_internode_node*.txt
fi

# 5. test_low_latency.py.
if want lowlatency; then
  port=8371
  for n in "${ranks[@]}"; do
    log=$out/test_low_latency_$n.txt
    (cd "$tests" && EPKIT_SHARE_GPU=1 MASTER_PORT=$port \
      timeout 300 python3 test_low_latency.py --num-processes "$n") >"$log" 2>&1
    rc=$?
    ((rc)) && status=1
    echo "== test_low_latency.py, $n ranks: exit $rc"
    grep -h "rank 0\]" "$log"
    ((rc)) && tail -n 20 "$log"
    port=$((port + 1))
  done
fi

# 5b. test_low_latency.py across faked nodes (the emulated NIC between them).
if want lowlatency-nodes; then
  port=8381
  for spec in ${LL_NODE_RUNS:-2x2 4x1}; do
    if [[ ! $spec =~ ^([0-9]+)x([0-9]+)$ ]]; then
      echo "== lowlatency-nodes: unknown run '$spec' (NxM)"
      status=1
      continue
    fi
    nodes=${BASH_REMATCH[1]} per=${BASH_REMATCH[2]}
    pids=()
    for ((node = nodes - 1; node >= 0; node--)); do
      (cd "$tests" && EPKIT_SHARE_GPU=1 EPKIT_RANKS_PER_NODE=$per EPKIT_NETWORK_LEG=emulated \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$nodes RANK=$node \
        timeout 300 python3 test_low_latency.py --num-processes "$per") \
        >"$out/test_low_latency_${spec}_node$node.txt" 2>&1 &
      pids+=($!)
    done
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    ((rc)) && status=1
    log=$out/test_low_latency_${spec}_node0.txt
    echo "== test_low_latency.py, $nodes faked nodes x $per ranks: exit $rc"
    grep -h "rank 0\]" "$log"
    ((rc)) && tail -n 20 "$out"/test_low_latency_"${spec}"_node*.txt
    port=$((port + 1))
  done
fi

# 6. DeepEP V2's tests/elastic/test_ep.py against ElasticBuffer.
if want elastic; then
  v2=${DEEPEP_V2_DIR:-$here/.deepep-v2}
  if [[ ! -f $v2/tests/elastic/test_ep.py || ! -f $v2/deep_ep/utils/__init__.py ]]; then
    echo "== elastic: no DeepEP V2 snapshot at $v2 (see this script's header)"
    status=1
  else
    v2=$(cd "$v2" && pwd)
    v2tests=$out/deepep-v2-tests
    rm -rf "$v2tests" && mkdir -p "$v2tests"
    cp "$v2/tests/elastic/test_ep.py" "$v2tests/"
    sed -i 's/^import deep_ep$/import epkit.deep_ep as deep_ep/' "$v2tests/test_ep.py"
    diff "$v2/tests/elastic/test_ep.py" "$v2tests/test_ep.py" >"$out/import-change-v2.diff"
    runs=${ELASTIC_RUNS:-"${ranks[*]} 2x2"}
    port=8401
    for spec in $runs; do
      name=${spec/:/_}
      log=$out/test_ep_$name.txt
      flags="--skip-perf-test ${ELASTIC_ARGS:-}"
      [[ $spec == *:nosync ]] && flags="$flags --do-cpu-sync 0"
      size=${spec%:nosync}
      start=$SECONDS
      if [[ $spec == graph ]]; then
        log=$out/elastic_graph.txt
        timeout 300 python3 "$here/tests/python/device/elastic_graph.py" --num-processes 2 --port $port >"$log" 2>&1
        rc=$?
      elif [[ $size =~ ^([0-9]+)x([0-9]+)$ ]]; then
        nodes=${BASH_REMATCH[1]} per=${BASH_REMATCH[2]}
        pids=()
        for ((node = nodes - 1; node >= 0; node--)); do
          # shellcheck disable=SC2086  # flags is a list
          # Every faked node's ranks share one GPU: V2's test holds its references
          # for all of them on one card, and the caching allocator's split blocks
          # ran it out of memory at 2x2 (a GPU per rank has room to spare).
          (cd "$v2tests" && EPKIT_SHARE_GPU=1 EPKIT_DEEPEP_V2_DIR=$v2 EPKIT_RANKS_PER_NODE=$per \
            PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} \
            PYTHONPATH=$here/tests/python/shim_v2:$PYTHONPATH MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            WORLD_SIZE=$nodes RANK=$node timeout 560 python3 test_ep.py --num-processes "$per" $flags) \
            >"$out/test_ep_${name}_node$node.txt" 2>&1 &
          pids+=($!)
        done
        rc=0
        for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
        log=$out/test_ep_${name}_node0.txt
      elif [[ $size =~ ^[0-9]+$ ]]; then
        # shellcheck disable=SC2086  # flags is a list
        (cd "$v2tests" && EPKIT_SHARE_GPU=1 EPKIT_DEEPEP_V2_DIR=$v2 \
          PYTHONPATH=$here/tests/python/shim_v2:$PYTHONPATH MASTER_PORT=$port \
          timeout 560 python3 test_ep.py --num-processes "$size" $flags) >"$log" 2>&1
        rc=$?
      else
        echo "== elastic: unknown run '$spec' (N, NxM, either with :nosync, or graph)"
        status=1
        continue
      fi
      ((rc)) && status=1
      if [[ $spec == graph ]]; then
        echo "== elastic graph: exit $rc in $((SECONDS - start)) s"
      else
        echo "== elastic $spec: exit $rc in $((SECONDS - start)) s, $(grep -c "Testing with" "$log") cases started (144 per run)"
      fi
      grep -h "elastic graph\|Ranks:" "$log" | head -n 4
      ((rc)) && tail -n 20 "$log"
      port=$((port + 1))
    done
  fi
fi

# 2. CUDA graphs.
if want graph; then
  step graph_replay timeout 300 python3 "$here/tests/python/device/graph_replay.py" --num-processes 2
  grep -h "graph\|differs\|Error" "$out/graph_replay.txt" | tail -n 8
  # The low-latency calls' objects made by the extension (hooks, handles).
  step low_latency_api timeout 200 python3 "$here/tests/python/device/low_latency_api.py" --num-processes 2
  grep -h "low_latency_api\|Error" "$out/low_latency_api.txt" | tail -n 4
fi

# 3. Host time per call: the C++ API, then the Python package (host_cost.py;
#    DeepEP beside it: scripts/device/compare_deepep.sh).
if want overhead; then
  if [[ -x $overhead_bin ]]; then
    step overhead_cpp timeout 120 "$overhead_bin" 2 8 400
    grep -h "^cpp " "$out/overhead_cpp.txt"
  fi
  EPKIT_SHARE_GPU=1 step overhead_python timeout 300 python3 "$here/tests/python/device/host_cost.py" \
    --module epkit.deep_ep --num-processes 2 --low-latency
  grep -h "^host_cost" "$out/overhead_python.txt"
fi
echo "== python suite: $([[ $status == 0 ]] && echo PASS || echo FAIL)"
exit $status
