#!/usr/bin/env bash
# Removes LLVM libomp registration files in /dev/shm that no libomp will ever finish writing.
#
# Each process that loads libomp (the asan build and the fuzzers link it through clang's
# -fopenmp) registers itself as /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>: shm_open(O_CREAT|O_EXCL),
# ftruncate to 1 KiB, write. A process that dies by a signal, abort or _exit (death tests, fuzzed
# crashes, timeouts) leaves its file behind. A later process that gets the same pid opens the
# existing file and reads it; that is harmless when the file holds a registration (libomp sees its
# owner is gone and takes the name over), but when the owner died between shm_open and ftruncate
# the file is empty, reading it through mmap raises SIGBUS, and the new process dies inside
# libomp's start-up before any of our code runs (CI failed that way once, on
# MovementTest.TransposeAllPermutationsOfRank4, pid 1158, with an empty file hours old).
#
# Only empty files older than a minute go: a live libomp keeps its file empty for microseconds,
# and a non-empty file is libomp's to handle (in a /dev/shm shared across pid namespaces a pid
# says nothing about whether the owner lives).
set -euo pipefail
dir=${1:-/dev/shm}
[ -d "$dir" ] || exit 0
n=0
while IFS= read -r -d '' f; do
  rm -f -- "$f" && n=$((n + 1))
done < <(find "$dir" -maxdepth 1 -name '__KMP_REGISTERED_LIB_*' -type f -size 0 -mmin +1 -print0 2>/dev/null)
[ "$n" -eq 0 ] || echo "clean_stale_omp_shm: removed $n empty libomp registration file(s) from $dir"
