"""mxrl_vllm.diverge: vLLM's per-layer captures (shapes, the embedding exact), the first divergence against
mxrl's learner, and `mxrl-vllm diverge`."""

import json
import math

import numpy as np
import pytest

from mxrl import diverge as dv

N = 32
PER_LAYER = ["input_layernorm", "qkv_proj", "rotary_q", "rotary_k", "attn", "residual_mid",
             "post_attention_layernorm"]


def tokens(vocab, seed=5):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, N)]


@pytest.fixture(scope="module")
def captured(checkpoint_factory):
    """preset -> (model dir, tokens, vLLM's captures): one engine per preset, closed after its capture."""
    from mxrl_vllm.diverge import capture
    from mxrl_vllm.engine import VllmEngine

    made = {}

    def get(preset):
        if preset not in made:
            d = checkpoint_factory(preset, 0)
            with VllmEngine(str(d)) as eng:
                toks = tokens(eng.layout.vocab)
                made[preset] = (d, toks, capture(str(d), "mxfp8", toks, engine=eng), eng.layout)
        return made[preset]

    return get


def expected_shapes(lay):
    q, kv = lay.heads * lay.head_dim, lay.kv_heads * lay.head_dim
    s = {"embed": (N, lay.hidden)}
    for l in range(lay.layers):
        p = f"layers.{l}."
        s.update({p + "input_layernorm": (N, lay.hidden), p + "qkv_proj": (N, q + 2 * kv), p + "rotary_q": (N, q),
                  p + "rotary_k": (N, kv), p + "attn": (N, q), p + "residual_mid": (N, lay.hidden),
                  p + "post_attention_layernorm": (N, lay.hidden)})
        if lay.experts:
            s[p + "router"] = (N, lay.experts)
        else:
            s.update({p + "gate_up_proj": (N, 2 * lay.intermediate), p + "act": (N, lay.intermediate)})
        s[p + "out"] = (N, lay.hidden)
    s.update({"norm": (N, lay.hidden), "logits": (N, lay.vocab), "logprobs": (N, lay.vocab)})
    return s


@pytest.mark.parametrize("preset", ["tiny-dense", "tiny-moe"])
def test_captures_every_point(captured, preset):
    import torch
    from safetensors.torch import load_file

    d, toks, got, lay = captured(preset)
    want = expected_shapes(lay)
    assert {k: v.shape for k, v in got.items()} == want
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in got.values())
    # the embedding is a lookup of the checkpoint's BF16 rows: exact
    w = load_file(str(d / "model.safetensors"))["model.embed_tokens.weight"]
    assert w.dtype == torch.bfloat16
    assert np.array_equal(got["embed"].view(np.uint32), w[toks].float().numpy().view(np.uint32))
    # log-prob rows are distributions, and logits' log-softmax up to rounding
    lse = np.log(np.exp(got["logprobs"].astype(np.float64)).sum(axis=1))
    assert np.abs(lse).max() < 1e-4
    z = got["logits"].astype(np.float64)
    ref = z - z.max(1, keepdims=True)
    ref -= np.log(np.exp(ref).sum(1, keepdims=True))
    assert np.abs(ref - got["logprobs"]).max() < 1e-4


@pytest.mark.parametrize("preset", ["tiny-dense", "tiny-moe"])
def test_first_divergence_against_learner(captured, preset):
    d, toks, got, _ = captured(preset)
    learner = dv.learner_trace(str(d), "mxfp8", toks)
    assert np.array_equal(learner["embed"].view(np.uint32), got["embed"].view(np.uint32))
    rows = dv.compare(learner, got)
    assert [r["status"] for r in rows if r["status"] in ("not captured", "shape mismatch", "not in learner")] == []
    fd = dv.first_divergence(rows)
    assert fd is not None and fd["name"] != "embed" and fd["op"] in {r["op"] for r in rows}
    assert all(math.isfinite(r["max_abs"]) and math.isfinite(r["rel_l2"]) for r in rows)


def test_cli_writes_reports(checkpoint_factory, tmp_path, capsys):
    from mxrl_vllm.__main__ import main

    d = checkpoint_factory("tiny-dense", 0)
    out = tmp_path / "div"
    assert main(["diverge", str(d), "--plan", "mxfp8", "--engine", "vllm", "--prompt-len", "16", "--out",
                 str(out)]) == 0
    doc = json.loads((out / "diverge.json").read_text())
    assert doc["plan"] == "mxfp8" and len(doc["tokens"]) == 16
    assert doc["engines"]["vllm"]["first_divergence"] not in (None, "embed")
    assert "First divergence" in (out / "diverge.md").read_text()
    err = capsys.readouterr().err
    assert "vllm: first divergence at" in err
    assert (out / "diverge.png").is_file() or "plot skipped" in err


def test_engines_registered():
    from mxrl_vllm import diverge as vd

    vd.register_engines()
    assert {"vllm", "vllm-mxrl-linear", "vllm-mxrl"} <= set(dv.engines())


@pytest.mark.parametrize("preset", ["tiny-dense", "tiny-moe"])
def test_vllm_with_mxrl_kernels_equals_learner(checkpoint_factory, preset):
    """kernels='mxrl' on a BF16 checkpoint: every captured point bitwise the learner's."""
    from mxrl_vllm.diverge import capture_mxrl

    d = checkpoint_factory(preset, 0)
    toks = tokens(dv.vocab_size(str(d)), seed=7)
    rows = dv.compare(dv.learner_trace(str(d), "mxfp8", toks), capture_mxrl(str(d), "mxfp8", toks))
    assert [(r["name"], r["status"]) for r in rows if r["status"] != "equal"] == []
