#!/usr/bin/env python3
"""Regenerates the safetensors test corpora (run by hand; plain python3).

- tests/data/safetensors_bad/*.safetensors: one malformed file per kind of
  problem, and EXPECTED.tsv (file TAB phrase the reader's error must contain).
  io_test replays them; the fuzzer uses them as seeds.
- fuzz/corpus/*.safetensors: small valid files seeding the fuzzer.

Usage: python3 tests/data/safetensors_bad/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "..", "..", "..", "fuzz", "corpus")


def raw(header: bytes, data: bytes = b"", n=None) -> bytes:
    """Length prefix (default: the header's length), header bytes, data."""
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def padded(header: str) -> bytes:
    """The header as the reference writer emits it: spaces up to a multiple of 8."""
    b = header.encode()
    return b + b" " * (-len(b) % 8)


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    # Tuples become JSON arrays; anything else is written as is (to make bad entries).
    def arr(v):
        return list(v) if isinstance(v, tuple) else v
    return {"dtype": dtype, "shape": arr(shape), "data_offsets": arr(offsets)}


def st(header: dict, data: bytes) -> bytes:
    return raw(padded(json.dumps(header, separators=(",", ":"))), data)


W = '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'

# name -> (file bytes, phrase the error message must contain)
BAD = {
    "too_short": (b"\x10\x00\x00", "file is too short"),
    "header_len_beyond_file": (raw(b"{}", n=64), "exceeds the file size"),
    "header_too_large": (raw(b"{}", n=200_000_000), "header too large"),
    "invalid_json": (raw(b'{"w":{"dtype":"F32",'), "header is not valid JSON"),
    "nul_in_header": (raw(b"{}\x00\x00\x00\x00\x00\x00"), "NUL byte"),
    "invalid_utf8": (raw(b'{"w\xff":{}}'), "header is not valid JSON"),
    "not_object": (raw(b"[1,2,3]"), "header is not a JSON object"),
    "leading_space": (raw(b" {}"), "header does not start with '{'"),
    "duplicate_tensor": (raw(("{%s,%s}" % (W, W)).encode(), bytes(8)), "duplicate key 'w'"),
    "duplicate_field": (raw(b'{"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
                        "duplicate key 'dtype' in the entry for 'w'"),
    "entry_not_object": (st({"w": [0, 8]}, b""), "entry is not a JSON object"),
    "missing_key": (st({"w": {"dtype": "F32", "shape": [2]}}, bytes(8)), "missing key 'data_offsets'"),
    "extra_key": (st({"w": dict(entry(), extra=1)}, bytes(8)), "unexpected key 'extra'"),
    "dtype_not_string": (st({"w": entry(dtype=4)}, bytes(8)), "'dtype' is not a string"),
    "shape_not_array": (st({"w": entry(shape="2")}, bytes(8)), "'shape' is not an array"),
    "unknown_dtype": (st({"w": entry(dtype="BOOL")}, bytes(8)), "unsupported dtype 'BOOL'"),
    "shape_negative": (st({"w": entry(shape=(2, -1))}, bytes(8)), "shape entry 1 is negative"),
    "shape_not_integer": (st({"w": entry(shape=(1.5,))}, bytes(8)), "shape entry 0 is not a non-negative"),
    "shape_overflow": (st({"w": entry(shape=(1 << 32, 1 << 32), offsets=(0, 0))}, b""), "overflows 64 bits"),
    "offsets_not_pair": (st({"w": entry(offsets=(0,))}, bytes(8)), "is not two non-negative integers"),
    "offsets_negative": (st({"w": entry(offsets=(-8, 0))}, bytes(8)), "is not two non-negative integers"),
    "offsets_reversed": (st({"w": entry(shape=(0,), offsets=(8, 0))}, bytes(8)), "begin > end"),
    "offsets_beyond_data": (st({"w": entry()}, bytes(4)), "beyond the data region"),
    "size_mismatch": (st({"w": entry(shape=(2, 3), offsets=(0, 12))}, bytes(12)),
                      "data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24"),
    "overlap": (st({"a": entry(), "b": entry(offsets=(4, 12))}, bytes(12)), "tensors 'a' and 'b' overlap"),
    "gap": (st({"a": entry(), "b": entry(offsets=(12, 20))}, bytes(20)), "gap of 4 unused bytes"),
    "bytes_before_first": (st({"a": entry(offsets=(4, 12))}, bytes(12)), "unused bytes before the first tensor"),
    "trailing_garbage": (st({"a": entry()}, bytes(9)), "trailing garbage"),
    "metadata_not_object": (st({"__metadata__": "pt"}, b""), "__metadata__ is not a JSON object"),
    "metadata_value_not_string": (st({"__metadata__": {"format": 1}}, b""),
                                  "__metadata__ value for key 'format' is not a string"),
}


def seed_files():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    yield "empty", st({}, b"")
    yield "one_f32", st({"w": entry(shape=(2, 3), offsets=(0, 24))}, f32)
    # The reference writer's layout: __metadata__ first, tensors by alignment then name.
    yield "reference_layout", raw(padded(
        '{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        '"a":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}'), struct.pack("<2f", 1, 2) + b"\x01\x02\x03")
    # Every dtype, a scalar, zero-size tensors, metadata.
    header, data = {"__metadata__": {"format": "mxrl", "step": "3"}}, b""
    for name, size in [("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("F8_E4M3", 1), ("F8_E5M2", 1),
                       ("F8_E8M0", 1), ("U8", 1), ("I8", 1), ("I32", 4), ("I64", 8)]:
        header["t_" + name] = entry(name, (2,), (len(data), len(data) + 2 * size))
        data += bytes(range(len(data), len(data) + 2 * size))
    header["scalar"] = entry("F32", (), (len(data), len(data) + 4))
    data += struct.pack("<f", 0.5)
    header["zero"] = entry("BF16", (0, 4), (len(data), len(data)))
    yield "mixed", st(header, data)


def main():
    for old in os.listdir(HERE):
        if old.endswith(".safetensors"):
            os.remove(os.path.join(HERE, old))
    with open(os.path.join(HERE, "EXPECTED.tsv"), "w") as tsv:
        tsv.write("# file\tphrase the error must contain (generated by make_corpus.py)\n")
        for name, (content, phrase) in BAD.items():
            with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
                f.write(content)
            tsv.write(f"{name}.safetensors\t{phrase}\n")
    os.makedirs(SEEDS, exist_ok=True)
    for name, content in seed_files():
        with open(os.path.join(SEEDS, name + ".safetensors"), "wb") as f:
            f.write(content)


if __name__ == "__main__":
    main()
