#!/usr/bin/env python3
"""Check a PyTorch MX emulation (torchao's to_mx) against mxrl.quantize, byte for byte.

    pip install . torch torchao && python examples/check_torchao_mx.py [--seed N] [--rows N]

For each element type and scale rule both implement, quantizes the same tensors
with both and compares the E8M0 scale bytes and the element codes. Reports, per
case, how many blocks and codes agree and shows the first disagreeing block with
its values, so a difference can be traced to its rule (docs/reference.md §3). Exits 1 when any
byte differs.
"""

import argparse
import sys

import numpy as np
import torch
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.mx_tensor import to_mx

import mxrl

CASES = [  # (mxrl elem, torch dtype, mxrl scale rule, torchao mode)
    ("e4m3", torch.float8_e4m3fn, "floor", ScaleCalculationMode.FLOOR),
    ("e4m3", torch.float8_e4m3fn, "rceil", ScaleCalculationMode.RCEIL),
    ("e5m2", torch.float8_e5m2, "floor", ScaleCalculationMode.FLOOR),
    ("e5m2", torch.float8_e5m2, "rceil", ScaleCalculationMode.RCEIL),
]


def tensors(rows, seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(rows, 1024, generator=g) * 0.02
    acts = torch.randn(rows, 1024, generator=g) * torch.exp2(torch.randint(-12, 12, (rows, 1), generator=g).float())
    wide = torch.randn(rows, 1024, generator=g) * torch.exp2(torch.randint(-60, 60, (rows, 1024), generator=g).float())
    edge = torch.randn(rows, 1024, generator=g)
    edge[:, ::7] = 0.0
    edge[:, 3::11] = -0.0
    edge[::2, :32] = 0.0                   # all-zero blocks
    edge[1::4, 64:96] = 1.0e-40            # FP32 subnormals
    edge[3::4, 128] = 3.0e38               # near FP32 max
    return {"weights N(0, 0.02)": weights, "activations (row scales 2^±12)": acts,
            "wide (2^±60 per value)": wide, "edge (zeros, subnormals, huge)": edge}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=256)
    args = ap.parse_args()
    import torchao
    print(f"torchao {torchao.__version__}, torch {torch.__version__}; mxrl from {mxrl.__file__}")
    bad = 0
    for name, x in tensors(args.rows, args.seed).items():
        for dtype_name in ["float32", "bfloat16"]:
            xt = x if dtype_name == "float32" else x.to(torch.bfloat16)
            for elem, tdtype, rule, mode in CASES:
                t_scale, t_data = to_mx(xt, tdtype, 32, mode)
                t_scales = t_scale.view(torch.uint8).reshape(x.shape[0], -1).numpy()
                t_codes = t_data.view(torch.uint8).reshape(x.shape).numpy()
                codes, scales = mxrl.quantize(xt, elem=elem, scale_rule=rule)  # torch tensor in, read in place
                s_eq = (scales == t_scales)
                c_eq = (codes == t_codes)
                blocks_eq = s_eq & c_eq.reshape(x.shape[0], -1, 32).all(axis=2)
                ok = bool(blocks_eq.all())
                bad += not ok
                print(f"{'OK  ' if ok else 'DIFF'} {name:<32} {dtype_name:<8} {elem} {rule:<5}: "
                      f"blocks {blocks_eq.sum()}/{blocks_eq.size}, scales {s_eq.sum()}/{s_eq.size}, "
                      f"codes {c_eq.sum()}/{c_eq.size}")
                if not ok:
                    r, b = map(int, np.argwhere(~blocks_eq)[0])
                    blk = xt[r, 32 * b:32 * b + 32].float()
                    j = int(np.argmax(codes[r, 32 * b:32 * b + 32] != t_codes[r, 32 * b:32 * b + 32]))
                    print(f"     first: row {r} block {b}: amax {blk.abs().max().item()!r} "
                          f"scale mxrl 0x{scales[r, b]:02X} torchao 0x{t_scales[r, b]:02X}; element {j} = "
                          f"{blk[j].item()!r}: code mxrl 0x{codes[r, 32 * b + j]:02X} torchao 0x{t_codes[r, 32 * b + j]:02X}")
    print(f"{bad} case(s) differ" if bad else "every byte agrees")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
