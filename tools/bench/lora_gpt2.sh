#!/bin/sh
# LoRA vs full fine-tune on GPT-2 small, batch 4 x 128, bf16 AMP (issue 37 item 5), and PEFT.
#   tools/bench/lora_gpt2.sh PYTHON [DIR] [STEPS]
# PYTHON has torch, transformers, onnx and peft; DIR (default /tmp/lora_gpt2) gets the export.
# Prints, per run, the median step time of the steps after the first two and the peak RSS.
set -eu
PY=$1
DIR=${2:-/tmp/lora_gpt2}
STEPS=${3:-8}
BIN=${MIXTRAIN:-build/mixtrain}
# Spinning OpenMP threads fight other processes for the cores on a shared machine (README.md of
# this folder); every runner inherits this.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ -f "$DIR/gpt2s.onnx" ] || "$PY" tools/bench/lora_gpt2.py export "$DIR"

median_ms() {  # the median "ms" of a --log-json log, first two steps left out
  "$PY" -c 'import json,statistics,sys; ms=[json.loads(l)["ms"] for l in open(sys.argv[1])][2:]; print(f"{statistics.median(ms):.0f}")' "$1"
}
peak_mib() { awk '/Maximum resident set size/ {printf "%.0f", $NF / 1024}' "$1"; }

for run in lora full; do
  flags=""
  [ $run = lora ] && flags="--lora-rank=8"
  /usr/bin/time -v "$BIN" train "$DIR/gpt2s.onnx" --data="$DIR/gpt2s.npz" --class-axis=-1 --batch-size=4 \
    --steps="$STEPS" --dtype=bf16 --device=cpu --lr=1e-4 $flags --log-json="$DIR/$run.jsonl" \
    > "$DIR/$run.out" 2> "$DIR/$run.time"
  echo "mixtrain $run: median step $(median_ms "$DIR/$run.jsonl") ms, peak RSS $(peak_mib "$DIR/$run.time") MiB"
done
for run in peft full; do
  flag=""
  [ $run = full ] && flag="--full"
  /usr/bin/time -v "$PY" tools/bench/lora_gpt2.py peft "$DIR" --steps="$STEPS" $flag 2> "$DIR/torch_$run.time" | grep torch
  echo "  (torch $run peak RSS by /usr/bin/time: $(peak_mib "$DIR/torch_$run.time") MiB)"
done
