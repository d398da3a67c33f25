#!/usr/bin/env python3
"""Writes the .npy / .npz fixtures of tests/runtime/npy_test.cc with NumPy itself.

pip packages: numpy, ml_dtypes (for the bfloat16 fixture)

    python3 tests/data/npy/make_fixtures.py

Element i of every dtype fixture is a formula of i that the C++ test recomputes, so the test
checks our reader against NumPy's writer, not against numbers copied from our own output.
"""

import os

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
I = np.arange(12)


def save(name, a, version=None):
    with open(os.path.join(HERE, name), "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=False)


def main():
    dtypes = {
        "f4": ((I - 5) * 0.25).astype(np.float32).reshape(3, 4),
        "f2": ((I - 5) * 0.25).astype(np.float16).reshape(3, 4),
        "f8": ((I - 5) / 3.0).astype(np.float64).reshape(2, 6),
        "i8": ((I - 5) * 10**12).astype(np.int64).reshape(2, 3, 2),
        "i4": ((I - 5) * 100000).astype(np.int32),
        "i1": (I * 20 - 100).astype(np.int8).reshape(4, 3),
        "u1": (I * 20).astype(np.uint8),
        "b1": (I % 3 == 0).reshape(3, 4),
        "bf16": ((I - 5) * 0.25).astype(ml_dtypes.bfloat16).reshape(3, 4),
    }
    for name, a in dtypes.items():
        np.save(os.path.join(HERE, name + ".npy"), a)  # header version 1.0, as np.save picks
    np.save(os.path.join(HERE, "scalar_f4.npy"), np.float32(3.5))
    np.save(os.path.join(HERE, "empty_f4.npy"), np.zeros((0, 3), np.float32))
    save("v2_f4.npy", dtypes["f4"], version=(2, 0))
    save("v3_f4.npy", dtypes["f4"], version=(3, 0))
    # Inputs the reader must refuse with a clear error.
    save("fortran_f4.npy", np.asfortranarray(dtypes["f4"]))
    save("bigendian_f4.npy", dtypes["f4"].astype(">f4"))
    save("u2.npy", I.astype(np.uint16))
    save("structured.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]))
    np.savez(os.path.join(HERE, "stored.npz"), **{k: dtypes[k] for k in ("f4", "i8", "b1", "bf16")})
    np.savez_compressed(os.path.join(HERE, "deflated.npz"), **dtypes)
    # np.save of an object array pickles it: the reader must say so.
    np.save(os.path.join(HERE, "object.npy"), np.array([[1, 2], [3]], dtype=object), allow_pickle=True)
    # A data set as a folder of .npy files (tests/library/training_data_test.cc), in NumPy's default
    # dtypes, which the model's f32 / i64 need converted: x[i, j] = (2 i + j) / 3, labels[i] = i % 3.
    folder = os.path.join(HERE, "folder")
    os.makedirs(os.path.join(folder, "test"), exist_ok=True)
    for sub, n, label_dtype in (("", 7, np.int32), ("test", 4, np.uint8)):
        i = np.arange(n)[:, None]
        np.save(os.path.join(folder, sub, "x.npy"), (2 * i + np.arange(2)) / 3.0)  # float64
        np.save(os.path.join(folder, sub, "labels.npy"), (np.arange(n) % 3).astype(label_dtype))


if __name__ == "__main__":
    main()
