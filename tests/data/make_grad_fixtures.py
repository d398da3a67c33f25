#!/usr/bin/env python3
"""Writes the PyTorch gradient-parity fixtures under tests/data/grad/ (checked by
tests/passes/torch_parity_test.cc).

pip packages: torch, onnx, numpy

    python3 tests/data/make_grad_fixtures.py

For every model in models/ plus three small models with other op mixes that this script defines
and exports (a 1-D conv net, a depthwise conv + ConvTranspose autoencoder, an MLP with LayerNorm
and GELU), it writes:
  <name>_batch.npz     the graph inputs and `labels`
  <name>_expected.npz  PyTorch's `loss` and, per trainable initializer P, `grad/P` (all elements),
                       or for tensors over SAMPLE elements a fixed sample: `grad/P` at indices
                       `idx/P` plus `maxabs/P` (the whole gradient's max |value|), so the
                       fixtures stay small (< 2 MB in all).
The gradients are PyTorch autograd's on the very graph the ONNX file holds: the graph is evaluated
node by node with torch ops (the OPS table below), initializers as leaf tensors. For the models
defined here the script also checks that this evaluation matches the nn.Module it exported, output
and gradients alike, so the table cannot drift from PyTorch's own modules.
Losses follow mixtrain's `--loss` semantics: cross_entropy = F.cross_entropy on N x C [x d...]
logits (class axis 1, mean), mse / bce_with_logits = F.mse_loss / F.binary_cross_entropy_with_logits.
BatchNormalization runs with batch statistics (training mode), as mixtrain's train_mode pass makes it.
"""

import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "grad")
SAMPLE = 2048
torch.manual_seed(0)


# --- evaluating an ONNX graph with torch ops ------------------------------------------------------

def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def sym_pads(pads, n):
    if not pads:
        return [0] * n
    assert pads[:n] == pads[n:], "asymmetric pads not needed by these models"
    return list(pads[:n])


def conv_fn(n):
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]


def op_conv(a, x, w, b=None):
    n = x.dim() - 2
    return conv_fn(n)(x, w, b, a.get("strides", [1] * n), sym_pads(a.get("pads"), n),
                      a.get("dilations", [1] * n), a.get("group", 1))


def op_conv_transpose(a, x, w, b=None):
    n = x.dim() - 2
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[n]
    return fn(x, w, b, a.get("strides", [1] * n), sym_pads(a.get("pads"), n),
              a.get("output_padding", [0] * n), a.get("group", 1), a.get("dilations", [1] * n))


def op_pool(kind):
    def f(a, x):
        n = x.dim() - 2
        k, s = a["kernel_shape"], a.get("strides", [1] * n)
        p = sym_pads(a.get("pads"), n)
        if kind == "max":
            fn = {1: F.max_pool1d, 2: F.max_pool2d}[n]
            return fn(x, k, s, p, a.get("dilations", [1] * n), bool(a.get("ceil_mode", 0)))
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d}[n]
        return fn(x, k, s, p, bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))
    return f


def op_gemm(a, x, w, c=None):
    x = x.t() if a.get("transA", 0) else x
    w = w.t() if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    return y if c is None else y + a.get("beta", 1.0) * c


def op_batchnorm(a, x, s, b, m, v):
    return F.batch_norm(x, m.detach().clone(), v.detach().clone(), s, b, training=True,
                        momentum=1 - a.get("momentum", 0.9), eps=a.get("epsilon", 1e-5))


def op_reshape(a, x, shape):
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(shape.tolist())]
    return x.reshape(dims)


def op_gather(a, x, idx):
    axis = a.get("axis", 0) % x.dim()
    idx = idx.long() % x.shape[axis]
    y = torch.index_select(x, axis, idx.reshape(-1))
    return y.reshape(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))


