#!/usr/bin/env python3
"""Forward-pass time per batch on the CPU: mixtrain next to PyTorch and ONNX Runtime.

pip packages: torch, onnxruntime, onnx, numpy

    python3 tools/bench/cpu_forward.py [--models fashion_cnn gpt_mini] [--batch-size 64]
                                       [--threads 2] [--mixtrain build/mixtrain] [--json OUT]

For each model in models/ it times, at the same batch size and thread count:
  * PyTorch eager, fp32, in inference mode (the model class from models/export_models.py);
  * PyTorch with torch.autocast("cpu", dtype=torch.bfloat16);
  * onnxruntime (CPUExecutionProvider, all graph optimisations) on the committed .onnx file;
  * `mixtrain bench MODEL --batch-size=N --warmup=W --iters=I` and `... --dtype=bf16`, with
    OMP_NUM_THREADS=--threads; its `forward: median X ms` and `planned peak memory: Y MiB` lines
    are parsed.
Every runner reports the median of --iters timed runs after --warmup untimed ones, and the script
prints each peer's time divided by mixtrain's (above 1: mixtrain is faster).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import export_models  # noqa: E402  (the PyTorch definitions the .onnx files were exported from)

MODEL_CLASSES = {
    "fashion_cnn": export_models.FashionCnn,
    "mlp": export_models.Mlp,
    "resnet_mini": export_models.ResnetMini,
    "gpt_mini": export_models.GptMini,
}


def example_input(name, batch):
    gen = torch.Generator().manual_seed(0)
    if name == "fashion_cnn":
        return torch.rand(batch, 1, 28, 28, generator=gen)
    if name == "mlp":
        return torch.rand(batch, 784, generator=gen)
    if name == "resnet_mini":
        return torch.randn(batch, 3, 32, 32, generator=gen)
    return torch.randint(0, export_models.GPT_VOCAB, (batch, export_models.GPT_SEQ), generator=gen)


def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_torch(name, x, bf16, args):
    torch.manual_seed(export_models.SEED)
    model = MODEL_CLASSES[name]().eval()

    def run():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(x)

    return median_ms(run, args.warmup, args.iters)


def bench_ort(path, x, args):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x.numpy()}
    return median_ms(lambda: sess.run(None, feed), args.warmup, args.iters)


# `mixtrain bench` (tools/cmd_bench.cc) prints
#   forward: median 1.234 ms, min 1.200 ms, max 1.500 ms per batch
#   planned peak memory: 12.34 MiB (...)
# A `median_ms: X` / `peak_bytes: B` form is accepted too.
MEDIAN_RE = re.compile(r"median(?:_ms\s*[:=]\s*|\s+)([0-9.]+)")
PEAK_RE = re.compile(r"peak[a-z_ ]*?(memory|bytes)\s*[:=]\s*([0-9.]+)\s*(MiB)?")


def parse_bench_output(text):
    """Returns (median ms or None, planned peak bytes or None) from `mixtrain bench` output."""
    m = MEDIAN_RE.search(text)
    p = PEAK_RE.search(text)
    peak = None
    if p:
        peak = int(float(p.group(2)) * (2**20 if p.group(3) else 1))
    return (float(m.group(1)) if m else None), peak


def bench_mixtrain(path, dtype, args):
    """Runs `mixtrain bench`; returns (median ms or None, peak bytes or None, note)."""
    if not os.access(args.mixtrain, os.X_OK):
        return None, None, f"{args.mixtrain} not built"
    cmd = [args.mixtrain, "bench", path, f"--batch-size={args.batch_size}",
           f"--warmup={args.warmup}", f"--iters={args.iters}"]
    if dtype != "fp32":
        cmd.append(f"--dtype={dtype}")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        return None, None, "timed out"
    out = proc.stdout + proc.stderr
    median, peak = parse_bench_output(proc.stdout)
    if proc.returncode != 0 or median is None:
        last = out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}"
        return None, None, f"failed: {last[:120]}"
    return median, peak, ""


def fmt(ms):
    return f"{ms:9.3f}" if ms is not None else "      n/a"


def add_common_args(ap, models, warmup, iters):
    """The flags every CPU benchmark script takes."""
    ap.add_argument("--models", nargs="+", default=models, choices=sorted(MODEL_CLASSES))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--json", help="also write the results as JSON to this file")


def setup_threads_and_warn(threads):
    """Pins torch's thread count and warns when other load will skew the timings."""
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f} before starting; other processes will skew "
              f"the timings (OpenMP runtimes suffer most; OMP_WAIT_POLICY=passive softens it)",
              file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, ["fashion_cnn", "gpt_mini"], warmup=10, iters=50)
    args = ap.parse_args()
    setup_threads_and_warn(args.threads)

    results = []
    for name in args.models:
        path = os.path.join(ROOT, "models", name + ".onnx")
        x = example_input(name, args.batch_size)
        rows = {}
        ours = {d: bench_mixtrain(path, d, args) for d in ("fp32", "bf16")}
        rows["mixtrain fp32"] = ours["fp32"][0]
        rows["mixtrain bf16"] = ours["bf16"][0]
        rows["torch fp32"] = bench_torch(name, x, False, args)
        rows["torch bf16 autocast"] = bench_torch(name, x, True, args)
        rows["onnxruntime fp32"] = bench_ort(path, x, args)

        print(f"\n{name}  batch {args.batch_size}, {args.threads} threads, median of "
              f"{args.iters} runs (ms)")
        for runner, ms in rows.items():
            note = ""
            if runner.startswith("mixtrain"):
                _, peak, why = ours[runner.split()[1]]
                note = why or (f"planned peak {peak / 2**20:.1f} MiB" if peak else "")
            print(f"  {runner:22s} {fmt(ms)}  {note}")
        ratios = {}
        for ours_key, peers in (("mixtrain fp32", ["torch fp32", "onnxruntime fp32"]),
                                ("mixtrain bf16", ["torch bf16 autocast", "mixtrain fp32"])):
            for peer in peers:
                if rows[ours_key] and rows[peer]:
                    ratios[f"{peer} / {ours_key}"] = rows[peer] / rows[ours_key]
        for label, r in ratios.items():
            print(f"  {label:40s} {r:6.2f}x")
        results.append({"model": name, "batch_size": args.batch_size, "threads": args.threads,
                        "median_ms": rows, "ratios": ratios,
                        "mixtrain_peak_bytes": {d: ours[d][1] for d in ours}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
