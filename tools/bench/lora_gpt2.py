#!/usr/bin/env python3
"""LoRA vs full fine-tune on GPT-2 small (issue 37, item 5), and HF PEFT on PyTorch beside it.

  python tools/bench/lora_gpt2.py export DIR   # DIR/gpt2s.onnx (124M, random init) + DIR/gpt2s.npz
  python tools/bench/lora_gpt2.py peft DIR [--steps=N] [--full]
                                               # PEFT LoRA r=8 (or --full: plain fine-tune) on the
                                               # same weights and batch, bf16 autocast on the CPU

The model is transformers' GPT2LMHeadModel with GPT2Config() (12 layers, d=768, V=50257),
exported with torch's dynamo exporter for a fixed 4 x 128 batch. tools/bench/lora_gpt2.sh runs
mixtrain on it (LoRA rank 8 on the attention and MLP projections, the default targets, vs a full
fine-tune, bf16 AMP) and this script's PEFT run, each under /usr/bin/time for the peak RSS.
Needs torch, transformers, onnx, peft (a venv of its own; see docs/lora.md).
"""
import argparse
import os
import resource
import statistics
import time

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

BATCH, SEQ = 4, 128


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def model():
    torch.manual_seed(0)
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "eager"
    return GPT2LMHeadModel(cfg).float()


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 50257, (BATCH, SEQ), generator=g), torch.randint(0, 50257, (BATCH, SEQ), generator=g)


def export(d):
    os.makedirs(d, exist_ok=True)
    ids, labels = batch()
    prog = torch.onnx.export(Logits(model().eval()), (ids,), None, dynamo=True, opset_version=18,
                             input_names=["input_ids"], output_names=["logits"], optimize=False,
                             external_data=True)
    prog.save(os.path.join(d, "gpt2s.onnx"), external_data=True)
    np.savez(os.path.join(d, "gpt2s.npz"), input_ids=ids.numpy(), labels=labels.numpy())


def train(steps, full):
    m = Logits(model().train())
    if not full:
        from peft import LoraConfig, get_peft_model
        m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn", "c_proj", "c_fc"],
                                         lora_dropout=0.0, fan_in_fan_out=True))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4)
    ids, labels = batch()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = m(ids)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    kind = "full fine-tune" if full else "PEFT LoRA r=8"
    print(f"torch {torch.__version__} {kind}: trainable {sum(p.numel() for p in params)} params, "
          f"median step {1000 * statistics.median(times[2:]):.0f} ms over {steps - 2} steps "
          f"(first {1000 * times[0]:.0f} ms), loss {loss.item():.4f}, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
          f"{torch.get_num_threads()} threads")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["export", "peft"])
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args()
    export(a.dir) if a.what == "export" else train(a.steps, a.full)
