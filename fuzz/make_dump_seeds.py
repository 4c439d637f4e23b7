#!/usr/bin/env python3
"""Seeds of the engine-dump fuzzer (fuzz/dump_corpus): a checkpoint of fuzz/dump_model.json made with
`mxrl init`, dumped in both namings with the mxrl Python package. Run by hand:

    python fuzz/make_dump_seeds.py build/mxrl
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import mxrl

here = pathlib.Path(__file__).resolve().parent
cfg = json.loads((here / "dump_model.json").read_text())
with tempfile.TemporaryDirectory() as tmp:
    toml = pathlib.Path(tmp) / "model.toml"
    toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items()))
    ckpt = pathlib.Path(tmp) / "ckpt"
    subprocess.run([sys.argv[1], "init", "--config", str(toml), "--out", str(ckpt), "--seed", "1"], check=True)
    model = mxrl.Model.load(ckpt, "mxfp8")
    for naming in ["vllm", "mxrl"]:
        mxrl.sync.write_dump(model, here / "dump_corpus" / f"{naming}.safetensors", naming=naming)
