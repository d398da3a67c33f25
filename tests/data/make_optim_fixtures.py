#!/usr/bin/env python3
"""Writes the optimizer-parity fixtures of tests/runtime/optimizer_parity_test.cc with PyTorch.

pip packages: torch, onnx, numpy

    python3 tests/data/make_optim_fixtures.py

Outputs under tests/data/optim/:
  mlp.onnx            2-layer MLP with bias (8 -> 16 -> ReLU -> 4), fixed weights, opset 17,
                      input "x" f32 N x 8, output "logits" N x 4
  batch.npz           the fixed batch: "x" (16 x 8 f32), "labels" (16 i64)
  <case>.textproto    the mixtrain TrainConfig of each case (fp32 preset, cross-entropy, mean)
  <case>.npz          "loss" (10 f32: loss of each step's batch, before its update), "lr" (10 f32:
                      the learning rate of each update), and the final parameters by ONNX
                      initializer name; clip cases also hold "grad_norm" (the pre-clip global norm
                      of each step, to show clipping was active)
  schedules.npz + schedule_<name>.textproto
                      LR of updates 0..N-1 from torch.optim.lr_scheduler (StepLR,
                      CosineAnnealingLR, LinearLR warmup followed by CosineAnnealingLR)
  mlp_bn.onnx         the MLP with BatchNorm1d after fc1 (exported in eval form), for the state
                      that is not a parameter (running statistics)
  tiny_loss_mlp.onnx  the same MLP with a loss output "small_loss" = 1e-7 * mean((logits - t)^2),
                      inputs "x" and "t" (N x 4 f32): its raw fp16 gradients flush to zero
                      (tests/runtime/amp_mechanism_test.cc)

The configs are written here and only read by the C++ test, so the numbers on both sides come
from the same settings; the expected numbers come from torch.optim, never from mixtrain.
"""

import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim")
STEPS = 10


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class MlpBn(torch.nn.Module):
    """The MLP with a BatchNorm: its running statistics are training state too."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class TinyLoss(torch.nn.Module):
    """1e-7 * mse: with fp16 gradients and no loss scaling, every gradient rounds to zero."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x, t):
        d = self.mlp(x) - t
        return 1e-7 * (d * d).mean()


# name -> (torch optimizer factory, mixtrain optimizer textproto, clip_grad_norm or 0)
CASES = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.1), "kind: SGD lr: 0.1", 0),
    "sgd_momentum": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                     "kind: SGD lr: 0.1 momentum: 0.9", 0),
    "sgd_nesterov": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                     "kind: SGD lr: 0.1 momentum: 0.9 nesterov: true", 0),
    "sgd_weight_decay": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.05),
                         "kind: SGD lr: 0.1 momentum: 0.9 weight_decay: 0.05", 0),
    "adam": (lambda p: torch.optim.Adam(p, lr=0.01), "kind: ADAM lr: 0.01", 0),
    "adam_l2": (lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
                "kind: ADAM lr: 0.01 beta1: 0.8 beta2: 0.99 epsilon: 1e-6 weight_decay: 0.05", 0),
    "adamw": (lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
              "kind: ADAMW lr: 0.01 weight_decay: 0.1", 0),
    "adagrad": (lambda p: torch.optim.Adagrad(p, lr=0.1), "kind: ADAGRAD lr: 0.1 epsilon: 1e-10", 0),
    "adagrad_weight_decay": (lambda p: torch.optim.Adagrad(p, lr=0.1, weight_decay=0.05),
                             "kind: ADAGRAD lr: 0.1 epsilon: 1e-10 weight_decay: 0.05", 0),
    # Clipping: max norms below the gradient norms of every step, so each step is clipped.
    "sgd_clip": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                 "kind: SGD lr: 0.1 momentum: 0.9 clip_grad_norm: 0.25", 0.25),
    "adam_clip": (lambda p: torch.optim.Adam(p, lr=0.01), "kind: ADAM lr: 0.01 clip_grad_norm: 0.1", 0.1),
}

# Schedules applied during training: name -> (torch optimizer factory, optimizer textproto,
# schedule textproto, torch scheduler factory).
SCHEDULED = {
    "sgd_momentum_step_lr": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                             "kind: SGD lr: 0.1 momentum: 0.9", "kind: STEP step_size: 3 gamma: 0.5",
                             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    "adam_warmup_cosine": (lambda p: torch.optim.Adam(p, lr=0.02), "kind: ADAM lr: 0.02",
                           "kind: COSINE warmup_steps: 3 min_lr: 0.001",
                           lambda o: warmup_cosine(o, 3, STEPS - 3, 0.001)),
}


def warmup_cosine(opt, warmup, t_max, eta_min):
    """Linear warmup from lr/warmup to lr over `warmup` updates, then cosine to eta_min."""
    return torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                          total_iters=warmup - 1),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta_min),
    ], milestones=[warmup])


