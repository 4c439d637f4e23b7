"""mxrl.diverge: the metrics on constructed arrays, the reports, the CLI, and mxrl's sampler against its learner."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from mxrl import diverge



def f32(*v):
    return np.array(v, dtype=np.float32)


def test_measure_equal_and_sizes():
    a = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    m = diverge.measure(a, a.copy())
    assert m["equal"] and m["max_abs"] == 0 and m["rel_l2"] == 0 and m["max_ulp"] == 0 and m["differing"] == 0
    b = a.copy()
    b[2, 3] += 0.5
    m = diverge.measure(b, a)
    assert not m["equal"] and m["differing"] == 1
    assert m["max_abs"] == pytest.approx(0.5)
    assert m["rel_l2"] == pytest.approx(0.5 / np.linalg.norm(a.astype(np.float64)))


def test_median_ulp_reads_the_typical_element_where_the_max_saturates():
    b = np.array([1.0, 2.0, 3.0, 1e-30, 5.0], np.float32)
    a = b.copy()
    a[0] = np.nextafter(a[0], np.float32(2))  # 1 ULP
    a[1] = np.nextafter(np.nextafter(a[1], np.float32(3)), np.float32(3))  # 2 ULPs
    a[3] = -a[3]  # a sign flip near 0: ~5e8 ULPs
    m = diverge.measure(a, b)
    assert m["max_ulp"] > 1e8
    assert m["median_ulp"] == 1.0  # distances 1, 2, 0, ~5e8, 0: the median is 1
    assert diverge.measure(b, b)["median_ulp"] == 0.0


def test_ulp_distance_neighbours_and_across_sign():
    one = f32(1.0)
    nxt = np.nextafter(one, f32(2.0))
    assert diverge.measure(nxt, one)["max_ulp"] == 1
    tiny = np.frombuffer(np.uint32(1).tobytes(), np.float32)  # smallest positive subnormal
    neg_tiny = -tiny
    assert diverge.measure(tiny, neg_tiny)["max_ulp"] == 2  # -d, (-0 = +0), +d
    assert diverge.measure(f32(0.0), f32(-0.0))["max_ulp"] == 0
    assert not diverge.measure(f32(0.0), f32(-0.0))["equal"]  # bitwise, the sign differs
    # -1 to 1: twice the count of floats in (0, 1]
    assert diverge.measure(f32(-1.0), f32(1.0))["max_ulp"] == 2 * int(np.float32(1.0).view(np.int32))


def test_nan_and_inf():
    m = diverge.measure(f32(1.0, np.nan), f32(1.0, np.nan))
    assert m["equal"] and m["max_ulp"] == 0 and m["nan_mismatch"] == 0
    m = diverge.measure(f32(1.0, np.nan, 2.0), f32(1.0, 3.0, 2.5))
    assert m["nan_mismatch"] == 1 and m["max_abs"] == math.inf and m["max_ulp"] == math.inf
    assert m["rel_l2"] > 0 and math.isfinite(m["rel_l2"])  # over the finite positions
    m = diverge.measure(f32(np.inf, 1.0), f32(np.inf, 1.0))
    assert m["equal"] and m["max_abs"] == 0
    m = diverge.measure(f32(np.inf, 1.0), f32(5.0, 1.0))
    assert m["nan_mismatch"] == 1 and m["max_abs"] == math.inf


def test_compare_first_divergence_and_reports(tmp_path):
    rng = np.random.default_rng(0)
    learner = {"embed": rng.standard_normal((4, 8)).astype(np.float32),
               "layers.0.qkv_proj": rng.standard_normal((4, 12)).astype(np.float32),
               "layers.0.attn": rng.standard_normal((4, 8)).astype(np.float32),
               "layers.0.out": rng.standard_normal((4, 8)).astype(np.float32),
               "logits": rng.standard_normal((4, 5)).astype(np.float32)}
    engine = {k: v.copy() for k, v in learner.items()}
    del engine["layers.0.attn"]
    engine["layers.0.out"] = engine["layers.0.out"] * np.float32(1.001)
    engine["logits"] = np.zeros((4, 6), np.float32)
    rows = diverge.compare(learner, engine)
    assert [r["name"] for r in rows] == list(learner)
    st = {r["name"]: r["status"] for r in rows}
    assert st == {"embed": "equal", "layers.0.qkv_proj": "equal", "layers.0.attn": "not captured",
                  "layers.0.out": "differs", "logits": "shape mismatch"}
    fd = diverge.first_divergence(rows)
    assert fd["name"] == "layers.0.out" and fd["layer"] == 0 and fd["op"] == "out"
    assert fd["rel_l2"] == pytest.approx(1e-3, rel=0.05) and fd["max_ulp"] > 0
    assert diverge.first_divergence(diverge.compare(learner, learner)) is None
    md = diverge.to_markdown(rows, "### t")
    assert "First divergence: **layers.0.out**" in md and "| layers.0.attn | 0 | attn |" in md
    doc = json.loads(diverge.to_json({"e": rows}, plan="mxfp8"))
    assert doc["plan"] == "mxfp8" and doc["engines"]["e"]["first_divergence"] == "layers.0.out"
    notes = diverge.write_reports(str(tmp_path), {"e": rows, "same": diverge.compare(learner, learner),
                                                  "broken": {"error": "RuntimeError: x"}},
                                  {"model": "m", "plan": "mxfp8", "tokens": [1, 2]})
    assert (tmp_path / "diverge.json").is_file() and (tmp_path / "diverge.md").is_file()
    try:
        import matplotlib  # noqa: F401
        assert not notes and (tmp_path / "diverge.png").stat().st_size > 1000
    except ImportError:
        assert notes and notes[0].startswith("plot skipped")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_registry_and_bad_input(tiny_dense, tmp_path, capsys):
    assert "mxrl" in diverge.engines()
    with pytest.raises(ValueError, match="--engine nope: unknown engine"):
        diverge.get_engine("nope")
    diverge.register("fake", lambda d, plan, toks, **o: {})
    assert diverge.get_engine("fake")(str(tiny_dense), "mxfp8", [1, 2]) == {}
    assert len(diverge.make_tokens(str(tiny_dense), None, 16, 3)) == 16
    assert diverge.make_tokens(str(tiny_dense), None, 16, 3) == diverge.make_tokens(str(tiny_dense), None, 16, 3)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        diverge.make_tokens(str(tiny_dense), "1,2,100000")
    with pytest.raises(ValueError, match="--tokens 1,x"):
        diverge.make_tokens(str(tiny_dense), "1,x")
    assert diverge.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a checkpoint directory" in err[0]
    assert diverge.main([str(tiny_dense), "--engine", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "--engine nope" in capsys.readouterr().err


def test_cli_help():
    r = subprocess.run([sys.executable, "-m", "mxrl", "diverge", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--engine" in r.stdout and "--prompt-len" in r.stdout
    r = subprocess.run([sys.executable, "-m", "mxrl", "bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown subcommand" in r.stderr


@pytest.mark.parametrize("preset", ["tiny_dense", "tiny_moe"])
def test_mxrl_sampler_equals_learner(preset, request, tmp_path):
    d = request.getfixturevalue(preset)
    r = subprocess.run([sys.executable, "-m", "mxrl", "diverge", str(d), "--plan", "mxfp8", "--engine", "mxrl",
                        "--prompt-len", "32", "--seed", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "diverge.json").read_text())
    rows = doc["engines"]["mxrl"]["rows"]
    assert doc["engines"]["mxrl"]["first_divergence"] is None
    assert rows and all(x["status"] == "equal" for x in rows), [x["name"] for x in rows if x["status"] != "equal"]
    names = [x["name"] for x in rows]
    assert names[0] == "embed" and names[-2:] == ["logits", "logprobs"] and "layers.0.qkv_proj" in names
