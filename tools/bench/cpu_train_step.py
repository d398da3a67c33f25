#!/usr/bin/env python3
"""Training-step time on the CPU: mixtrain next to PyTorch and ONNX Runtime's trainer.

pip packages: torch, onnx, numpy, and for the ONNX Runtime rows onnxruntime-training-cpu (its
last release, 1.19, reads ONNX IR <= 10, so it needs onnx < 1.17 to write its artifacts; and it
replaces the `onnxruntime` module, so keep both in their own virtual environment:
    python3 -m venv --system-site-packages /tmp/ort-train
    /tmp/ort-train/bin/pip install onnxruntime-training-cpu "onnx<1.17"
    /tmp/ort-train/bin/python tools/bench/cpu_train_step.py)

    python3 tools/bench/cpu_train_step.py [--models fashion_cnn] [--batch-size 64] [--threads 2]
                                          [--mixtrain build/mixtrain] [--json OUT]

One step = forward, cross-entropy loss, backward, Adam(W) update, at one batch size:
  * PyTorch eager fp32, and bf16 AMP with torch.autocast("cpu", dtype=torch.bfloat16)
    (fp32 master weights, as torch users run it); torch.optim.Adam;
  * ONNX Runtime training (onnxruntime.training.api), artifacts generated from the committed
    .onnx file with CrossEntropyLoss and AdamW, fp32 (its CPU trainer has no AMP);
  * `mixtrain train MODEL --steps=S --batch-size=N --log-json=FILE` with --precision=fp32 and with
    --precision=amp --dtype=bf16; the per-step `ms` field of the JSON lines is read back.
Every runner reports the median over the timed steps after the warm-up steps, and the script
prints each peer's time divided by mixtrain's (above 1: mixtrain is faster).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import export_models  # noqa: E402  (the PyTorch definitions the .onnx files were exported from)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_forward import (MODEL_CLASSES, add_common_args, example_input, fmt,
                         setup_threads_and_warn)  # noqa: E402

NUM_CLASSES = {"fashion_cnn": 10, "mlp": 10, "resnet_mini": 10, "gpt_mini": export_models.GPT_VOCAB}


def example_labels(name, batch):
    gen = torch.Generator().manual_seed(1)
    shape = (batch, export_models.GPT_SEQ) if name == "gpt_mini" else (batch,)
    return torch.randint(0, NUM_CLASSES[name], shape, generator=gen)


def timed_steps(step, warmup, iters):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_torch(name, x, y, bf16, args):
    torch.manual_seed(export_models.SEED)
    model = MODEL_CLASSES[name]().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, NUM_CLASSES[name]), y.reshape(-1))
        loss.backward()
        opt.step()

    return timed_steps(step, args.warmup, args.iters)


@contextlib.contextmanager
def quiet_stderr():
    """Silences file descriptor 2 (native-code logging) for the duration; exceptions still pass."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def bench_ort_training(name, path, x, y, args):
    """Returns (median ms or None, note)."""
    try:
        import onnxruntime as ort
        import onnxruntime.training  # noqa: F401
    except ImportError:
        return None, "onnxruntime-training-cpu not installed (see the script header)"
    ort.set_default_logger_severity(3)
    if name == "gpt_mini":
        # Its SoftmaxCrossEntropyLoss block takes N x C logits; the LM's are N x T x V.
        return None, "ORT's CrossEntropyLoss block takes N x C logits only"
    try:
        return _ort_training_median(path, x, y, args), ""
    except Exception as e:  # noqa: BLE001  (a peer that cannot run this model is a row, not a crash)
        return None, f"failed: {str(e).strip().splitlines()[-1][-120:]}"


