"""The real-engine experiment and the throughput bench, at a size CI affords."""

import json
import math

import pytest

from mxrl_vllm import bench, experiment
from mxrl_vllm.__main__ import main


def test_engine_experiment_measures_vllm_and_finds_mxrl_exact(checkpoint_factory, tmp_path):
    model = checkpoint_factory("tiny-dense", 0)
    res = experiment.run({"tiny-dense": str(model)}, str(tmp_path / "engine.json"),
                         configs=["vllm-bf16", "vllm-mxfp8", "mxrl"], seeds=[0], prompts=4, samples=2, bootstrap=50,
                         progress=lambda s: None)
    rows = res["presets"]["tiny-dense"]["rows"]
    assert set(rows) == {"vllm-bf16", "vllm-mxfp8", "mxrl"}
    for name, r in rows.items():
        assert r["tokens"] > 0 and not r["checks_failed"], name  # every sync passed its checks on the engine
        assert r["lo"] <= r["kl"] <= r["hi"]
    # mxrl's own sampler on the learner's grid: the learner's rows bit for bit.
    assert rows["mxrl"]["kl"] == 0 and rows["mxrl"]["unequal_tokens"] == 0
    # vLLM's own kernels (BF16 activations, its GEMMs and attention) differ from the learner at every token.
    assert rows["vllm-bf16"]["kl"] > 0 and math.isfinite(rows["vllm-bf16"]["kl"])
    assert rows["vllm-bf16"]["unequal_tokens"] > 0
    claims = {c["claim"]: c for c in res["presets"]["tiny-dense"]["claims"]}
    assert claims["all linears on grid vs a BF16 sampler"]["ratio"] > 0
    assert json.loads((tmp_path / "engine.json").read_text())["presets"]["tiny-dense"]["rows"]["mxrl"]["kl"] == 0
    md = experiment.markdown(res, "stamp")
    assert "| `mxrl` | 0 [0, 0] |" in md and "-16%" in md


def test_engine_experiment_rejects_bad_settings(checkpoint_factory, tmp_path):
    model = str(checkpoint_factory("tiny-dense", 0))
    with pytest.raises(ValueError, match="unknown configuration 'nope'"):
        experiment.run({"tiny-dense": model}, str(tmp_path / "e.json"), configs=["nope"])
    with pytest.raises(ValueError, match="must be >= 1"):
        experiment.run({"tiny-dense": model}, str(tmp_path / "e.json"), prompts=0)
    assert main(["experiment", "--out", str(tmp_path)]) == 2  # no model: one line, exit 2


def test_bench_interleaves_samplers_and_says_what_cannot_run(tmp_path, capsys):
    assert main(["bench", "--out", str(tmp_path), "--shapes", "tiny-dense", "--samplers", "vllm,mxrl", "--plans",
                 "bf16", "--batches", "1,2", "--rounds", "2", "--new-tokens", "4", "--stamp", "test"]) == 0
    res = json.loads((tmp_path / "engine_speed.json").read_text())
    rows = res["shapes"]["tiny-dense"]["rows"]
    assert {(r["sampler"], r["batch"]) for r in rows} == {("vllm", 1), ("vllm", 2), ("mxrl", 1), ("mxrl", 2)}
    for r in rows:
        assert len(r["runs"]) == 2 and all(x > 0 for x in r["runs"]) and r["min"] <= r["tok_s"] <= r["max"]
    md = (tmp_path / "engine_speed.md").read_text()
    assert "test" in md and "| `mxrl` | bf16 | 1 |" in md and "1.00x" in md
    moe = {"num_experts": 8}
    assert bench.applicable("vllm", "mxfp8", _config_dir(tmp_path, moe)) == \
        "vLLM's CPU build runs MXFP8 experts only through Triton"
    assert bench.applicable("mxrl", "mxfp8", _config_dir(tmp_path, moe)) is None
    with pytest.raises(ValueError, match="unknown sampler"):
        bench.run(["tiny-dense"], str(tmp_path / "x.json"), samplers=["sglang"])


def test_bench_separates_prefill_and_decode_and_makes_the_tokens_asked(tmp_path):
    res = bench.run(["tiny-dense"], str(tmp_path / "speed.json"), samplers=["vllm", "mxrl"], plans=["bf16"],
                    batches=[3], rounds=1, prompt_len=8, new_tokens=12, threads=2, work=str(tmp_path),
                    progress=lambda s: None)
    rows = {r["sampler"]: r for r in res["shapes"]["tiny-dense"]["rows"]}
    assert set(rows) == {"vllm", "mxrl"} and res["config"]["worker_env"]["OMP_NUM_THREADS"] == "2"
    for name, r in rows.items():
        # Workers.call raised had a sampler made other than batch x new tokens; the rows say what was counted.
        assert (r["batch"], r["tokens"], r["prompt_tokens"]) == (3, 36, 24), name
        assert r["tok_s"] > 0 and r["prefill_tok_s"] > 0 and r["decode_tok_s"] > 0, name
        assert len(r["prefill"]["runs"]) == len(r["decode"]["runs"]) == 1, name
        # decode excludes the prefill the generate figure includes
        assert r["seconds_new_tokens"][0] > r["seconds_1_token"][0], name
    md = bench.markdown(res, "stamp")
    assert "mxrl's sampler against `vllm` (mxrl / vllm)" in md and "| bf16 | 3 | prefill |" in md
    assert "| bf16 | 3 | decode |" in md


def test_bench_prompts_are_fresh_per_call():
    a, b = bench.prompts_for(1, 2, 16, 100), bench.prompts_for(2, 2, 16, 100)
    assert a != b and a[0] != a[1] and all(3 <= t < 100 for p in a for t in p)
    assert bench.prompts_for(1, 2, 16, 100) == a


def _config_dir(tmp_path, cfg):
    d = tmp_path / "cfg"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)
