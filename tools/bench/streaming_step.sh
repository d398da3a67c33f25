#!/usr/bin/env bash
# The training step fed from a folder of .npy files (memory-mapped, read ahead) against the same
# data as one in-memory .npz, side by side in one run (issue 36: within 5%):
#   tools/bench/streaming_step.sh DATA.npz FOLDER [ROUNDS] [MODEL] [BATCH] [DTYPE]
# Each round runs `mixtrain bench --train --data=...` once on each, alternating which goes first;
# prints every run and the medians (of the per-run median step time, the batch wait included).
# Write both from one dataset, e.g. Fashion-MNIST with NumPy (pip: numpy):
#   np.savez("fm.npz", input=x, labels=y); np.save("fm/input.npy", x); np.save("fm/labels.npy", y)
# with x float32 [N, 1, 28, 28] (pixels / 255) and y int64 [N].
set -euo pipefail
npz=$1 dir=$2 rounds=${3:-10} model=${4:-models/fashion_cnn.onnx} batch=${5:-64} dtype=${6:-bf16}
cd "$(dirname "$0")/../.."
bin=${MIXTRAIN:-build/mixtrain}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
one() {
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$bin" bench "$model" --train --batch-size="$batch" --dtype="$dtype" \
    --data="$2" --warmup=20 --iters=300 2>&1 |
    awk -v k="$1" '/^train step: median/ {m=$4} /waited for its batch median/ {
      match($0, /batch median [0-9.]+/); w=substr($0, RSTART + 13, RLENGTH - 13)} END {print k, m, w}' | tee -a "$out"
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then one npz "$npz"; one folder "$dir"; else one folder "$dir"; one npz "$npz"; fi
done
med() { grep "^$1 " "$out" | awk -v c="$2" '{print $c}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
awk -v a="$(med npz 2)" -v b="$(med folder 2)" -v wa="$(med npz 3)" -v wb="$(med folder 3)" 'BEGIN {
  printf "median step ms: npz %.3f, folder %.3f (folder/npz %.3f); median wait for the batch ms: npz %s, folder %s\n", a, b, b / a, wa, wb }'
