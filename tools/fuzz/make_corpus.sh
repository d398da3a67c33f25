#!/usr/bin/env bash
# Builds the fuzzers' working corpora: OUT/<target>/ (default build-asan/fuzz-corpus) from the
# committed seeds (fuzz/corpus/<target>/) plus what the repository and Debian packages hold:
#   onnx_import, dump: models/*.onnx, tests/data/**/*.onnx, ONNX's test models
#                      (libonnx-testdata: /usr/share/libonnx-testdata/data/**/model.onnx);
#                      dump's copies carry its 2-byte option header (fuzz/dump_fuzzer.cc)
#   npz:               tests/data/**/*.npy and *.npz
#   idx:               small IDX files made here (plain and gzip), the Fashion-MNIST test labels
#   checkpoint:        the checkpoint the fuzzer's own Trainer saves (MIXTRAIN_FUZZ_WRITE_SEED)
#   train_config:      tests/data/**/*.textproto and the TrainConfig defaults printed in full
#   api:               the committed programs alone (tools/fuzz/make_api_seeds.py writes them)
# Inputs over MAX_BYTES (default 256 KiB) are left out: libFuzzer would cut them at -max_len.
# Usage: tools/fuzz/make_corpus.sh [OUT] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-asan/fuzz-corpus}
build=${2:-build-asan}
max_bytes=${MAX_BYTES:-262144}
testdata=/usr/share/libonnx-testdata/data
mkdir -p "$out"
out=$(cd "$out" && pwd)
targets=(onnx_import dump npz idx checkpoint train_config api)

for t in "${targets[@]}"; do
  mkdir -p "$out/$t"
  cp -f fuzz/corpus/"$t"/* "$out/$t/" 2>/dev/null || true
done

# Copies a file in as <tag>_<path with / as _>, when small enough.
add() {  # target file [header-bytes-as-printf-escapes]
  local t=$1 f=$2 hdr=${3:-}
  [ "$(stat -c %s "$f")" -le "$max_bytes" ] || return 0
  local name=${f#./}; name=${name//\//_}
  if [ -n "$hdr" ]; then
    { printf "$hdr"; cat "$f"; } > "$out/$t/${hdr//\\/}_$name"
  else
    cp -f "$f" "$out/$t/$name"
  fi
}

onnx_files=$( { ls models/*.onnx; find tests/data -name '*.onnx'; \
                [ -d "$testdata" ] && find "$testdata" -name 'model.onnx'; } | sort)
i=0
for f in $onnx_files; do
  add onnx_import "$f"
  # dump: every model as it is (text, import only); every 8th also through the training graph,
  # the eval graph, and precision + autodiff-ish pass lists, in the other formats.
  add dump "$f" '\x00\x00'
  if [ $((i % 8)) -eq 0 ]; then
    add dump "$f" '\x01\x04'   # dot, train
    add dump "$f" '\x12\x08'   # onnx, fp16, eval
    add dump "$f" '\x08\x02\x05\x09'  # half precision, two passes by index
  fi
  i=$((i + 1))
done

for f in $(find tests/data -name '*.npy' -o -name '*.npz' | sort); do add npz "$f"; done

# IDX: magic (0 0 type rank), big-endian u32 dims, data.
idx() { printf "$2" > "$out/idx/$1"; gzip -9nc "$out/idx/$1" > "$out/idx/$1.gz"; }
idx images_u8 '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x00\x01\x02\x03\x04\x05\x06\x07'
idx labels_u8 '\x00\x00\x08\x01\x00\x00\x00\x04\x00\x01\x09\x0a'
idx i32 '\x00\x00\x0c\x01\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff'
idx f32 '\x00\x00\x0d\x02\x00\x00\x00\x01\x00\x00\x00\x01\x3f\x80\x00\x00'
idx f64 '\x00\x00\x0e\x01\x00\x00\x00\x01\x3f\xf0\x00\x00\x00\x00\x00\x00'
idx i8 '\x00\x00\x09\x01\x00\x00\x00\x03\x80\x00\x7f'
[ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] &&
  cp -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "$out/idx/"

if [ -x "$build/checkpoint_fuzzer" ]; then
  MIXTRAIN_FUZZ_WRITE_SEED="$out/checkpoint/tiny.ckpt" "$build/checkpoint_fuzzer" >/dev/null 2>&1
fi

for f in $(find tests/data -name '*.textproto' | sort); do add train_config "$f"; done

for t in "${targets[@]}"; do echo "$t: $(ls "$out/$t" | wc -l) inputs"; done
