#!/usr/bin/env python3
"""The ceiling a CPU puts on mixed precision: matrix-product GFLOP/s in fp32 and bf16, and what
that allows each model's training step.

pip packages: onnx, numpy; torch for the PyTorch rows (optional: without it they read n/a).

    python3 tools/bench/product_peak.py [--size 2048] [--threads 2] [--iters 10]
        [--rounds 3] [--models fashion_cnn gpt_mini] [--mixtrain build/mixtrain]

1. Writes a one-MatMul model ([S, S] x [S, S] weight, S = --size) to build/bench-models/ and times
   its forward with `mixtrain bench --dtype=fp32` and `--dtype=bf16` (the bf16 run includes the
   casts of the input and output, a few percent at S = 2048), and torch.matmul in fp32 and bf16
   with the same thread count. GFLOP/s = 2 S^3 / time.
2. For each model, `mixtrain bench MODEL --train --profile` in fp32 and in bf16 AMP: the share f of
   the fp32 step spent in matrix products and convolutions (the profile's rows with a GFLOP/s
   figure), and the bf16 step time. If bf16 made the products r times faster (r from 1.) and
   left the rest as it was, the step would gain 1 / (f / r + 1 - f): the printed ceiling. The
   rest (norms, softmax, Gelu, pools, the optimizer) is compute- or cache-bound in float in both
   precisions, so that is an upper bound for what AMP can give the model on this CPU.
Say which CPU (lscpu's flags) and ISA cap the numbers came from when you quote them.
"""

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_matmul_model(path, size):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((size, size)) * 0.01).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", size])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def mixtrain_matmul_ms(args, model, dtype, env):
    out = run([args.mixtrain, "bench", model, f"--batch-size={args.size}", f"--dtype={dtype}",
               "--warmup=3", f"--iters={args.iters}", "--device=cpu"], env)
    m = re.search(r"forward: median ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError(f"no median in: {out[-300:]}")
    return float(m.group(1))


def torch_matmul_ms(args, dtype):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(args.threads)
    dt = torch.float32 if dtype == "fp32" else torch.bfloat16
    a = torch.randn(args.size, args.size).to(dt)
    b = torch.randn(args.size, args.size).to(dt)
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def model_path(name):
    committed = os.path.join(ROOT, "models", name + ".onnx")
    if os.path.exists(committed):
        return committed
    return os.path.join(ROOT, "build", "bench-models", name + ".onnx")


DEFAULT_BATCH = {"cifar_cnn": 256, "transformer_cls": 32}


def step_profile(args, name, dtype, env):
    """(median step ms, ms/step in products, ms/step in all kernels) of one --train --profile run."""
    cmd = [args.mixtrain, "bench", model_path(name), "--train", "--profile", "--device=cpu",
           f"--batch-size={DEFAULT_BATCH.get(name, 64)}", f"--dtype={dtype}", "--warmup=5",
           f"--iters={max(args.iters, 20)}"]
    if name == "gpt_mini":
        cmd.append("--class-axis=-1")
    out = run(cmd, env)
    median = float(re.search(r"train step: median ([0-9.]+) ms", out).group(1))
    products = kernels = 0.0
    in_table = False
    for line in out.splitlines():
        if "by op type" in line:
            in_table = True
            continue
        if in_table and line.strip().startswith("slowest nodes"):
            break
        parts = line.split()
        if not in_table or len(parts) < 6 or parts[0] == "phase":
            continue
        ms = float(parts[2])
        kernels += ms
        if len(parts) >= 8:  # a GFLOP/s column: a matrix product or a convolution
            products += ms
    return median, products, kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="alternating repeats; the best median counts")
    ap.add_argument("--models", nargs="*", default=["fashion_cnn", "cifar_cnn", "gpt_mini", "transformer_cls"])
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    os.makedirs(os.path.join(ROOT, "build", "bench-models"), exist_ok=True)
    model = os.path.join(ROOT, "build", "bench-models", f"matmul_{args.size}.onnx")
    if not os.path.exists(model):
        write_matmul_model(model, args.size)
    flop = 2.0 * args.size ** 3
    print(f"[{args.size}, {args.size}] x [{args.size}, {args.size}], {args.threads} threads: GFLOP/s (median of {args.iters})")
    # Shared machines slow down by up to 2x for seconds at a time: each figure is the best of
    # --rounds medians, the rounds alternating fp32 and bf16.
    best = {}
    for _ in range(args.rounds):
        for runner in ("mixtrain", "torch"):
            for dtype in ("fp32", "bf16"):
                ms = mixtrain_matmul_ms(args, model, dtype, env) if runner == "mixtrain" else torch_matmul_ms(args, dtype)
                if ms is not None:
                    best[(runner, dtype)] = min(ms, best.get((runner, dtype), ms))
    rates = {}
    for runner in ("mixtrain", "torch"):
        row = []
        for dtype in ("fp32", "bf16"):
            ms = best.get((runner, dtype))
            rates[(runner, dtype)] = None if ms is None else flop / ms / 1e6
            row.append("n/a" if ms is None else f"{flop / ms / 1e6:7.1f}")
        print(f"  {runner:9s} fp32 {row[0]:>7s}   bf16 {row[1]:>7s}")
    r = rates[("mixtrain", "bf16")] / rates[("mixtrain", "fp32")]
    print(f"  mixtrain bf16 / fp32 product rate: r = {r:.2f}")
    if not args.models:
        return
    print("\ntraining step (mixtrain bench --train --profile): f = share of the fp32 kernel time in products")
    print(f"  {'model':16s} {'fp32 ms':>8s} {'bf16 ms':>8s} {'speedup':>8s} {'f':>6s} {'ceiling 1/(f/r+1-f)':>20s}")
    for name in args.models:
        if not os.path.exists(model_path(name)):
            print(f"  {name:16s} n/a (no {model_path(name)}: tools/bench/train_models.py exports it)")
            continue
        t32 = t16 = float("inf")
        for _ in range(args.rounds):
            m32, p, k = step_profile(args, name, "fp32", env)
            if m32 < t32:
                t32, p32, k32 = m32, p, k
            t16 = min(t16, step_profile(args, name, "bf16", env)[0])
        f = p32 / k32 if k32 > 0 else 0.0
        ceiling = 1.0 / (f / r + 1.0 - f)
        print(f"  {name:16s} {t32:8.2f} {t16:8.2f} {t32 / t16:7.2f}x {f:6.2f} {ceiling:19.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
