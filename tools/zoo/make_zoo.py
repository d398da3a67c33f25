#!/usr/bin/env python3
"""Generates the "zoo of real exports" under tests/data/zoo/: small models exported to ONNX by the
real exporters (torch.onnx TorchScript, torch.onnx dynamo, tf2onnx), each with a reference batch,
the framework's loss and gradients, and 10 Adam steps.

pip packages (the versions these files were generated with; CPU only, no network past PyPI):
    torch==2.15.0 onnx==1.23.2 onnxscript==0.7.2 onnx-ir==1.1.0 numpy==2.4.6 transformers==5.24.0
    timm==1.0.31 torchvision==0.29.2 onnxruntime==1.32.0 (optional: forward check)
    tensorflow-cpu==2.21.0 keras==3.15.1 tf2onnx==1.17.0 protobuf==7.36.2 (optional: the keras_* models)

    python3 -m venv /tmp/zoo-venv
    /tmp/zoo-venv/bin/pip install torch onnx onnxscript numpy transformers timm torchvision onnxruntime \
        tensorflow-cpu tf2onnx
    OMP_NUM_THREADS=1 /tmp/zoo-venv/bin/python tools/zoo/make_zoo.py            # every model
    OMP_NUM_THREADS=1 /tmp/zoo-venv/bin/python tools/zoo/make_zoo.py NAME ...   # some models
    /tmp/zoo-venv/bin/python tools/zoo/make_zoo.py --list
    /tmp/zoo-venv/bin/python tools/zoo/make_zoo.py --table      # README table from the manifest
    /tmp/zoo-venv/bin/python tools/zoo/check_zoo.py             # independent check (onnxruntime)

Nothing is downloaded from any hub: transformers models are built from tiny configs with random
init, timm models with pretrained=False; all weights are seeded.

For every model NAME it writes tests/data/zoo/NAME.onnx and tests/data/zoo/NAME.npz with
  <input>              each non-initializer graph input, by its ONNX name (float32 or int64)
  labels               int64 (N for classifiers; N x T for language models)
  loss                 float32 scalar: cross-entropy on the model's first output, mean reduction
                       (class axis 1 for N x C logits, -1 for N x T x V language-model logits)
  grad/<initializer>   the framework's gradient of `loss` for every trainable parameter that maps
                       to an ONNX initializer holding exactly the parameter's values, or its
                       transpose/reshape when the exporter folded one (the gradient is then
                       given in the initializer's layout; see map_params)
  adam_losses          float32[10]: full-batch torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999),
                       eps=1e-8, weight_decay=0) on that batch, the loss BEFORE each step's update
and updates its row in tests/data/zoo/manifest.tsv (see tools/zoo/README.md for the columns).

Reference semantics: dropout is 0 everywhere; the reference loss/gradients/Adam run the module in
train() mode, so BatchNorm uses batch statistics (manifest bn_train=1) while the ONNX file is
exported from eval() mode (BatchNormalization with running statistics, which the engine's train
mode pass switches to batch statistics). Parameters that a framework initializes to a constant
(norm weights/biases, zero biases, layer-scale gammas, timm's zero_init_last) or that are exact
copies of another parameter (nn.TransformerEncoder deep-copies its layer) get seeded noise added
before export, so every trainable tensor is distinct and a gradient mix-up cannot go unnoticed.
"""

import argparse
import collections
import copy
import math
import os
import sys
import traceback
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "data", "zoo")
MANIFEST = os.path.join(OUT, "manifest.tsv")
BATCH = 4
ADAM_STEPS = 10
MAX_ONNX_BYTES = 2 * 1024 * 1024
COLUMNS = ["name", "exporter", "opset", "loss", "class_axis", "dynamic_batch", "op_types",
           "n_params_mapped", "params_unmapped", "bn_train", "ort_max_abs_err", "notes"]

warnings.filterwarnings("ignore")


def torch_mod():
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch


# --- model registry --------------------------------------------------------------------------------

Spec = collections.namedtuple(
    "Spec", "name exporter opset loss build dynamic optimize fold notes train")
SPECS = collections.OrderedDict()


def register(name, exporter, opset, loss="cross_entropy", dynamic=False, optimize=False,
             fold=False, notes="", train=False):
    """exporter: torchscript | dynamo | tf2onnx. loss: cross_entropy (N x C, class axis 1) or
    cross_entropy_lm (N x T x V, class axis -1). optimize: dynamo's optimize flag. fold:
    TorchScript's do_constant_folding flag. train: exported in train() mode with its dropout
    (TorchScript: training=TrainingMode.TRAINING); the references are the module at dropout p=0
    (see make_torch_model)."""
    def deco(fn):
        SPECS[name] = Spec(name, exporter, opset, loss, fn, dynamic, optimize, fold, notes, train)
        return fn
    return deco


def image(shape):
    torch = torch_mod()
    return torch.randn(*shape)


def class_labels(n_classes):
    torch = torch_mod()
    return torch.randint(0, n_classes, (BATCH,))


# --- TorchScript-exporter models -------------------------------------------------------------------

@register("conv1d_pad", "torchscript", 13, fold=True,
          notes="exporter defaults, do_constant_folding=True (nothing is folded: Linear on 2-D "
                "input is Gemm transB=1)")
