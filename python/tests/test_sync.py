"""mxrl.sync: bundles byte for byte the CLI's, inspect/verify with the CLI's findings, engine dumps."""

import json

import numpy as np
import pytest

import mxrl
import st


@pytest.mark.parametrize("sync", ["ship", "requantize"])
def test_export_equals_cli(cli, tiny_dense, tmp_path, sync):
    cli("sync", "export", "--model", tiny_dense, "--recipe", "mxfp8", "--sync", sync, "--version", 3,
        "--out", tmp_path / "cli.safetensors")
    info = mxrl.sync.export(tiny_dense, tmp_path / "py.safetensors", recipe="mxfp8", sync=sync, version=3)
    assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "cli.safetensors").read_bytes()
    cli_json = json.loads(cli("sync", "inspect", "--json", tmp_path / "cli.safetensors").stdout)
    assert info == cli_json
    assert mxrl.sync.inspect((tmp_path / "cli.safetensors").read_bytes()) == cli_json
    assert info["version"] == 3 and info["sync"] == sync and info["recipe"] == "mxfp8"


def test_ship_manifest_is_the_models(tiny_moe, tmp_path):
    info = mxrl.sync.export(tiny_moe, tmp_path / "b.safetensors")
    m = mxrl.Model.load(tiny_moe, "mxfp8")
    assert info["manifest"] == m.manifest()
    r = mxrl.sync.verify(tmp_path / "b.safetensors", m.manifest())
    assert list(r) == ["coverage", "placement", "grid", "exceptions"]  # condition order
    assert all(c["passed"] and not c["findings"] for c in r.values())


def test_inspect_rejects_corruption(tiny_dense, tmp_path):
    mxrl.sync.export(tiny_dense, tmp_path / "b.safetensors")
    data = bytearray((tmp_path / "b.safetensors").read_bytes())
    data[-3] ^= 0x40  # a byte of the last tensor's payload
    with pytest.raises(ValueError, match=r"<bytes>: .*xxh3"):
        mxrl.sync.inspect(bytes(data))
    with pytest.raises(ValueError, match="b.safetensors"):
        (tmp_path / "b.safetensors").write_bytes(bytes(data[:100]))
        mxrl.sync.inspect(tmp_path / "b.safetensors")


def test_verify_files_findings_under_their_condition(tiny_dense, tmp_path):
    good = mxrl.sync.export(tiny_dense, tmp_path / "b.safetensors")["manifest"]

    def entry(name, part):
        return next(i for i, d in enumerate(good) if d["name"] == name and d["part"] == part)

    q = "model.layers.0.self_attn.q_proj.weight"
    k = "model.layers.0.self_attn.k_proj.weight"
    # coverage: a tensor missing
    got = [d for d in good if d["name"] != q]
    r = mxrl.sync.verify(good, got)
    assert not r["coverage"]["passed"] and any(q in f for f in r["coverage"]["findings"])
    assert r["placement"]["passed"] and r["grid"]["passed"] and r["exceptions"]["passed"]
    # placement: gate and up hold each other's bytes
    g, u = entry("model.layers.0.mlp.gate_proj.weight", "codes"), entry("model.layers.0.mlp.up_proj.weight", "codes")
    got = [dict(d) for d in good]
    got[g]["xxh3"], got[u]["xxh3"] = good[u]["xxh3"], good[g]["xxh3"]
    r = mxrl.sync.verify(good, got)
    assert not r["placement"]["passed"] and r["coverage"]["passed"] and r["grid"]["passed"]
    assert any("gate_proj" in f and "up_proj" in f for f in r["placement"]["findings"])
    # grid: other scale bytes under q_proj
    got = [dict(d) for d in good]
    got[entry(q, "scales")]["xxh3"] = "0123456789abcdef"
    r = mxrl.sync.verify(good, got)
    assert not r["grid"]["passed"] and r["coverage"]["passed"] and r["placement"]["passed"]
    # exceptions: a BF16 tensor (the final norm) with other bytes
    got = [dict(d) for d in good]
    got[entry("model.norm.weight", "bf16")]["xxh3"] = "0123456789abcdef"
    r = mxrl.sync.verify(good, got)
    assert not r["exceptions"]["passed"] and r["grid"]["passed"]
    with pytest.raises(TypeError, match="expected a bundle path"):
        mxrl.sync.verify(good, 42)
    with pytest.raises(ValueError):
        mxrl.sync.verify(good, [{"name": k}])  # a malformed manifest entry


