#!/usr/bin/env bash
# Train-step time of the committed models under two builds of mixtrain, side by side in one run:
#   tools/bench/compare_builds.sh OLD_MIXTRAIN NEW_MIXTRAIN [ROUNDS]
# Each round runs `bench --train` for every model and precision with the old binary, then the new
# one, so both see the same machine; prints one line per run and the median of the rounds per
# (model, precision, build). For refactors that must not change speed. A copied old binary finds
# its own libmixtrain.so only with its RPATH pointing at it (patchelf --set-rpath DIR OLD_MIXTRAIN).
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
cd "$(dirname "$0")/../.."
models="fashion_cnn:64:1 mlp:64:1 resnet_mini:32:1 gpt_mini:64:-1"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for m in $models; do
    IFS=: read -r name bs axis <<< "$m"
    for dt in fp32 bf16; do
      for which in old new; do
        bin=$old; [ "$which" = new ] && bin=$new
        ms=$(OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$bin" bench "models/$name.onnx" --train --batch-size="$bs" \
               --class-axis="$axis" --dtype="$dt" --warmup=5 --iters=30 2>&1 |
             sed -n 's/^train step: median \([0-9.]*\) ms.*/\1/p')
        echo "$round $name $dt $which $ms" | tee -a "$out"
      done
    done
  done
done
echo "median of $rounds rounds, ms per step (model precision old new new/old):"
for m in $models; do
  name=${m%%:*}
  for dt in fp32 bf16; do
    med() { grep " $name $dt $1 " "$out" | awk '{print $5}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    o=$(med old) n=$(med new)
    awk -v n="$name" -v d="$dt" -v o="$o" -v w="$n" 'BEGIN {printf "%-12s %-5s %8.3f %8.3f %6.3f\n", n, d, o, w, w / o}'
  done
done