def build_conv1d_pad():
    torch = torch_mod()
    from torch import nn
    import torch.nn.functional as F

    class Conv1dPad(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(4, 8, 3)
            self.c2 = nn.Conv1d(8, 16, 3, stride=2)
            self.pool = nn.AdaptiveAvgPool1d(1)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            x = F.pad(x, (1, 2), mode="constant", value=0.5)
            x = F.relu(self.c1(x))
            x = F.pad(x, (2, 1), mode="reflect")
            x = F.relu(self.c2(x))
            return self.fc(self.pool(x).flatten(1))

    return Conv1dPad(), {"x": torch.randn(BATCH, 4, 24)}, class_labels(5)


@register("resnet_pad", "torchscript", 14)
def build_resnet_pad():
    torch = torch_mod()
    from torch import nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, pad_mode):
            super().__init__()
            self.pad_mode = pad_mode
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.pad(x, (1, 1, 1, 1), mode=self.pad_mode)
            y = F.relu(self.bn1(self.conv1(y)))
            y = self.bn2(self.conv2(F.pad(y, (1, 1, 1, 1))))
            s = x if self.short is None else self.short(x)
            return F.relu(y + s)

    class ResNetPad(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.b1 = Block(8, 8, 1, "reflect")
            self.b2 = Block(8, 16, 2, "constant")
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            x = F.relu(self.bn(self.stem(F.pad(x, (1, 1, 1, 1), mode="replicate"))))
            x = self.b2(self.b1(x))
            x = self.pool(x)
            return self.fc(x.reshape(x.size(0), -1))

    return ResNetPad(), {"x": torch.randn(BATCH, 3, 16, 16)}, class_labels(5)


def make_gpt_causal(vocab=50, d=32, n_head=2, n_layer=2, t_max=16):
    torch = torch_mod()
    from torch import nn
    import torch.nn.functional as F

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.register_buffer("mask", torch.tril(torch.ones(t_max, t_max))
                                 .view(1, 1, t_max, t_max))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.qkv(x).split(d, dim=2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = Attn()
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.gelu = nn.GELU(approximate="tanh")
            self.out = nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.out(self.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(t_max, d)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            nn.init.normal_(self.wte.weight, std=0.02)
            nn.init.normal_(self.wpe.weight, std=0.02)

        def forward(self, idx):
            B, T = idx.size()
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.blocks:
                x = b(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


@register("gpt_causal", "torchscript", 15, loss="cross_entropy_lm",
          notes="tied embeddings: lm_head.weight is wte.weight (one initializer used by Gather and "
                "by Transpose+MatMul); causal mask sliced from a registered buffer")
def build_gpt_causal():
    torch = torch_mod()
    T = 8
    return (make_gpt_causal(), {"idx": torch.randint(0, 50, (BATCH, T))},
            torch.randint(0, 50, (BATCH, T)))


def make_tfm_encoder():
    torch = torch_mod()
    from torch import nn

    class TfmEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64,
                                               dropout=0.0, norm_first=True, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.fc = nn.Linear(32, 5)

        def forward(self, x):
            return self.fc(self.enc(x).mean(dim=1))

    return TfmEncoder(), {"x": torch.randn(BATCH, 6, 32)}, class_labels(5)


@register("tfm_encoder", "torchscript", 17)
def build_tfm_encoder():
    return make_tfm_encoder()


@register("tfm_encoder_dyn", "torchscript", 17, dynamic=True,
          notes="dynamic_axes: batch axis of x and logits is symbolic ('batch')")
def build_tfm_encoder_dyn():
    return make_tfm_encoder()


@register("nn_mix", "torchscript", 16)
def build_nn_mix():
    torch = torch_mod()
    from torch import nn
    import torch.nn.functional as F

    class NNMix(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.gn = nn.GroupNorm(2, 8)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.mix = nn.Conv2d(16, 16, 1)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            x = F.silu(self.gn(self.c1(x)))                       # N 8 16 16
            x = F.hardswish(self.dw(x))
            y = F.leaky_relu(self.down(x), 0.1)                   # N 16 8 8
            p, q = torch.chunk(y, 2, dim=1)                       # N 8 8 8 each
            p = F.interpolate(p, scale_factor=2.0, mode="nearest")
            q = F.interpolate(q, size=(16, 16), mode="bilinear", align_corners=False)
            u = F.elu(self.up(y))                                 # N 8 16 16
            z = self.mix(torch.cat([p + u, q], dim=1))            # N 16 16 16
            s1, s2, s3 = torch.split(z, [4, 4, 8], dim=1)
            z = torch.cat([F.softplus(s1), F.mish(s2), torch.cumsum(s3, dim=1) * 0.25], dim=1)
            return self.fc(z.mean(dim=(2, 3)))

    return NNMix(), {"x": torch.randn(BATCH, 3, 16, 16)}, class_labels(5)


def make_lstm_classifier():
    torch = torch_mod()
    from torch import nn

    class LstmClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(30, 8)
            self.rnn = nn.LSTM(8, 12, num_layers=2, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(24, 5)

        def forward(self, tokens):
            y, _ = self.rnn(self.emb(tokens))   # N T 24
            return self.fc(y[:, -1])

    return LstmClassifier(), {"tokens": torch.randint(0, 30, (BATCH, 10))}, class_labels(5)


@register("lstm_ts", "torchscript", 14,
          notes="nn.Embedding -> 2-layer bidirectional nn.LSTM (batch_first) -> Linear on the "
                "last step; ONNX LSTM nodes whose W/R/B are Slice/Concat/Unsqueeze of the "
                "parameters (torch's gate order re-ordered to ONNX's)")
def build_lstm_ts():
    return make_lstm_classifier()


@register("gru_ts", "torchscript", 14, dynamic=True,
          notes="nn.GRU (batch_first, given an initial state computed from the input) on float "
                "sequences, mean over time -> Linear; symbolic batch; ONNX GRU with "
                "linear_before_reset=1")
def build_gru_ts():
    torch = torch_mod()
    from torch import nn

    class GruRegressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.h0 = nn.Linear(6, 10)
            self.rnn = nn.GRU(6, 10, batch_first=True)
            self.fc = nn.Linear(10, 4)

        def forward(self, x):
            h0 = torch.tanh(self.h0(x[:, 0])).unsqueeze(0)   # 1 N 10
            y, _ = self.rnn(x, h0)
            return self.fc(y.mean(dim=1))

    return GruRegressor(), {"x": torch.randn(BATCH, 7, 6)}, class_labels(4)


@register("script_loop_ts", "torchscript", 13,
          notes="a torch.jit.script function looping `for t in range(x.size(1)): h = tanh(x_t "
                "Wx^T + bx + h Wh^T + bh)`, then Linear: an ONNX Loop (trip count and zero state "
                "Constant nodes of the traced sizes, condition true) whose body reads x and the "
                "weights from the enclosing graph")
def build_script_loop_ts():
    torch = torch_mod()
    from torch import nn

    # Scripted, so the exporter (which traces the module) keeps the loop as a loop.
    @torch.jit.script
    def rnn(x, wx, bx, wh, bh):
        h = torch.zeros(x.size(0), wh.size(0))
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] @ wx.t() + bx + h @ wh.t() + bh)
        return h

    class ScriptLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.wx = nn.Linear(5, 8)
            self.wh = nn.Linear(8, 8)
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            return self.head(rnn(x, self.wx.weight, self.wx.bias, self.wh.weight, self.wh.bias))

    return ScriptLoop(), {"x": torch.randn(BATCH, 6, 5)}, class_labels(4)


@register("shufflenet_tv", "torchscript", 17,
          notes="torchvision.models.ShuffleNetV2(stages_repeats=[2, 2, 2], stages_out_channels="
                "[24, 24, 48, 96, 256], num_classes=5) (torchvision's class; the published widths "
                "make files > 2 MB), 3x64x64: channel shuffle as Reshape/Transpose/Reshape, "
                "chunk as Split")
def build_shufflenet_tv():
    import torchvision
    m = torchvision.models.ShuffleNetV2([2, 2, 2], [24, 24, 48, 96, 256], num_classes=5)
    return m, {"x": image((BATCH, 3, 64, 64))}, class_labels(5)


@register("unet_prelu_ts", "torchscript", 17, fold=True,
          notes="a small U-Net: Conv -> nn.PReLU() (one slope) -> strided Conv -> nn.PReLU(16) -> "
                "Conv -> Softplus -> 1x1 Conv -> nn.PixelShuffle(2) (DepthToSpace) -> Concat with "
                "the skip -> Conv -> Softplus(beta=2) -> nn.PReLU() -> mean -> Linear, 3x16x16; "
                "exporter defaults (do_constant_folding=True) fold each PReLU slope's Unsqueeze, "
                "so the one-element slopes become onnx::PRelu_N initializers; Softplus(beta=2) is "
                "Softplus(2x)/2 with one-element constants")
def build_unet_prelu_ts():
    torch = torch_mod()
    from torch import nn
    import torch.nn.functional as F

    class UNetPReLU(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Conv2d(3, 8, 3, padding=1)
            self.act1 = nn.PReLU()
            self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.act2 = nn.PReLU(16)
            self.mid = nn.Conv2d(16, 16, 3, padding=1)
            self.up = nn.Conv2d(16, 32, 1)
            self.shuffle = nn.PixelShuffle(2)
            self.dec = nn.Conv2d(16, 8, 3, padding=1)
            self.act3 = nn.PReLU()
            self.head = nn.Linear(8, 5)

        def forward(self, x):
            e = self.act1(self.enc(x))                               # N 8 16 16
            m = F.softplus(self.mid(self.act2(self.down(e))))        # N 16 8 8
            u = self.shuffle(self.up(m))                             # N 8 16 16
            d = self.act3(F.softplus(self.dec(torch.cat([e, u], 1)), beta=2.0))
            return self.head(d.mean((2, 3)))

    return UNetPReLU(), {"x": torch.randn(BATCH, 3, 16, 16)}, class_labels(5)


# --- dynamo-exporter models ------------------------------------------------------------------------

@register("resnet10t_timm", "dynamo", 18,
          notes="timm resnet10t channels=(8,16,32,64) stem_width=8, 3x32x32; optimize=False keeps "
                "BatchNormalization (optimize=True folds it into Conv)")
def build_resnet10t():
    import timm
    m = timm.create_model("resnet10t", pretrained=False, num_classes=5,
                          channels=(8, 16, 32, 64), stem_width=8)
    return m, {"x": image((BATCH, 3, 32, 32))}, class_labels(5)


@register("mobilenetv3_timm", "dynamo", 19,
          notes="timm mobilenetv3_small_050 with conv_head shrunk 1024->128 channels (keeps the "
                "file < 2 MB); optimize=False keeps BatchNormalization; 64x64 images: at 32x32 the "
                "last blocks are 1x1, so train-mode BatchNorm normalizes 4 values per channel and "
                "amplifies rounding differences to 1e-4 of the gradients")
def build_mobilenetv3():
    import timm
    from torch import nn
    m = timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=5)
    m.conv_head = nn.Conv2d(m.conv_head.in_channels, 128, 1, bias=m.conv_head.bias is not None)
    m.classifier = nn.Linear(128, 5)
    m.num_features = m.head_hidden_size = 128
    return m, {"x": image((BATCH, 3, 64, 64))}, class_labels(5)


@register("vit_timm", "dynamo", 21,
          notes="timm vit_tiny_patch16_224 img_size=32 patch_size=8 depth=2 embed_dim=32 "
                "num_heads=2; optimize=False because optimize=True folds cls_token.expand(N,-1,-1) "
                "into a batch-4 initializer 'expand' (4x1x32): four independent copies, so "
                "cls_token cannot be trained (and the batch is baked in)")
def build_vit():
    import timm
    m = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=32,
                          patch_size=8, depth=2, embed_dim=32, num_heads=2)
    return m, {"x": image((BATCH, 3, 32, 32))}, class_labels(5)


@register("convnext_timm", "dynamo", 20, optimize=True,
          notes="timm convnext_atto depths=(1,1,1,1) dims=(16,32,48,64); optimize=True (the default)")
def build_convnext():
    import timm
    m = timm.create_model("convnext_atto", pretrained=False, num_classes=5, depths=(1, 1, 1, 1),
                          dims=(16, 32, 48, 64))
    return m, {"x": image((BATCH, 3, 32, 32))}, class_labels(5)


@register("groupnorm_cnn", "dynamo", 21, dynamic=True, optimize=True,
          notes="dynamic_shapes: batch axis symbolic; optimize=True (the default)")
def build_groupnorm_cnn():
    torch = torch_mod()
    from torch import nn

    class GroupNormCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(),
                nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(2, 16), nn.GELU(),
                nn.Conv2d(16, 16, 3, padding=1), nn.GroupNorm(16, 16), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            return self.fc(self.body(x))

    return GroupNormCNN(), {"x": torch.randn(BATCH, 3, 16, 16)}, class_labels(5)


@register("lstm_dynamo", "dynamo", 18,
          notes="lstm_ts's model through the dynamo exporter")
def build_lstm_dynamo():
    return make_lstm_classifier()


@register("vit_tv", "dynamo", 18,
          notes="torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, "
                "num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=5) (torchvision's class at a "
                "tiny size; its encoder is nn.MultiheadAttention), 3x32x32")
def build_vit_tv():
    import torchvision
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                             hidden_dim=32, mlp_dim=64, num_classes=5)
    return m, {"x": image((BATCH, 3, 32, 32))}, class_labels(5)


@register("tfm_encoder_dynamo", "dynamo", 18, optimize=True,
          notes="same module as tfm_encoder, dynamo exporter, optimize=True (the default)")
def build_tfm_encoder_dynamo():
    return make_tfm_encoder()


def hf_logits(model, use_cache, ones_mask=False):
    """Wraps a transformers model so that forward(input_ids) returns the logits tensor only."""
    torch = torch_mod()
    from torch import nn

    class Wrap(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            kw = {"use_cache": False} if use_cache else {}
            if ones_mask:
                kw["attention_mask"] = torch.ones_like(input_ids)
            return self.m(input_ids=input_ids, **kw).logits

    return Wrap(model)


HF_NOTE = ("initializer_range=0.2 (default 0.02 leaves attention nearly uniform and the query/key "
           "gradients ~1e-5)")


def make_gpt2(ones_mask=False):
    torch = torch_mod()
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                     bos_token_id=0, eos_token_id=0, initializer_range=0.2)
    cfg._attn_implementation = "eager"
    m = GPT2LMHeadModel(cfg)
    return (hf_logits(m, True, ones_mask), {"input_ids": torch.randint(0, 64, (BATCH, 8))},
            torch.randint(0, 64, (BATCH, 8)))


@register("gpt2_hf", "dynamo", 18, loss="cross_entropy_lm",
          notes="transformers GPT2LMHeadModel n_layer=2 n_embd=32 n_head=2 vocab=64 n_positions=16 "
                "eager attention, tied lm_head/wte; logits only (use_cache=False); " + HF_NOTE +
                "; optimize=False because optimize=True unties lm_head (wte copied into "
                "lm_head.weight and a transposed val_N) and folds wpe[arange(T)] into a constant; "
                "with optimize=False the qkv split exports as SplitToSequence+SequenceAt")
def build_gpt2():
    return make_gpt2()


@register("gpt2_hf_ts", "torchscript", 14, loss="cross_entropy_lm",
          notes="same GPT2LMHeadModel as gpt2_hf, TorchScript exporter; with attention_mask=None "
                "the export fails (transformers' packed-sequence check "
                "masking_utils.find_packed_sequence_indices runs under jit tracing and emits "
                "aten::diff, unsupported by the TorchScript exporter), so the wrapper passes "
                "attention_mask=torch.ones_like(input_ids)")
def build_gpt2_ts():
    return make_gpt2(ones_mask=True)


@register("bert_hf", "dynamo", 19,
          notes="transformers BertForSequenceClassification 2 layers hidden=32 heads=2 "
                "intermediate=64 vocab=64 num_labels=3, default (sdpa) attention, input_ids only; "
                + HF_NOTE + "; optimize=False because optimize=True folds the position and "
                "token-type embedding lookups (constant indices) into constants, so "
                "position_embeddings/token_type_embeddings vanish; input ids avoid 0, the "
                "pad_token_id: nn.Embedding's padding_idx is not in the ONNX graph, so torch "
                "leaves that row's gradient zero where the exported graph (and mixtrain) does not")
def build_bert():
    torch = torch_mod()
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                     intermediate_size=64, vocab_size=64, num_labels=3, max_position_embeddings=32,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     classifier_dropout=0.0, initializer_range=0.2)
    m = BertForSequenceClassification(cfg)
    return hf_logits(m, False), {"input_ids": torch.randint(1, 64, (BATCH, 8))}, class_labels(3)


@register("llama_hf", "dynamo", 20, loss="cross_entropy_lm", optimize=True,
          notes="transformers LlamaForCausalLM 2 layers hidden=32 heads=2 intermediate=64 "
                "vocab=64 (RMSNorm, rotary, SwiGLU), default (sdpa) attention, untied lm_head; "
                + HF_NOTE + "; optimize=True (the default): every parameter survives (the "
                "rotary cos/sin tables are folded into constants)")
def build_llama():
    torch = torch_mod()
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=64, vocab_size=64,
                      max_position_embeddings=32, attention_dropout=0.0, tie_word_embeddings=False,
                      initializer_range=0.2)
    m = LlamaForCausalLM(cfg)
    return (hf_logits(m, True), {"input_ids": torch.randint(0, 64, (BATCH, 8))},
            torch.randint(0, 64, (BATCH, 8)))


