#!/usr/bin/env python3
"""Larger benchmark models for tools/bench/{cpu,gpu}_train_step.py, exported to ONNX on demand.

pip packages: torch, onnx, onnxscript (torch's default exporter needs it)

    python3 tools/bench/train_models.py [--model-dir build/bench-models] [--models NAME ...]
        # exports cifar_cnn and transformer_cls (or the named ones), prints their ops

  * cifar_cnn: the classic CIFAR-10 CNN of the AMP tutorials; float N x 3 x 32 x 32 in ("input"),
    N x 10 logits out. Conv(3->32) ReLU MaxPool, Conv(32->64) ReLU MaxPool, Linear(4096->256) ReLU,
    Linear(256->10).
  * transformer_cls: a 4-layer pre-LayerNorm nn.TransformerEncoder classifier; int64 token ids
    N x 64 in ("tokens", vocabulary 1000), token + learned positional embeddings (d_model 256,
    4 heads, feed-forward 1024, GELU, no dropout), final LayerNorm, mean over the sequence,
    Linear(256->10): N x 10 logits out.
  * lstm_cls: a 2-layer nn.LSTM classifier; int64 token ids N x 64 in ("tokens", vocabulary
    1000), embedding 128, hidden 256, batch_first, Linear(256->10) on the last step: N x 10
    logits out. Both exporters write ONNX LSTM nodes, which mixtrain's training unrolls.
  * gpt2_small: GPT-2 small's shape (124M parameters; 12 pre-LayerNorm blocks, d 768, 12 heads,
    1024 tokens, vocabulary 50257, tanh GELU, untied head), attention in plain ops; int64 token
    ids N x 1024 in ("tokens"), N x 1024 x 50257 logits out (labels N x 1024). Its .onnx file is
    ~500 MB: tools/bench/gpu_train_step.py exports it on the GPU machine.

Unlike models/*.onnx these files are not committed: `ensure_exported` writes them into a cache
folder (build/bench-models/ by default) the first time and reuses them after. Weights are PyTorch's
default initialisation after torch.manual_seed(SEED), so `build(name)` in another process returns
the same module the file was exported from. Export uses torch.onnx.export with its default
exporter (the torch.export-based one in torch >= 2.9), model in eval mode, batch axis dynamic; if
that raises, the TorchScript exporter (dynamo=False, opset 17) is used instead.
"""

import argparse
import math
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(ROOT, "build", "bench-models")
SEED = 0

CIFAR_CLASSES = 10
TF_VOCAB, TF_SEQ, TF_DIM, TF_HEADS, TF_FF, TF_LAYERS, TF_CLASSES = 1000, 64, 256, 4, 1024, 4, 10
G2_VOCAB, G2_SEQ, G2_DIM, G2_HEADS, G2_LAYERS = 50257, 1024, 768, 12, 12
LS_VOCAB, LS_SEQ, LS_EMB, LS_HIDDEN, LS_LAYERS, LS_CLASSES = 1000, 64, 128, 256, 2, 10


class CifarCnn(nn.Module):
    """The AMP-tutorial CIFAR-10 CNN; input N x 3 x 32 x 32, output N x 10 logits."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, CIFAR_CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x))


class TransformerCls(nn.Module):
    """nn.TransformerEncoder sequence classifier; int64 tokens N x 64 in, N x 10 logits out."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(TF_VOCAB, TF_DIM)
        self.pos = nn.Parameter(torch.randn(TF_SEQ, TF_DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=TF_DIM, nhead=TF_HEADS,
                                           dim_feedforward=TF_FF, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        # enable_nested_tensor only applies to padding masks (none here) and warns with norm_first.
        self.encoder = nn.TransformerEncoder(layer, num_layers=TF_LAYERS,
                                             enable_nested_tensor=False)
        self.norm = nn.LayerNorm(TF_DIM)
        self.head = nn.Linear(TF_DIM, TF_CLASSES)
        # nn.TransformerEncoder deep-copies one layer, so its layers start identical, and every
        # LayerNorm weight (ones) and most biases (zeros) hold the same values. The default
        # exporter's optimizer merges initializers with equal values (small ones, at least), which
        # would tie those parameters together in the .onnx file: the trainers would then train a
        # different model from PyTorch's. A little seeded noise on every parameter (as a model
        # after some training would have) keeps each one its own initializer.
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.02)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x.mean(dim=1))


