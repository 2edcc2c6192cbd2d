#!/usr/bin/env bash
# Builds the epkit image from the repository root and tags it with the epkit
# version (CMake's project version) and the git commit:
#   deploy/docker/build.sh [REGISTRY/NAME]     default name: epkit
# Environment: CUDA_VERSION (default in the Dockerfile), PUSH=1 to push both
# tags, DOCKER (docker or podman, default docker).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=${1:-epkit}
docker=${DOCKER:-docker}

version=$(sed -n 's/^project(epkit VERSION \([0-9.]*\).*/\1/p' "$here/CMakeLists.txt")
if [[ -z $version ]]; then
  echo "build.sh: no 'project(epkit VERSION x.y.z' line in $here/CMakeLists.txt" >&2
  exit 1
fi
commit=$(git -C "$here" rev-parse --short=12 HEAD)
if [[ -n $(git -C "$here" status --porcelain --untracked-files=no) ]]; then
  commit="$commit-dirty"
fi
tag="$version-$commit"

args=(build -f "$here/deploy/docker/Dockerfile"
      --build-arg "EPKIT_VERSION=$version" --build-arg "EPKIT_GIT_COMMIT=$commit"
      -t "$name:$tag" -t "$name:$version")
if [[ -n ${CUDA_VERSION:-} ]]; then
  args+=(--build-arg "CUDA_VERSION=$CUDA_VERSION")
fi
echo "build.sh: $docker ${args[*]} $here"
"$docker" "${args[@]}" "$here"
if [[ ${PUSH:-0} == 1 ]]; then
  "$docker" push "$name:$tag"
  "$docker" push "$name:$version"
fi
echo "$name:$tag"