# --- train-mode dropout and flattened logits (issue 32) -----------------------------------------

def make_dropout_mlp():
    torch = torch_mod()
    from torch import nn

    class DropoutMLP(nn.Module):
        """Two dropouts of one shape and rate: their masks must differ (per-node seeds)."""
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 64)
            self.drop1 = nn.Dropout(0.3)
            self.fc2 = nn.Linear(64, 64)
            self.drop2 = nn.Dropout(0.3)
            self.fc3 = nn.Linear(64, 5)

        def forward(self, x):
            x = self.drop1(torch.relu(self.fc1(x)))
            x = self.drop2(torch.relu(self.fc2(x)))
            return self.fc3(x)

    return DropoutMLP(), {"x": torch.randn(BATCH, 16)}, class_labels(5)


@register("dropout_mlp_ts", "torchscript", 17, train=True,
          notes="Linear-ReLU-Dropout(0.3) twice, then Linear; training=TrainingMode.TRAINING: "
                "Dropout nodes whose ratio and training_mode come from Constant nodes")
def build_dropout_mlp_ts():
    return make_dropout_mlp()


@register("dropout_mlp_dynamo", "dynamo", 18, train=True,
          notes="dropout_mlp_ts's module through the dynamo exporter in train() mode: "
                "nn.Dropout becomes a Dropout node (native_dropout) with Constant ratio and "
                "training_mode")
