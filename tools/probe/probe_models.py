#!/usr/bin/env python3
"""Robustness probe: mutated ONNX models through the `mixtrain` CLI.

Generates invalid (and some valid) variants of models/*.onnx and of exports nobody here wrote
(tests/data/zoo: torch.nn, timm, torchvision, transformers, tf2onnx; both torch exporters) --
rewired inputs, dropped/added inputs, "" inputs, inserted nodes of many op types with odd arities,
duplicated outputs, cycles, wrong dtypes, bad attributes, attribute values out of range or of
another type (NaN, inf, negative epsilons, huge axes, strings for ints), bad declarations (element
type 0, negative dims), typo'd ops and unknown domains, other opsets, truncated/oversized
initializer data, huge dims, random byte flips and truncation of the file -- and runs `mixtrain
check`, `dump --passes=train`, `grad` and `train --steps=1` on each with a timeout. Prints one table per category: cases, clean errors
(non-zero exit, one-line message), accepted (exit 0; for `check` also exit 1 with its report of
why the model does not train), unclean errors (non-zero exit, other
output), crashes (killed by a signal: SIGSEGV, SIGABRT from an MT_CHECK, ...) and hangs (timeout).
Crashing cases are kept under --keep (smallest first) for regression fixtures
(tests/data/crashers/models/).

Needs: onnx, numpy (pip).   /tmp/zoo-venv/bin/python tools/probe/probe_models.py [--cases=N]
Exit status 1 when any case crashed or hung.
"""
import argparse
import collections
import concurrent.futures
import copy
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# model -> (ONNX file, batch .npz, class axis): the repository's models, and exports nobody here
# wrote (tests/data/zoo: torch.nn, timm, torchvision, transformers, tf2onnx; both torch exporters;
# opsets 13..21). A zoo batch keeps only the model's inputs and the labels (its .npz also holds
# the reference loss and gradients, which `train` would refuse as data).
MODELS = {
    "mlp": ("models/mlp.onnx", "tests/data/grad/mlp_batch.npz", 1),
    "fashion_cnn": ("models/fashion_cnn.onnx", "tests/data/grad/fashion_cnn_batch.npz", 1),
    "resnet_mini": ("models/resnet_mini.onnx", "tests/data/grad/resnet_mini_batch.npz", 1),
    "gpt_mini": ("models/gpt_mini.onnx", "tests/data/grad/gpt_mini_batch.npz", 1),
}
ZOO = ["keras_mlp", "conv1d_pad", "gru_ts", "nn_mix", "groupnorm_cnn", "resnet_pad", "tfm_encoder_dynamo",
       "gpt2_hf_ts", "vit_timm", "llama_hf", "bert_hf", "lstm_ts"]


def zoo_models(work):
    """MODELS rows for the zoo exports, from tests/data/zoo/manifest.tsv."""
    rows = {}
    with open(os.path.join(ROOT, "tests/data/zoo/manifest.tsv")) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split("\t")))
            rows[row["name"]] = row
    out = {}
    for name in ZOO:
        if name not in rows or rows[name]["loss"] != "cross_entropy":
            continue
        model = onnx.load(os.path.join(ROOT, "tests/data/zoo", name + ".onnx"), load_external_data=False)
        keep = {i.name for i in model.graph.input} | {"labels"}
        z = np.load(os.path.join(ROOT, "tests/data/zoo", name + ".npz"))
        batch = os.path.join(work, name + "_batch.npz")
        np.savez(batch, **{k: z[k] for k in z.files if k in keep})
        out[name] = ("tests/data/zoo/%s.onnx" % name, batch, int(rows[name]["class_axis"]))
    return out

# Ops spliced into a model by the "insert" category, with the input counts tried.
INSERT_OPS = [
    "Transpose", "Dropout", "Size", "Shape", "Identity", "Relu", "Neg", "Abs", "Sqrt", "Exp",
    "Log", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Flatten", "Reshape", "Squeeze",
    "Unsqueeze", "Expand", "Concat", "Split", "Slice", "Gather", "Add", "Sub", "Mul", "Div",
    "Pow", "Where", "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "LayerNormalization", "ReduceMean", "ReduceSum", "ReduceMax",
    "Cast", "CastLike", "Clip", "Pad", "Tile", "ConstantOfShape", "Range", "Equal", "Not",
    "Erf", "Gelu", "Sum", "Max", "Min", "Mean", "CumSum", "Einsum", "TopK", "ArgMax",
    "InstanceNormalization", "GroupNormalization", "Resize", "ScatterElements",
    "GatherElements", "NonZero", "OneHot", "Trilu", "HardSwish", "LeakyRelu", "Elu",
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "ConvTranspose", "Upsample",
]

