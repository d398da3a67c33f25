#!/usr/bin/env python3
"""Writes the committed seeds of the `api` fuzz target (fuzz/corpus/api/): short programs in the
encoding fuzz/api_fuzzer.cc reads (one action byte, then the bytes its arguments read), each a
session an embedding service could run: create, step, evaluate, save, load, export, serve the
export; and the same with wrong feeds, bad configs, another model's checkpoint, corrupt bytes.

Usage: python3 tools/fuzz/make_api_seeds.py [OUT_DIR]   (default fuzz/corpus/api)
Keep it in step with fuzz/api_fuzzer.cc: the action numbers and argument order are its.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Actions (RunAction's switch) and the models (kModels), by index.
CREATE, STEP, STEP_ASYNC, EVALUATE, SESSION, RUN, SAVE, LOAD, WRITE_BYTES, EXPORT, TOTAL_STEPS, PARAMETER, \
    COUNTERS, DESTROY = range(14)
TINY, MLP_BN, LN_GELU, CONV1D, KERAS_MLP, NN_MIX = range(6)
# Program::Number's table: the indices used here.
ONE, LR_1E_3, NAN, TINY_1E_50 = 2, 7, 14, 10
SKIP = 255  # a byte >= every threshold: "leave it as it is"


def create(slot, model, fields=(), preset=0, low=0, loss=0, kind=0, scaler=0, labels=None, allow=None):
    """Trainer::Create. fields: (field index in kNumeric, Number index) pairs, at most 3 (10 is
    accumulate; Number index 5 is 2)."""
    out = [CREATE, slot, model, len(fields)]
    for f, v in fields:
        out += [f, v]
    out += [SKIP, kind, 0, preset, low, scaler, loss]
    out += [0, labels] if labels is not None else [SKIP]  # labels_key: Name index
    out += [SKIP]                                         # output
    out += [0, allow] if allow is not None else [SKIP]    # precision.allow: Name index
    out += [SKIP, SKIP, SKIP]                             # deny, fp32_nodes, freeze
    return out


def batch(modes, sym=1, fill=None):
    """FuzzBatch: one mode per input (0 right, 4 wrong type, 5 wrong shape, 6 missing, 7 renamed)."""
    out = [sym]
    for mode in modes:
        out.append(mode)
        if mode == 6:
            continue
        if mode == 4:
            out.append(3)  # float64
        if mode == 5:
            out += [2, 3, 1]  # rank 2: [3, 1]
        out += [0] if fill is None else [1, fill]  # zeros, or one number everywhere
        if mode == 7:
            out.append(4)  # Name "input"
    return out


def step(slot, modes, read_loss=1, fill=None):
    return [STEP, slot] + batch(modes, fill=fill) + [read_loss]


SEEDS = {
    # The whole service: train, evaluate, checkpoint round trip, export, serve the export.
    "train_save_load_export_serve": create(0, TINY, fields=[(0, LR_1E_3)]) + step(0, [0, 0]) + step(0, [0, 0]) +
    [EVALUATE, 0] + batch([0, 0]) + [SAVE, 0, 1, 1, 0, LOAD, 0, 0] + step(0, [0, 0]) +
    [EXPORT, 0, 0, SESSION, 0, 0, 1, 0, RUN, 0, SKIP] + batch([0]) + [COUNTERS, 0],
    # Wrong feeds: another element type, another shape, a missing and a renamed entry.
    "wrong_feeds": create(0, MLP_BN, preset=1) + step(0, [4, 0]) + step(0, [5, 0]) + step(0, [6, 0]) +
    step(0, [0, 7]) + [EVALUATE, 0] + batch([0, 5]) + step(0, [0, 0]),
    # Another model's checkpoint, then a corrupt one, then the right one.
    "foreign_and_corrupt_checkpoints": create(0, TINY) + create(1, LN_GELU) + step(1, [0, 0]) +
    [SAVE, 1, 1, 1, 0, LOAD, 0, 0, WRITE_BYTES, 0, 8] + list(b"MXTRCKPT") + [1, LOAD, 0, 1] +
    [SAVE, 0, 1, 1, 1, LOAD, 0, 1],
    # A session computing in bf16 fed NaN; a fetch of a name the model lacks.
    "session_nan_bf16": [SESSION, 0, 1, 1, SKIP, LN_GELU, RUN, 0, SKIP] + batch([0], fill=NAN) +
    [RUN, 0, 0, 0] + batch([0]),
    # Configs Create must refuse: a NaN lr set unchecked, an empty labels key, an unknown op.
    "bad_configs": [CREATE, 0, TINY, 0, 0, NAN, 0, 0, 0, 0, 0, 0, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP] +
    create(0, TINY, labels=1) + create(0, TINY, allow=10) + create(0, TINY, fields=[(0, TINY_1E_50)]),
    # Accumulation over two steps, a parameter read and replaced, a huge step count.
    "accumulate_parameters": create(0, CONV1D, fields=[(10, 5)]) + step(0, [0, 0]) + step(0, [0, 0]) +
    [PARAMETER, 0, 32, 0] + batch([0], fill=ONE) + [TOTAL_STEPS, 0, 7] + step(0, [0, 0]),
    # tf2onnx's and torch.nn's exports, fp16 AMP with dynamic loss scaling, then destroyed.
    "zoo_fp16": create(0, KERAS_MLP, preset=0, low=1, scaler=3) + step(0, [0, 0]) + create(1, NN_MIX) +
    step(1, [0, 0]) + [DESTROY, 0, 1, COUNTERS, 1],
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "fuzz", "corpus", "api")
    os.makedirs(out, exist_ok=True)
    for name, program in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes(program))
    print("%d seeds written to %s" % (len(SEEDS), out))


if __name__ == "__main__":
    main()
