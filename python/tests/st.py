"""A minimal safetensors reader and writer (numpy only), for feeding and reading the CLI in tests."""

import json
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
       "F8_E8M0": np.uint8, "BF16": np.uint16, "I32": np.int32, "I64": np.int64}


def write(path, tensors, metadata=None):
    """tensors: name -> (dtype name, numpy array holding the raw values)."""
    header, blobs, off = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read(path):
    """name -> (dtype name, numpy array of the raw values); and the metadata."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + e], dtype=_NP[t["dtype"]]).reshape(t["shape"])
        out[name] = (t["dtype"], a)
    return out, meta


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
