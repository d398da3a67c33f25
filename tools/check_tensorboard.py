#!/usr/bin/env python3
"""Reads a `mixtrain train --log-dir` directory with TensorBoard's own reader (EventAccumulator)
and prints every scalar tag with its number of points, first and last (step, value).

pip packages: tensorboard (no TensorFlow needed).

    python3 tools/check_tensorboard.py LOG_DIR [--require TAG ...]

Exit 1 when TensorBoard finds no scalars or a required tag is missing.
"""
import argparse
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log_dir")
    ap.add_argument("--require", nargs="*", default=[], help="tags that must be present")
    args = ap.parse_args()
    acc = EventAccumulator(args.log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        print(f"{args.log_dir}: TensorBoard found no scalars", file=sys.stderr)
        return 1
    for tag in sorted(tags):
        pts = acc.Scalars(tag)
        print(f"{tag}: {len(pts)} points, first (step {pts[0].step}, {pts[0].value:.6g}), "
              f"last (step {pts[-1].step}, {pts[-1].value:.6g})")
    missing = [t for t in args.require if t not in tags]
    if missing:
        print(f"missing tags: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
