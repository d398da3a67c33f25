#!/usr/bin/env python3
"""Writes the LoRA parity fixtures tests/data/lora/{gpt2,cnn}_lora.{onnx,npz,adapter.onnx} with HF PEFT.

A transformers GPT2LMHeadModel (2 layers, d=64, random init, fixed seed) is exported to ONNX
with torch's dynamo exporter (the base model, no adapters: mixtrain adds its own). PEFT's
LoraConfig(r=4, lora_alpha=8, target_modules=c_attn/c_proj/c_fc, lora_dropout=0) wraps the same
model; lora_B is drawn random (PEFT starts it at zero, which would make every lora_A gradient
zero and the merge a no-op) so the fixture checks both factors. The npz holds, in mixtrain's
layout (A [in, rank] = lora_A.weight^T, B [rank, out] = lora_B.weight^T, keyed
"<ONNX weight>.lora_A|B"):

  input_ids, labels [N, T]     one batch
  loss                         PEFT's mean cross-entropy over the N*T logits
  grad/<adapter>               PEFT's gradient of that loss for each A and B
  adam_losses [10]             torch.optim.Adam(lr=1e-3) on the adapters, loss before each update
  adam_final/<adapter>         the adapters after those 10 updates
  merged_logits                logits of merge_and_unload() (initial adapters), run in onnxruntime

gpt2_lora.adapter.onnx holds the initial A and B as mixtrain's adapter file (docs/lora.md), read
with TrainConfig.lora_init.

cnn_lora.* is the same for LoRA on Conv kernels: a torch.nn CNN (3x3 convs with and without bias,
a stride-2 conv, a 1x1 conv, global average pooling, a Linear head; input [4, 3, 8, 8], 10
classes) exported with torch's TorchScript exporter, PEFT LoraConfig(r=4, lora_alpha=8) on the four
convs and the head. A Conv's adapters keep PEFT's layout (A = lora_A.weight [r, in, kh, kw],
B = lora_B.weight [out, r, 1, 1]); the head's are transposed as GPT-2's. The arrays are named as
above with "input" for input_ids.

Run with a Python that has torch, transformers, onnx, onnxruntime and peft:
python tools/lora/make_lora_fixture.py [OUT_DIR] [gpt2|cnn ...]   (default: both)
"""
import copy
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

RANK, ALPHA, STEPS, LR = 4, 8, 10, 1e-3
TARGETS = ["c_attn", "c_proj", "c_fc"]


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def ce(logits, labels):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def draw_adapters(peft_model, onnx_names, b_std):
    """PEFT's adapters by mixtrain's names ("<ONNX weight>.lora_A|B") and each one's base layer.
    B is drawn random: PEFT's zero B would make every A gradient zero and the merge a no-op."""
    adapters, bases = {}, {}
    gen = torch.Generator().manual_seed(1)
    for name, mod in peft_model.named_modules():
        if not hasattr(mod, "lora_A") or "default" not in mod.lora_A:
            continue
        onnx_w = name.replace("base_model.model.", "") + ".weight"
        assert onnx_w in onnx_names, f"{onnx_w} is not an initializer of the export"
        with torch.no_grad():
            b = mod.lora_B["default"].weight
            b.copy_(torch.randn(b.shape, generator=gen) * b_std)
        adapters[onnx_w + ".lora_A"] = mod.lora_A["default"].weight
        adapters[onnx_w + ".lora_B"] = mod.lora_B["default"].weight
        bases[onnx_w + ".lora_A"] = bases[onnx_w + ".lora_B"] = mod.base_layer
    return adapters, bases


