#!/usr/bin/env bash
# The GPU checks, run on the device machine from the repository root with .carry/gpu.tar.gz made
# by tools/gpu/pack.sh: unpacks it, finds the machine's CUDA libraries, then runs the CUDA tests
# (host, kernels against the CPU, whole-step parity) and the train-step benchmark on both devices.
# Writes everything to $OUT (or /tmp) as well as stdout.
set -uo pipefail
OUT=${OUT:-/tmp}
mkdir -p /tmp/mt && tar xzf .carry/gpu.tar.gz -C /tmp/mt
src=$(cat /tmp/mt/gpu/source_dir)
if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
cudalibs=$(find / \( -name 'libcublasLt.so*' -o -name 'libcudart.so*' -o -name 'libcudnn.so*' \) 2>/dev/null |
           xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH=/tmp/mt/gpu/lib:${cudalibs}${LD_LIBRARY_PATH:-}
B=/tmp/mt/gpu/bin
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee "$OUT/env.txt"
ldd /tmp/mt/gpu/lib/libmixtrain_cuda.so | grep -E 'not found|cublas|cudart' | tee -a "$OUT/env.txt"
rc=0
for t in cuda_host_test cuda_kernels_test device_session_test cuda_train_test; do
  timeout 300 "$B/$t" --gtest_brief=1 2>&1 | tee "$OUT/$t.txt" | tail -30 || rc=1
done
for m in mlp fashion_cnn gpt_mini; do "$B/mixtrain" check "models/$m.onnx" --device=cuda 2>&1 | tail -2; done | tee "$OUT/check.txt"
# Train step on both devices: the MLP fixture and fashion_cnn (every op of both has a CUDA kernel).
for d in cpu cuda; do
  for dt in fp32 bf16; do
    timeout 120 "$B/mixtrain" bench tests/data/optim/mlp.onnx --train --batch-size=16 --dtype=$dt --device=$d --iters=50 2>&1 | tee -a "$OUT/bench.txt"
    timeout 120 "$B/mixtrain" bench models/fashion_cnn.onnx --train --batch-size=64 --dtype=$dt --device=$d --iters=30 2>&1 | tee -a "$OUT/bench.txt"
  done
done
exit $rc
