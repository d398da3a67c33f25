#!/usr/bin/env python3
"""Checks tests/data/zoo/ end to end with onnxruntime, independently of the framework that made the
references: for every NAME.onnx / NAME.npz pair it
  * runs onnx.checker and checks that the npz holds exactly the graph inputs, labels, loss,
    adam_losses and grad/<initializer> arrays of the initializers' shapes;
  * evaluates the ONNX graph with onnxruntime and recomputes the cross-entropy (class axis from the
    manifest) in float64: it must match `loss`;
  * checks every grad/<initializer> by a central finite difference of that loss along a random
    direction of that initializer (fp32 onnxruntime, so the tolerance is loose, but a wrong name,
    layout or transposition shows up as an O(1) error).
BatchNormalization nodes are switched to training_mode=1 for this (batch statistics), as the
engine's train-mode pass does, so BN models are checked against their train-mode references.
Train-mode exports (make_zoo.py's train=True) have references at dropout p=0: their Dropout nodes
lose training_mode (the identity); a random mask onnxruntime would draw itself (RandomUniformLike:
the dynamo exporter's bernoulli) cannot be checked here and is skipped, saying so (the engine's
tests compare it at p=0 and check the dropout statistically).

pip packages: onnx, onnxruntime, numpy (see tools/zoo/make_zoo.py for versions)

    /tmp/zoo-venv/bin/python tools/zoo/check_zoo.py [NAME ...]
"""

import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "data", "zoo")


def manifest():
    with open(os.path.join(ZOO, "manifest.tsv")) as f:
        header = f.readline().rstrip("\n").split("\t")
        return {r["name"]: r for r in (dict(zip(header, line.rstrip("\n").split("\t")))
                                       for line in f)}


def ce(logits, labels, axis):
    x = np.moveaxis(logits.astype(np.float64), axis, -1)
    x = x.reshape(-1, x.shape[-1])
    y = labels.reshape(-1)
    m = x.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[:, 0]
    return float(np.mean(lse - x[np.arange(len(y)), y]))


