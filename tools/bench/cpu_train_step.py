#!/usr/bin/env python3
"""Training-step time and peak RSS on the CPU: mixtrain next to PyTorch and ONNX Runtime's trainer.

pip packages: torch, onnx, onnxscript (torch's default ONNX exporter), onnxruntime, numpy, and
for the ONNX Runtime training rows onnxruntime-training-cpu (its last release, 1.19, reads ONNX
IR <= 10, so it needs onnx < 1.17 to write its artifacts; and it replaces the `onnxruntime` module,
so keep both in their own virtual environment:
    python3 -m venv --system-site-packages /tmp/ort-train
    /tmp/ort-train/bin/pip install onnxruntime-training-cpu "onnx<1.17"
    /tmp/ort-train/bin/python tools/bench/cpu_train_step.py)
Without onnxruntime-training its rows read n/a and the rest still runs.

    python3 tools/bench/cpu_train_step.py [--models fashion_cnn cifar_cnn gpt_mini transformer_cls]
        [--batch-size N] [--threads 2] [--warmup 5] [--iters 30] [--mixtrain build/mixtrain]
        [--model-dir build/bench-models] [--mixtrain-arg=FLAG ...] [--json OUT]

Models: fashion_cnn, gpt_mini, mlp, resnet_mini are the committed models/*.onnx (PyTorch classes in
models/export_models.py); cifar_cnn, transformer_cls and lstm_cls (not in the default set) are
defined in tools/bench/train_models.py and exported on first use into --model-dir (see that
file). Default batch: 64, but cifar_cnn 256
and transformer_cls 32; --batch-size overrides every model's. Inputs are one random batch (and
random labels) per model, written to an .npz that every runner reads.

One step = forward, cross-entropy loss, backward, Adam(W) update, at one batch size:
  * PyTorch eager fp32, and bf16 AMP with torch.autocast("cpu", dtype=torch.bfloat16)
    (fp32 master weights, as torch users run it); F.cross_entropy, torch.optim.Adam(lr=1e-3);
    the same module class and seeded initial weights the .onnx file was exported from;
  * ONNX Runtime training, fp32 (its CPU trainer has no AMP): its offline step,
    onnxruntime.training.artifacts.generate_artifacts with CrossEntropyLoss and AdamW, runs in a
    process of its own (its peak RSS goes in the note); then onnxruntime.training.api's Module and
    Optimizer load those artifacts and are timed. Trainable: every float initializer except
    BatchNorm running statistics and single-element exporter constants. LayerNormalization nodes
    get their optional Mean/InvStdDev outputs named first: ORT 1.19's gradient for it needs them;
  * `mixtrain train MODEL --data=BATCHES.npz --steps=S --batch-size=N --log-json=FILE` with
    --precision=fp32 and with --precision=amp --dtype=bf16 (gpt_mini: --class-axis=-1); the npz
    holds 4 copies of the example batch (the Python runners load one); the per-step `ms` field
    of the JSON lines is read back.
Every runner reports the median over the timed steps after the warm-up steps.

Peak RSS: every runner runs in a fresh process of its own (the Python runners re-run this script
with --runner), with OMP_NUM_THREADS=--threads, and its peak resident set size is the ru_maxrss
that os.wait4 returns for it. It is started through a small Python launcher that forks and execs
it and reports that number: Linux carries a forked child's inherited memory into its ru_maxrss
across exec, so a child forked straight from this script (which holds torch) would report this
script's size (measured: a 500 MiB parent gives /bin/true a 517 MiB peak; through the launcher
6 MiB). The figure is whole-process: the interpreter, imported libraries and the data included.
The PyTorch runner imports torch (and numpy) but not onnx or onnxruntime; the ONNX Runtime
processes import onnxruntime and numpy (and onnx for the artifacts) but not torch:
onnxruntime-training's package __init__ imports torch, so they load only its `artifacts` or `api`
module, which do not need it.

The script prints, per model, each runner's median ms and peak RSS (MiB), then each peer's time
divided by mixtrain's (above 1: mixtrain is faster) and mixtrain's RSS divided by the peer's
(below 1: mixtrain uses less memory).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "models"))

COMMITTED = ("fashion_cnn", "gpt_mini", "mlp", "resnet_mini")  # models/*.onnx
EXPORTED = ("cifar_cnn", "transformer_cls", "lstm_cls")         # tools/bench/train_models.py
DEFAULT_BATCH = {"fashion_cnn": 64, "gpt_mini": 64, "mlp": 64, "resnet_mini": 64,
                 "cifar_cnn": 256, "transformer_cls": 32, "lstm_cls": 64}
INPUT_NAME = {"gpt_mini": "tokens", "transformer_cls": "tokens", "lstm_cls": "tokens"}  # others: "input"
DATA_REPS = 4  # copies of the example batch in mixtrain's --data file

# Runner names (table rows) and the child --runner value of the Python ones.
MIXTRAIN_FP32, MIXTRAIN_AMP = "mixtrain fp32", "mixtrain bf16 amp"
TORCH_FP32, TORCH_BF16, ORT_FP32 = "torch fp32", "torch bf16 autocast", "onnxruntime-training fp32"
CHILD_RUNNER = {TORCH_FP32: "torch-fp32", TORCH_BF16: "torch-bf16", ORT_FP32: "ort-training"}
CHILD_ONLY = ("ort-artifacts",)  # ONNX Runtime's offline step, run before "ort-training"
PAIRS = ((MIXTRAIN_FP32, [TORCH_FP32, ORT_FP32]), (MIXTRAIN_AMP, [TORCH_BF16, MIXTRAIN_FP32]))

# Forks and execs argv[2:], waits for it with wait4 and writes its ru_maxrss (KiB) to argv[1]; exits
# with its status. Being a fresh small process, its child inherits a few MiB, not the caller's size.
LAUNCHER = """\
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def timed_steps(step, warmup, iters):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def fmt(value, width=9, digits=3):
    return f"{value:{width}.{digits}f}" if value is not None else f"{'n/a':>{width}s}"