CATEGORIES = [
    "rewire", "drop_input", "add_input", "empty_input", "insert", "dup_output", "cycle",
    "dtype", "attr", "init_data", "huge_dims", "byte_flip", "truncate",
    "attr_value", "declared", "op_name", "opset",
]


def value_names(g):
    names = [i.name for i in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        names += [o for o in n.output if o]
    return names


def producers(g):
    return {o: i for i, n in enumerate(g.node) for o in n.output if o}


def downstream(g, idx):
    """Indices of nodes that (transitively) consume node idx's outputs."""
    consumers = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for x in n.input:
            consumers[x].append(i)
    seen, todo = set(), list(g.node[idx].output)
    while todo:
        v = todo.pop()
        for c in consumers[v]:
            if c not in seen:
                seen.add(c)
                todo += list(g.node[c].output)
    return seen


def nodes_with_inputs(g):
    return [n for n in g.node if len(n.input) > 0]


def mut_rewire(m, r):
    g = m.graph
    n = r.choice(nodes_with_inputs(g))
    n.input[r.randrange(len(n.input))] = r.choice(value_names(g) + ["ghost"])


def mut_drop_input(m, r):
    n = r.choice(nodes_with_inputs(m.graph))
    del n.input[r.randrange(len(n.input))]


def mut_add_input(m, r):
    n = r.choice(list(m.graph.node))
    for _ in range(r.choice([1, 1, 2, 5])):
        n.input.append(r.choice(value_names(m.graph) + [""]))


def mut_empty_input(m, r):
    n = r.choice(nodes_with_inputs(m.graph))
    n.input[r.randrange(len(n.input))] = ""


def mut_insert(m, r):
    """Splices `op(x, extra...)` between a value x and its consumers."""
    g = m.graph
    names = value_names(g)
    x = r.choice([n.output[0] for n in g.node if n.output and n.output[0]] + [g.input[0].name])
    op = r.choice(INSERT_OPS)
    arity = r.choice([0, 1, 1, 2, 2, 3, 4, 6])
    ins = [x] + [r.choice(names + ["", x]) for _ in range(max(arity - 1, 0))]
    if arity == 0:
        ins = []
    elif r.random() < 0.3:
        ins[0] = ""
    y = x + "__probe"
    outs = [y] + ["%s__probe_%d" % (x, i) for i in range(r.choice([0, 0, 0, 1, 2]))]
    attrs = {}
    if r.random() < 0.5:
        attrs[r.choice(["axis", "perm", "training_mode", "to", "keepdims", "axes", "ratio"])] = \
            r.choice([0, 1, -1, 7, -9, [0, 1], [2, 0, 1], [0, 0], [5], 1.5, 1 << 40])
    node = helper.make_node(op, ins, outs, name="probe_" + op, **attrs)
    for n in g.node:
        for i, v in enumerate(n.input):
            if v == x:
                n.input[i] = y
    for o in g.output:
        if o.name == x:
            o.name = y
    pos = producers(g).get(x, -1) + 1
    g.node.insert(pos, node)
    if op == "Dropout" and r.random() < 0.7:  # train-mode Dropout with "" data
        node.input[:] = ["", "", ""] if r.random() < 0.5 else [x, "", ""]


def mut_dup_output(m, r):
    g = m.graph
    n = r.choice([n for n in g.node if n.output])
    n.output[r.randrange(len(n.output))] = r.choice(value_names(g))


def mut_cycle(m, r):
    g = m.graph
    for _ in range(20):
        i = r.randrange(len(g.node))
        down = sorted(downstream(g, i))
        if down and g.node[i].input:
            j = r.choice(down)
            outs = [o for o in g.node[j].output if o]
            if outs:
                n = g.node[i]
                n.input[r.randrange(len(n.input))] = r.choice(outs)
                return
    n = g.node[0]  # self-loop
    n.input.append(n.output[0])


DTYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
          TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE, TensorProto.UINT8,
          TensorProto.INT8, TensorProto.STRING, TensorProto.UINT32, 999]


