#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine, build epkit, and run one job:
#   scripts/setup.sh doctor   build, then run `epkit doctor` on this node
#   scripts/setup.sh test     build, then run every test (GPU tests skip without a GPU)
# Missing packages are installed with apt when run as root; otherwise the
# exact apt line is printed and the script stops.
set -euo pipefail

job=${1:-doctor}
shift || true
if [[ $job != doctor && $job != test ]]; then
  echo "usage: scripts/setup.sh doctor|test [args...]" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${EPKIT_BUILD_DIR:-$here/build}

# What the tool needs to build, and what its tests add.
packages=(cmake ninja-build g++ pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev
          libibverbs-dev zlib1g-dev libssl-dev libre2-dev)
if [[ $job == test ]]; then
  # The linters check `epkit env`'s sh and k8s outputs and the deploy
  # manifests (shellcheck, yamllint); jq serves the deploy pod scripts.
  packages+=(libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev
             yamllint shellcheck jq)
  # Debian's PyTorch (CPU): epkit._C's syntax check against its headers and
  # ElasticBuffer's CPU simulation (tests/python/CMakeLists.txt).
  # pybind11-dev only as libtorch-dev's recommendation, which
  # --no-install-recommends leaves out; torch_ext.cc needs it.
  packages+=(libtorch-dev python3-torch pybind11-dev)
  # The deploy checks (deploy/checks) run on Node.js; a NodeSource nodejs
  # brings its own npm, so ask for Debian's only when there is none.
  command -v npm >/dev/null || packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
testing=OFF
werror=OFF
# The test job is the developers' and CI's build: warnings are errors there.
# A user's doctor build never fails on a warning (named OFF so that a build
# folder configured by `test` before does not carry it over).
[[ $job == test ]] && testing=ON && werror=ON
cmake_args=()
# CUDAARCHS is CMake's variable for the GPU architectures (the image builds
# "90;100"); unset, CMakeLists.txt picks its default.
[[ -n ${CUDAARCHS:-} ]] && cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$CUDAARCHS")
# Release (-O3): what epkit ships is built and tested the way it runs, and
# GCC's -O3 analyses (-Wrestrict, -Wstringop-*) see the same code CI checks.
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=$testing \
  -DEPKIT_WERROR=$werror "${cmake_args[@]}" >/dev/null
if [[ $job == test ]]; then
  # The deploy checks' npm tools, pinned by the committed lockfile.
  if [[ ! -d $here/deploy/checks/node_modules ]] ||
     [[ $here/deploy/checks/package-lock.json -nt $here/deploy/checks/node_modules ]]; then
    (cd "$here/deploy/checks" && npm ci --no-audit --no-fund --loglevel=error) ||
      echo "setup: npm ci in deploy/checks failed; the deploy_checks test will say so" >&2
  fi
  cmake --build "$build" -j "$jobs"
else
  cmake --build "$build" -j "$jobs" --target epkit_bin
fi

case "$job" in
  doctor)
    status=0
    "$build/epkit" doctor "$@" || status=$?
    echo "epkit doctor exit code: $status (0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN)"
    exit "$status"
    ;;
  test)
    ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 300 "$@"
    ;;
esac