def last_line(text, limit=160):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[-limit:] if lines else ""


# --- child runners (a fresh process each; each prints one JSON line: {"ms": ..., "note": ...}) ---

def load_batch(path):
    with np.load(path) as data:
        return data["x"], data["y"].astype(np.int64)


def torch_module(name):
    """The PyTorch module the .onnx file was exported from, with its seeded initial weights."""
    import torch
    if name in EXPORTED:
        import train_models
        return train_models.build(name)
    # cpu_forward and export_models import onnx and onnxruntime at the top for their exporting and
    # timing code, which this runner never calls: placeholders keep those libraries out of its RSS.
    import types
    stubs = [m for m in ("onnx", "onnxruntime") if m not in sys.modules]
    for m in stubs:
        sys.modules[m] = types.ModuleType(m)
    try:
        import cpu_forward
        import export_models
    finally:
        for m in stubs:
            del sys.modules[m]
    torch.manual_seed(export_models.SEED)
    return cpu_forward.MODEL_CLASSES[name]()


def child_torch(args, bf16):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    xs, ys = load_batch(args.batch_npz)
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    model = torch_module(args.model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        # N x C logits, or N x T x V for gpt_mini (labels N x T): classes on the last axis.
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    return timed_steps(step, args.warmup, args.iters), ""


def import_ort_training(module):
    """Imports onnxruntime.training.MODULE ("artifacts" or "api") without importing torch.

    The package's __init__ imports ORTModule and torch-based optimizer wrappers, and `import
    onnxruntime` itself probes ORTModule; neither the offline artifact builder nor the on-device
    training API needs torch. With torch marked unimportable, onnxruntime's probe fails quietly,
    and a bare package object lets the submodule load without the package's __init__."""
    import importlib
    import types
    sys.modules.setdefault("torch", None)  # None: `import torch` raises ImportError
    import onnxruntime
    pkg_dir = os.path.join(os.path.dirname(onnxruntime.__file__), "training")
    if not os.path.isdir(os.path.join(pkg_dir, "api")):
        raise ImportError("onnxruntime.training is not installed")
    if "onnxruntime.training" not in sys.modules:
        pkg = types.ModuleType("onnxruntime.training")
        pkg.__path__ = [pkg_dir]
        sys.modules["onnxruntime.training"] = pkg
    return importlib.import_module("onnxruntime.training." + module)


def child_ort_artifacts(args):
    """ORT's offline phase: training, eval and optimizer graphs and a checkpoint, into
    --artifact-dir. Its own process, so the training process's RSS is that of training alone."""
    try:
        artifacts = import_ort_training("artifacts")
    except ImportError:
        return None, "onnxruntime-training-cpu not installed (see the script header)"
    import onnx
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    model = onnx.load(args.onnx)
    # Trainable: float initializers other than BatchNorm running statistics and one-element
    # constants the exporter made (transformer_cls's attention scale), as mixtrain trains.
    running = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization"
               for i in (3, 4)}
    params = [t.name for t in model.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and t.name not in running
              and int(np.prod(t.dims)) > 1]
    frozen = [t.name for t in model.graph.initializer if t.name not in params]
    # ORT 1.19's LayerNormalization gradient reads the node's optional Mean and InvStdDev outputs,
    # which exporters leave out (it fails with "GradientBuilderBase::O(...) i <
    # node_->OutputDefs().size() was false"): name them. The forward computation is unchanged.
    note = ""
    for i, node in enumerate(model.graph.node):
        if node.op_type == "LayerNormalization" and len(node.output) < 3:
            while len(node.output) < 3:
                node.output.append(f"{node.name or f'layernorm_{i}'}_saved_{len(node.output)}")
            note = "LayerNormalization outputs 2-3 named for its gradient builder"
    # The gradient builder logs every graph transformer it runs on fd 2: into the log file.
    artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=args.artifact_dir)
    return None, note