def write_reference(out, stem, peft_model, adapters, layout, loss_fn, input_name, x, labels, export, opset):
    """<stem>.npz: the batch, PEFT's loss and adapter gradients, the merged model's logits in
    onnxruntime (`export(model, path)` writes it), 10 Adam steps; <stem>.adapter.onnx: the initial
    adapters as mixtrain's adapter file. `layout(name, tensor)` gives mixtrain's layout."""
    init = {k: layout(k, p) for k, p in adapters.items()}
    arrays = {input_name: x.numpy(), "labels": labels.numpy()}
    loss = loss_fn(peft_model(x), labels)
    grads = torch.autograd.grad(loss, list(adapters.values()))
    arrays["loss"] = np.float32(loss.item())
    for (k, _), g in zip(adapters.items(), grads):
        arrays["grad/" + k] = layout(k, g)

    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    merged_path = os.path.join(out, "merged_tmp.onnx")
    export(merged, merged_path)
    ort_logits = ort.InferenceSession(merged_path).run(None, {input_name: x.numpy()})[0]
    os.remove(merged_path)
    with torch.no_grad():
        assert np.abs(ort_logits - merged(x).numpy()).max() < 1e-4
        assert np.abs(ort_logits - peft_model(x).numpy()).max() < 1e-4, "merge_and_unload changed the function"
    arrays["merged_logits"] = ort_logits.astype(np.float32)

    opt = torch.optim.Adam(list(adapters.values()), lr=LR)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss = loss_fn(peft_model(x), labels)
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    arrays["adam_losses"] = np.array(losses, np.float32)
    for k, p in adapters.items():
        arrays["adam_final/" + k] = layout(k, p)
    np.savez(os.path.join(out, stem + ".npz"), **arrays)

    graph = onnx.helper.make_graph([], "lora_adapters", [], [],
                                   [numpy_helper.from_array(v, k) for k, v in init.items()])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    onnx.helper.set_model_props(model, {"mixtrain.lora.rank": str(RANK), "mixtrain.lora.alpha": str(ALPHA)})
    onnx.save(model, os.path.join(out, stem + ".adapter.onnx"))
    print(f"{stem}: loss {loss.item():.6f}, adam {losses[0]:.4f} -> {losses[-1]:.4f}, wrote {out}")


def transposed(_, p):  # a Linear's lora_A.weight [r, in] -> A [in, r]; lora_B.weight [out, r] -> B [r, out]
    return p.detach().t().contiguous().numpy().astype(np.float32)


def gpt2(out):
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=64, n_positions=16, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, initializer_range=0.2)
    cfg._attn_implementation = "eager"
    base = GPT2LMHeadModel(cfg).float().eval()
    ids = torch.randint(0, 64, (4, 8))
    labels = torch.randint(0, 64, (4, 8))

    def export(model, path):
        torch.onnx.export(model, (ids,), None, dynamo=True, opset_version=18, input_names=["input_ids"],
                          output_names=["logits"], optimize=False, external_data=False).save(path, external_data=False)

    onnx_path = os.path.join(out, "gpt2_lora.onnx")
    export(Logits(base), onnx_path)
    onnx_names = {i.name for i in onnx.load(onnx_path).graph.initializer}
    peft_model = get_peft_model(Logits(copy.deepcopy(base)),
                                LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0,
                                           fan_in_fan_out=True))
    adapters, _ = draw_adapters(peft_model, onnx_names, 0.05)
    assert len(adapters) == 16, sorted(adapters)
    write_reference(out, "gpt2_lora", peft_model, adapters, transposed, ce, "input_ids", ids, labels, export, 18)


class SmallCnn(torch.nn.Module):
    """Convs of several kinds PEFT adapts (no dilation: PEFT's lora_A drops it) and a Linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.conv3 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.conv4 = torch.nn.Conv2d(16, 12, 1)
        self.fc = torch.nn.Linear(12, 10)

    def forward(self, x):
        r = torch.nn.functional.relu
        x = r(self.conv4(r(self.conv3(r(self.conv2(r(self.conv1(x))))))))
        return self.fc(x.mean(dim=(2, 3)))


def cnn(out):
    torch.manual_seed(0)
    base = SmallCnn().float().eval()
    x = torch.randn(4, 3, 8, 8)
    labels = torch.randint(0, 10, (4,))

    def export(model, path, dynamic=False):
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}} if dynamic else None)

    onnx_path = os.path.join(out, "cnn_lora.onnx")
    export(base, onnx_path, dynamic=True)
    onnx_names = {i.name for i in onnx.load(onnx_path).graph.initializer}
    targets = ["conv1", "conv2", "conv3", "conv4", "fc"]
    peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets,
                                                                lora_dropout=0.0))
    adapters, bases = draw_adapters(peft_model, onnx_names, 0.2)
    assert len(adapters) == 10, sorted(adapters)

    def layout(k, p):  # a Conv's adapters as PEFT holds them; a Linear's transposed
        if isinstance(bases[k], torch.nn.Conv2d):
            return p.detach().contiguous().numpy().astype(np.float32)
        return transposed(k, p)

    write_reference(out, "cnn_lora", peft_model, adapters, layout, torch.nn.functional.cross_entropy, "input", x,
                    labels, export, 17)


def main():
    args = sys.argv[1:]
    out = args.pop(0) if args and args[0] not in ("gpt2", "cnn") else os.path.join(
        os.path.dirname(__file__), "../../tests/data/lora")
    os.makedirs(out, exist_ok=True)
    for name in args or ["gpt2", "cnn"]:
        {"gpt2": gpt2, "cnn": cnn}[name](out)


if __name__ == "__main__":
    main()
