#!/usr/bin/env python3
"""Training-step time and GPU memory on one GPU: mixtrain --device=cuda next to PyTorch.

Run on the GPU machine (tools/gpu/run.sh calls it). pip packages: torch (with CUDA), numpy, and
for exporting the models that are not committed (cifar_cnn, gpt2_small) onnx and onnxscript (or
torch's TorchScript exporter; see tools/bench/train_models.py). A model that cannot be exported
there reads n/a for every runner, with the reason.

    python3 tools/bench/gpu_train_step.py [--models fashion_cnn cifar_cnn gpt_mini gpt2_small]
        [--batch-size N] [--warmup 10] [--iters 50] [--mixtrain build/mixtrain]
        [--model-dir build/bench-models] [--json OUT] [--timeout 900]

Models: fashion_cnn and gpt_mini are the committed models/*.onnx; cifar_cnn (the AMP tutorial's
CIFAR-10 CNN: conv3-32, conv32-64, fc4096-256-10) and gpt2_small (GPT-2 small's shape, 124M
parameters) come from tools/bench/train_models.py. Default batches: fashion_cnn 64, cifar_cnn
256, gpt_mini 64, gpt2_small 8 (x 1024 tokens). One random batch per model (and random labels),
the same for every runner.

One step = forward, cross-entropy, backward, Adam update. Runners, each in a fresh process:
  * torch eager fp32: TF32 off for matmuls and convolutions, as mixtrain's fp32 (true fp32);
  * torch eager AMP: torch.autocast("cuda") with fp16 and a GradScaler for the CNNs, bf16 for the
    GPTs (no scaler), fp32 master weights;
  * torch.compile AMP: the same step with the module wrapped in torch.compile (default mode);
  * mixtrain fp32 and AMP: `mixtrain train MODEL --device=cuda --data=... --log-json=...` with
    --precision=fp32, and --precision=amp --dtype=fp16 (CNNs) or bf16 (GPTs); the JSON lines'
    per-step `ms` are read back.
Every runner waits for the GPU after each step (torch.cuda.synchronize; mixtrain reads the loss
every step with --log-json) and reports the median step over --iters steps after --warmup.

GPU memory: this script samples the GPU's used memory (nvidia-smi, every 50 ms) while each runner
runs and reports the peak above what was in use before it started: the CUDA context, the caching
allocator's pool and libraries' workspaces included, for every runner alike.

MFU (GPTs): model FLOPs per step as nanoGPT estimates them, 6 N + 12 L H Q T per token (N the
parameters less the position table), over the median step, over the GPU's dense bf16 peak (H100
SXM / H200 989 TFLOP/s, H100 PCIe 756).

Prints per model each runner's median ms and peak MiB, then the issue's ratios: mixtrain AMP /
torch eager AMP (goal <= 0.5 on the CNNs), mixtrain AMP / torch.compile AMP (goal <= 1.0 on the
GPT), mixtrain AMP memory / mixtrain fp32 memory (goal <= 0.6).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "models"))

EXPORTED = ("cifar_cnn", "gpt2_small")  # tools/bench/train_models.py
GPTS = ("gpt_mini", "gpt2_small")
DEFAULT_BATCH = {"fashion_cnn": 64, "cifar_cnn": 256, "gpt_mini": 64, "gpt2_small": 8}
INPUT_NAME = {"gpt_mini": "tokens", "gpt2_small": "tokens"}  # others: "input"
DATA_REPS = 2
TORCH_RUNNERS = ("torch eager fp32", "torch eager AMP", "torch.compile AMP")
MIXTRAIN_RUNNERS = ("mixtrain fp32", "mixtrain AMP")


def amp_dtype(name):
    return "bf16" if name in GPTS else "fp16"


def import_export_models():
    """models/export_models.py, whose module-level imports of onnx and onnxruntime (for its own
    exporting and checking, never called here) are stubbed: the GPU machine may lack them."""
    import types
    stubs = [m for m in ("onnx", "onnxruntime") if m not in sys.modules]
    for m in stubs:
        sys.modules[m] = types.ModuleType(m)
    try:
        import export_models
    finally:
        for m in stubs:
            del sys.modules[m]
    return export_models


# --- the torch runner (a process of its own; prints one JSON line) ---------------------------------

def torch_module(name):
    import torch
    if name in EXPORTED:
        import train_models
        return train_models.build(name)
    export_models = import_export_models()
    torch.manual_seed(export_models.SEED)
    return {"fashion_cnn": export_models.FashionCnn, "gpt_mini": export_models.GptMini}[name]()


def child_torch(args):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with np.load(args.batch_npz) as d:
        x = torch.from_numpy(d["x"]).cuda()
        y = torch.from_numpy(d["y"].astype(np.int64)).cuda()
    model = torch_module(args.model).cuda().train()
    amp = args.runner != "torch eager fp32"
    dtype = torch.bfloat16 if amp_dtype(args.model) == "bf16" else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=amp and dtype == torch.float16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    run = torch.compile(model) if args.runner == "torch.compile AMP" else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=amp):
            logits = run(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    times = []
    for i in range(args.warmup + args.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    note = f"torch {torch.__version__}, {torch.cuda.get_device_name()}"
    print(json.dumps({"ms": statistics.median(times), "note": note,
                      "torch_peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20}))
    return 0


# --- the harness ------------------------------------------------------------------------------------

def gpu_used_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.strip().splitlines()[0])
    except Exception:  # noqa: BLE001
        return None


def run_sampled(cmd, env, timeout):
    """Runs cmd; returns (exit code or None on timeout, stdout, stderr, peak GPU MiB above the
    memory used before it started)."""
    base = gpu_used_mib()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            v = gpu_used_mib()
            if v is not None and (peak[0] is None or v > peak[0]):
                peak[0] = v

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, e.stdout or "", e.stderr or ""
    done.set()
    t.join()
    mib = peak[0] - base if base is not None and peak[0] is not None else None
    return code, out if isinstance(out, str) else out.decode(), err if isinstance(err, str) else err.decode(), mib


def last_line(text, limit=200):
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip()[-limit:] if lines else ""


def run_torch(runner, name, batch_npz, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--runner", runner, "--model", name,
           "--batch-npz", batch_npz, "--warmup", str(args.warmup), "--iters", str(args.iters)]
    code, out, err, mib = run_sampled(cmd, dict(os.environ), args.timeout)
    if code != 0:
        return None, mib, "timed out" if code is None else f"failed: {last_line(err) or last_line(out)}"
    r = json.loads(out.strip().splitlines()[-1])
    return r["ms"], mib, f"{r['note']}; torch max_memory_allocated {r['torch_peak_allocated_mib']:.0f} MiB"


def run_mixtrain(runner, name, onnx_path, data_npz, batch, workdir, args):
    if not os.access(args.mixtrain, os.X_OK):
        return None, None, f"{args.mixtrain} not built"
    log = os.path.join(workdir, f"{name}-{runner.replace(' ', '_')}.jsonl")
    cmd = [os.path.abspath(args.mixtrain), "train", onnx_path, "--device=cuda", f"--data={data_npz}",
           "--labels=labels", f"--steps={args.warmup + args.iters}", f"--batch-size={batch}",
           f"--log-json={log}", "--seed=0"]
    cmd += ["--precision=fp32"] if runner == "mixtrain fp32" else ["--precision=amp", f"--dtype={amp_dtype(name)}"]
    if name in GPTS:
        cmd += ["--class-axis=-1"]
    code, out, err, mib = run_sampled(cmd, dict(os.environ), args.timeout)
    if code != 0 or not os.path.exists(log):
        return None, mib, "timed out" if code is None else f"failed: {last_line(err) or last_line(out)}"
    with open(log) as f:
        ms = [json.loads(line)["ms"] for line in f if line.strip()]
    timed = ms[args.warmup:]
    if not timed:
        return None, mib, f"log has {len(ms)} steps"
    return statistics.median(timed), mib, ""


def model_files(name, batch, args):
    """(path of the .onnx file, input, labels) as numpy arrays; raises when it cannot export."""
    if name in EXPORTED:
        import train_models
        path = train_models.ensure_exported(name, args.model_dir)
        return path, train_models.example_input(name, batch).numpy(), train_models.example_labels(name, batch).numpy()
    import torch
    export_models = import_export_models()
    path = os.path.join(ROOT, "models", name + ".onnx")
    gen = torch.Generator().manual_seed(0)
    if name == "gpt_mini":
        x = torch.randint(0, export_models.GPT_VOCAB, (batch, export_models.GPT_SEQ), generator=gen)
        y = torch.randint(0, export_models.GPT_VOCAB, (batch, export_models.GPT_SEQ), generator=gen)
    else:
        x = torch.rand(batch, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
    return path, x.numpy(), y.numpy()


def gpt_flops_per_step(name, batch):
    """nanoGPT's estimate: (6 N + 12 L H Q T) per token, N without the position table."""
    if name == "gpt2_small":
        import train_models as m
        vocab, seq, dim, heads, layers = m.G2_VOCAB, m.G2_SEQ, m.G2_DIM, m.G2_HEADS, m.G2_LAYERS
    else:
        m = import_export_models()
        vocab, seq, dim, heads, layers = m.GPT_VOCAB, m.GPT_SEQ, m.GPT_DIM, m.GPT_HEADS, m.GPT_LAYERS
    block = 12 * dim * dim + 13 * dim  # qkv, proj, fc, out weights and biases; two LayerNorms
    n = vocab * dim + layers * block + 2 * dim + dim * vocab
    per_token = 6 * n + 12 * layers * heads * (dim // heads) * seq
    return per_token * batch * seq


def peak_bf16_flops():
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return None, "unknown GPU"
    if "H100" in name and "PCIe" in name:
        return 756e12, name
    if "H100" in name or "H200" in name:
        return 989e12, name
    if "A100" in name:
        return 312e12, name
    return None, name


def fmt(v, width=9, digits=3):
    return f"{v:{width}.{digits}f}" if v is not None else f"{'n/a':>{width}s}"


def bench_model(name, args):
    batch = args.batch_size or DEFAULT_BATCH[name]
    rows, mem, notes = {}, {}, {}
    try:
        path, x, y = model_files(name, batch, args)
    except Exception as e:  # noqa: BLE001
        why = f"no model: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        for r in MIXTRAIN_RUNNERS + TORCH_RUNNERS:
            rows[r], mem[r], notes[r] = None, None, why
        path = None
    if path is not None:
        with tempfile.TemporaryDirectory(prefix="gpu_train_step-") as d:
            batch_npz = os.path.join(d, "batch.npz")
            np.savez(batch_npz, x=x, y=y)
            data_npz = os.path.join(d, "data.npz")
            np.savez(data_npz, **{INPUT_NAME.get(name, "input"): np.concatenate([x] * DATA_REPS),
                                  "labels": np.concatenate([y] * DATA_REPS).astype(np.int64)})
            for r in MIXTRAIN_RUNNERS:
                rows[r], mem[r], notes[r] = run_mixtrain(r, name, path, data_npz, batch, d, args)
            for r in TORCH_RUNNERS:
                rows[r], mem[r], notes[r] = run_torch(r, name, batch_npz, args)
    print(f"\n{name}  train step, batch {batch}, AMP dtype {amp_dtype(name)}, median of {args.iters} steps after "
          f"{args.warmup} warm-up; peak GPU memory above the idle GPU's")
    print(f"  {'runner':20s} {'median ms':>9s}  {'peak MiB':>8s}  note")
    for r in MIXTRAIN_RUNNERS + TORCH_RUNNERS:
        print(f"  {r:20s} {fmt(rows[r])}  {fmt(mem[r], 8, 0)}  {notes[r]}")
    ratios = {}
    amp = rows.get("mixtrain AMP")
    for peer in TORCH_RUNNERS:
        if amp and rows.get(peer):
            ratios[f"mixtrain AMP / {peer}"] = amp / rows[peer]
    if mem.get("mixtrain AMP") and mem.get("mixtrain fp32"):
        ratios["mixtrain AMP memory / mixtrain fp32 memory"] = mem["mixtrain AMP"] / mem["mixtrain fp32"]
    for k, v in ratios.items():
        print(f"  {k:48s} {v:8.2f}x")
    mfu = {}
    if name in GPTS:
        peak, gpu = peak_bf16_flops()
        flops = gpt_flops_per_step(name, batch)
        for r in MIXTRAIN_RUNNERS + TORCH_RUNNERS:
            if rows.get(r) and peak:
                mfu[r] = flops / (rows[r] / 1e3) / peak
        if mfu:
            print(f"  MFU ({flops / 1e12:.2f} TFLOP per step; {gpu}, {peak / 1e12:.0f} TFLOP/s bf16 dense): " +
                  ", ".join(f"{r} {100 * v:.1f}%" for r, v in mfu.items()))
    return {"model": name, "batch_size": batch, "median_ms": rows, "peak_gpu_mib": mem, "ratios": ratios,
            "mfu": mfu, "notes": notes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=["fashion_cnn", "cifar_cnn", "gpt_mini", "gpt2_small"],
                    choices=sorted(DEFAULT_BATCH))
    ap.add_argument("--batch-size", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--json")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--runner", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--batch-npz", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_torch(args)
    results = [bench_model(m, args) for m in args.models]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