def child_ort_training(args):
    """Loads the artifacts of child_ort_artifacts and times training steps."""
    api = import_ort_training("api")
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    d = args.artifact_dir
    xs, ys = load_batch(args.batch_npz)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    state = api.CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = api.Module(os.path.join(d, "training_model.onnx"), state,
                        os.path.join(d, "eval_model.onnx"), device="cpu", session_options=opts)
    optimizer = api.Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    module.train()

    def step():
        module(xs, ys)
        optimizer.step()
        module.lazy_reset_grad()

    return timed_steps(step, args.warmup, args.iters), ""


def child_main(args):
    if args.runner == "ort-artifacts":
        ms, note = child_ort_artifacts(args)
    elif args.runner == "ort-training":
        ms, note = child_ort_training(args)
    else:
        ms, note = child_torch(args, bf16=args.runner == "torch-bf16")
    sys.stdout.flush()
    print(json.dumps({"ms": ms, "note": note,
                      "torch_imported": sys.modules.get("torch") is not None}), flush=True)
    return 0


# --- the parent: models, batches, spawning --------------------------------------------------------

def spawn(cmd, env, workdir, tag, timeout):
    """Runs cmd through LAUNCHER; returns (exit code or None on timeout, peak RSS MiB, out, err)."""
    rss_file = os.path.join(workdir, tag + ".maxrss")
    out_path, err_path = (os.path.join(workdir, f"{tag}.{s}") for s in ("out", "err"))
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", LAUNCHER, rss_file] + cmd,
                                stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher's session: it and the runner
            proc.wait()
            code = None
    with open(out_path) as f:
        out_text = f.read()
    with open(err_path) as f:
        err_text = f.read()
    rss = None
    if os.path.exists(rss_file):
        with open(rss_file) as f:
            rss = int(f.read()) / 1024  # ru_maxrss is in KiB on Linux
    return code, rss, out_text, err_text