def op_split(a, x, split=None):
    axis = a.get("axis", 0)
    if split is not None:
        return list(torch.split(x, split.tolist(), dim=axis))
    n = a["num_outputs"]
    return list(torch.split(x, -(-x.shape[axis] // n), dim=axis))


def op_shape(a, x):
    dims = list(x.shape)[a.get("start", 0):a.get("end", None)]
    return torch.tensor(dims, dtype=torch.int64)


OPS = {
    "Conv": op_conv, "ConvTranspose": op_conv_transpose,
    "MaxPool": op_pool("max"), "AveragePool": op_pool("avg"),
    "GlobalAveragePool": lambda a, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    "Gemm": op_gemm, "MatMul": lambda a, x, y: x @ y,
    "BatchNormalization": op_batchnorm,
    "LayerNormalization": lambda a, x, s, b=None: F.layer_norm(
        x, x.shape[a.get("axis", -1) % x.dim():], s, b, a.get("epsilon", 1e-5)),
    "Softmax": lambda a, x: F.softmax(x, a.get("axis", -1)),
    "Relu": lambda a, x: F.relu(x), "Sigmoid": lambda a, x: torch.sigmoid(x),
    "Tanh": lambda a, x: torch.tanh(x), "Erf": lambda a, x: torch.erf(x),
    "Sqrt": lambda a, x: torch.sqrt(x), "Neg": lambda a, x: -x,
    "Add": lambda a, x, y: x + y, "Sub": lambda a, x, y: x - y,
    "Mul": lambda a, x, y: x * y, "Div": lambda a, x, y: x / y, "Pow": lambda a, x, y: x ** y,
    "Where": lambda a, c, x, y: torch.where(c, x, y),
    "Flatten": lambda a, x: x.reshape(int(np.prod(x.shape[:a.get("axis", 1)])), -1),
    "Reshape": op_reshape, "Shape": op_shape, "Gather": op_gather, "Split": op_split,
    "Transpose": lambda a, x: x.permute(a.get("perm", list(range(x.dim()))[::-1])),
    "Expand": lambda a, x, s: torch.broadcast_to(x, torch.broadcast_shapes(x.shape, tuple(s.tolist()))),
    "Unsqueeze": lambda a, x, ax: x.reshape(_unsq(x.shape, ax.tolist())),
    "Identity": lambda a, x: x,
    "Constant": lambda a: torch.from_numpy(numpy_helper.to_array(a["value"]).copy()),
    "Cast": lambda a, x: x.to(_TORCH_TYPE[a["to"]]),
}
_TORCH_TYPE = {1: torch.float32, 7: torch.int64, 9: torch.bool, 6: torch.int32}


def _unsq(shape, axes):
    out = list(shape)
    r = len(shape) + len(axes)
    for ax in sorted(a % r for a in axes):
        out.insert(ax, 1)
    return out


def run_graph(model, feeds, params):
    """Evaluates the graph; `params` are the leaf tensors of the float initializers."""
    env = dict(feeds)
    for init in model.graph.initializer:
        if init.name not in params:
            env[init.name] = torch.from_numpy(numpy_helper.to_array(init).copy())
    env.update(params)
    for node in model.graph.node:
        ins = [env[i] if i else None for i in node.input]
        while ins and ins[-1] is None:
            ins.pop()
        out = OPS[node.op_type](attrs_of(node), *ins)
        outs = out if isinstance(out, list) else [out]
        for name, val in zip(node.output, outs):
            if name:
                env[name] = val
    return [env[o.name] for o in model.graph.output]


def loss_of(kind, y, labels):
    if kind == "cross_entropy":
        return F.cross_entropy(y, labels)
    if kind == "mse":
        return F.mse_loss(y, labels)
    if kind == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(y, labels)
    raise ValueError(kind)


def float_params(model):
    return {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()).requires_grad_(True)
            for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}


def write(name, model_path, feeds, labels, kind, module=None):
    model = onnx.load(model_path)
    params = float_params(model)
    torch_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
    y = run_graph(model, torch_feeds, params)[0]
    loss = loss_of(kind, y, torch.from_numpy(labels))
    loss.backward()
    if module is not None:  # the graph evaluation must be the module's function
        module.train()
        ym = module(*torch_feeds.values())
        assert torch.allclose(ym, y, rtol=1e-5, atol=1e-5), name
        loss_of(kind, ym, torch.from_numpy(labels)).backward()
        for pname, p in module.named_parameters():
            if pname in params:
                assert torch.allclose(p.grad, params[pname].grad, rtol=1e-4, atol=1e-6), pname
    batch = dict(feeds)
    batch["labels"] = labels
    np.savez(os.path.join(OUT, f"{name}_batch.npz"), **batch)
    expected = {"loss": np.array(loss.item(), dtype=np.float32)}
    rng = np.random.default_rng(0)
    for pname, p in params.items():
        if p.grad is None:
            continue
        g = p.grad.numpy().astype(np.float32)
        if g.size <= SAMPLE:
            expected[f"grad/{pname}"] = g
        else:
            idx = np.sort(rng.choice(g.size, SAMPLE, replace=False)).astype(np.int64)
            expected[f"grad/{pname}"] = g.reshape(-1)[idx]
            expected[f"idx/{pname}"] = idx
            expected[f"maxabs/{pname}"] = np.array(np.abs(g).max(), dtype=np.float32)
    np.savez(os.path.join(OUT, f"{name}_expected.npz"), **expected)
    print(f"{name}: loss {loss.item():.6f}, {len(expected) - 1} arrays")


# --- the extra models -----------------------------------------------------------------------------

class Conv1dNet(nn.Module):
    """1-D convolutions, max and average pooling, Tanh; N x 2 x 32 -> N x 5."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 6, 5, padding=2)
        self.c2 = nn.Conv1d(6, 8, 3, stride=2, dilation=2, padding=2)
        self.fc = nn.Linear(8 * 4, 5)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.c1(x)), 2)
        x = F.avg_pool1d(torch.tanh(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class ConvAutoencoder(nn.Module):
    """Depthwise + pointwise convolution down, ConvTranspose up, Sigmoid; N x 3 x 8 x 8 in and out."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(3, 3, 3, stride=2, padding=1, groups=3)
        self.pw = nn.Conv2d(3, 8, 1)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.up_dw = nn.ConvTranspose2d(4, 3, 3, padding=1, groups=1)

    def forward(self, x):
        h = F.relu(self.pw(self.dw(x)))
        return torch.sigmoid(self.up_dw(F.relu(self.up(h))))


class LnGeluMlp(nn.Module):
    """Linear, LayerNorm, exact GELU, Linear; N x 12 -> N x 4 multi-label logits."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.ln(self.fc1(x))))


def export(module, example, name):
    path = os.path.join(OUT, f"{name}.onnx")
    torch.onnx.export(module, (example,), path, dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                      training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    return path


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(1)
    models = os.path.join(ROOT, "models")
    img = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    write("fashion_cnn", os.path.join(models, "fashion_cnn.onnx"), {"input": img},
          rng.integers(0, 10, 4).astype(np.int64), "cross_entropy")
    write("mlp", os.path.join(models, "mlp.onnx"),
          {"input": rng.standard_normal((4, 784)).astype(np.float32)},
          rng.integers(0, 10, 4).astype(np.int64), "cross_entropy")
    write("resnet_mini", os.path.join(models, "resnet_mini.onnx"),
          {"input": rng.standard_normal((4, 3, 32, 32)).astype(np.float32)},
          rng.integers(0, 10, 4).astype(np.int64), "cross_entropy")
    # gpt_mini's logits are N x 32 x 256; cross_entropy takes axis 1 as the class axis (ONNX's
    # SoftmaxCrossEntropyLoss layout), so the labels are N x 256 in [0, 32).
    write("gpt_mini", os.path.join(models, "gpt_mini.onnx"),
          {"tokens": rng.integers(0, 256, (2, 32)).astype(np.int64)},
          rng.integers(0, 32, (2, 256)).astype(np.int64), "cross_entropy")

    m = Conv1dNet()
    x = rng.standard_normal((4, 2, 32)).astype(np.float32)
    write("conv1d_net", export(m, torch.from_numpy(x), "conv1d_net"), {"input": x},
          rng.integers(0, 5, 4).astype(np.int64), "cross_entropy", m)
    m = ConvAutoencoder()
    x = rng.random((2, 3, 8, 8)).astype(np.float32)
    write("conv_autoencoder", export(m, torch.from_numpy(x), "conv_autoencoder"), {"input": x},
          x.copy(), "mse", m)
    m = LnGeluMlp()
    x = rng.standard_normal((6, 12)).astype(np.float32)
    write("ln_gelu_mlp", export(m, torch.from_numpy(x), "ln_gelu_mlp"), {"input": x},
          (rng.random((6, 4)) > 0.5).astype(np.float32), "bce_with_logits", m)


if __name__ == "__main__":
    main()
