#!/usr/bin/env bash
# The deploy kit's checks, offline (ctest runs this as deploy_checks):
#   yamllint; shellcheck of every script; `kubectl kustomize` of every overlay
#   and of node-prep, compared with the golden renderings in golden/; the
#   rendered objects validated (validate.mjs: JobSet CRD schema with unknown
#   fields rejected, core kinds, the kit's invariants); the Dockerfile
#   (dockerfile.mjs); `epkit doctor --format prometheus` through a Prometheus
#   parser; the node-problem-detector plugin's exit-code mapping; and
#   mutations that must fail (a renamed field, replicas as a string, ...).
#   A check that cannot run here (no JobSet CRD, no kubectl with kustomize
#   v5) is reported as SKIP with its reason; every other check still runs.
# Usage: deploy/checks/run.sh EPKIT_BINARY
#   EPKIT_UPDATE_GOLDEN=1 rewrites golden/ from the renderings; such a run
#   compares nothing and fails, so a rewrite never reads as a pass.
#   EPKIT_SHARED_DIR: where the shared inputs are (default: ../shared beside
#   the checkout).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
epkit=${1:?usage: run.sh EPKIT_BINARY}
checks=$root/deploy/checks
shared=${EPKIT_SHARED_DIR:-$root/../shared}
# The JobSet CRD (kubernetes-sigs/jobset config/components/crd/bases/): named by
# EPKIT_JOBSET_CRD, or found in the shared inputs (k8s-schemas/) or in
# deploy/checks/schemas/. A fresh clone has neither: the schema checks skip.
crd=${EPKIT_JOBSET_CRD:-}
if [[ -n $crd && ! -r $crd ]]; then
  echo "FAIL  EPKIT_JOBSET_CRD=$crd is not a readable file"
  exit 1
fi
for c in "$shared/k8s-schemas/jobset.x-k8s.io_jobsets.yaml" \
         "$root/deploy/checks/schemas/jobset.x-k8s.io_jobsets.yaml"; do
  [[ -z $crd && -r $c ]] && crd=$c
done
renders=(overlays/gke-a4 overlays/gke-a3-ultra overlays/generic-ib overlays/single-node node-prep)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
passed=0
skipped=0

ok() { passed=$((passed + 1)); echo "ok    $*"; }
bad() { failures=$((failures + 1)); echo "FAIL  $*"; }
skip() { skipped=$((skipped + 1)); echo "SKIP  $*"; }
# Runs a check that must pass; its output shows only when it fails.
must_pass() {
  local name=$1
  shift
  if "$@" >"$tmp/out" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/      /' "$tmp/out"; fi
}
# Runs a check that must fail with output matching a pattern.
must_fail() {
  local name=$1 pattern=$2
  shift 2
  if "$@" >"$tmp/out" 2>&1; then
    bad "$name: passed, but must fail"
  elif grep -qE -- "$pattern" "$tmp/out"; then
    ok "$name (fails: $(grep -oE -- "$pattern" "$tmp/out" | head -n 1))"
  else
    bad "$name: failed without '$pattern'"; sed 's/^/      /' "$tmp/out"
  fi
}

update_golden=0
case ${EPKIT_UPDATE_GOLDEN:-} in
  '' | 0) ;;
  1) update_golden=1 ;;
  *)
    echo "FAIL  EPKIT_UPDATE_GOLDEN=${EPKIT_UPDATE_GOLDEN}: 1 rewrites the golden files, 0 or unset compares"
    exit 64
    ;;
esac
no_crd="no JobSet CRD here: set EPKIT_JOBSET_CRD, or put jobset.x-k8s.io_jobsets.yaml (kubernetes-sigs/jobset, config/components/crd/bases/) in deploy/checks/schemas/ or the shared inputs' k8s-schemas/"
if [[ ! -d $checks/node_modules ]]; then
  echo "FAIL  deploy/checks/node_modules is missing: run 'npm ci' in deploy/checks (scripts/setup.sh test does)"
  exit 1
