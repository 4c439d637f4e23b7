#!/usr/bin/env python3
"""Verify the weights a sampler holds, dumped to safetensors, against the learner's checkpoint.

    pip install . torch safetensors
    mxrl init --preset tiny-dense --out /tmp/tiny          # or any learner checkpoint
    python examples/verify_sampler_dump.py --learner /tmp/tiny [--dump FILE --naming vllm]

With --dump, checks that file (an engine's parameters, e.g. vLLM's in its own
naming: fused qkv_proj / gate_up_proj, weight + weight_scale). Without it, the
script plays the engine: it dumps what an on-grid sampler computes with in vLLM's
layout, verifies it (clean), then reproduces a classic loader bug -- the two halves
of layer 0's fused gate/up tensor loaded in the wrong order -- and verifies again.
Prints conditions 1-4 (coverage, placement, grid identity, exceptions) with every
finding; exits 1 when the (given) dump fails.
"""

import argparse
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import mxrl


def report(title, result):
    print(title)
    for cond, r in result.items():
        print(f"  {cond:<11} {'PASS' if r['passed'] else 'FAIL'}")
        for f in r["findings"]:
            print(f"    {f}")
    return all(r["passed"] for r in result.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learner", required=True, help="the learner's checkpoint directory")
    ap.add_argument("--recipe", default="mxfp8", help="the learner's precision recipe (default mxfp8)")
    ap.add_argument("--dump", help="the sampler's weight dump (.safetensors); default: make one")
    ap.add_argument("--naming", default="vllm", choices=["mxrl", "vllm"], help="the dump's tensor names")
    args = ap.parse_args()

    if args.dump:
        ok = report(f"{args.dump} against {args.learner} ({args.recipe}):",
                    mxrl.sync.verify_dump(args.learner, args.dump, recipe=args.recipe, naming=args.naming))
        return 0 if ok else 1

    sampler = mxrl.Model.load(args.learner, args.recipe)  # what an on-grid sampler computes with
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "sampler.safetensors")
        mxrl.sync.write_dump(sampler, clean, naming="vllm")
        tensors = load_file(clean)
        print(f"dumped {len(tensors)} vLLM parameters, e.g. "
              + ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in list(tensors.items())[:3]))
        report("clean dump:", mxrl.sync.verify_dump(args.learner, clean, recipe=args.recipe, naming="vllm"))

        # The bug: the fused gate/up tensor holds [up; gate] instead of [gate; up], codes and scales
        # alike -- layer 0's gate_up_proj, or expert 0's slice of w13_weight in an MoE layer.
        dense = "model.layers.0.mlp.gate_up_proj.weight" in tensors
        base = "model.layers.0.mlp.gate_up_proj.weight" if dense else "model.layers.0.mlp.experts.w13_weight"
        for key in [base, base + "_scale"]:
            t = tensors[key] if dense else tensors[key][0]
            gate, up = t.chunk(2, dim=0)
            fixed = torch.cat([up, gate], dim=0)
            if dense:
                tensors[key] = fixed
            else:
                tensors[key] = torch.cat([fixed.unsqueeze(0), tensors[key][1:]], dim=0)
        bad = os.path.join(tmp, "sampler_bad.safetensors")
        save_file(tensors, bad)
        ok = report("dump with gate/up loaded in the wrong order:",
                    mxrl.sync.verify_dump(args.learner, bad, recipe=args.recipe, naming="vllm"))
        print("the fault was caught" if not ok else "the fault was NOT caught")
        return 0 if not ok else 1


if __name__ == "__main__":
    sys.exit(main())