def mut_dtype(m, r):
    g = m.graph
    k = r.randrange(4)
    if k == 0:  # graph input elem type
        g.input[0].type.tensor_type.elem_type = r.choice(DTYPES)
    elif k == 1 and g.initializer:  # initializer dtype, same bytes
        t = r.choice(g.initializer)
        t.data_type = r.choice(DTYPES)
    elif k == 2:  # value_info / output contradicting the producer
        o = g.output[0]
        o.type.tensor_type.elem_type = r.choice(DTYPES)
    else:  # a Cast inserted on a node's input
        n = r.choice(nodes_with_inputs(g))
        i = r.randrange(len(n.input))
        if not n.input[i]:
            return
        c = helper.make_node("Cast", [n.input[i]], [n.input[i] + "__cast"], name="probe_cast",
                             to=r.choice(DTYPES[:9]))
        n.input[i] = c.output[0]
        g.node.insert(list(g.node).index(n), c)


ATTR_VALUES = [0, 1, -1, 2, 3, 7, -7, 1 << 40, -(1 << 40), [0], [1, 0], [0, 0], [9, 9, 9, 9],
               [-1, -1], [], 0.0, -1.0, 1e30, "x", [1 << 62, 1 << 62]]


def mut_attr(m, r):
    n = r.choice([n for n in m.graph.node if n.attribute] or list(m.graph.node))
    if n.attribute and r.random() < 0.7:
        a = r.choice(n.attribute)
        name = a.name
        n.attribute.remove(a)
        if r.random() < 0.2:
            return  # dropped attribute
    else:
        name = r.choice(["axis", "perm", "pads", "strides", "kernel_shape", "group", "axes",
                         "epsilon", "transA", "num_outputs", "training_mode", "dilations"])
    v = r.choice(ATTR_VALUES)
    n.attribute.append(helper.make_attribute(name, v, attr_type=onnx.AttributeProto.INTS)
                       if v == [] else helper.make_attribute(name, v))


NAN, INF = float("nan"), float("inf")
BAD_FLOATS = [NAN, INF, -INF, -1.0, -1e-5, 0.0, 1e38, 1e-45]
BAD_INTS = [1 << 40, -(1 << 40), 1 << 62, -1, 0, 64, -65, 2, 3]


def mut_attr_value(m, r):
    """An attribute of a type its op allows holding a value it cannot take (NaN, infinities, a
    negative epsilon, a huge or negative axis or count), or the same value in another type (a
    string where an int goes), or a setting the op has added with such a value."""
    g = m.graph
    nodes = [n for n in g.node if n.attribute]
    if not nodes or r.random() < 0.25:
        n = r.choice(list(g.node))
        name, v = r.choice([("epsilon", r.choice(BAD_FLOATS)), ("momentum", r.choice(BAD_FLOATS)),
                            ("alpha", r.choice(BAD_FLOATS)), ("beta", r.choice(BAD_FLOATS)),
                            ("axis", r.choice(BAD_INTS)), ("num_outputs", r.choice(BAD_INTS)),
                            ("group", r.choice(BAD_INTS)), ("strides", [r.choice(BAD_INTS)] * 2),
                            ("pads", [r.choice(BAD_INTS)] * 4), ("axes", [r.choice(BAD_INTS)])])
        for a in list(n.attribute):
            if a.name == name:
                n.attribute.remove(a)
        n.attribute.append(helper.make_attribute(name, v))
        return
    n = r.choice(nodes)
    a = r.choice(n.attribute)
    A = onnx.AttributeProto
    if r.random() < 0.25:  # the value in another type
        name = a.name
        n.attribute.remove(a)
        n.attribute.append(helper.make_attribute(name, r.choice(["2", 2.5, [1, 2], 7, [0.5], b"\xff"])))
    elif a.type == A.FLOAT:
        a.f = r.choice(BAD_FLOATS)
    elif a.type == A.INT:
        a.i = r.choice(BAD_INTS)
    elif a.type == A.FLOATS and a.floats:
        a.floats[r.randrange(len(a.floats))] = r.choice(BAD_FLOATS)
    elif a.type == A.INTS and a.ints:
        a.ints[r.randrange(len(a.ints))] = r.choice(BAD_INTS)
    elif a.type == A.STRING:
        a.s = r.choice([b"", b"\xff\xfe", b"NOTAMODE", b"x" * 300])
    elif a.type == A.TENSOR:  # a Constant's tensor: wrong element type or no data
        a.t.data_type = r.choice(DTYPES)
        if r.random() < 0.5:
            a.t.ClearField("raw_data")


