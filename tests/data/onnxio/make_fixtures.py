"""Writes the small ONNX fixtures of the onnxio tests (import/export, dump CLI).

Needs pip `onnx` and `numpy`. Run from anywhere: python3 tests/data/onnxio/make_fixtures.py
The outputs are committed; tests never run Python.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save(model, name):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name))


def tiny():
    """Conv -> Relu -> Cast(f16) -> Cast(f32) -> GlobalAveragePool -> Flatten -> Gemm, with a
    symbolic batch dim, a Constant node, value_info and mixed initializer encodings."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w")
    b = helper.make_tensor("conv.b", TensorProto.FLOAT, [4], [0.1, 0.2, 0.3, 0.4])  # float_data
    fw = numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "fc.w")
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu", doc_string="mixtrain:precision=f16"),
        helper.make_node("Cast", ["r"], ["r16"], name="to_f16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["r16"], ["r32"], name="to_f32", to=TensorProto.FLOAT),
        helper.make_node("GlobalAveragePool", ["r32"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Constant", [], ["fc.b"], name="bias",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [2], [0.5, -0.5])),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [w, b, fw],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4, 8, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fixture")
    m.ir_version = 8
    helper.set_model_props(m, {"purpose": "onnxio test"})
    save(m, "tiny.onnx")


def unknown_op():
    """An op no one knows, in the default and in a custom domain: import and dump must work."""
    nodes = [
        helper.make_node("FancyOp", ["x"], ["a"], name="fancy", alpha=2.0),
        helper.make_node("Swizzle", ["a"], ["y"], name="swizzle", domain="com.example"),
    ]
    g = helper.make_graph(
        nodes, "unknown_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.example", 1)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, "unknown_op.onnx"))  # the checker would refuse FancyOp


def external():
    """MatMul whose weight lives in external/weights.bin at an offset."""
    os.makedirs(os.path.join(HERE, "external"), exist_ok=True)
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    pad = b"\x00" * 16
    with open(os.path.join(HERE, "external", "weights.bin"), "wb") as f:
        f.write(pad + w.tobytes())
    t = TensorProto()
    t.name = "w"
    t.data_type = TensorProto.FLOAT
    t.dims.extend([3, 4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "16"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, "external", "model.onnx"))


if __name__ == "__main__":
    tiny()
    unknown_op()
    external()