def training_copy(model, grads):
    """BN in training mode; the initializers with a grad also become graph inputs so that they can
    be fed (perturbed) without rebuilding the session."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            for a in list(n.attribute):
                if a.name == "training_mode":
                    n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("training_mode", 1))
            y = n.output[0]
            del n.output[:]
            n.output.extend([y, y + "__running_mean", y + "__running_var"])
        if n.op_type == "Dropout" and len(n.input) > 2:
            del n.input[2:]  # training_mode: a train-mode export's references are at p=0
    inits = {i.name: i for i in m.graph.initializer}
    for name in grads:
        i = inits[name]
        m.graph.input.append(helper.make_tensor_value_info(name, i.data_type, list(i.dims)))
    if m.ir_version < 4:
        m.ir_version = 4
    return m


def exporter_zero_mask(model, name, value):
    """1 where initializer `name` holds a parameter of the framework, 0 where it holds tf2onnx's
    zero recurrent bias: a Keras LSTM/SimpleRNN (GRU with reset_after=False) has one bias, which
    tf2onnx writes as the first half of the node's B, zeros in the second; the cell only adds the
    two halves, so ONNX's gradient of that half is the first half's, and Keras has no such
    parameter (the engine keeps it at zero, passes/unroll_rnn.cc). Finite differences leave it out."""
    mask = np.ones(value.shape)
    if model.producer_name != "tf2onnx":
        return mask
    for n in model.graph.node:
        if n.op_type not in ("LSTM", "GRU", "RNN") or len(n.input) < 4 or n.input[3] != name:
            continue
        lbr = any(a.name == "linear_before_reset" and a.i != 0 for a in n.attribute)
        if n.op_type == "GRU" and lbr:
            continue
        half = value.shape[-1] // 2
        for d in range(value.shape[0]):
            if not value[d, half:].any():
                mask[d, half:] = 0
    return mask


def check(name, row):
    import onnxruntime as ort
    path = os.path.join(ZOO, name + ".onnx")
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    z = np.load(os.path.join(ZOO, name + ".npz"))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    grads = {k[5:]: z[k] for k in z.files if k.startswith("grad/")}
    expect = set(inputs) | {"labels", "loss", "adam_losses"} | {"grad/" + g for g in grads}
    assert set(z.files) == expect, (sorted(set(z.files) ^ expect))
    for g, v in grads.items():
        assert g in inits and inits[g].shape == v.shape, g
    assert int(row["n_params_mapped"]) == len(grads), (row["n_params_mapped"], len(grads))
    axis = int(row["class_axis"])
    if any(n.op_type == "RandomUniformLike" for n in model.graph.node):
        print(f"skip {name:20s} draws a random mask (RandomUniformLike): onnxruntime's own draws "
              f"cannot match the p=0 references")
        return True

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(training_copy(model, grads).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    feeds = {k: z[k] for k in inputs}
    base = {g: inits[g] for g in grads}

    def loss(over=None):
        f = dict(feeds)
        f.update(base)
        if over:
            f.update(over)
        return ce(sess.run(None, f)[0], z["labels"], axis)

    if row["dynamic_batch"] == "1":  # the plain model must run at another batch size too
        plain = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        full = plain.run(None, feeds)[0]
        half = plain.run(None, {k: v[:2] for k, v in feeds.items()})[0]
        # rows per example: 1, or T for logits the model flattens itself (N*T x V)
        rows = full.shape[0] // next(iter(feeds.values())).shape[0]
        assert half.shape[0] == 2 * rows and np.allclose(half, full[:2 * rows], atol=1e-5), \
            "dynamic batch"
    l0 = loss()
    loss_err = abs(l0 - float(z["loss"]))
    assert loss_err < 1e-4 * max(1.0, abs(l0)), (l0, float(z["loss"]))
    rng = np.random.default_rng(0)
    # fp32 rounding of the loss bounds what a finite difference resolves: errors are relative to
    # the gradient's norm, floored at 1e-3 of the model's largest gradient norm
    floor = max(1e-4, 1e-3 * max(float(np.linalg.norm(v)) for v in grads.values()))
    worst, worst_name = 0.0, ""
    for g, grad in grads.items():
        gn = float(np.linalg.norm(grad))
        mask = exporter_zero_mask(model, g, inits[g])
        assert not (grad * (1 - mask)).any(), f"{g}: a gradient for tf2onnx's zero recurrent bias"
        r = rng.standard_normal(grad.shape) * mask
        v = r / np.linalg.norm(r) + (grad / gn if gn > 0 else 0)
        if np.linalg.norm(v) < 1e-3:  # they cancel: a one-element parameter (a PReLU slope)
            v = r
        v /= np.linalg.norm(v)
        an = float((grad.astype(np.float64) * v).sum())
        err = np.inf
        for eps in (1e-2, 3e-3, 1e-3, 3e-4):  # best step: curvature vs fp32 rounding
            plus = loss({g: (base[g] + eps * v).astype(np.float32)})
            minus = loss({g: (base[g] - eps * v).astype(np.float32)})
            fd = (plus - minus) / (2 * eps)
            err = min(err, abs(fd - an) / (gn + floor))
        if err > worst:
            worst, worst_name = err, g
    ok = worst < 0.05
    print(f"{'ok  ' if ok else 'FAIL'} {name:20s} loss {l0:.6f} (|d| {loss_err:.1e}) "
          f"{len(grads):3d} grads, worst finite-difference error {worst:.2e} ({worst_name})")
    return ok


def main():
    rows = manifest()
    names = sys.argv[1:] or [n for n in rows if os.path.exists(os.path.join(ZOO, n + ".onnx"))]
    bad = []
    for n in names:
        try:
            if not check(n, rows[n]):
                bad.append(n)
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {n}: {type(e).__name__}: {e}")
            bad.append(n)
    print(f"{len(names) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
