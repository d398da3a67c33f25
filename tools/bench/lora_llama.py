#!/usr/bin/env python3
"""LoRA on a 1.1B-parameter Llama-shaped model (issue 37, item 6), and HF PEFT on PyTorch beside it.

  python tools/bench/lora_llama.py export DIR [--layers 22]  # DIR/llama.onnx (+ external data), DIR/llama.npz
  python tools/bench/lora_llama.py peft DIR [--steps=N] [--layers 22]
                                               # PEFT LoRA r=8 on the same weights and batch,
                                               # bf16 autocast on the CPU

The model is transformers' LlamaForCausalLM with TinyLlama-1.1B's shape (22 layers, d = 2048, MLP
5632, 32 query heads and 4 key/value heads, vocabulary 32000: 1.10B parameters), random init
(seed 0), eager attention, returning the logits; one batch of 1 x 128 tokens. It is exported with
torch's dynamo exporter, the weights in an external data file (4.4 GB in fp32).
tools/bench/lora_llama.sh runs mixtrain on it (LoRA rank 8 on the products of the repeated blocks,
the default targets, bf16 AMP: the frozen weights stored in bf16) and this script's PEFT run (r=8 on
q, k, v, o, gate, up and down), each under /usr/bin/time for the peak RSS.
pip packages: torch, transformers, onnx, onnxscript, peft, numpy.
"""
import argparse
import os
import resource
import statistics
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, SEQ = 1, 128


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def model(layers):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    return LlamaForCausalLM(cfg).float()


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 32000, (BATCH, SEQ), generator=g), torch.randint(0, 32000, (BATCH, SEQ), generator=g)


def export(d, layers):
    os.makedirs(d, exist_ok=True)
    ids, labels = batch()
    m = model(layers).eval()
    print(f"{sum(p.numel() for p in m.parameters()) / 1e9:.3f}B parameters", flush=True)
    prog = torch.onnx.export(Logits(m), (ids,), None, dynamo=True, opset_version=18,
                             input_names=["input_ids"], output_names=["logits"], optimize=False,
                             external_data=True)
    prog.save(os.path.join(d, "llama.onnx"), external_data=True)
    np.savez(os.path.join(d, "llama.npz"), input_ids=ids.numpy(), labels=labels.numpy())


def train(steps, layers):
    from peft import LoraConfig, get_peft_model
    m = get_peft_model(Logits(model(layers).train()),
                       LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"]))
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
    print(f"torch {torch.__version__} PEFT LoRA r=8: trainable {sum(p.numel() for p in params)} params, "
          f"median step {1000 * statistics.median(times[2:]):.0f} ms over {steps - 2} steps "
          f"(first {1000 * times[0]:.0f} ms), loss {loss.item():.4f}, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
          f"{torch.get_num_threads()} threads")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["export", "peft"])
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=22)
    a = ap.parse_args()
    export(a.dir, a.layers) if a.what == "export" else train(a.steps, a.layers)