def mut_declared(m, r):
    """The declarations: an element type of 0 or unknown, negative or huge dims, a dim that is
    neither value nor symbol, on graph inputs, outputs and value_info (used or not)."""
    g = m.graph
    k = r.randrange(5)
    vi = r.choice(list(g.input) + list(g.output))
    tt = vi.type.tensor_type
    if k == 0:
        tt.elem_type = r.choice([0, 0, 17, 23, 999, -1])
    elif k == 1 and tt.shape.dim:
        tt.shape.dim[r.randrange(len(tt.shape.dim))].dim_value = r.choice([-1, -7, -(1 << 40)])
    elif k == 2:
        name = r.choice([n.output[0] for n in g.node if n.output] + ["unused_value"])
        g.value_info.append(helper.make_tensor_value_info(
            name, r.choice([TensorProto.FLOAT, 0, TensorProto.INT64]), [r.choice([-3, 2, 1 << 62, 0])]))
    elif k == 3 and tt.shape.dim:
        d = tt.shape.dim[r.randrange(len(tt.shape.dim))]
        d.ClearField("dim_value")
        d.dim_param = r.choice(["", "batch", "\x00", "N" * 200])
    else:
        vi.type.ClearField("tensor_type")
        vi.type.sequence_type.elem_type.tensor_type.elem_type = TensorProto.FLOAT


def mut_op_name(m, r):
    """A node's op or domain: a typo of a real op, a name no one defines, a domain no one
    defines (imported or not), ai.mixtrain's or ONNX-ML's domain."""
    g = m.graph
    n = r.choice(list(g.node))
    k = r.randrange(5)
    if k == 0:  # a typo: a letter dropped, doubled or swapped, or the case changed
        op = n.op_type
        i = r.randrange(len(op))
        n.op_type = r.choice([op[:i] + op[i + 1:], op[:i] + op[i] + op[i:], op.lower(), op.upper(),
                              op[:i] + op[i + 1:i + 2] + op[i:i + 1] + op[i + 2:]]) or "X"
    elif k == 1:
        n.op_type = r.choice(["FooOp", "", "Relu6", "Attention", "FusedMatMul", "Mish", "Gelu"])
    elif k == 2:
        n.domain = r.choice(["com.example", "com.microsoft", "ai.onnx.ml", "ai.mixtrain"])
        if r.random() < 0.7:
            m.opset_import.append(helper.make_opsetid(n.domain, 1))
    elif k == 3:
        n.domain = "com.example"  # not imported
    else:
        n.op_type = r.choice(["ReluGrad", "SoftmaxGrad", "FusedConv", "MaskedSoftmax", "SumToShape"])
        n.domain = "ai.mixtrain"
        m.opset_import.append(helper.make_opsetid("ai.mixtrain", 1))


