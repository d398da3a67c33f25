#!/usr/bin/env python3
"""Builds the small models mixtrain ships and exports them from PyTorch to ONNX.

pip packages: torch, onnx, onnxruntime, onnxscript (torch's default exporter needs it), numpy

    python3 models/export_models.py            # rewrites models/*.onnx next to this script

Weights come from PyTorch's default initialisation under a fixed seed, so a re-run with the same
torch version writes the same tensors. Two exporters are exercised on purpose, because users bring
models from both: the classic TorchScript exporter at opset 17 (fashion_cnn, resnet_mini) and
current PyTorch's default (torch.export based) exporter at opset 18 (mlp, gpt_mini).

Every file is checked with onnx.checker (full check), run once in onnxruntime and compared with the
PyTorch output, and its op set is printed and checked against the ops mixtrain's runtime supports.
"""

import copy
import math
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
MAX_BYTES = 5 * 1024 * 1024

# Ops of the default domain that mixtrain's runtime executes (issue 3). An export that emits
# anything else is a bug in this script: change the model code or the export settings.
SUPPORTED_OPS = {
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
    "Reciprocal", "Neg", "Abs", "Exp", "Log", "Erf", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu",
    "Softplus", "Clip", "Max", "Min", "Where", "Equal", "Less", "Greater", "Not", "And", "Cast",
    "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "LayerNormalization",
    "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceSumSquare", "Reshape",
    "Flatten", "Transpose", "Concat", "Split", "Slice", "Gather", "Unsqueeze", "Squeeze", "Expand",
    "Tile", "Pad", "Identity", "Dropout", "Constant", "Shape", "ConstantOfShape", "Range", "ArgMax",
    "CumSum",
}


# --- the models -----------------------------------------------------------------------------------

class FashionCnn(nn.Module):
    """The classic small Fashion-MNIST CNN; input N x 1 x 28 x 28, output N x 10 logits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 7 * 7, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


class Mlp(nn.Module):
    """784 -> 256 -> 128 -> 10 with ReLU; input N x 784 (a flattened 28 x 28 image)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class ResBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus a shortcut (1x1 conv + BN when the shape changes), then ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.shortcut is None else self.shortcut(x)
        return torch.relu(y + s)


