#!/usr/bin/env python3
"""Data-parallel scaling on one machine: `mixtrain train --data-parallel` under mpirun with K = 1
and K = 2 ranks, against one process without MPI, at the same global batch.

Step time is the median of the `ms` column of --log-json (rank 0's step wall time, which includes
waiting for the other ranks in the all-reduce), after `--warmup` steps. Scaling efficiency at
a fixed global batch: speedup(K) / K with speedup(K) = T(K=1) / T(K), both runs with one OpenMP
thread per rank, so K ranks use K cores. The one-process row uses as many threads as the machine
has cores (what a user would run without MPI).

Needs: the built CLI (build/mixtrain), Open MPI's mpirun (openmpi-bin), Fashion-MNIST
(dataset-fashion-mnist). Standard library only.

  python3 tools/bench/data_parallel.py [--models fashion_cnn mlp] [--batch 256] [--steps 60]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env, log):
    r = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    return rows, r.stdout


def median_ms(rows, warmup):
    return statistics.median(r["ms"] for r in rows[warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["fashion_cnn", "mlp"])
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "mixtrain"))
    a = ap.parse_args()
    cores = os.cpu_count()
    base_env = dict(os.environ, OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
                    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(f"global batch {a.batch}, {a.steps} steps (median after {a.warmup}), --precision={a.precision}, "
          f"{cores} cores, MIXTRAIN_MAX_ISA={os.environ.get('MIXTRAIN_MAX_ISA', 'native')}")
    print("| model | one process, %d threads | K=1 (1 thread) | K=2 (1 thread each) | speedup K=2 / K=1 | efficiency | K=2 / one process |" % cores)
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.models:
            common = [os.path.join(ROOT, "models", f"{m}.onnx"), f"--batch-size={a.batch}", f"--steps={a.steps}",
                      f"--precision={a.precision}", "--limit-test=16"]
            times = {}
            log = os.path.join(tmp, f"{m}_one.jsonl")
            rows, _ = run([a.binary, "train", *common, f"--log-json={log}"], dict(base_env, OMP_NUM_THREADS=str(cores)), log)
            times["one"] = median_ms(rows, a.warmup)
            losses = {}
            for k in (1, 2):
                log = os.path.join(tmp, f"{m}_k{k}.jsonl")
                rows, _ = run(["mpirun", "-n", str(k), "--oversubscribe", "--bind-to", "core", a.binary, "train", *common,
                               "--data-parallel", f"--log-json={log}"], dict(base_env, OMP_NUM_THREADS="1"), log)
                times[k] = median_ms(rows, a.warmup)
                losses[k] = rows[-1]["loss"]
            speedup = times[1] / times[2]
            print(f"| {m} | {times['one']:.2f} ms | {times[1]:.2f} ms | {times[2]:.2f} ms | {speedup:.2f}x | "
                  f"{100 * speedup / 2:.0f}% | {times['one'] / times[2]:.2f}x |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