def mut_opset(m, r):
    """The default domain's opset: another version, one out of range, or imported twice."""
    ops = [o for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if not ops:
        return
    if r.random() < 0.2:
        m.opset_import.append(helper.make_opsetid("", ops[0].version))
    else:
        ops[0].version = r.choice([1, 5, 6, 9, 11, 13, 17, 18, 20, 21, 22, 1000, -1])


def mut_init_data(m, r):
    g = m.graph
    t = r.choice(g.initializer)
    k = r.randrange(6)
    if k == 0 and t.raw_data:
        t.raw_data = t.raw_data[: r.randrange(len(t.raw_data))]
    elif k == 1:
        t.raw_data = t.raw_data + bytes(r.randrange(1, 64))
    elif k == 2:  # typed data of the wrong count
        t.ClearField("raw_data")
        t.data_type = TensorProto.FLOAT
        t.float_data.extend([1.0] * r.randrange(0, 5))
    elif k == 3:  # dims disagree with the data
        if t.dims:
            t.dims[r.randrange(len(t.dims))] += r.choice([-1, 1, 100])
        else:
            t.dims.append(2)
    elif k == 4:  # external data: missing file, wrong length, escaping path
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for key, val in r.choice([[("location", "missing.bin")],
                                  [("location", "w.bin"), ("length", "7")],
                                  [("location", "../w.bin")],
                                  [("location", "w.bin"), ("offset", "-5")],
                                  [("location", "w.bin"), ("offset", str(1 << 62))],
                                  [("length", "4")]]):
            e = t.external_data.add()
            e.key, e.value = key, val
    else:
        del t.dims[:]
        t.dims.extend([r.choice([0, 1, 3]) for _ in range(r.randrange(0, 4))])


HUGE = [1 << 31, 1 << 40, 1 << 62, (1 << 63) - 1, 3037000500, 1 << 20]


def mut_huge_dims(m, r):
    g = m.graph
    k = r.randrange(4)
    if k == 0:  # declared input dims
        dims = g.input[0].type.tensor_type.shape.dim
        if dims:
            dims[r.randrange(len(dims))].dim_value = r.choice(HUGE)
    elif k == 1:  # initializer dims (data left as is)
        t = r.choice(g.initializer)
        del t.dims[:]
        t.dims.extend([r.choice(HUGE) for _ in range(r.randrange(1, 4))])
    elif k == 2:  # a ConstantOfShape / Expand / Reshape to a huge static shape
        x = r.choice([n.output[0] for n in g.node if n.output])
        shape = [r.choice(HUGE + [2, 3]) for _ in range(r.randrange(1, 4))]
        c = helper.make_node("Constant", [], [x + "__shape"], name="probe_shape",
                             value=helper.make_tensor("s", TensorProto.INT64, [len(shape)], shape))
        op = r.choice(["ConstantOfShape", "Expand", "Reshape", "Tile"])
        ins = [c.output[0]] if op == "ConstantOfShape" else [x, c.output[0]]
        n = helper.make_node(op, ins, [x + "__big"], name="probe_" + op)
        g.node.extend([c, n])
        g.output.append(helper.make_tensor_value_info(n.output[0], TensorProto.UNDEFINED, None))
    else:  # value_info claiming a huge shape
        n = r.choice([n for n in g.node if n.output])
        g.value_info.append(helper.make_tensor_value_info(
            n.output[0], TensorProto.FLOAT, [r.choice(HUGE) for _ in range(r.randrange(1, 4))]))


def byte_mutants(data, r, kind):
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[: r.randrange(len(b))])
    for _ in range(r.choice([1, 2, 4, 16])):
        p = r.randrange(len(b))
        # Flips concentrated in the first few KB (graph structure) more often than in weights.
        if r.random() < 0.7:
            p = min(p, r.randrange(min(len(b), 8192)))
            p = len(b) - 1 - p if r.random() < 0.5 else p
        b[p] ^= 1 << r.randrange(8)
    return bytes(b)


MUTATORS = {
    "rewire": mut_rewire, "drop_input": mut_drop_input, "add_input": mut_add_input,
    "empty_input": mut_empty_input, "insert": mut_insert, "dup_output": mut_dup_output,
    "cycle": mut_cycle, "dtype": mut_dtype, "attr": mut_attr, "init_data": mut_init_data,
    "huge_dims": mut_huge_dims, "attr_value": mut_attr_value, "declared": mut_declared,
    "op_name": mut_op_name, "opset": mut_opset,
}


def commands(exe, model, data, axis, tmp):
    return {
        "check": [exe, "check", model, "--loss=cross_entropy", "--class-axis=%d" % axis],
        "dump": [exe, "dump", model, "--passes=train"],
        "grad": [exe, "grad", model, "--data=" + data, "--class-axis=%d" % axis,
                 "--out=" + os.path.join(tmp, "g.npz")],
        "train": [exe, "train", model, "--data=" + data, "--class-axis=%d" % axis, "--steps=1",
                  "--batch-size=2"],
    }


def classify(cmd, p):
    if p is None:
        return "hang"
    if p.returncode < 0:
        return "crash"
    # `check` exits 1 for a model it analysed and found untrainable (a report, not an error).
    if p.returncode == 0 or (cmd == "check" and p.returncode == 1 and p.stdout.strip()):
        return "accepted"
    lines = [l for l in p.stderr.decode("utf-8", "replace").splitlines() if l.strip()]
    if p.returncode in (124, 137):
        return "hang"
    # SIGABRT from MT_CHECK comes back as -6; anything else with a one-line message is clean.
    if len(lines) >= 1 and lines[-1].startswith("mixtrain ") and "check failed" not in lines[-1]:
        return "clean"
    return "unclean"