# Schedules checked alone: name -> (base lr, schedule textproto, total steps, torch factory).
SCHEDULES = {
    "step": (0.1, "kind: STEP step_size: 4 gamma: 0.3", 20,
             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.3)),
    "cosine": (0.1, "kind: COSINE min_lr: 0.002", 20,
               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20, eta_min=0.002)),
    "warmup_cosine": (0.1, "kind: COSINE warmup_steps: 5 min_lr: 0.0", 25,
                      lambda o: warmup_cosine(o, 5, 20, 0.0)),
    "warmup_constant": (0.1, "kind: CONSTANT warmup_steps: 4", 10,
                        lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0,
                                                                    total_iters=3)),
}


def fresh_model():
    torch.manual_seed(1234)
    return Mlp()


def onnx_names(path):
    return [i.name for i in onnx.load(path).graph.initializer]


def config_text(optimizer, schedule=None, steps=STEPS):
    lines = [
        "# Written by tests/data/make_optim_fixtures.py",
        'model: "mlp.onnx"',
        'loss: "cross_entropy"',
        "precision { preset: FP32 }",
        "optimizer { %s }" % optimizer,
        "data { batch_size: 16 shuffle: false }",
        "steps: %d" % steps,
    ]
    if schedule:
        lines.append("schedule { %s }" % schedule)
    return "\n".join(lines) + "\n"


def write(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)


def train(make_opt, clip, make_sched, x, labels, names):
    model = fresh_model()
    opt = make_opt(model.parameters())
    sched = make_sched(opt) if make_sched else None
    losses, lrs, norms = [], [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        losses.append(loss.item())
        lrs.append(opt.param_groups[0]["lr"])
        if clip:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())
        opt.step()
        if sched:
            sched.step()
    out = {"loss": np.array(losses, np.float32), "lr": np.array(lrs, np.float32)}
    if clip:
        norms = np.array(norms, np.float32)
        assert (norms > clip).all(), f"clip {clip} is not active at every step: {norms}"
        out["grad_norm"] = norms
    params = dict(model.named_parameters())
    for n in names:
        out[n] = params[n].detach().numpy().astype(np.float32)
    return out


def main():
    os.makedirs(HERE, exist_ok=True)
    torch.set_num_threads(1)
    model = fresh_model()
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(7))
    labels = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(8))
    mlp_path = os.path.join(HERE, "mlp.onnx")
    torch.onnx.export(model, (x,), mlp_path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      do_constant_folding=False, dynamo=False)
    onnx.checker.check_model(onnx.load(mlp_path), full_check=True)
    names = onnx_names(mlp_path)
    assert sorted(names) == sorted(n for n, _ in model.named_parameters()), names
    np.savez(os.path.join(HERE, "batch.npz"), x=x.numpy(), labels=labels.numpy().astype(np.int64))

    for case, (make_opt, opt_text, clip) in CASES.items():
        np.savez(os.path.join(HERE, case + ".npz"), **train(make_opt, clip, None, x, labels, names))
        write(case + ".textproto", config_text(opt_text))
    for case, (make_opt, opt_text, sched_text, make_sched) in SCHEDULED.items():
        np.savez(os.path.join(HERE, case + ".npz"), **train(make_opt, 0, make_sched, x, labels, names))
        write(case + ".textproto", config_text(opt_text, sched_text))

    sched_out = {}
    for name, (lr, sched_text, steps, make_sched) in SCHEDULES.items():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        sched = make_sched(opt)
        lrs = []
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        sched_out[name] = np.array(lrs, np.float64)
        write("schedule_%s.textproto" % name, config_text("kind: SGD lr: %g" % lr, sched_text, steps))
    np.savez(os.path.join(HERE, "schedules.npz"), **sched_out)

    torch.manual_seed(1234)
    bn_model = MlpBn().eval()
    with torch.no_grad():  # distinct values, or the exporter merges equal initializers
        bn_model.bn.running_mean.uniform_(-0.5, 0.5)
        bn_model.bn.running_var.uniform_(0.5, 1.5)
        bn_model.bn.weight.uniform_(0.5, 1.5)
        bn_model.bn.bias.uniform_(-0.5, 0.5)
    bn_path = os.path.join(HERE, "mlp_bn.onnx")
    torch.onnx.export(bn_model, (x,), bn_path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      do_constant_folding=False, dynamo=False, training=torch.onnx.TrainingMode.EVAL)
    onnx.checker.check_model(onnx.load(bn_path), full_check=True)

    tiny_path = os.path.join(HERE, "tiny_loss_mlp.onnx")
    t = torch.randn(16, 4, generator=torch.Generator().manual_seed(9))
    torch.onnx.export(TinyLoss(fresh_model()), (x, t), tiny_path, input_names=["x", "t"],
                      output_names=["small_loss"], dynamic_axes={"x": {0: "N"}, "t": {0: "N"}},
                      opset_version=17, do_constant_folding=False, dynamo=False)
    onnx.checker.check_model(onnx.load(tiny_path), full_check=True)
    np.savez(os.path.join(HERE, "tiny_batch.npz"), x=x.numpy(), t=t.numpy())
    print("wrote", sorted(os.listdir(HERE)))


if __name__ == "__main__":
    main()
