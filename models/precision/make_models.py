#!/usr/bin/env python3
"""Exports the precision debugger's test models (issue 16) with torch.onnx (TorchScript exporter).

pip packages: torch, onnx. Run: python3 models/precision/make_models.py  (writes beside itself)

logit_scale_overflow.onnx  A Fashion-MNIST classifier with a CLIP-style logit scale (x 64) on
                     features that are not normalized: its first layer is initialized large
                     (|h| ~ 1e3, as raw 0..255 pixels would give), so the scaled logits pass
                     fp16's 65504. In fp16 AMP the Mul (an "infer" op, so fp16 after the fp16
                     Gemm) overflows and every step skips; fp32 trains. The debugger must name
                     the Mul node, and pinning it to fp32 must let fp16 AMP train.
                     (The sum-of-squares pattern, sqrt(sum(h * h)), is not a test: mixtrain's
                     policy already keeps a Mul that feeds ReduceSum in fp32.)
autoencoder.onnx     784-64-784 autoencoder trained with MSE on its own input: its gradients are
                     ~1e-5 and below, in fp16's subnormal range, and flush to zero without loss
                     scaling; dynamic loss scaling lifts them (the underflow demonstration).
"""
import os

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class LogitScaleClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)
        with torch.no_grad():
            self.fc1.weight.mul_(4000.0)  # |h| ~ 1e3: what raw 0..255 pixels would give

    def forward(self, x):
        h = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(h) * 64.0


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(784, 64)
        self.dec = nn.Linear(64, 784)

    def forward(self, x):
        return self.dec(torch.relu(self.enc(x)))


def export(model, example, name):
    path = os.path.join(HERE, name)
    torch.onnx.export(model, (example,), path, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    print("wrote", path)


def main():
    torch.manual_seed(0)
    export(LogitScaleClassifier(), torch.rand(2, 1, 28, 28), "logit_scale_overflow.onnx")
    export(AutoEncoder(), torch.rand(2, 784), "autoencoder.onnx")


if __name__ == "__main__":
    main()
