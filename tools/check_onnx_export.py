#!/usr/bin/env python3
"""Checks mixtrain's ONNX export with a current ONNX checker (pip package `onnx`).

Debian's C++ checker (ONNX 1.12, run in CTest) knows opsets <= 17 only; this script covers the
newer ones. For every model given (default: models/*.onnx) it exports the imported graph and the
transformed training graph with `mixtrain dump --format=onnx`, then runs
`onnx.checker.check_model(full_check=True)` on the plain export (our ai.mixtrain ops have no
schemas in pip onnx, so the training graph gets the structural check only).

    pip install onnx
    python3 tools/check_onnx_export.py [--mixtrain build/mixtrain] [MODEL.onnx ...]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import onnx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mixtrain", default="build/mixtrain")
    ap.add_argument("models", nargs="*")
    args = ap.parse_args()
    models = args.models or sorted(glob.glob("models/*.onnx"))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            for passes, full in (("", True), ("train_mode,loss,precision,autodiff,optimizer,cleanup", False)):
                out = os.path.join(tmp, "out.onnx")
                cmd = [args.mixtrain, "dump", m, "--format=onnx", f"--out={out}"]
                if passes:
                    cmd.append(f"--passes={passes}")
                r = subprocess.run(cmd, capture_output=True, text=True)
                label = f"{m} [{passes or 'import'}]"
                if r.returncode != 0:
                    print(f"FAIL {label}: {r.stderr.strip()}")
                    failures += 1
                    continue
                try:
                    onnx.checker.check_model(onnx.load(out), full_check=full)
                    print(f"ok   {label} (onnx {onnx.__version__}, full_check={full})")
                except Exception as e:  # the checker raises its own ValidationError types
                    print(f"FAIL {label}: {e}")
                    failures += 1
    print(f"{2 * len(models) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