class ResnetMini(nn.Module):
    """A CIFAR-sized ResNet: stem, three residual blocks, global average pool, fc; N x 3 x 32 x 32."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.block1 = ResBlock(16, 16, 1)
        self.block2 = ResBlock(16, 32, 2)
        self.block3 = ResBlock(32, 64, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)  # exports as GlobalAveragePool
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.block3(self.block2(self.block1(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


GPT_VOCAB, GPT_DIM, GPT_HEADS, GPT_SEQ, GPT_LAYERS = 256, 64, 4, 32, 2


class CausalSelfAttention(nn.Module):
    """Multi-head attention written with plain ops (MatMul, Softmax, Where) so no fused
    attention op reaches the graph; the causal mask is a buffer and so becomes an initializer."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(GPT_DIM, 3 * GPT_DIM)
        self.proj = nn.Linear(GPT_DIM, GPT_DIM)
        self.register_buffer("mask", torch.tril(torch.ones(GPT_SEQ, GPT_SEQ, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        hd = c // GPT_HEADS
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.reshape(b, t, GPT_HEADS, hd).transpose(1, 2)
        k = k.reshape(b, t, GPT_HEADS, hd).transpose(1, 2)
        v = v.reshape(b, t, GPT_HEADS, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(hd))
        att = torch.where(self.mask, att, torch.full_like(att, -1e9))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class GptBlock(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) with GELU."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(GPT_DIM)
        self.attn = CausalSelfAttention()
        self.ln2 = nn.LayerNorm(GPT_DIM)
        self.fc = nn.Linear(GPT_DIM, 4 * GPT_DIM)
        self.out = nn.Linear(4 * GPT_DIM, GPT_DIM)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        # Exact (erf) GELU spelled out, so the graph has Erf/Mul/Add whatever the opset.
        h = self.fc(self.ln2(x))
        h = 0.5 * h * (1.0 + torch.erf(h * (1.0 / math.sqrt(2.0))))
        return x + self.out(h)


class GptMini(nn.Module):
    """A two-block character-level GPT; int64 tokens N x 32 in, N x 32 x 256 logits out."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(GPT_VOCAB, GPT_DIM)
        self.pos = nn.Embedding(GPT_SEQ, GPT_DIM)
        self.blocks = nn.ModuleList([GptBlock() for _ in range(GPT_LAYERS)])
        self.ln_f = nn.LayerNorm(GPT_DIM)
        self.head = nn.Linear(GPT_DIM, GPT_VOCAB, bias=False)
        self.register_buffer("positions", torch.arange(GPT_SEQ, dtype=torch.int64))

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


# --- export and verification ----------------------------------------------------------------------

def export_classic(model, example, path, input_name, training):
    """TorchScript exporter, opset 17, batch dim symbolic."""
    torch.onnx.export(
        model, (example,), path, dynamo=False, opset_version=17,
        input_names=[input_name], output_names=["logits"],
        dynamic_axes={input_name: {0: "N"}, "logits": {0: "N"}},
        training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not training)


def export_dynamo(model, example, path, input_name):
    """Current PyTorch's default exporter (torch.export + onnxscript), opset 18, weights inline."""
    batch = torch.export.Dim("N", min=1, max=4096)
    program = torch.onnx.export(
        model, (example,), dynamo=True, opset_version=18,
        input_names=[input_name], output_names=["logits"],
        dynamic_shapes=({0: batch},))
    program.save(path, external_data=False)


def verify(path, model, example, training):
    """Full checker, supported-op check, size check, onnxruntime vs torch on `example`."""
    onnx.checker.check_model(path, full_check=True)
    m = onnx.load(path)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer), path
    size = os.path.getsize(path)
    assert size < MAX_BYTES, f"{path}: {size} bytes"
    ops = sorted({(n.domain or "ai.onnx", n.op_type) for n in m.graph.node})
    opset = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    print(f"{os.path.basename(path)}: {size} bytes, opset {opset}, input {dims}, "
          f"{len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers")
    print("  ops:", " ".join(op for _, op in ops))
    bad = [f"{d}::{op}" for d, op in ops if d != "ai.onnx" or op not in SUPPORTED_OPS]
    assert not bad, f"{path}: unsupported ops {bad}"
    assert isinstance(dims[0], str), f"{path}: batch dim is not symbolic"

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    # Two batch sizes: the export example's and another, to prove the batch dim is really free.
    for x in (example, torch.cat([example, example[:2]])):
        # The reference runs on a copy: a training-mode forward updates BatchNorm running stats.
        ref_model = copy.deepcopy(model).train(training)
        with torch.no_grad():
            want = ref_model(x).numpy()
        got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
        err = float(np.max(np.abs(got - want)))
        print(f"  batch {x.shape[0]}: onnxruntime vs torch max abs diff {err:.2e}")
        assert got.shape == want.shape and err < 1e-4, f"{path}: onnxruntime disagrees ({err})"


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    specs = [
        # name, model, example input (batch 3: any batch must work), exporter, training mode
        ("fashion_cnn", FashionCnn(), torch.rand(3, 1, 28, 28, generator=gen), "classic", False),
        ("mlp", Mlp(), torch.rand(3, 784, generator=gen), "dynamo", False),
        ("resnet_mini", ResnetMini(), torch.randn(3, 3, 32, 32, generator=gen), "classic", True),
        ("gpt_mini", GptMini(), torch.randint(0, GPT_VOCAB, (3, GPT_SEQ), generator=gen), "dynamo",
         False),
    ]
    for name, model, example, exporter, training in specs:
        path = os.path.join(HERE, name + ".onnx")
        input_name = "tokens" if name == "gpt_mini" else "input"
        model.train(training)
        # Export from a copy so the model the reference uses keeps its initial buffers.
        export_model = copy.deepcopy(model)
        if exporter == "classic":
            export_classic(export_model, example, path, input_name, training)
        else:
            export_model.eval()
            export_dynamo(export_model, example, path, input_name)
        verify(path, model, example, training)
    return 0


if __name__ == "__main__":
    sys.exit(main())