@pytest.mark.parametrize("naming", ["mxrl", "vllm"])
@pytest.mark.parametrize("which", ["tiny_dense", "tiny_moe"])
def test_engine_dump_clean_and_faulted(cli, request, tmp_path, naming, which):
    model_dir = request.getfixturevalue(which)
    m = mxrl.Model.load(model_dir, "mxfp8")
    dump = tmp_path / "dump.safetensors"
    mxrl.sync.write_dump(m, dump, naming)
    tensors, _ = st.read(dump)
    if naming == "vllm":
        assert "model.layers.0.self_attn.qkv_proj.weight" in tensors
        assert tensors["model.layers.0.self_attn.qkv_proj.weight_scale"][0] in ("U8", "F8_E8M0")
    assert mxrl.sync.dump_manifest(dump, m, naming) == m.manifest()
    r = mxrl.sync.verify_dump(model_dir, dump, recipe="mxfp8", naming=naming)
    assert all(c["passed"] for c in r.values()), r
    # a real faulted sync, dumped by the CLI, is caught under its condition here and by verify-sync alike
    fault, cond = ("expert-offset", "placement") if which == "tiny_moe" else ("swap-gate-up", "placement")
    bad = tmp_path / "bad.safetensors"
    cli("sync", "dump", "--model", model_dir, "--recipe", "mxfp8", "--naming", naming, "--fault", fault, "--out", bad)
    r = mxrl.sync.verify_dump(model_dir, bad, naming=naming)
    assert not r[cond]["passed"] and all(c["passed"] for k, c in r.items() if k != cond), r
    v = cli("verify-sync", "--learner", model_dir, "--recipe", "mxfp8", "--sampler-dump", bad, "--naming", naming,
            "--json", check=False)
    assert v.returncode != 0
    j = json.loads(v.stdout)
    assert {c["name"]: {"passed": c["passed"], "findings": c["findings"]} for c in j["checks"]} == r


def test_grid_fault_in_a_vllm_dump(cli, tiny_dense, tmp_path):
    bad = tmp_path / "bad.safetensors"
    cli("sync", "dump", "--model", tiny_dense, "--naming", "vllm", "--fault", "requant-floor", "--sync", "requantize",
        "--out", bad)
    r = mxrl.sync.verify_dump(tiny_dense, bad, naming="vllm")
    assert not r["grid"]["passed"] and r["coverage"]["passed"] and r["placement"]["passed"], r


def test_compressed_tensors_export_scores_like_the_on_grid_sampler(cli, tiny_dense, tmp_path):
    out = tmp_path / "ct"
    cli("export", "--model", tiny_dense, "--recipe", "mxfp8", "--format", "compressed-tensors", "--out", out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    tensors, _ = st.read(next(out.glob("*.safetensors")))
    assert tensors["model.layers.0.self_attn.q_proj.weight"][0] == "F8_E4M3"
    assert tensors["model.layers.0.self_attn.q_proj.weight_scale"][0] == "U8"
    served = mxrl.Model.load(out, "mxfp8")
    trained = mxrl.Model.load(tiny_dense, "mxfp8")
    assert served.manifest() == trained.manifest()
    rng = np.random.default_rng(1)
    seqs = [rng.integers(0, cfg["vocab_size"], 20).tolist() for _ in range(4)]
    for a, b in zip(served.score(seqs), trained.score(seqs)):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.raises(ValueError, match="bf16"):
        mxrl.Model.load(out, "bf16")


def test_a_stale_tensor_is_coverage_given_the_previous_dump(cli, tiny_dense, tmp_path):
    # version 0: the checkpoint as initialised; version 1: another seed (every weight differs)
    v1 = tmp_path / "v1"
    cli("init", "--preset", "tiny-dense", "--out", v1, "--seed", "99")
    bad, before = tmp_path / "bad.safetensors", tmp_path / "before.safetensors"
    cli("sync", "dump", "--model", v1, "--previous-model", tiny_dense, "--naming", "vllm", "--fault", "drop-tensor",
        "--out", bad, "--previous-out", before)
    r = mxrl.sync.verify_dump(v1, bad, naming="vllm", previous=before)
    assert not r["coverage"]["passed"] and r["placement"]["passed"] and r["grid"]["passed"], r
    assert any("q_proj" in f for f in r["coverage"]["findings"])
    without = mxrl.sync.verify_dump(v1, bad, naming="vllm")  # no history: the stale bytes just differ
    assert not without["grid"]["passed"] and without["coverage"]["passed"], without