def build_dropout_mlp_dynamo():
    return make_dropout_mlp()


def make_mobilenet_v3_tv():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf
    setting, _ = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.5, reduced_tail=True)
    m = MobileNetV3(setting, 128, num_classes=5)
    return m, {"x": image((BATCH, 3, 64, 64))}, class_labels(5)


MNV3_NOTE = ("torchvision MobileNetV3 with mobilenet_v3_small's blocks at width_mult=0.5, "
             "reduced_tail, last_channel 128 (the full model is 6.9 MB), 3x64x64; its classifier's "
             "nn.Dropout(p=0.2, inplace=True)")


@register("mobilenetv3_tv_train", "dynamo", 20, train=True,
          notes=MNV3_NOTE + " exports in train() mode as bernoulli: "
                "RandomUniformLike(CastLike(Expand)), Less(r, 0.8), CastLike, Div by 0.8, Mul; "
                "BatchNormalization in inference form with momentum 0.99")
def build_mobilenetv3_tv_train():
    return make_mobilenet_v3_tv()


@register("mobilenetv3_tv_train_ts", "torchscript", 17, train=True,
          notes=MNV3_NOTE + " exports with training=TrainingMode.TRAINING as a Dropout node; "
                "BatchNormalization with training_mode=1")
def build_mobilenetv3_tv_train_ts():
    return make_mobilenet_v3_tv()


def make_flat_lm(vocab=64, d=32, t=8):
    torch = torch_mod()
    from torch import nn

    class FlatLM(nn.Module):
        """A token model that flattens its logits itself: N*T rows of V classes."""
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(t, d) * 0.1)
            self.ln = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 2 * d)
            self.head = nn.Linear(2 * d, vocab)

        def forward(self, idx):
            x = self.ln(self.emb(idx) + self.pos)
            return self.head(torch.tanh(self.fc(x))).view(-1, vocab)

    return (FlatLM(), {"idx": torch.randint(0, vocab, (BATCH, t))},
            torch.randint(0, vocab, (BATCH * t,)))


@register("flat_lm_ts", "torchscript", 17,
          notes="logits flattened inside the model (head(x).view(-1, V): 32 x 64 for 4 x 8 "
                "tokens), labels saved flat (32): 8 label rows per example")
def build_flat_lm_ts():
    return make_flat_lm()


@register("flat_lm_dynamo", "dynamo", 18, dynamic=True,
          notes="flat_lm_ts's module through the dynamo exporter with a symbolic batch: the "
                "logits' first dim is a multiple of it")
def build_flat_lm_dynamo():
    return make_flat_lm()


# --- tf2onnx ---------------------------------------------------------------------------------------

# Keras layers whose weights tf2onnx stores under names that are no Keras variable's: a conv's
# bias as the folded ".../Squeeze:0", a depthwise kernel transposed into "const_fold_opt__N", a
# Conv1D kernel expanded into [out, in, 1, k] (".../ExpandDims_1:0"), a PReLU slope negated
# (".../Neg:0", Keras computes relu(x) - alpha * relu(-x)). Biases, slopes and BatchNorm's
# gamma/beta get seeded non-constant initializers (Keras's zeros and ones would be dropped or
# duplicated by the exporter, and could not be mapped by value).
KERAS_CONV_NOTES = ("reference grads from tf.GradientTape, adam_losses from torch.optim.Adam's rule "
                    "written out in TF (see keras_mlp); exported via tf2onnx.convert.from_function "
                    "with a symbolic batch")


def keras_init(seed, stddev=0.1):
    import keras
    return keras.initializers.RandomNormal(stddev=stddev, seed=seed)


@register("keras_conv2d", "tf2onnx", 13, dynamic=True,
          notes="keras Conv2D(8,3,relu) -> Conv2D(16,3,stride 2) -> GlobalAveragePooling2D -> "
                "Dense(5), 12x12x3 NHWC input (tf2onnx transposes it to NCHW); the conv biases "
                "are folded '.../Squeeze:0' initializers; " + KERAS_CONV_NOTES)
def build_keras_conv2d():
    import keras
    layers = keras.layers
    x = keras.Input((12, 12, 3), name="x")
    y = layers.Conv2D(8, 3, activation="relu", bias_initializer=keras_init(1), name="conv1")(x)
    y = layers.Conv2D(16, 3, strides=2, bias_initializer=keras_init(2), name="conv2")(y)
    y = layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, layers.Dense(5, bias_initializer=keras_init(3), name="logits")(y))


@register("keras_dw_bn", "tf2onnx", 13, train=True,
          notes="keras functional Conv2D(8,3,no bias) -> BatchNormalization -> ReLU -> "
                "DepthwiseConv2D(3,same,no bias) -> BatchNormalization -> ReLU -> Conv2D(8,1) -> "
                "GlobalAveragePooling2D -> Dense(5), 12x12x3; exported with training=True: "
                "tf2onnx's grappler pass folds an inference-mode Keras BatchNormalization into "
                "the conv before it (kernel * gamma/sqrt(var+eps) as '.../merged_input:0'), so "
                "gamma and beta would be gone; in training mode BatchNorm is written out with "
                "batch moments (ReduceMean, Sqrt, Reciprocal, Mul, Sub), as Keras trains it; the "
                "depthwise kernel is a folded transpose 'const_fold_opt__N'; a fixed batch of 4 "
                "(batch statistics tie the rows together); " + KERAS_CONV_NOTES.replace(
                    " with a symbolic batch", ""))
def build_keras_dw_bn():
    import keras
    layers = keras.layers

    def bn(seed, name):
        return layers.BatchNormalization(
            beta_initializer=keras_init(seed),
            gamma_initializer=keras.initializers.RandomUniform(0.5, 1.5, seed=seed + 100), name=name)

    x = keras.Input((12, 12, 3), name="x")
    y = layers.Conv2D(8, 3, use_bias=False, name="stem")(x)
    y = layers.ReLU()(bn(4, "bn1")(y))
    # No bias before a BatchNorm: its gradient is zero but for rounding noise, in Keras too.
    y = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw")(y)
    y = layers.ReLU()(bn(7, "bn2")(y))
    y = layers.Conv2D(8, 1, bias_initializer=keras_init(9), name="pw")(y)
    y = layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, layers.Dense(5, bias_initializer=keras_init(3), name="logits")(y))


