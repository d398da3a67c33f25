#!/usr/bin/env bash
# Runs every libFuzzer target of the asan build for SECONDS each (default 60) and turns what they
# find into regression inputs: each crash / timeout / OOM is minimized (crashes only) and
# copied to tests/data/crashers/<target>/, which the fuzz_replay_<target> tests replay in every
# build. Exits 1 when anything was found, 0 otherwise; prints a table of what ran.
#
# Usage: tools/fuzz/run.sh [SECONDS] [TARGET...]
#   BUILD=build-asan    where the fuzzers are (cmake --preset asan && ninja -C build-asan)
#   WORK=$BUILD/fuzz    corpora (made by make_corpus.sh on first use), artifacts, logs
#   JOBS=1              targets run side by side
#   MIN_SECONDS=20      time to minimize each crash before copying it (0: copy as found)
# Limits suit a 2-core, 24 GB machine: inputs up to 64 KiB (4 KiB for the text, IDX and API
# targets), 4 GB RSS per fuzzer, 30 s per input before it counts as a hang.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
shift || true
build=${BUILD:-build-asan}
work=${WORK:-$build/fuzz}
jobs=${JOBS:-1}
all=(onnx_import dump npz idx checkpoint train_config api)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

declare -A max_len=([onnx_import]=65536 [dump]=65536 [npz]=16384 [idx]=4096 [checkpoint]=16384
                    [train_config]=4096 [api]=4096)
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "run.sh: unknown target '$t' (${all[*]})" >&2; exit 2; }
  [ -x "$build/${t}_fuzzer" ] || { echo "run.sh: $build/${t}_fuzzer not built (cmake --preset asan)" >&2; exit 2; }
done
[ -d "$work/corpus" ] || tools/fuzz/make_corpus.sh "$work/corpus" "$build" > /dev/null
# Sanitizer settings as the asan test preset; leaks are not errors while fuzzing (an input that
# makes a parser leak is reported by the replay tests under LeakSanitizer instead).
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=0:suppressions=$PWD/fuzz/sanitizer/asan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/fuzz/sanitizer/ubsan.supp"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# Each fuzzer process's scratch folder goes under one of this run's own, removed when the run
# ends: the jobs that crash (fork mode runs every input batch in a child) cannot remove theirs.
shm=/tmp
[ -w /dev/shm ] && shm=/dev/shm
MIXTRAIN_FUZZ_SCRATCH=$(mktemp -d "$shm/mixtrain_fuzz_run.XXXXXX") || exit 2
export MIXTRAIN_FUZZ_SCRATCH
trap 'rm -rf "$MIXTRAIN_FUZZ_SCRATCH"' EXIT
# A libomp registration file left empty by a killed process crashes the next libomp with its pid.
tools/ci/clean_stale_omp_shm.sh

run_one() {
  local t=$1
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t" "$work/logs"
  # -fork=1 with -ignore_*: a crash does not end the run; each is saved and the run goes on.
  "$build/${t}_fuzzer" "$work/corpus/$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -max_total_time="$secs" -max_len="${max_len[$t]}" -rss_limit_mb=4096 -timeout=30 \
      -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 > "$work/logs/$t.log" 2>&1
}

pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait

found=0
printf '%-14s %8s %12s %8s %6s %5s\n' target seconds executions crashes hangs ooms
for t in "${targets[@]}"; do
  # Fork mode's progress lines: "#EXECS: cov: .. oom/timeout/crash: O/T/C time: Ss job: ..".
  last=$(grep -E '^#[0-9]+: cov:' "$work/logs/$t.log" | tail -1)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  read -r ooms hangs crashes < <(sed -E 's|.*oom/timeout/crash: ([0-9]+)/([0-9]+)/([0-9]+).*|\1 \2 \3|' <<<"$last")
  ran=$(sed -E 's/.* time: ([0-9]+)s.*/\1/' <<<"$last")
  printf '%-14s %8s %12s %8s %6s %5s\n' "$t" "${ran:-?}" "${execs:-?}" "${crashes:-?}" "${hangs:-?}" "${ooms:-?}"
  for a in "$work/artifacts/$t"/crash-* "$work/artifacts/$t"/timeout-* "$work/artifacts/$t"/oom-* \
           "$work/artifacts/$t"/leak-*; do
    [ -f "$a" ] || continue
    found=1
    dest=tests/data/crashers/$t
    mkdir -p "$dest"
    name=$(basename "$a")
    if [ "${MIN_SECONDS:-20}" -gt 0 ] && [[ $name == crash-* ]]; then
      "$build/${t}_fuzzer" "$a" -minimize_crash=1 -max_total_time="${MIN_SECONDS:-20}" -timeout=30 \
          -exact_artifact_path="$work/artifacts/$t/min-$name" > "$work/logs/$t.min.log" 2>&1
      [ -s "$work/artifacts/$t/min-$name" ] && a=$work/artifacts/$t/min-$name
    fi
    cp -f "$a" "$dest/$name"
    echo "  $t: $dest/$name (stack: $build/${t}_replay $dest/$name)"
    mv "$work/artifacts/$t/$name" "$work/artifacts/$t/seen-$name"
  done
done
exit $found
