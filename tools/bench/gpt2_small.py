#!/usr/bin/env python3
"""GPT-2 small at real size: training-step time and peak RSS, mixtrain next to PyTorch (issue 35).

pip packages: torch, transformers, onnx, onnxscript (torch's default ONNX exporter), numpy.

    python3 tools/bench/gpt2_small.py [--batches 1 4 16] [--precisions fp32 bf16]
        [--recompute none auto] [--runners mixtrain torch] [--threads 2] [--warmup 2] [--iters 3]
        [--seq 128] [--mixtrain build/mixtrain] [--workdir /tmp/mixtrain-gpt2] [--json OUT]
        [--layers 12]

The model is transformers' GPT2LMHeadModel with GPT-2 small's shape (12 layers, d = 768, 12 heads,
vocabulary 50257, 1024 positions: 124.4M parameters, lm_head tied to the token embedding), random
init (seed 0), no dropout, eager attention, returning the logits. It is exported once into
--workdir with torch.onnx.export(dynamo=True, optimize=False) and a dynamic batch
(dynamic_shapes={"input_ids": {0: Dim("batch")}}), the form tools/zoo/README.md recommends.

One step = forward, cross-entropy over N x T x V logits, backward, Adam(lr=1e-3) update:
  * mixtrain: `mixtrain train MODEL --config=CFG --data=D.npz --steps=S --batch-size=N
    --class-axis=-1 --log-json=LOG`, CFG a TrainConfig text proto with the precision
    (fp32, or amp with dtype bf16) and `recompute` (none | auto); the per-step `ms` of the log;
  * PyTorch eager: the same module and initial weights, fp32 and bf16 torch.autocast (fp32 master
    weights), torch.optim.Adam, F.cross_entropy (no recompute: it has none to ask for).
Each runner runs in a fresh process with OMP_NUM_THREADS = --threads (and torch.set_num_threads)
and reports the median step of --iters after --warmup; its peak RSS is the ru_maxrss of that
process (through cpu_train_step.py's launcher, which keeps this script's size out of it).

The table puts each figure next to the floor: fp32 weights, gradients and Adam's two moments,
16 bytes per parameter (what any trainer holding fp32 master weights must keep), and prints
the ratios issue 35 sets goals for. Nothing here asserts: timings depend on the machine and its
load (see tools/bench/README.md on OMP_WAIT_POLICY and load averages).
"""

import argparse
import json
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from cpu_train_step import spawn, last_line, timed_steps  # noqa: E402

VOCAB = 50257
DATA_REPS = 2  # batches in mixtrain's --data file (it cycles through them)