@register("keras_conv1d_prelu", "tf2onnx", 13, dynamic=True,
          notes="keras Conv1D(8,3) -> PReLU (one slope per element, 14x8) -> Conv1D(16,3,stride "
                "2) -> PReLU(shared_axes=[1], one per channel) -> GlobalAveragePooling1D -> "
                "Dense(5), 16x4 input; Conv1D is Unsqueeze -> Conv -> Squeeze with the kernel "
                "folded to [out, in, 1, k] and the bias added after the Squeeze; PReLU is "
                "Keras's relu(x) + (-alpha) * relu(-x) with -alpha folded ('.../Neg:0'); "
                + KERAS_CONV_NOTES)
def build_keras_conv1d_prelu():
    import keras
    layers = keras.layers

    def slope(seed):
        return keras.initializers.RandomUniform(0.1, 0.4, seed=seed)

    x = keras.Input((16, 4), name="x")
    y = layers.Conv1D(8, 3, bias_initializer=keras_init(1), name="c1")(x)
    y = layers.PReLU(alpha_initializer=slope(2), name="p1")(y)
    y = layers.Conv1D(16, 3, strides=2, bias_initializer=keras_init(3), name="c2")(y)
    y = layers.PReLU(alpha_initializer=slope(4), shared_axes=[1], name="p2")(y)
    y = layers.GlobalAveragePooling1D()(y)
    return keras.Model(x, layers.Dense(5, bias_initializer=keras_init(5), name="logits")(y))


register("keras_mlp", "tf2onnx", 13, dynamic=True,
         notes="Keras Sequential Dense(32,relu)-Dense(5), reference grads from tf.GradientTape; "
               "adam_losses from torch.optim.Adam's update rule written out in TF, because "
               "keras.optimizers.Adam adds epsilon to sqrt(v) before bias correction "
               "(var -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps)), i.e. an effective "
               "eps_hat = eps*sqrt(1-b2^t) in torch's formula, and defaults to eps=1e-7; "
               "tf2onnx names the initializers after TF ops "
               "('sequential_1/dense_1/Cast/ReadVariableOp:0'), so grad/ keys hold '/' and ':'; "
               "exported via tf2onnx.convert.from_function on a tf.function of the model")(None)


# Keras recurrent layers through tf2onnx: SimpleRNN and GRU become an ONNX Loop (TensorFlow's while
# loop, the weights loop-carried), LSTM an ONNX LSTM node whose W, R, B are the layer's weights
# re-ordered into ONNX's gates, B's second half zeros of tf2onnx's own (Keras has one bias).
# Every bias gets seeded noise (Keras initializes them to zeros), unit_forget_bias is off (it
# forces zeros); T = 6 steps of 5 features, 8 units, 4 classes.
KERAS_RNN_NOTES = ("reference grads from tf.GradientTape, adam_losses from torch.optim.Adam's rule "
                   "written out in TF (see keras_mlp); exported via tf2onnx.convert.from_function "
                   "with a symbolic batch")


def keras_rnn_model(layers):
    import keras
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((6, 5), name="x")] + layers + [
        keras.layers.Dense(4, bias_initializer=keras.initializers.RandomNormal(stddev=0.1, seed=9),
                           name="logits")])


def keras_bias(seed):
    import keras
    return keras.initializers.RandomNormal(stddev=0.2, seed=seed)


@register("keras_simplernn", "tf2onnx", 13, dynamic=True,
          notes="keras.layers.SimpleRNN(8) + Dense(4): an ONNX Loop; " + KERAS_RNN_NOTES)
def build_keras_simplernn():
    import keras
    return keras_rnn_model([keras.layers.SimpleRNN(8, bias_initializer=keras_bias(1), name="rnn")])


@register("keras_gru", "tf2onnx", 13, dynamic=True,
          notes="keras.layers.GRU(8) (reset_after=True: input and recurrent biases) + Dense(4): an "
                "ONNX Loop; " + KERAS_RNN_NOTES)
def build_keras_gru():
    import keras
    return keras_rnn_model([keras.layers.GRU(8, bias_initializer=keras_bias(2), name="gru")])


@register("keras_lstm", "tf2onnx", 13, dynamic=True,
          notes="keras.layers.LSTM(8, unit_forget_bias=False) + Dense(4): an ONNX LSTM whose B is "
                "[Keras bias, zeros]; grads of W, R, B in ONNX's gate order (i, o, f, c), B's "
                "second half 0; " + KERAS_RNN_NOTES)
def build_keras_lstm():
    import keras
    return keras_rnn_model([keras.layers.LSTM(8, unit_forget_bias=False, bias_initializer=keras_bias(3),
                                              name="lstm")])


@register("keras_conv1d_lstm", "tf2onnx", 13, dynamic=True,
          notes="keras.layers.Conv1D(8, 3, relu) + LSTM(8, unit_forget_bias=False) + Dense(4); "
                "the Conv1D kernel is folded into an [out, in, 1, k] initializer; " + KERAS_RNN_NOTES)
def build_keras_conv1d_lstm():
    import keras
    return keras_rnn_model([
        keras.layers.Conv1D(8, 3, activation="relu", bias_initializer=keras_bias(4), name="conv"),
        keras.layers.LSTM(8, unit_forget_bias=False, bias_initializer=keras_bias(5), name="lstm")])


# --- shared machinery ------------------------------------------------------------------------------

def seed_all(seed):
    torch = torch_mod()
    torch.manual_seed(seed)
    np.random.seed(seed)


def uniquify_params(module, seed):
    """Adds seeded noise to parameters that are constant or exact copies of another parameter."""
    torch = torch_mod()
    g = torch.Generator().manual_seed(seed + 1000)
    seen = {}
    changed = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            key = (tuple(p.shape), p.detach().numpy().tobytes())
            constant = p.numel() > 1 and bool((p == p.flatten()[0]).all()) or \
                (p.numel() == 1)
            if constant or key in seen:
                scale = 0.1 if constant else 0.02 * float(p.abs().mean()) + 1e-3
                p.add_(torch.randn(p.shape, generator=g) * scale)
                changed.append(name)
            seen[(tuple(p.shape), p.detach().numpy().tobytes())] = name
    return changed


def zero_dropout(module):
    """Sets every dropout to p=0; returns [(module name, former p)]."""
    from torch import nn
    ratios = []
    for name, m in module.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            ratios.append((name, m.p))
            m.p = 0.0
    return ratios


def check_no_dropout(module):
    from torch import nn
    for name, m in module.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            assert m.p == 0.0, f"dropout {name} has p={m.p}"
        if isinstance(m, nn.MultiheadAttention):
            assert m.dropout == 0.0, f"MultiheadAttention {name} has dropout={m.dropout}"
        dp = getattr(m, "drop_path", None)
        if dp is not None and hasattr(dp, "drop_prob"):
            assert dp.drop_prob == 0.0, name


def has_batchnorm(module):
    from torch import nn
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def first_output(out):
    if isinstance(out, (tuple, list)):
        return out[0]
    if hasattr(out, "logits"):
        return out.logits
    return out


def ce_loss(logits, labels, lm):
    import torch.nn.functional as F
    if lm:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return F.cross_entropy(logits, labels)


def op_types(model):
    ops = set()

    def walk(graph):
        for n in graph.node:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}")
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(model.graph)
    for f in model.functions:
        for n in f.node:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}")
    return sorted(ops)


