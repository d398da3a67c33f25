#!/usr/bin/env python3
"""Checks that a model exported by `mixtrain train --export` means the same in onnxruntime.

pip packages: onnxruntime, onnx, numpy

    python3 tools/check_export_ort.py [--mixtrain build/mixtrain] [--steps 50]
                                     [--export-dtype fp32|fp16|bf16] [--keep DIR]

Trains models/fashion_cnn.onnx for --steps steps on a Fashion-MNIST subset (bf16 AMP, the CLI's
default), exports the inference model, runs it on 256 test images with `mixtrain run` and with
onnxruntime (CPUExecutionProvider), and compares the logits and the predicted classes. Exits
non-zero when the max |difference| of the logits exceeds the tolerance (1e-4 x max|logit| for
fp32 exports, 2e-2 x for fp16/bf16, whose ops round differently in the two engines) or more
than 1% of the predictions differ; exits 2 when onnxruntime's CPU provider has no kernel for the
export (bf16 Relu, for one). A script, not a CTest: the C++ tests never need Python.
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def test_images(n):
    with gzip.open(FASHION, "rb") as f:
        data = np.frombuffer(f.read(), np.uint8, offset=16)
    return (data.reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "mixtrain"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--export-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--keep", help="write the files here instead of a temporary directory")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mt_export_ort_")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "trained.onnx")
    subprocess.run([args.mixtrain, "train", os.path.join(ROOT, "models", "fashion_cnn.onnx"),
                    "--steps=%d" % args.steps, "--batch-size=64", "--limit-train=%d" % (64 * args.steps),
                    "--limit-test=256", "--export=" + model, "--export-dtype=" + args.export_dtype],
                   check=True)
    onnx.checker.check_model(onnx.load(model), full_check=True)
    x = test_images(256)
    inputs = os.path.join(work, "inputs.npz")
    np.savez(inputs, input=x)
    out = os.path.join(work, "mixtrain_out.npz")
    subprocess.run([args.mixtrain, "run", model, "--inputs=" + inputs, "--out=" + out], check=True)
    ours = np.load(out)["logits"].astype(np.float32)
    try:
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except ort.capi.onnxruntime_pybind11_state.NotImplemented as e:
        # Valid ONNX (the checker passed above) that onnxruntime's CPU provider cannot run, e.g.
        # bf16 Relu: nothing to compare against.
        print("onnxruntime cannot run this export on the CPU: %s" % e)
        return 2
    feed = x.astype(np.float16) if sess.get_inputs()[0].type == "tensor(float16)" else x
    theirs = sess.run(None, {sess.get_inputs()[0].name: feed})[0].astype(np.float32)
    diff = float(np.abs(ours - theirs).max())
    scale = float(np.abs(theirs).max())
    tol = (1e-4 if args.export_dtype == "fp32" else 2e-2) * scale
    disagree = float((ours.argmax(1) != theirs.argmax(1)).mean())
    print("export %s: max |mixtrain - onnxruntime| = %.3g (max |logit| %.3g, tolerance %.3g), "
          "predictions differ on %.2f%% of %d images" % (args.export_dtype, diff, scale, tol, 100 * disagree, len(x)))
    ok = diff <= tol and disagree <= 0.01
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