class Gpt2Attention(nn.Module):
    """Causal multi-head attention in plain ops (MatMul, Softmax, Where), as models/export_models.py
    writes gpt_mini's, so no fused attention op reaches the graph."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(G2_DIM, 3 * G2_DIM)
        self.proj = nn.Linear(G2_DIM, G2_DIM)
        self.register_buffer("mask", torch.tril(torch.ones(G2_SEQ, G2_SEQ, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        hd = c // G2_HEADS
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.reshape(b, t, G2_HEADS, hd).transpose(1, 2)
        k = k.reshape(b, t, G2_HEADS, hd).transpose(1, 2)
        v = v.reshape(b, t, G2_HEADS, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(hd))
        att = torch.where(self.mask, att, torch.full_like(att, -1e9))
        att = torch.softmax(att, dim=-1)
        return self.proj(torch.matmul(att, v).transpose(1, 2).reshape(b, t, c))


class Gpt2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(G2_DIM)
        self.attn = Gpt2Attention()
        self.ln2 = nn.LayerNorm(G2_DIM)
        self.fc = nn.Linear(G2_DIM, 4 * G2_DIM)
        self.out = nn.Linear(4 * G2_DIM, G2_DIM)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2Small(nn.Module):
    """GPT-2 small's shape (124M parameters: 12 pre-LN blocks, d 768, 12 heads, 1024 tokens,
    vocabulary 50257, untied head); int64 tokens N x 1024 in, N x 1024 x 50257 logits out."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(G2_VOCAB, G2_DIM)
        self.pos = nn.Embedding(G2_SEQ, G2_DIM)
        self.blocks = nn.ModuleList([Gpt2Block() for _ in range(G2_LAYERS)])
        self.ln_f = nn.LayerNorm(G2_DIM)
        self.head = nn.Linear(G2_DIM, G2_VOCAB, bias=False)
        self.register_buffer("positions", torch.arange(G2_SEQ, dtype=torch.int64))

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class LstmCls(nn.Module):
    """2-layer nn.LSTM sequence classifier; int64 tokens N x 64 in, N x 10 logits out."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(LS_VOCAB, LS_EMB)
        self.rnn = nn.LSTM(LS_EMB, LS_HIDDEN, num_layers=LS_LAYERS, batch_first=True)
        self.head = nn.Linear(LS_HIDDEN, LS_CLASSES)

    def forward(self, tokens):
        y, _ = self.rnn(self.tok(tokens))
        return self.head(y[:, -1])


MODELS = {"cifar_cnn": CifarCnn, "transformer_cls": TransformerCls, "gpt2_small": Gpt2Small,
          "lstm_cls": LstmCls}
INPUT_NAMES = {"cifar_cnn": "input", "transformer_cls": "tokens", "gpt2_small": "tokens",
               "lstm_cls": "tokens"}
NUM_CLASSES = {"cifar_cnn": CIFAR_CLASSES, "transformer_cls": TF_CLASSES, "gpt2_small": None,
               "lstm_cls": LS_CLASSES}


def build(name):
    """The module, with the weights the exported file has (seeded default initialisation)."""
    torch.manual_seed(SEED)
    return MODELS[name]()


def example_input(name, batch):
    gen = torch.Generator().manual_seed(0)
    if name == "cifar_cnn":
        return torch.randn(batch, 3, 32, 32, generator=gen)
    if name == "gpt2_small":
        return torch.randint(0, G2_VOCAB, (batch, G2_SEQ), generator=gen)
    if name == "lstm_cls":
        return torch.randint(0, LS_VOCAB, (batch, LS_SEQ), generator=gen)
    return torch.randint(0, TF_VOCAB, (batch, TF_SEQ), generator=gen)


def example_labels(name, batch):
    """Class labels N, or next-token labels N x T for the GPT (classes on the last axis)."""
    gen = torch.Generator().manual_seed(1)
    if name == "gpt2_small":
        return torch.randint(0, G2_VOCAB, (batch, G2_SEQ), generator=gen)
    return torch.randint(0, NUM_CLASSES[name], (batch,), generator=gen)


def export(name, path):
    """Exports build(name) in eval mode to `path`; returns the exporter used, as a string."""
    model = build(name).eval()
    example = example_input(name, 3)  # batch 3: any batch must work afterwards
    input_name = INPUT_NAMES[name]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    try:
        batch = torch.export.Dim("N", min=1, max=4096)
        program = torch.onnx.export(model, (example,), input_names=[input_name],
                                    output_names=["logits"], dynamic_shapes=({0: batch},))
        if program is None:  # a torch whose default exporter is still the TorchScript one
            raise RuntimeError("the default exporter returned no ONNXProgram")
        program.save(tmp, external_data=False)
        exporter = "torch.onnx.export default (dynamo=True, torch.export-based)"
    except Exception as e:  # noqa: BLE001
        print(f"{name}: default exporter failed ({type(e).__name__}: "
              f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}); "
              f"falling back to dynamo=False", file=sys.stderr)
        torch.onnx.export(model, (example,), tmp, dynamo=False, opset_version=17,
                          input_names=[input_name], output_names=["logits"],
                          dynamic_axes={input_name: {0: "N"}, "logits": {0: "N"}})
        exporter = "torch.onnx.export dynamo=False (TorchScript, opset 17)"
    os.replace(tmp, path)
    return exporter


def ensure_exported(name, model_dir=DEFAULT_DIR, log=sys.stdout):
    """Returns the path of NAME.onnx in model_dir, exporting it only when the file is missing."""
    path = os.path.join(model_dir, name + ".onnx")
    if not os.path.exists(path):
        exporter = export(name, path)
        print(f"exported {path} with {exporter}", file=log)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", default=DEFAULT_DIR)
    ap.add_argument("--force", action="store_true", help="re-export even when the file exists")
    ap.add_argument("--models", nargs="*", default=["cifar_cnn", "transformer_cls"], choices=sorted(MODELS))
    args = ap.parse_args()
    import onnx
    for name in args.models:
        path = os.path.join(args.model_dir, name + ".onnx")
        if args.force and os.path.exists(path):
            os.remove(path)
        ensure_exported(name, args.model_dir)
        m = onnx.load(path)
        ops = sorted({(n.domain + "::" if n.domain else "") + n.op_type for n in m.graph.node})
        opset = {o.domain or "ai.onnx": o.version for o in m.opset_import}
        print(f"{path}: {os.path.getsize(path)} bytes, IR {m.ir_version}, opset {opset}, "
              f"{len(m.graph.node)} nodes\n  ops: {' '.join(ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