def opset_of(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return -1


def map_params(named_params, model):
    """Maps each (torch name, np array) to the ONNX initializer that holds it.

    A parameter maps to an initializer holding exactly its values (same name preferred), or to one
    holding them in another layout: its 2-D transpose ("T") or a reshape to another shape of the
    same element order ("reshape") -- what an exporter's constant folding makes of
    Transpose(W) / Reshape(gamma). Such a layout is a bijection that only this initializer uses,
    so its gradient is the parameter's gradient in that layout, and elementwise Adam on it is the
    same as Adam on the parameter. Returns (mapping torch name -> (initializer, layout), list of
    'name (reason)' for the parameters that cannot be mapped)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    by_bytes = {}
    for iname, arr in inits.items():
        by_bytes.setdefault((arr.dtype.str, arr.tobytes()), []).append(iname)
    used = set()
    mapping, unmapped = {}, []
    for tname, value in named_params:
        exact, other = [], []
        for iname in by_bytes.get((value.dtype.str, value.tobytes()), []):
            (exact if inits[iname].shape == value.shape else other).append((iname, "reshape"))
        exact = [(n, "") for n, _ in exact]
        if value.ndim == 2:
            vt = np.ascontiguousarray(value.T)
            other += [(n, "T") for n in by_bytes.get((vt.dtype.str, vt.tobytes()), [])
                      if inits[n].shape == vt.shape and (n, "") not in exact]
        # more than one hit = the exporter made copies (e.g. untied a tied weight): not mappable
        hits = [h for h in exact + other if h[0] not in used]
        if len(hits) == 1:
            mapping[tname] = hits[0]
            used.add(hits[0][0])
            continue
        if len(hits) > 1:
            unmapped.append(f"{tname} (copied into {'+'.join(h[0] for h in hits)})")
        elif tname in inits:
            unmapped.append(f"{tname} (same name, other values: folded)")
        else:
            unmapped.append(f"{tname} (absent: folded into another initializer)")
    return mapping, unmapped


def layout_grad(g, layout, shape):
    if layout == "T":
        g = g.T
    return np.ascontiguousarray(g.reshape(shape)).astype(np.float32)


def layout_note(mapping):
    counts = collections.Counter(lay for _, lay in mapping.values() if lay)
    if not counts:
        return ""
    words = {"T": "transposed", "reshape": "reshaped"}
    return ("the exporter folded " + " and ".join(f"{n} {words[k]}" for k, n in counts.items())
            + " parameter(s) into new initializers (" +
            ", ".join(f"{t}->{i}" for t, (i, lay) in mapping.items() if lay) +
            "): grads are given in the initializer's layout")


def graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def dynamic_batch_of(model, input_names):
    for i in model.graph.input:
        if i.name in input_names:
            dims = i.type.tensor_type.shape.dim
            if dims and not dims[0].HasField("dim_value"):
                return 1
    return 0


def run_ort(path, feeds):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def save_npz(path, arrays):
    np.savez(path, **arrays)
    with np.load(path) as z:  # validate by re-loading
        assert sorted(z.files) == sorted(arrays), (sorted(z.files), sorted(arrays))
        for k, v in arrays.items():
            assert z[k].dtype == v.dtype and z[k].shape == v.shape, k
            assert np.array_equal(z[k], v), k
            assert v.dtype in (np.float32, np.int64), (k, v.dtype)
        assert z["loss"].shape == () and z["adam_losses"].shape == (ADAM_STEPS,)
        assert np.isfinite(z["adam_losses"]).all() and np.isfinite(z["loss"])


def export_torch(spec, module, inputs, path):
    torch = torch_mod()
    args = tuple(inputs.values())
    names = list(inputs)
    if spec.exporter == "torchscript":
        dyn = None
        if spec.dynamic:
            dyn = {n: {0: "batch"} for n in names}
            dyn["logits"] = {0: "batch"}
        mode = torch.onnx.TrainingMode.TRAINING if spec.train else torch.onnx.TrainingMode.EVAL
        torch.onnx.export(module, args, path, dynamo=False, opset_version=spec.opset,
                          input_names=names, output_names=["logits"], dynamic_axes=dyn,
                          do_constant_folding=spec.fold, training=mode)
    else:
        dyn = None
        if spec.dynamic:
            batch = torch.export.Dim("batch", min=1, max=1024)
            dyn = {n: {0: batch} for n in names}
        prog = torch.onnx.export(module, args, None, dynamo=True, opset_version=spec.opset,
                                 input_names=names, output_names=["logits"],
                                 dynamic_shapes=dyn, optimize=spec.optimize,
                                 external_data=False)
        prog.save(path, external_data=False)


def make_torch_model(spec):
    torch = torch_mod()
    seed_all(0)
    module, inputs, labels = spec.build()
    module = module.float()
    changed = uniquify_params(module, 0)
    exported = None
    if spec.train:
        # The file holds the train-mode module with its dropout; the references are the same
        # weights at dropout p=0 (deterministic, as the tests compare them: tests/zoo/zoo_test.cc
        # zeroes the exported dropout ratios; tests/passes/dropout_export_test.cc checks the
        # dropout itself statistically).
        exported = copy.deepcopy(module).train()
        ratios = zero_dropout(module)
        assert ratios, f"{spec.name}: a train-mode export needs a dropout"
    check_no_dropout(module)
    bn = has_batchnorm(module)
    lm = spec.loss == "cross_entropy_lm"
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]

    # reference loss and gradients (train mode: BatchNorm with batch statistics)
    ref = copy.deepcopy(module).train()
    ref_params = [p for _, p in ref.named_parameters() if p.requires_grad]
    out_train = first_output(ref(*inputs.values()))
    loss = ce_loss(out_train, labels, lm)
    grads = torch.autograd.grad(loss, ref_params)

    # Adam, full batch, fp32, loss before each update
    tr = copy.deepcopy(module).train()
    opt = torch.optim.Adam([p for p in tr.parameters() if p.requires_grad], lr=1e-3,
                           betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
    adam = []
    for _ in range(ADAM_STEPS):
        opt.zero_grad()
        step_loss = ce_loss(first_output(tr(*inputs.values())), labels, lm)
        adam.append(step_loss.item())
        step_loss.backward()
        opt.step()

    module.eval()
    with torch.no_grad():
        out_eval = first_output(module(*inputs.values())).detach().numpy()
    if not bn:
        d = float(np.abs(out_eval - out_train.detach().numpy()).max())
        assert d < 1e-5, f"train/eval outputs differ by {d}: randomness or mode-dependent layers"

    path = os.path.join(OUT, spec.name + ".onnx")
    export_torch(spec, exported if spec.train else module, inputs, path)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    in_names = graph_inputs(model)
    assert sorted(in_names) == sorted(inputs), (in_names, list(inputs))

    value_params = [(n, p.detach().numpy().astype(np.float32)) for n, p in named]
    mapping, unmapped = map_params(value_params, model)

    feeds = {k: v.numpy() for k, v in inputs.items()}
    # A train-mode export draws its dropout masks in onnxruntime too: nothing to compare with.
    ort_out = None if spec.train else run_ort(path, feeds)
    ort_err = None if ort_out is None else float(np.abs(ort_out - out_eval).max())

    arrays = dict(feeds)
    arrays["labels"] = labels.numpy().astype(np.int64)
    arrays["loss"] = np.array(loss.item(), dtype=np.float32)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    for (tname, _), g in zip(named, grads):
        if tname in mapping:
            iname, layout = mapping[tname]
            arrays["grad/" + iname] = layout_grad(g.detach().numpy(), layout, shapes[iname])
    arrays["adam_losses"] = np.array(adam, dtype=np.float32)
    save_npz(os.path.join(OUT, spec.name + ".npz"), arrays)

    notes = [spec.notes] if spec.notes else []
    flag = (f"do_constant_folding={spec.fold}" if spec.exporter == "torchscript"
            else f"optimize={spec.optimize}")
    if flag not in spec.notes:
        notes.append(flag)
    if layout_note(mapping):
        notes.append(layout_note(mapping))
    if changed:
        notes.append(f"seeded noise added to {len(changed)} constant/duplicate params")
    if spec.train:
        notes.append("exported in train() mode with dropout " +
                     ", ".join(f"{n} p={p}" for n, p in ratios) +
                     "; references (loss, grads, adam_losses) are the module at dropout p=0 (the "
                     "zoo test zeroes the exported ratios; the dropout itself is checked "
                     "statistically by tests/passes/dropout_export_test.cc); no onnxruntime "
                     "comparison (it draws its own masks)")
    return dict(model=model, bn=bn, mapped=len(mapping), unmapped=unmapped, ort_err=ort_err,
                dynamic=dynamic_batch_of(model, inputs), notes="; ".join(notes),
                loss=float(loss.item()), n_params=len(named))


def make_keras_mlp(spec):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import tf2onnx

    keras.utils.set_random_seed(0)
    init_b = keras.initializers.RandomNormal(stddev=0.1, seed=1)
    model = keras.Sequential([
        keras.Input((16,), name="x"),
        keras.layers.Dense(32, activation="relu", bias_initializer=init_b, name="dense"),
        keras.layers.Dense(5, bias_initializer=keras.initializers.RandomNormal(stddev=0.1, seed=2),
                           name="logits"),
    ])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 16)).astype(np.float32)
    labels = rng.integers(0, 5, BATCH).astype(np.int64)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    init_values = [v.numpy().copy() for v in model.trainable_variables]
    names = [v.path for v in model.trainable_variables]

    with tf.GradientTape() as tape:
        loss = ce(labels, model(x, training=True))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    # torch.optim.Adam's rule, written out (see the notes: Keras's Adam places epsilon elsewhere)
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = [np.zeros_like(v) for v in init_values]
    s = [np.zeros_like(v) for v in init_values]
    adam = []
    for t in range(1, ADAM_STEPS + 1):
        with tf.GradientTape() as tape:
            step_loss = ce(labels, model(x, training=True))
        adam.append(float(step_loss.numpy()))
        gs = tape.gradient(step_loss, model.trainable_variables)
        for i, (var, g) in enumerate(zip(model.trainable_variables, gs)):
            g = g.numpy()
            m[i] = b1 * m[i] + (1 - b1) * g
            s[i] = b2 * s[i] + (1 - b2) * g * g
            mhat = m[i] / (1 - b1 ** t)
            vhat = s[i] / (1 - b2 ** t)
            var.assign((var.numpy() - lr * mhat / (np.sqrt(vhat) + eps)).astype(np.float32))
    for var, v in zip(model.trainable_variables, init_values):
        var.assign(v)
    out = model(x, training=False).numpy()

    spec_in = (tf.TensorSpec((None, 16), tf.float32, name="x"),)

    @tf.function(input_signature=spec_in)
    def fwd(x):
        return {"logits": model(x, training=False)}

    proto, _ = tf2onnx.convert.from_function(fwd, input_signature=spec_in, opset=spec.opset)
    path = os.path.join(OUT, spec.name + ".onnx")
    onnx.save(proto, path)
    model_pb = onnx.load(path)
    onnx.checker.check_model(model_pb, full_check=True)
    in_names = graph_inputs(model_pb)
    assert in_names == ["x"], in_names

    value_params = list(zip(names, [v.astype(np.float32) for v in init_values]))
    mapping, unmapped = map_params(value_params, model_pb)
    ort_out = run_ort(path, {"x": x})
    ort_err = None if ort_out is None else float(np.abs(ort_out - out).max())

    arrays = {"x": x, "labels": labels, "loss": np.array(float(loss.numpy()), np.float32)}
    shapes = {i.name: tuple(i.dims) for i in model_pb.graph.initializer}
    for tname, g in zip(names, grads):
        if tname in mapping:
            iname, layout = mapping[tname]
            arrays["grad/" + iname] = layout_grad(g, layout, shapes[iname])
    arrays["adam_losses"] = np.array(adam, dtype=np.float32)
    save_npz(os.path.join(OUT, spec.name + ".npz"), arrays)
    notes = "; ".join(x for x in (spec.notes, layout_note(mapping)) if x)
    return dict(model=model_pb, bn=False, mapped=len(mapping), unmapped=unmapped,
                ort_err=ort_err, dynamic=dynamic_batch_of(model_pb, ["x"]), notes=notes,
                loss=float(loss.numpy()), n_params=len(names))


def keras_layouts(value):
    """The layouts tf2onnx gives a Keras variable of this value: (name, f) with f linear, applied
    alike to the value and its gradient. Every permutation of its axes followed by a reshape (a
    Dense kernel as is; a Conv2D kernel [kh, kw, in, out] -> [out, in, kh, kw]; a depthwise
    kernel [kh, kw, in, 1] -> [in, 1, kh, kw]; a Conv1D kernel [k, in, out] -> [out, in, 1, k]),
    each also negated (a PReLU slope, stored as -alpha); and for [rows, 4H] LSTM kernels and [4H]
    biases, tf2onnx's LSTM form: gates i, f, c, o -> ONNX's i, o, f, c, the kernels transposed,
    the bias followed by zeros (ONNX's recurrent bias, which Keras lacks), each with a leading
    direction axis."""
    import itertools
    out = []
    for p in itertools.permutations(range(value.ndim)):
        name = "perm" + "".join(map(str, p))
        out.append((name, lambda v, p=p: np.ascontiguousarray(np.transpose(v, p))))
        out.append(("negated " + name, lambda v, p=p: np.ascontiguousarray(-np.transpose(v, p))))
    if value.shape[-1] % 4 == 0:
        h = value.shape[-1] // 4
        order = np.concatenate([np.arange(h) + k * h for k in (0, 3, 1, 2)])
        if value.ndim == 2:
            out.append(("lstm_kernel", lambda v: np.ascontiguousarray(v[:, order].T[None])))
        if value.ndim == 1:
            out.append(("lstm_bias", lambda v: np.concatenate([v[order], np.zeros_like(v)])[None]))
    return out


def map_keras_variables(variables, model_pb):
    """Maps each Keras variable (path, value) to the initializer holding it in one of
    keras_layouts: returns {path: (initializer, f, layout name or "" for as is)} and the unmapped
    paths with the reason."""
    inits = {i.name: numpy_helper.to_array(i) for i in model_pb.graph.initializer}
    mapping, unmapped, used = {}, [], set()
    for path, value in variables:
        hits = []
        for lname, f in keras_layouts(value):
            v = f(value)
            for iname, arr in inits.items():
                if arr.size == v.size and arr.dtype == v.dtype and np.array_equal(arr, v.reshape(arr.shape)):
                    hits.append((iname, lname, f))
        names = sorted({h[0] for h in hits} - used)
        if len(names) != 1:
            unmapped.append(f"{path} ({'no initializer holds it' if not names else 'held by ' + '+'.join(names)})")
            continue
        iname = names[0]
        used.add(iname)
        _, lname, f = next(h for h in hits if h[0] == iname)
        same = lname == "perm" + "".join(map(str, range(value.ndim))) and inits[iname].shape == value.shape
        mapping[path] = (iname, f, "" if same else lname)
    return mapping, unmapped


def make_keras_model(spec):
    """A Keras model from spec.build() through tf2onnx, checked like keras_mlp, with its variables
    mapped to initializers by map_keras_variables. spec.train: the tf.function calls the model
    with training=True (BatchNormalization on batch moments, as Keras trains it), so the export,
    its onnxruntime check and the references all compute the training forward. spec.dynamic: a
    symbolic batch axis, else a batch of BATCH."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import tf2onnx

    # Keras's layer names (hence TF's op names) must not depend on which models ran before.
    # (tf2onnx still names the constants it deduplicates in no fixed order: regenerated files are
    # equivalent, not byte-identical.)
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = spec.build()
    in_shape = tuple(model.inputs[0].shape[1:])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH,) + in_shape).astype(np.float32)
    n_classes = model.outputs[0].shape[-1]
    labels = rng.integers(0, n_classes, BATCH).astype(np.int64)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    init_values = [v.numpy().copy() for v in model.trainable_variables]
    # Training-mode calls update BatchNorm's moving statistics; the export must not see them move.
    all_values = [v.numpy().copy() for v in model.variables]
    names = [v.path for v in model.trainable_variables]

    with tf.GradientTape() as tape:
        loss = ce(labels, model(x, training=True))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8  # torch.optim.Adam's rule (see keras_mlp's notes)
    m = [np.zeros_like(v) for v in init_values]
    s = [np.zeros_like(v) for v in init_values]
    adam = []
    for t in range(1, ADAM_STEPS + 1):
        with tf.GradientTape() as tape:
            step_loss = ce(labels, model(x, training=True))
        adam.append(float(step_loss.numpy()))
        gs = tape.gradient(step_loss, model.trainable_variables)
        for i, (var, g) in enumerate(zip(model.trainable_variables, gs)):
            g = g.numpy()
            m[i] = b1 * m[i] + (1 - b1) * g
            s[i] = b2 * s[i] + (1 - b2) * g * g
            var.assign((var.numpy() - lr * (m[i] / (1 - b1 ** t)) /
                        (np.sqrt(s[i] / (1 - b2 ** t)) + eps)).astype(np.float32))
    for var, v in zip(model.variables, all_values):
        var.assign(v)
    out = model(x, training=spec.train).numpy()
    for var, v in zip(model.variables, all_values):
        var.assign(v)

    spec_in = (tf.TensorSpec((None if spec.dynamic else BATCH,) + in_shape, tf.float32, name="x"),)

    @tf.function(input_signature=spec_in)
    def fwd(x):
        return {"logits": model(x, training=spec.train)}

    proto, _ = tf2onnx.convert.from_function(fwd, input_signature=spec_in, opset=spec.opset)
    path = os.path.join(OUT, spec.name + ".onnx")
    onnx.save(proto, path)
    model_pb = onnx.load(path)
    onnx.checker.check_model(model_pb, full_check=True)
    assert graph_inputs(model_pb) == ["x"], graph_inputs(model_pb)

    mapping, unmapped = map_keras_variables(list(zip(names, init_values)), model_pb)
    ort_out = run_ort(path, {"x": x})
    ort_err = None if ort_out is None else float(np.abs(ort_out - out).max())

    arrays = {"x": x, "labels": labels, "loss": np.array(float(loss.numpy()), np.float32)}
    shapes = {i.name: tuple(i.dims) for i in model_pb.graph.initializer}
    for path_, g in zip(names, grads):
        if path_ in mapping:
            iname, f, _ = mapping[path_]
            arrays["grad/" + iname] = np.ascontiguousarray(f(g).reshape(shapes[iname])).astype(np.float32)
    arrays["adam_losses"] = np.array(adam, dtype=np.float32)
    save_npz(os.path.join(OUT, spec.name + ".npz"), arrays)
    moved = [f"{p}->{i} ({lay})" for p, (i, _, lay) in mapping.items() if lay]
    notes = "; ".join(x for x in (spec.notes, "layouts: " + ", ".join(moved) if moved else "") if x)
    return dict(model=model_pb, bn=False, mapped=len(mapping), unmapped=unmapped,
                ort_err=ort_err, dynamic=dynamic_batch_of(model_pb, ["x"]), notes=notes,
                loss=float(loss.numpy()), n_params=len(names))


