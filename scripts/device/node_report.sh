#!/usr/bin/env bash
# On a GPU node: run `epkit topo` and `epkit doctor` beside `nvidia-smi topo -m`
# and write everything under $OUT (or ./node-report). Used to verify the
# topology and doctor on real hardware; prints a short summary last.
set -u
out=${OUT:-node-report}
bin=${EPKIT_BIN:-build/epkit}
mkdir -p "$out"
{
  date -u +%FT%TZ
  uname -r
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader
} >"$out/machine.txt" 2>&1
nvidia-smi topo -m >"$out/nvidia-smi-topo.txt" 2>&1
"$bin" topo >"$out/topo.txt" 2>&1; echo "exit $?" >>"$out/topo.txt"
"$bin" topo --json >"$out/topo.json" 2>"$out/topo-json.err"
start=$EPOCHREALTIME
"$bin" doctor >"$out/doctor.txt" 2>&1; rc=$?
end=$EPOCHREALTIME
awk -v a="$start" -v b="$end" -v rc="$rc" 'BEGIN { printf "exit %d, wall %.3f s\n", rc, b - a }' >>"$out/doctor.txt"
"$bin" doctor --json >"$out/doctor.json" 2>"$out/doctor-json.err"
cat "$out/machine.txt" "$out/nvidia-smi-topo.txt" "$out/topo.txt" "$out/doctor.txt"