def run_child(runner, name, onnx_path, batch_npz, batch, workdir, env, args):
    """Runs `this script --runner RUNNER` in a fresh process; returns (result dict or None,
    peak RSS MiB, failure note)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--runner", runner, "--model", name,
           "--onnx", onnx_path, "--batch-npz", batch_npz,
           "--artifact-dir", os.path.join(workdir, "ort-artifacts"), f"--batch-size={batch}",
           f"--threads={args.threads}", f"--warmup={args.warmup}", f"--iters={args.iters}"]
    code, rss, out, err = spawn(cmd, env, workdir, f"{name}-{runner}", args.timeout)
    if code is None:
        return None, None, "timed out"
    for line in reversed(out.strip().splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if code == 0 and isinstance(result, dict):
            return result, rss, ""
        break
    return None, None, f"failed: {last_line(err) or last_line(out) or f'exit {code}'}"


def run_python_runner(runner, name, onnx_path, batch_npz, batch, workdir, env, args):
    """Returns (median ms or None, peak RSS MiB or None, note)."""
    notes = []
    if runner == ORT_FP32:
        if name == "gpt_mini":
            # Its SoftmaxCrossEntropyLoss block takes N x C logits; the LM's are N x T x V.
            return None, None, "ORT's CrossEntropyLoss block takes N x C logits only"
        os.makedirs(os.path.join(workdir, "ort-artifacts"), exist_ok=True)
        result, rss, why = run_child("ort-artifacts", name, onnx_path, batch_npz, batch,
                                     workdir, env, args)
        if result is None:
            return None, None, f"generate_artifacts {why}"
        if not os.path.exists(os.path.join(workdir, "ort-artifacts", "checkpoint")):
            return None, None, result.get("note") or "generate_artifacts wrote no checkpoint"
        notes += [result["note"]] if result.get("note") else []
        notes.append("artifacts built in another process"
                     + (f", peak {rss:.0f} MiB" if rss is not None else ""))
    result, rss, why = run_child(CHILD_RUNNER[runner], name, onnx_path, batch_npz, batch,
                                 workdir, env, args)
    if result is None:
        return None, None, "; ".join(notes + [why])
    if result.get("torch_imported") and runner == ORT_FP32:
        notes.append("torch got imported")
    notes += [result["note"]] if result.get("note") else []
    if result.get("ms") is None:
        return None, None, "; ".join(notes)
    return result["ms"], rss, "; ".join(notes)


def run_mixtrain(name, onnx_path, data_npz, batch, precision, workdir, env, args):
    """`mixtrain train` for warmup + iters steps; returns (median ms or None, RSS MiB, note)."""
    if not os.access(args.mixtrain, os.X_OK):
        return None, None, f"{args.mixtrain} not built"
    tag = f"{name}-mixtrain-{precision}"
    log = os.path.join(workdir, tag + ".jsonl")
    cmd = [os.path.abspath(args.mixtrain), "train", onnx_path, f"--data={data_npz}",
           "--labels=labels", f"--steps={args.warmup + args.iters}", f"--batch-size={batch}",
           f"--log-json={log}", "--seed=0"]
    cmd += ["--precision=fp32"] if precision == "fp32" else ["--precision=amp", "--dtype=bf16"]
    if name == "gpt_mini":  # N x T x V logits, labels N x T
        cmd += ["--class-axis=-1"]
    cmd += args.mixtrain_arg
    code, rss, out, err = spawn(cmd, env, workdir, tag, args.timeout)
    if code is None:
        return None, None, "timed out"
    if code != 0 or not os.path.exists(log):
        return None, None, f"failed: {last_line(err) or last_line(out) or f'exit {code}'}"
    with open(log) as f:
        ms = [json.loads(line)["ms"] for line in f if line.strip()]
    timed = ms[args.warmup:]
    if not timed:
        return None, None, f"log has {len(ms)} steps, fewer than warm-up + 1"
    return statistics.median(timed), rss, ""


def model_and_batch(name, batch, args):
    """Returns (path of the .onnx file, example input, labels) as numpy arrays."""
    if name in EXPORTED:
        import train_models
        path = train_models.ensure_exported(name, args.model_dir)
        x, y = train_models.example_input(name, batch), train_models.example_labels(name, batch)
    else:
        import cpu_forward
        import export_models
        import torch
        path = os.path.join(ROOT, "models", name + ".onnx")
        x = cpu_forward.example_input(name, batch)
        gen = torch.Generator().manual_seed(1)
        shape = (batch, export_models.GPT_SEQ) if name == "gpt_mini" else (batch,)
        classes = export_models.GPT_VOCAB if name == "gpt_mini" else 10
        y = torch.randint(0, classes, shape, generator=gen)
    return path, x.numpy(), y.numpy().astype(np.int64)


def bench_model(name, args):
    batch = args.batch_size or DEFAULT_BATCH[name]
    path, x, y = model_and_batch(name, batch, args)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rows, rss, notes = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="cpu_train_step-") as d:
        batch_npz = os.path.join(d, "batch.npz")
        np.savez(batch_npz, x=x, y=y)
        data_npz = os.path.join(d, "data.npz")
        np.savez(data_npz, **{INPUT_NAME.get(name, "input"): np.concatenate([x] * DATA_REPS),
                              "labels": np.concatenate([y] * DATA_REPS)})
        for precision, key in (("fp32", MIXTRAIN_FP32), ("amp", MIXTRAIN_AMP)):
            rows[key], rss[key], notes[key] = run_mixtrain(name, path, data_npz, batch,
                                                           precision, d, env, args)
        for key in (TORCH_FP32, TORCH_BF16, ORT_FP32):
            rows[key], rss[key], notes[key] = run_python_runner(key, name, path, batch_npz,
                                                                batch, d, env, args)

    print(f"\n{name}  train step, batch {batch}, {args.threads} threads, median of {args.iters} "
          f"steps after {args.warmup} warm-up; peak RSS of each runner's own process")
    print(f"  {'runner':26s} {'median ms':>9s}  {'RSS MiB':>8s}  note")
    for runner, ms in rows.items():
        print(f"  {runner:26s} {fmt(ms)}  {fmt(rss[runner], 8, 1)}  {notes.get(runner, '')}")
    ratios, rss_ratios = {}, {}
    for ours, peers in PAIRS:
        for peer in peers:
            if rows[ours] and rows[peer]:
                ratios[f"{peer} / {ours}"] = rows[peer] / rows[ours]
            if rss[ours] and rss[peer]:
                rss_ratios[f"{ours} / {peer}"] = rss[ours] / rss[peer]
    if ratios or rss_ratios:
        print(f"  {'':48s} {'time peer/ours':>14s}  {'RSS ours/peer':>13s}")
    for ours, peers in PAIRS:
        for peer in peers:
            t = ratios.get(f"{peer} / {ours}")
            m = rss_ratios.get(f"{ours} / {peer}")
            if t is None and m is None:
                continue
            print(f"  {peer + ' / ' + ours:48s} {fmt(t, 13, 2)}x  {fmt(m, 12, 2)}x")
    return {"model": name, "onnx": os.path.relpath(path, ROOT), "batch_size": batch,
            "threads": args.threads, "warmup": args.warmup, "iters": args.iters,
            "median_ms": rows, "rss_mib": rss, "ratios": ratios, "rss_ratios": rss_ratios,
            "notes": notes}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", choices=COMMITTED + EXPORTED,
                    default=["fashion_cnn", "cifar_cnn", "gpt_mini", "transformer_cls"])
    ap.add_argument("--batch-size", type=int, default=None,
                    help="examples per step for every model (default: per model: "
                    + ", ".join(f"{k} {v}" for k, v in DEFAULT_BATCH.items()) + ")")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench-models"),
                    help="where cifar_cnn and transformer_cls are exported (once) and read from")
    ap.add_argument("--mixtrain-arg", action="append", default=[],
                    help="extra flag passed to `mixtrain train` (repeatable)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per runner process")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    # Internal: run one Python runner in this (fresh) process and print its JSON line.
    ap.add_argument("--runner", choices=sorted(CHILD_RUNNER.values()) + list(CHILD_ONLY),
                    help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--batch-npz", help=argparse.SUPPRESS)
    ap.add_argument("--artifact-dir", help=argparse.SUPPRESS)
    return ap.parse_args()


def main():
    args = parse_args()
    if args.runner:
        return child_main(args)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f} before starting; other processes will skew "
              f"the timings (OpenMP runtimes suffer most; OMP_WAIT_POLICY=passive softens it)",
              file=sys.stderr)
    results = [bench_model(name, args) for name in args.models]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