def _ort_training_median(path, x, y, args):
    import onnxruntime as ort
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    model = onnx.load(path)
    # Trainable: float initializers other than BatchNorm running statistics.
    running = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization"
               for i in (3, 4)}
    params = [t.name for t in model.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and t.name not in running]
    frozen = [t.name for t in model.graph.initializer if t.name not in params]
    with tempfile.TemporaryDirectory() as d:
        with quiet_stderr():  # the gradient builder logs every graph transformer it runs
            artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                         loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.AdamW,
                                         artifact_directory=d)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
        module = Module(os.path.join(d, "training_model.onnx"), state,
                        os.path.join(d, "eval_model.onnx"), device="cpu", session_options=opts)
        optimizer = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
        module.train()
        xs, ys = x.numpy(), y.numpy().astype(np.int64)

        def step():
            module(xs, ys)
            optimizer.step()
            module.lazy_reset_grad()

        return timed_steps(step, args.warmup, args.iters)


def bench_mixtrain(name, path, x, y, precision, args):
    """Runs `mixtrain train` for warmup + iters steps; returns (median ms or None, note)."""
    if not os.access(args.mixtrain, os.X_OK):
        return None, f"{args.mixtrain} not built"
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "steps.jsonl")
        cmd = [args.mixtrain, "train", path, f"--steps={args.warmup + args.iters}",
               f"--batch-size={args.batch_size}", f"--log-json={log}", "--seed=0"]
        cmd += ["--precision=fp32"] if precision == "fp32" else ["--precision=amp", "--dtype=bf16"]
        if name != "fashion_cnn":  # fashion_cnn trains on Fashion-MNIST by default
            data = os.path.join(d, "data.npz")
            reps = 4  # a few batches of the random example
            np.savez(data, **{"labels": np.concatenate([y.numpy()] * reps),
                              ("tokens" if name == "gpt_mini" else "input"):
                              np.concatenate([x.numpy()] * reps)})
            cmd += [f"--data={data}", "--labels=labels"]
            if name == "gpt_mini":  # N x T x V logits, labels N x T
                cmd += ["--class-axis=-1"]
        cmd += args.mixtrain_arg
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        except subprocess.TimeoutExpired:
            return None, "timed out"
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not os.path.exists(log):
            return None, f"failed: {out.splitlines()[-1][:120] if out else proc.returncode}"
        with open(log) as f:
            ms = [json.loads(line)["ms"] for line in f if line.strip()]
    timed = ms[args.warmup:]
    if not timed:
        return None, f"log has {len(ms)} steps, fewer than warm-up + 1"
    return statistics.median(timed), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, ["fashion_cnn"], warmup=5, iters=30)
    ap.add_argument("--mixtrain-arg", action="append", default=[],
                    help="extra flag passed to `mixtrain train` (repeatable)")
    args = ap.parse_args()
    setup_threads_and_warn(args.threads)

    results = []
    for name in args.models:
        path = os.path.join(ROOT, "models", name + ".onnx")
        x, y = example_input(name, args.batch_size), example_labels(name, args.batch_size)
        notes = {}
        rows = {}
        for precision, key in (("fp32", "mixtrain fp32"), ("amp", "mixtrain bf16 amp")):
            rows[key], notes[key] = bench_mixtrain(name, path, x, y, precision, args)
        rows["torch fp32"] = bench_torch(name, x, y, False, args)
        rows["torch bf16 autocast"] = bench_torch(name, x, y, True, args)
        rows["onnxruntime-training fp32"], notes["onnxruntime-training fp32"] = \
            bench_ort_training(name, path, x, y, args)

        print(f"\n{name}  train step, batch {args.batch_size}, {args.threads} threads, median of "
              f"{args.iters} steps (ms)")
        for runner, ms in rows.items():
            print(f"  {runner:26s} {fmt(ms)}  {notes.get(runner, '')}")
        ratios = {}
        for ours, peers in (("mixtrain fp32", ["torch fp32", "onnxruntime-training fp32"]),
                            ("mixtrain bf16 amp", ["torch bf16 autocast", "mixtrain fp32"])):
            for peer in peers:
                if rows[ours] and rows[peer]:
                    ratios[f"{peer} / {ours}"] = rows[peer] / rows[ours]
        for label, r in ratios.items():
            print(f"  {label:48s} {r:6.2f}x")
        results.append({"model": name, "batch_size": args.batch_size, "threads": args.threads,
                        "median_ms": rows, "ratios": ratios, "notes": notes})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
