#!/usr/bin/env python3
"""Writes tests/data/crashers/models/*.onnx: the smallest forms of the models that crashed
`mixtrain` (SIGSEGV or an abort) before the import-time verifier (graph/verifier.h), found by
tools/probe/probe_models.py and the issues. tests/graph/crashers_test.cc imports each and runs
the pipeline on it, expecting a one-line error naming the node.

Each model is a trainable y = f(x @ W) on x: f32 N x 4 (W: 4 x 3) with one defect.
Needs: onnx (pip).   /tmp/zoo-venv/bin/python tools/probe/make_crashers.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "crashers", "models")


def model(nodes, inits=(), opset=17, name="crasher"):
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul")] + nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w] + list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_crashers")
    m.ir_version = 8
    return m


def crashers():
    true = numpy_helper.from_array(np.array(True), "train")
    yield "dropout_empty_data", model([  # SIGSEGV in the train-mode pass
        helper.make_node("Dropout", ["", "", "train"], ["d"], name="dropout"),
        helper.make_node("Add", ["h", "d"], ["y"], name="add")], [true])
    yield "transpose_empty_data", model([  # SIGSEGV in autodiff
        helper.make_node("Transpose", [""], ["t"], name="transpose", perm=[1, 0]),
        helper.make_node("Add", ["h", "t"], ["y"], name="add")])
    yield "size_empty_data", model([  # SIGSEGV where the planner folds Size
        helper.make_node("Size", [""], ["s"], name="size"),
        helper.make_node("Cast", ["s"], ["sf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["h", "sf"], ["y"], name="mul")])


def plan_crashers():
    """Models that import (their declarations are each valid) but crashed when planned: written to
    tests/data/crashers/plan/, which check must report as not training and grad refuse."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    # x: N x 2^61 x 4 floats, whose byte count overflows int64 (probe: huge_dims, SIGABRT in check).
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
         helper.make_node("ReduceMean", ["h"], ["y"], name="mean", axes=[1], keepdims=0)], "crasher",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2**61, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_crashers")
    m.ir_version = 8
    yield "huge_declared_input", m


def main():
    for out, models in ((OUT, crashers()), (os.path.join(os.path.dirname(OUT), "plan"), plan_crashers())):
        os.makedirs(out, exist_ok=True)
        for name, m in models:
            path = os.path.join(out, name + ".onnx")
            with open(path, "wb") as f:
                f.write(m.SerializeToString())
            print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