def read_manifest():
    rows = collections.OrderedDict()
    if os.path.exists(MANIFEST):
        with open(MANIFEST) as f:
            header = f.readline().rstrip("\n").split("\t")
            for line in f:
                vals = line.rstrip("\n").split("\t")
                row = dict(zip(header, vals))
                rows[row["name"]] = row
    return rows


def write_manifest(rows):
    order = [n for n in SPECS if n in rows] + [n for n in rows if n not in SPECS]
    with open(MANIFEST, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for n in order:
            f.write("\t".join(str(rows[n].get(c, "")).replace("\t", " ") for c in COLUMNS) + "\n")


def markdown_table():
    """The manifest as the Markdown table of tools/zoo/README.md."""
    lines = ["| name | exporter | opset | loss, class axis | dyn. batch | BN train | params mapped "
             "/ unmapped | onnx KB | npz KB | ONNX op types |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n, r in read_manifest().items():
        kb = [f"{os.path.getsize(os.path.join(OUT, n + ext)) / 1024:.0f}"
              if os.path.exists(os.path.join(OUT, n + ext)) else "-" for ext in (".onnx", ".npz")]
        unm = len(r["params_unmapped"].split(",")) if r.get("params_unmapped") else 0
        lines.append(f"| {n} | {r['exporter']} | {r['opset']} | {r.get('loss', '')}, "
                     f"{r.get('class_axis', '')} | {r.get('dynamic_batch', '')} | "
                     f"{r.get('bn_train', '')} | {r.get('n_params_mapped', '')} / {unm} | "
                     f"{kb[0]} | {kb[1]} | {r.get('op_types', '').replace(',', ', ')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="models to (re)generate; default: all")
    ap.add_argument("--list", action="store_true", help="list the models")
    ap.add_argument("--table", action="store_true",
                    help="print the manifest as the Markdown table of tools/zoo/README.md")
    a = ap.parse_args()
    if a.table:
        print(markdown_table())
        return 0
    if a.list:
        for s in SPECS.values():
            print(f"{s.name}\t{s.exporter}\topset {s.opset}")
        return 0
    names = a.names or list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        sys.exit(f"unknown model(s): {unknown}")
    os.makedirs(OUT, exist_ok=True)
    rows = read_manifest()
    failed = []
    for name in names:
        spec = SPECS[name]
        print(f"== {name} ({spec.exporter}, opset {spec.opset})", flush=True)
        try:
            if spec.exporter == "tf2onnx":
                r = make_keras_model(spec) if spec.build is not None else make_keras_mlp(spec)
            else:
                r = make_torch_model(spec)
        except Exception as e:  # record, keep going
            traceback.print_exc()
            failed.append(name)
            rows[name] = dict(name=name, exporter=spec.exporter, opset=spec.opset,
                              notes=f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        model = r["model"]
        lm = spec.loss == "cross_entropy_lm"
        size = os.path.getsize(os.path.join(OUT, name + ".onnx"))
        assert size < MAX_ONNX_BYTES, f"{name}.onnx is {size} bytes"
        rows[name] = dict(
            name=name, exporter=spec.exporter, opset=opset_of(model),
            loss="cross_entropy", class_axis=-1 if lm else 1, dynamic_batch=r["dynamic"],
            op_types=",".join(op_types(model)), n_params_mapped=r["mapped"],
            params_unmapped=",".join(r["unmapped"]), bn_train=int(r["bn"]),
            ort_max_abs_err="n/a" if r["ort_err"] is None else f"{r['ort_err']:.3g}",
            notes=r["notes"])
        print(f"   opset={opset_of(model)} loss={r['loss']:.6f} params mapped "
              f"{r['mapped']}/{r['n_params']} unmapped={r['unmapped']} ort_err={r['ort_err']} "
              f"onnx={size}B", flush=True)
    write_manifest(rows)
    if failed:
        print("FAILED:", " ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
