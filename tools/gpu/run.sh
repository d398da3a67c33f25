#!/usr/bin/env bash
# The GPU checks, run on the device machine from the repository root with .carry/gpu.tar.gz made
# by tools/gpu/pack.sh: unpacks it, finds the machine's CUDA libraries, then runs the CUDA tests
# (host, kernels against the CPU, whole-step parity), the train-step benchmark on both devices, and
# tools/bench/gpu_train_step.py against PyTorch (eager fp32, eager AMP, torch.compile) when the
# machine's Python has torch. The device tool allows 600 s per call, so split the work:
#   TESTS=0 skips the tests and the mixtrain bench; BENCH=0 skips the PyTorch comparison;
#   MODELS="..." picks its models (default fashion_cnn cifar_cnn gpt_mini; gpt2_small in a call
#   of its own: its export and torch.compile take minutes), ITERS/WARMUP its step counts.
# Writes everything to $OUT (or /tmp) as well as stdout.
set -uo pipefail
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
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
if [ "${TESTS:-1}" != 0 ]; then
for t in cuda_host_test cuda_kernels_test cuda_matmul_kernels_test cuda_conv_norm_kernels_test \
         cuda_movement_kernels_test cuda_plan_test device_session_test cuda_train_test; do
  timeout 300 "$B/$t" --gtest_brief=1 2>&1 | tee "$OUT/$t.txt" | tail -30 || rc=1
done
for m in mlp fashion_cnn gpt_mini resnet_mini; do "$B/mixtrain" check "models/$m.onnx" --device=cuda 2>&1 | tail -2; done | tee "$OUT/check.txt"
# Train step on both devices: the MLP fixture and fashion_cnn (every op of both has a CUDA kernel).
for d in cpu cuda; do
  for dt in fp32 bf16; do
    timeout 120 "$B/mixtrain" bench tests/data/optim/mlp.onnx --train --batch-size=16 --dtype=$dt --device=$d --iters=50 2>&1 | tee -a "$OUT/bench.txt"
    timeout 120 "$B/mixtrain" bench models/fashion_cnn.onnx --train --batch-size=64 --dtype=$dt --device=$d --iters=30 2>&1 | tee -a "$OUT/bench.txt"
  done
done
fi
if [ "${BENCH:-1}" != 0 ] && python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  timeout 540 python3 tools/bench/gpu_train_step.py --mixtrain "$B/mixtrain" --model-dir /tmp/mt/bench-models \
    --json "$OUT/gpu_train_step.json" --models ${MODELS:-fashion_cnn cifar_cnn gpt_mini} \
    --iters "${ITERS:-30}" --warmup "${WARMUP:-5}" --timeout 240 2>&1 | tee "$OUT/gpu_train_step.txt"
fi
exit $rc
