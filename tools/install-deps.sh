#!/usr/bin/env bash
# Installs mixtrain's Debian build dependencies when any is missing; a no-op otherwise.
set -euo pipefail
pkgs=(cmake ninja-build ccache g++ pkg-config protobuf-compiler libprotobuf-dev libonnx-dev libabsl-dev
      libgtest-dev libgmock-dev libdnnl-dev zlib1g-dev libzip-dev libonnx-testdata
      dataset-fashion-mnist graphviz nlohmann-json3-dev
      # `mixtrain plot`: PLplot (its svg driver) and its cairo driver for PNG.
      libplplot-dev plplot-driver-cairo
      # Data-parallel training (docs/distributed.md): Open MPI, its headers and mpirun.
      libopenmpi-dev openmpi-bin
      # The asan preset and the fuzzers (.ci/sanitize, docs/fuzzing.md): clang, its sanitizer and
      # libFuzzer runtimes, and clang's OpenMP.
      clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "mixtrain: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