def run_case(args):
    exe, case_dir, path, data, axis, cmds, timeout = args
    results = {}
    for name, argv in commands(exe, path, data, axis, case_dir).items():
        if name not in cmds:
            continue
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout, cwd=case_dir,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            p = None
        msg = "" if p is None else p.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        results[name] = (classify(name, p), p.returncode if p else None, msg[0] if msg else "")
    return path, results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--cases", type=int, default=120, help="cases per category (17 categories)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--commands", default="check,dump,grad,train")
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--models", default=",".join(list(MODELS) + ZOO))
    ap.add_argument("--keep", default="/tmp/probe_crashers",
                    help="folder for crashing/hanging cases (emptied first)")
    ap.add_argument("--verbose", action="store_true", help="print every non-clean result")
    ap.add_argument("--keep-accepted", default="",
                    help="also copy every case some command accepted here, to review for silent accepts")
    a = ap.parse_args()

    cmds = a.commands.split(",")
    cats = a.categories.split(",")
    work = tempfile.mkdtemp(prefix="mt_probe_")
    known = dict(MODELS, **zoo_models(work))
    models = {k: known[k] for k in a.models.split(",")}
    originals = {k: onnx.load(os.path.join(ROOT, v[0])) for k, v in models.items()}
    raw = {k: open(os.path.join(ROOT, v[0]), "rb").read() for k, v in models.items()}
    shutil.rmtree(a.keep, ignore_errors=True)
    os.makedirs(a.keep)
    jobs, meta = [], {}
    for cat in cats:
        for i in range(a.cases):
            # One stream per case: a case is reproducible alone (--categories, --cases).
            r = random.Random("%d-%s-%d" % (a.seed, cat, i))
            name = r.choice(sorted(models))
            case_dir = os.path.join(work, "%s_%04d" % (cat, i))
            os.makedirs(case_dir)
            path = os.path.join(case_dir, "%s_%s_%04d.onnx" % (cat, name, i))
            if cat in ("byte_flip", "truncate"):
                data = byte_mutants(raw[name], r, cat)
            else:
                m = copy.deepcopy(originals[name])
                MUTATORS[cat](m, r)
                data = m.SerializeToString()
            with open(path, "wb") as f:
                f.write(data)
            with open(os.path.join(case_dir, "w.bin"), "wb") as f:
                f.write(bytes(64))
            meta[path] = (cat, name)
            data_npz = os.path.join(ROOT, models[name][1])
            jobs.append((a.exe, case_dir, path, data_npz, models[name][2], cmds, a.timeout))

    table = collections.defaultdict(collections.Counter)
    bad = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for path, results in ex.map(run_case, jobs):
            cat, _ = meta[path]
            table[cat]["cases"] += 1
            for cmd, (kind, rc, msg) in results.items():
                table[cat][kind] += 1
                if kind == "accepted" and a.keep_accepted:
                    os.makedirs(a.keep_accepted, exist_ok=True)
                    shutil.copy(path, a.keep_accepted)
                if kind in ("crash", "hang", "unclean"):
                    bad.append((os.path.getsize(path), path, cmd, kind, rc, msg))
                    if a.verbose:
                        print("%s %s %s rc=%s %s" % (kind, cmd, path, rc, msg[:200]))

    cols = ["cases", "clean", "accepted", "unclean", "crash", "hang"]
    print("runs per case: %s (timeout %gs)" % (",".join(cmds), a.timeout))
    print("%-12s" % "category" + "".join("%10s" % c for c in cols))
    total = collections.Counter()
    for cat in cats:
        print("%-12s" % cat + "".join("%10d" % table[cat][c] for c in cols))
        total.update(table[cat])
    print("%-12s" % "total" + "".join("%10d" % total[c] for c in cols))
    kept = set()
    for size, path, cmd, kind, rc, msg in sorted(bad):
        if kind == "unclean" or path in kept:
            continue
        kept.add(path)
        shutil.copy(path, a.keep)
        print("%s (%s, rc %s, %d bytes): %s  %s" % (kind, cmd, rc, size, os.path.basename(path),
                                                   msg[:160]))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if total["crash"] or total["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
