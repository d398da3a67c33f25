#!/bin/sh
# LoRA on a 1.1B-parameter Llama-shaped model, batch 1 x 128, bf16 AMP (issue 37 item 6), and PEFT.
#   tools/bench/lora_llama.sh PYTHON [DIR] [STEPS]
# PYTHON has torch, transformers, onnx, onnxscript and peft; DIR (default /tmp/lora_llama) gets the
# export (4.4 GB of fp32 weights in llama.onnx.data). Prints, per run, the median step time of the
# steps after the first two and the peak RSS (/usr/bin/time).
set -eu
PY=$1
DIR=${2:-/tmp/lora_llama}
STEPS=${3:-6}
BIN=${MIXTRAIN:-build/mixtrain}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ -f "$DIR/llama.onnx" ] || "$PY" tools/bench/lora_llama.py export "$DIR"

median_ms() {
  "$PY" -c 'import json,statistics,sys; ms=[json.loads(l)["ms"] for l in open(sys.argv[1]) if "ms" in json.loads(l)][2:]; print(f"{statistics.median(ms):.0f}")' "$1"
}
peak_mib() { awk '/Maximum resident set size/ {printf "%.0f", $NF / 1024}' "$1"; }

for recompute in none auto; do
  /usr/bin/time -v "$BIN" train "$DIR/llama.onnx" --data="$DIR/llama.npz" --class-axis=-1 --batch-size=1 \
    --steps="$STEPS" --dtype=bf16 --device=cpu --lr=1e-4 --lora-rank=8 --recompute=$recompute \
    --log-json="$DIR/lora_$recompute.jsonl" > "$DIR/lora_$recompute.out" 2> "$DIR/lora_$recompute.time"
  echo "mixtrain LoRA r=8 recompute=$recompute: median step $(median_ms "$DIR/lora_$recompute.jsonl") ms, peak RSS $(peak_mib "$DIR/lora_$recompute.time") MiB"
done
/usr/bin/time -v "$PY" tools/bench/lora_llama.py peft "$DIR" --steps="$STEPS" 2> "$DIR/torch_peft.time" | grep torch
echo "  (torch PEFT peak RSS by /usr/bin/time: $(peak_mib "$DIR/torch_peft.time") MiB)"
