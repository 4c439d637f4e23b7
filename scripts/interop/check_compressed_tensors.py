#!/usr/bin/env python3
"""Check an `mxrl export --format compressed-tensors` directory with the
compressed-tensors package itself (run by hand, not in CI: it needs torch,
safetensors and compressed-tensors).

    mxrl export --model M --recipe mxfp8 --format compressed-tensors --out CT
    mxrl init --from CT --out CT_F32 --dtype f32      # mxrl's exact dequantized values
    python scripts/interop/check_compressed_tensors.py CT CT_F32

1. config.json's quantization_config parses with
   compressed_tensors.QuantizationConfig.model_validate, and its group_0 is
   the package's own MXFP8 preset scheme (quant_scheme.py MXFP8).
2. Every MXFP8 linear (F8_E4M3 weight + U8 weight_scale) decompresses with the
   package's MXFP8QuantizationCompressor; the values are compared with mxrl's
   (CT_F32, when given) bit for bit.
Exits non-zero on any mismatch.
"""
import json
import sys

import torch
from safetensors.torch import load_file

import compressed_tensors
from compressed_tensors.compressors.mxfp8.base import MXFP8QuantizationCompressor
from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme
from compressed_tensors.quantization.quant_scheme import MXFP8


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    ct_dir = sys.argv[1]
    ref_dir = sys.argv[2] if len(sys.argv) == 3 else None
    with open(f"{ct_dir}/config.json") as f:
        cfg = json.load(f)
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    print(f"compressed-tensors {compressed_tensors.__version__}: quantization_config parses: "
          f"quant_method={qc.quant_method} format={qc.format} status={qc.quantization_status} ignore={qc.ignore}")
    scheme = qc.config_groups["group_0"]
    preset = QuantizationScheme(targets=["Linear"], **MXFP8)
    same = scheme.weights == preset.weights and scheme.input_activations == preset.input_activations
    print(f"group_0 targets={scheme.targets}: equal to the package's MXFP8 preset scheme: {same}")
    ok = same

    tensors = load_file(f"{ct_dir}/model.safetensors")
    ref = load_file(f"{ref_dir}/model.safetensors") if ref_dir else None
    n_mx = n_equal = 0
    worst = 0.0
    for name, w in tensors.items():
        if not name.endswith(".weight") or w.dtype != torch.float8_e4m3fn:
            continue
        scale = tensors[name + "_scale"]
        assert scale.dtype == torch.uint8 and scale.shape == (w.shape[0], w.shape[1] // 32), (name, scale.shape)
        out = MXFP8QuantizationCompressor.decompress({"weight": w, "weight_scale": scale}, scheme)["weight"]
        n_mx += 1
        if ref is not None:
            mine = ref[name].to(torch.float32)
            theirs = out.to(torch.float32)
            if torch.equal(mine, theirs):
                n_equal += 1
            else:
                diff = (mine - theirs).abs().max().item()
                worst = max(worst, diff)
                print(f"MISMATCH {name}: max |mxrl - compressed-tensors| = {diff:g} "
                      f"(compressed-tensors dtype {out.dtype})")
                ok = False
    print(f"{n_mx} MXFP8 linears decompressed with MXFP8QuantizationCompressor (output dtype {out.dtype})")
    if ref is not None:
        others = [n for n, t in tensors.items() if t.dtype == torch.bfloat16]
        n_bf16 = sum(torch.equal(tensors[n].to(torch.float32), ref[n].to(torch.float32)) for n in others)
        print(f"{n_equal}/{n_mx} equal bit for bit to mxrl's dequantized values; "
              f"{n_bf16}/{len(others)} BF16 tensors equal")
        ok = ok and n_equal == n_mx and n_bf16 == len(others)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