def gpt2_module(layers):
    import torch
    from torch import nn
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=VOCAB, n_positions=1024,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg)

    class Logits(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Logits(model)


def export(args):
    path = os.path.join(args.workdir, f"gpt2_l{args.layers}_t{args.seq}.onnx")
    if os.path.exists(path):
        return path
    import torch
    model = gpt2_module(args.layers).eval()
    ids = torch.randint(0, VOCAB, (2, args.seq))
    batch = torch.export.Dim("batch")
    tmp = path + ".tmp.onnx"
    torch.onnx.export(model, (ids,), tmp, dynamo=True, optimize=False, input_names=["input_ids"],
                      dynamic_shapes={"input_ids": {0: batch}}, external_data=False)
    os.replace(tmp, path)
    return path


def param_count(layers):
    d, v, t = 768, VOCAB, 1024
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    return v * d + t * d + layers * per_layer + 2 * d  # lm_head tied to wte


def data_files(args, batch):
    """(batch .npz for torch, data .npz for mixtrain) of random tokens, labels = tokens shifted."""
    path = os.path.join(args.workdir, f"data_b{batch}_t{args.seq}")
    rng = np.random.default_rng(batch)
    ids = rng.integers(0, VOCAB, size=(batch * DATA_REPS, args.seq + 1), dtype=np.int64)
    x, y = ids[:, :-1], ids[:, 1:]
    np.savez(path + "_torch.npz", x=x[:batch], y=y[:batch])
    np.savez(path + "_mixtrain.npz", input_ids=x, labels=y)
    return path + "_torch.npz", path + "_mixtrain.npz"


def child_torch(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    with np.load(args.batch_npz) as data:
        x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    model = gpt2_module(args.layers).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    bf16 = args.runner == "torch-bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()

    ms = timed_steps(step, args.warmup, args.iters)
    print(json.dumps({"ms": ms}), flush=True)
    return 0


def run_torch(precision, batch_npz, env, args):
    runner = "torch-fp32" if precision == "fp32" else "torch-bf16"
    cmd = [sys.executable, os.path.abspath(__file__), "--runner", runner, "--batch-npz", batch_npz,
           f"--threads={args.threads}", f"--warmup={args.warmup}", f"--iters={args.iters}",
           f"--layers={args.layers}", f"--seq={args.seq}"]
    tag = f"torch-{precision}-{os.path.basename(batch_npz)}"
    code, rss, out, err = spawn(cmd, env, args.workdir, tag, args.timeout)
    if code != 0:
        return None, None, "timed out" if code is None else f"failed: {last_line(err) or last_line(out)}"
    return json.loads(out.strip().splitlines()[-1])["ms"], rss, ""


def run_mixtrain(onnx_path, data_npz, batch, precision, recompute, env, args):
    if not os.access(args.mixtrain, os.X_OK):
        return None, None, f"{args.mixtrain} not built"
    tag = f"mixtrain-{precision}-{recompute}-b{batch}"
    cfg = os.path.join(args.workdir, tag + ".textproto")
    with open(cfg, "w") as f:
        f.write(f'recompute: "{recompute}"\n')
    log = os.path.join(args.workdir, tag + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [os.path.abspath(args.mixtrain), "train", onnx_path, f"--config={cfg}", f"--data={data_npz}",
           "--labels=labels", f"--steps={args.warmup + args.iters}", f"--batch-size={batch}",
           "--class-axis=-1", f"--log-json={log}", "--seed=0"] + args.mixtrain_arg
    cmd += ["--precision=fp32"] if precision == "fp32" else ["--precision=amp", "--dtype=bf16"]
    code, rss, out, err = spawn(cmd, env, args.workdir, tag, args.timeout)
    if code != 0 or not os.path.exists(log):
        return None, None, "timed out" if code is None else f"failed: {last_line(err) or last_line(out)}"
    with open(log) as f:
        ms = [json.loads(line)["ms"] for line in f if line.strip()]
    timed = ms[args.warmup:]
    return (statistics.median(timed) if timed else None), rss, ""


def fmt(v, width=9, digits=0):
    return f"{v:{width},.{digits}f}" if v is not None else f"{'n/a':>{width}s}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--recompute", nargs="+", default=["none", "auto"], choices=["none", "auto", "all"])
    ap.add_argument("--runners", nargs="+", default=["mixtrain", "torch"], choices=["mixtrain", "torch"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--mixtrain-arg", action="append", default=[])
    ap.add_argument("--workdir", default="/tmp/mixtrain-gpt2")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--json")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--runner", help=argparse.SUPPRESS)
    ap.add_argument("--batch-npz", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.runner:
        return child_torch(args)

    os.makedirs(args.workdir, exist_ok=True)
    onnx_path = export(args)
    print(f"model: {onnx_path}", flush=True)
    if args.export_only:
        return 0
    params = param_count(args.layers)
    floor = params * 16 / 2**20
    print(f"GPT-2 small, {args.layers} layers, {params / 1e6:.1f}M parameters, T = {args.seq}, "
          f"{args.threads} threads; floor (fp32 weights + grads + Adam m, v) {floor:,.0f} MiB", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rows = []
    print(f"{'runner':34s} {'batch':>5s} {'step ms':>9s} {'peak MiB':>9s} {'/ floor':>8s}  note", flush=True)
    for batch in args.batches:
        batch_npz, data_npz = data_files(args, batch)
        for precision in args.precisions:
            runs = []
            if "mixtrain" in args.runners:
                for rc in args.recompute:
                    ms, rss, note = run_mixtrain(onnx_path, data_npz, batch, precision, rc, env, args)
                    runs.append((f"mixtrain {precision} recompute={rc}", ms, rss, note))
            if "torch" in args.runners:
                ms, rss, note = run_torch(precision, batch_npz, env, args)
                runs.append((f"torch {precision}" + (" autocast" if precision == "bf16" else ""), ms, rss, note))
            for name, ms, rss, note in runs:
                ratio = f"{rss / floor:8.2f}" if rss is not None else f"{'n/a':>8s}"
                print(f"{name:34s} {batch:5d} {fmt(ms)} {fmt(rss)} {ratio}  {note}", flush=True)
                rows.append({"runner": name, "batch": batch, "ms": ms, "peak_rss_mib": rss,
                             "floor_mib": floor, "note": note})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"params": params, "seq": args.seq, "threads": args.threads, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
