#!/usr/bin/env bash
# Packs what the GPU checks need into .carry/gpu.tar.gz (git-ignored) for the device machine,
# which has the NVIDIA driver, CUDA libraries and PyTorch but none of our Debian packages: the CLI,
# libmixtrain and the CUDA plugin, the CUDA test binaries, the non-system libraries they load
# (oneDNN, ONNX, protobuf, abseil, MPI...; not libc, not the CUDA libraries: the machine's own are
# used), and the models and fixtures the tests read. Run after a Release build; then
#   run(command="bash tools/gpu/run.sh", carry=[".carry"])
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
out=.carry/gpu
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
bins=(mixtrain cuda_host_test cuda_kernels_test cuda_matmul_kernels_test cuda_conv_norm_kernels_test
      cuda_movement_kernels_test cuda_train_test cuda_plan_test device_session_test)
for b in "${bins[@]}"; do cp "$BUILD/$b" "$out/bin/"; done
cp -P "$BUILD"/libmixtrain.so* "$BUILD"/libmixtrain_cuda.so "$out/lib/"
# Non-system dependencies: everything ldd resolves outside the C runtime and the CUDA toolkit.
for f in "$out"/bin/* "$out"/lib/libmixtrain_cuda.so; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda|libcudart|libcublas|libcudnn|libmixtrain' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
pwd > "$out/source_dir"  # the tests read fixtures under the MT_SOURCE_DIR they were compiled with
tar czf .carry/gpu.tar.gz -C .carry gpu
rm -rf "$out"
ls -la .carry/gpu.tar.gz