fi

# --- lint
must_pass "yamllint deploy/" yamllint -s -c "$checks/yamllint.yaml" "$root/deploy"
mapfile -t scripts < <(find "$root/deploy" "$root/scripts" -name node_modules -prune -o -name '*.sh' -print | sort)
scripts+=("$checks/fake/epkit")
must_pass "shellcheck (${#scripts[@]} scripts)" shellcheck -x "${scripts[@]}"

# --- render and compare with the golden files
kustomize_ok=0
no_kustomize="no kubectl with kustomize v5 (Debian's kubernetes-client is too old; install kubectl from pkgs.k8s.io or google-cloud-cli)"
if command -v kubectl >/dev/null &&
   kubectl version --client -o json 2>/dev/null | grep -q '"kustomizeVersion": "v5'; then
  kustomize_ok=1
fi
render() { kubectl kustomize "$1/deploy/k8s/$2"; }
for r in "${renders[@]}"; do
  golden=$checks/golden/${r##*/}.yaml
  if ((!kustomize_ok)); then
    skip "kustomize $r vs golden/${golden##*/}: $no_kustomize; the golden file is validated as committed"
    continue
  fi
  if ! render "$root" "$r" >"$tmp/render.yaml" 2>"$tmp/out"; then
    bad "kubectl kustomize $r"; sed 's/^/      /' "$tmp/out"; continue
  fi
  if ((update_golden)); then
    # Compared with itself it would pass: the rewrite is reported, and the
    # run fails until it is run again without EPKIT_UPDATE_GOLDEN.
    if cmp -s "$golden" "$tmp/render.yaml"; then
      bad "golden/${golden##*/}: EPKIT_UPDATE_GOLDEN=1, nothing compared (unchanged)"
    else
      cp "$tmp/render.yaml" "$golden"
      bad "golden/${golden##*/}: rewritten from kustomize $r (EPKIT_UPDATE_GOLDEN=1); review the diff, then run again without it"
    fi
    continue
  fi
  must_pass "kustomize $r matches golden/${golden##*/}" diff -u "$golden" "$tmp/render.yaml"
done

# --- validate the renderings, and mutations of them that must fail:
# rendered through kustomize when it is here, otherwise applied to a copy of
# the golden rendering. One node process for every case (one schema compile).
cases=$tmp/cases.tsv
: >"$cases"
if [[ -n $crd ]]; then
  what="JobSet CRD strict, core kinds, invariants"
else
  what="core kinds, invariants"
  skip "JobSet CRD schema (unknown or mistyped JobSet fields): $no_crd"
fi
for r in "${renders[@]}"; do
  printf 'pass\t\tvalidate %s (%s)\t%s\n' "${r##*/}" "$what" "$checks/golden/${r##*/}.yaml" >>"$cases"
done
mutations=0
mutate() { # name file-in-deploy/k8s sed-expression rendering pattern [schema]
  local name=$1 file=$2 expr=$3 r=$4 pattern=$5 dir=$tmp/m$mutations
  # A mutation only the JobSet CRD's schema catches needs the CRD.
  if [[ ${6:-} == schema && -z $crd ]]; then
    skip "$name: $no_crd"
    return
  fi
  mutations=$((mutations + 1))
  mkdir -p "$dir/deploy"
  if ((kustomize_ok)); then
    cp -r "$root/deploy/k8s" "$dir/deploy/k8s"
    sed -i -e "$expr" "$dir/deploy/k8s/$file"
    if cmp -s "$root/deploy/k8s/$file" "$dir/deploy/k8s/$file"; then
      bad "$name: the mutation changed nothing"
      return
    fi
    render "$dir" "$r" >"$dir/render.yaml"
  else
    sed -e "$expr" "$checks/golden/${r##*/}.yaml" >"$dir/render.yaml"
  fi
  printf 'fail\t%s\t%s\t%s\n' "$pattern" "$name" "$dir/render.yaml" >>"$cases"
}
mutate "base: parallelism misspelt" base/jobset.yaml 's/parallelism:/paralelism:/' overlays/gke-a4 "additional properties 'paralelism'" schema
mutate "base: replicas as a string" base/jobset.yaml 's/replicas: 1/replicas: "1"/' overlays/gke-a4 "replicas: must be integer" schema
mutate "base: unknown container field" base/jobset.yaml 's/securityContext:/securityContxt:/' overlays/single-node "additional properties 'securityContxt'" schema
mutate "base: NNODES disagrees with parallelism" base/jobset.yaml '0,/value: "2"/s//value: "3"/' overlays/gke-a4 "NNODES=3 but parallelism is 2"
mutate "node-prep: misspelt pod field" node-prep/daemonset.yaml 's/serviceAccountName:/serviceAccountNme:/' node-prep "serviceAccountNme: unknown field"
mutate "node-prep: string where an object goes" node-prep/daemonset.yaml 's/cpu: 10m/cpu: {a: 1}/' node-prep "resources"
rc=0
node "$checks/validate.mjs" "${crd:--}" --cases "$cases" >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
passed=$((passed + $(grep -c '^ok' "$tmp/out" || true)))
failures=$((failures + $(grep -c '^FAIL' "$tmp/out" || true)))
if ((rc != 0)) && ! grep -q '^FAIL' "$tmp/out"; then bad "validate.mjs exited $rc"; fi

# --- the image
must_pass "Dockerfile (dockerfilelint, COPY sources, setup.sh build, runtime without driver)" \
  node "$checks/dockerfile.mjs" "$root"
sed 's#^COPY include include#COPY includes include#' "$root/deploy/docker/Dockerfile" >"$tmp/Dockerfile"
must_fail "Dockerfile: a COPY source that does not exist" "COPY source includes does not exist" \
  node "$checks/dockerfile.mjs" "$root" "$tmp/Dockerfile"
sed 's#^RUN bash scripts/setup.sh doctor --list#RUN cmake -S . -B build \&\& cmake --build build#' "$root/deploy/docker/Dockerfile" >"$tmp/Dockerfile"
must_fail "Dockerfile: build steps copied out of setup.sh" "setup.sh" \
  node "$checks/dockerfile.mjs" "$root" "$tmp/Dockerfile"

# --- epkit doctor --format prometheus through a Prometheus parser
code=0
"$epkit" doctor --format prometheus --sysroot "$root/examples/gke-a4" \
  --env-file "$root/examples/env/gke-a4-seed000.env" >"$tmp/seed.prom" || code=$?
must_pass "prometheus: seed environment parses (exit $code)" node "$checks/prometheus.mjs" "$tmp/seed.prom" "$code"
code=0
"$epkit" doctor --format prometheus --sysroot "$root/examples/gke-a4" \
  --env-file "$root/examples/env/gke-a4-fixed.env" >"$tmp/fixed.prom" || code=$?
must_pass "prometheus: fixed environment parses (exit $code)" node "$checks/prometheus.mjs" "$tmp/fixed.prom" "$code"
grep -v 'status="skip"' "$tmp/seed.prom" >"$tmp/broken.prom"
must_fail "prometheus: a check without its skip row" "5 and 1" node "$checks/prometheus.mjs" "$tmp/broken.prom"

# --- the pod scripts, with a stand-in epkit (fake/epkit) on PATH
scripts_dir=$root/deploy/docker/scripts
pod_run() { # doctor-exit-code
  rm -rf "$tmp/pod" && mkdir -p "$tmp/pod"
  env PATH="$checks/fake:$PATH" EPKIT_FAKE_LOG="$tmp/pod/log" EPKIT_FAKE_DOCTOR="$1" \
    EPKIT_RUN_DIR="$tmp/pod/run" EPKIT_RESULTS_DIR="$tmp/pod/results" JOB_COMPLETION_INDEX=0 \
    NNODES=2 GPUS_PER_NODE=8 MASTER_ADDR=host0 MASTER_PORT=29500 \
    bash "$scripts_dir/epkit-jobset-run.sh"
}
pod_ok() {
  pod_run 1 || return 1
  local got
  got=$(cut -d' ' -f1 "$tmp/pod/log" | tr '\n' ' ')
  [[ $got == "env env place doctor doctor test bench bench " ]] || { echo "steps: $got"; return 1; }
  grep -q -- '^test --nnodes 2 --node-rank 1 --master host0:29500 --nproc-per-node 8' "$tmp/pod/log" ||
    { echo "test did not get the placement's rank"; cat "$tmp/pod/log"; return 1; }
  grep -q '^bench nccl alltoall --nnodes 2 --node-rank 1' "$tmp/pod/log" || return 1
  for f in doctor test nccl-alltoall ep; do
    [[ -s $tmp/pod/results/$(hostname)/$f.json ]] || { echo "no $f.json"; return 1; }
  done
}
must_pass "pod script: env, place, doctor, test and benchmarks in order, JSON written" pod_ok
must_fail "pod script: doctor FAIL stops the job before the test" "doctor exit 2 stops the job" pod_run 2
pod_forged() {
  EPKIT_FAKE_MASTER="\$(touch $tmp/pwned):29500" pod_run 0
  local code=$?
  [[ ! -e $tmp/pwned ]] || { echo "the forged placement ran a command"; return 0; }
  return "$code"
}
must_fail "pod script: a forged placement is data, never run" "unusable placement" pod_forged
node_prep_once() {
  rm -rf "$tmp/prep" && mkdir -p "$tmp/prep"
  env PATH="$checks/fake:$PATH" EPKIT_FAKE_LOG="$tmp/prep/log" EPKIT_FAKE_DOCTOR=2 EPKIT_ONCE=1 NODE_NAME= \
    EPKIT_STATE_DIR="$tmp/prep/state" EPKIT_TEXTFILE_DIR="$tmp/prep/textfile" \
    bash "$scripts_dir/epkit-node-prep.sh" || return 1
  [[ $(cat "$tmp/prep/state/doctor.exit") == 2 ]] || { echo "doctor.exit is not 2"; return 1; }
  grep -q 'FAIL nccl.net-plugin' "$tmp/prep/state/doctor.summary" || { echo "summary misses the failing check"; return 1; }
  grep -q 'epkit_doctor_exit_code 2' "$tmp/prep/textfile/epkit_doctor.prom" || { echo "no textfile metrics"; return 1; }
  ! ls "$tmp/prep/textfile/"*.tmp 2>/dev/null
}
must_pass "node prep: doctor result, summary and textfile metrics" node_prep_once

# --- node-problem-detector plugin: epkit 0/1 -> 0, 2 -> 1, 3/missing/stale -> 2
npd=$root/deploy/k8s/node-prep/npd/epkit-npd-check.sh
npd_case() { # epkit-code expected-npd-code [touch-date]
  local state=$tmp/npd-$1-${3:-now} got=0
  mkdir -p "$state"
  if [[ $1 != none ]]; then
    echo "$1" >"$state/doctor.exit"
    echo "FAIL nccl.net-plugin" >"$state/doctor.summary"
    [[ -n ${3:-} ]] && touch -d "$3" "$state/doctor.exit"
  fi
  EPKIT_STATE_DIR=$state sh "$npd" >/dev/null || got=$?
  if [[ $got != "$2" ]]; then
    echo "epkit $1 ${3:-} -> NPD $got, want $2"
    return 1
  fi
  echo "epkit $1 -> NPD $got"
}
must_pass "npd plugin exit codes" bash -c "$(declare -f npd_case); tmp=$tmp npd=$npd; \
  npd_case 0 0 && npd_case 1 0 && npd_case 2 1 && npd_case 3 2 && npd_case none 2 && npd_case 0 2 '1 hour ago'"

echo "deploy checks: $passed passed, $failures failed, $skipped skipped"
((failures == 0))
