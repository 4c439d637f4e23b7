"""mxrl's kernels in a vLLM engine (mxrl_vllm.kernels): op by op and end to end, bit for bit (float32 bits).

One engine is live at a time (engines are made per (preset, plan) and the
previous one is closed first); tiny presets, few tokens.
"""

import numpy as np
import pytest
import torch

import mxrl

pytestmark = pytest.mark.skipif(not hasattr(mxrl, "ops"), reason="this mxrl has no mxrl.ops")

from mxrl_vllm import kernels as K  # noqa: E402
from mxrl_vllm.engine import VllmEngine  # noqa: E402


def bits(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32)).view(np.uint32)


def same(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


@pytest.fixture(scope="module")
def engine_for(checkpoint_factory):
    """engine_for(preset, plan, kernels="mxrl"): one live engine at a time, kept while asked for again."""
    held = {}

    def make(preset, plan, kernels="mxrl", dtype="bf16"):
        key = (preset, plan, kernels, dtype)
        if key not in held or held[key].llm is None:  # new, or closed by a test that changed its weights
            for e in held.values():
                e.close()
            held.clear()
            held[key] = VllmEngine(checkpoint_factory(preset, 0, dtype), kernels=kernels, plan=plan, max_model_len=256)
        return held[key]

    def close_all():
        for e in held.values():
            e.close()
        held.clear()

    make.close_all = close_all
    yield make
    for e in held.values():
        e.close()


def learner_weights(model_dir):
    from safetensors.torch import load_file
    import pathlib

    out = {}
    for f in sorted(pathlib.Path(model_dir).glob("*.safetensors")):
        out.update({k: v.to(torch.float32).numpy() for k, v in load_file(str(f)).items()})
    return out


SEQS = [[int(t) for t in np.random.default_rng(s).integers(0, 83, 24)] for s in range(3)]


def test_modes_are_checked():
    with pytest.raises(ValueError, match="expected one of"):
        K.set_mode("fast")
    with pytest.raises(ValueError, match="needs a plan"):
        K.set_mode("mxrl")
    assert K.mode() == "vllm"


def test_mxrl_mode_refuses_a_non_fp32_engine(checkpoint_factory):
    with pytest.raises(ValueError, match="FP32"):
        VllmEngine(checkpoint_factory("tiny-dense", 0), kernels="mxrl", plan="bf16", dtype="bfloat16")
    assert K.mode() == "vllm"


def test_linear_kinds_from_prefixes():
    assert K.linear_kinds("model.layers.3.self_attn.qkv_proj") == (("q", "k", "v"), 3)
    assert K.linear_kinds("model.layers.0.mlp.gate_up_proj") == (("gate", "up"), 0)
    assert K.linear_kinds("model.layers.2.mlp.gate") == (("router",), 2)
    assert K.linear_kinds("lm_head") == (("lm_head",), -1)


@pytest.mark.parametrize("plan", ["bf16", "mxfp8", "mxfp8-half"])
def test_every_op_of_the_engine_is_mxrls_bitwise(plan, engine_for, checkpoint_factory):
    """Each vLLM linear on a random FP32 input equals mxrl.ops.Linear's on the learner's weights.

    So do the RMSNorm (plain and fused add), rope and SiluAndMul layers against mxrl.ops."""
    e = engine_for("tiny-dense", plan)
    W = learner_weights(checkpoint_factory("tiny-dense", 0))
    ops = mxrl.ops
    rng = np.random.default_rng(1)

    def run(model):
        bad, seen = [], 0
        for name, m in model.named_modules():
            if getattr(m, "mxrl_linears", None) is not None:
                kinds, layer = K.linear_kinds(name)
                x = rng.standard_normal((5, m.mxrl_linears[0].k)).astype(np.float32)
                y = m.quant_method.apply(m, torch.from_numpy(x), None).numpy()
                parts = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
                         "up": "up_proj", "down": "down_proj"}
                refs = []
                for kind in kinds:
                    if kind == "lm_head":
                        w = W.get("lm_head.weight", W["model.embed_tokens.weight"])
                    else:
                        sub = "self_attn" if kind in "qkvo" else "mlp"
                        w = W[f"model.layers.{layer}.{sub}.{parts[kind]}.weight"]
                    lin = ops.Linear(np.ascontiguousarray(w), precision=ops.plan_precision(plan, kind, layer))
                    refs.append(lin.forward(x))
                seen += 1
                ref = np.concatenate(refs, axis=1)
                if not same(y[:, : ref.shape[1]], ref):  # the head's rows beyond the vocabulary are vLLM's padding
                    bad.append(name)
            elif type(m).__name__ == "MxrlRMSNorm":
                d = m.weight.shape[0]
                x = rng.standard_normal((4, d)).astype(np.float32)
                r = rng.standard_normal((4, d)).astype(np.float32)
                w = m.weight.detach().numpy()
                y = m(torch.from_numpy(x)).numpy()
                y2, res = m(torch.from_numpy(x), torch.from_numpy(r.copy()))
                seen += 1
                if not (same(y, ops.rmsnorm(x, w, m.variance_epsilon)) and same(res.numpy(), x + r)
                        and same(y2.numpy(), ops.rmsnorm(x + r, w, m.variance_epsilon))):
                    bad.append(name)
            elif type(m).__name__ == "MxrlRotaryEmbedding":
                T, hd = 6, m.head_size
                pos = np.array([0, 1, 2, 7, 30, 100], np.int64)
                q = rng.standard_normal((T, 8 * hd)).astype(np.float32)
                k = rng.standard_normal((T, 2 * hd)).astype(np.float32)
                qo, ko = m(torch.from_numpy(pos), torch.from_numpy(q), torch.from_numpy(k))
                seen += 1
                if not (same(qo.numpy().reshape(T, 8, hd), ops.rope(q.reshape(T, 8, hd), pos, m.base))
                        and same(ko.numpy().reshape(T, 2, hd), ops.rope(k.reshape(T, 2, hd), pos, m.base))):
                    bad.append(name)
            elif type(m).__name__ == "MxrlSiluAndMul":
                x = rng.standard_normal((3, 64)).astype(np.float32)
                seen += 1
                if not same(m(torch.from_numpy(x)).numpy(), ops.swiglu(x[:, :32].copy(), x[:, 32:].copy())):
                    bad.append(name)
        return bad, seen

    bad, seen = e.call(run)
    assert bad == []
    # 4 layers x (qkv, o, gate_up, down, 4 norms, silu) + lm_head + final norm + the rope (one shared instance)
    assert seen == 4 * 9 + 3


def _learner_logprobs(model_dir, plan, tokens):
    return np.asarray(mxrl.Model.load(str(model_dir), plan).trace(tokens)["logprobs"], np.float32)


# An F32 checkpoint holds the FP32 masters: the engine must compute with the learner's BF16 compute
# copies of the embedding and norm weights, not with what it loaded.
@pytest.mark.parametrize("preset,plan,dtype", [("tiny-dense", "bf16", "bf16"), ("tiny-dense", "mxfp8", "bf16"),
                                               ("tiny-moe", "mxfp8", "bf16"), ("tiny-dense", "mxfp8", "f32")])
def test_prompt_logprobs_are_the_learners_bitwise(preset, plan, dtype, engine_for, checkpoint_factory):
    e = engine_for(preset, plan, dtype=dtype)
    rows = e.prompt_logprobs(SEQS)
    m = mxrl.Model.load(str(checkpoint_factory(preset, 0, dtype)), plan)
    for s, r in zip(SEQS, rows):
        ref = np.asarray(m.trace(s)["logprobs"], np.float32)[: len(s) - 1]
        assert same(r, ref), float(np.abs(r.astype(np.float64) - ref).max())


@pytest.mark.parametrize("preset,plan", [("tiny-dense", "mxfp8"), ("tiny-moe", "mxfp8")])
def test_sampled_logprobs_are_the_learners_scoring_bitwise(preset, plan, engine_for, checkpoint_factory):
    e = engine_for(preset, plan)
    req = {"id": 1, "prompt": SEQS[0][:10], "n": 2, "max_new_tokens": 8, "temperature": 1.0, "stop_tokens": [],
           "seed": 3}
    samples = e.generate([req], full_rows=False)
    m = mxrl.Model.load(str(checkpoint_factory(preset, 0)), plan)
    p = len(req["prompt"])
    for s in samples:
        lp = np.asarray(m.trace(req["prompt"] + s["tokens"])["logprobs"], np.float32)
        ref = [lp[p - 1 + t, tok] for t, tok in enumerate(s["tokens"])]
        got = np.asarray(s["logprobs"], np.float32)
        assert same(got, ref), float(np.abs(got.astype(np.float64) - np.asarray(ref, np.float64)).max())


@pytest.mark.parametrize("preset", ["tiny-dense", "tiny-moe"])
def test_after_a_refit_the_engine_is_the_new_weights_learner_bitwise(preset, engine_for, checkpoint_factory, bundles):
    """The mxrl copies are re-prepared by vLLM's refit (reload_weights re-runs process_weights_after_loading).

    The sync checks pass on it: they read the mxrl ops (an F32-held BF16 value is no exception there, and the
    expert probe is compared with mxrl's expert, exactly)."""
    e = engine_for(preset, "mxfp8")
    b1, _ = bundles(preset)  # mxfp8 ship bundle of the seed-1 checkpoint
    e.apply(b1, 1)
    try:
        from mxrl_vllm import bundle as B
        from mxrl_vllm import checks as C

        report = C.run(e, B.parse(b1), None, {"agreement": False}, version=1)
        assert {c["name"]: c["findings"] for c in report if c["ran"] and not c["passed"]} == {}
        rows = e.prompt_logprobs(SEQS[:2])
        m = mxrl.Model.load(str(checkpoint_factory(preset, 1)), "mxfp8")
        for s, r in zip(SEQS[:2], rows):
            ref = np.asarray(m.trace(s)["logprobs"], np.float32)[: len(s) - 1]
            assert same(r, ref), float(np.abs(r.astype(np.float64) - ref).max())
    finally:
        e.close()  # its weights are no longer the checkpoint's


def test_an_mxfp8_export_computes_from_its_codes_as_the_learner(tiny_dense_mx, checkpoint_factory, engine_for):
    """An MXFP8 compressed-tensors export: the linears are prepared from the codes and scales the plugin keeps."""
    engine_for.close_all()  # one live engine at a time
    with VllmEngine(tiny_dense_mx, kernels="mxrl", plan="mxfp8", max_model_len=256) as e:
        kinds = e.call(lambda model: sorted({type(m.quant_method).__name__ for _, m in model.named_modules()
                                             if getattr(m, "mxrl_linears", None) is not None}))
        rows = e.prompt_logprobs(SEQS[:2])
    assert any("CompressedTensors" in k for k in kinds), kinds
    m = mxrl.Model.load(str(checkpoint_factory("tiny-dense", 0)), "mxfp8")
    for s, r in zip(SEQS[:2], rows):
        ref = np.asarray(m.trace(s)["logprobs"], np.float32)[: len(s) - 1]
        assert same(r, ref), float(np.abs(r.astype(np.float64) - ref).max())


def test_mxrl_linear_mode_computes_every_linear_through_mxrl_in_a_bf16_engine(engine_for, checkpoint_factory):
    """kernels="mxrl-linear": BF16 activations in, mxrl's linear on their FP32 values, the output rounded to BF16."""
    e = engine_for("tiny-dense", "mxfp8", "mxrl-linear")
    W = learner_weights(checkpoint_factory("tiny-dense", 0))
    ops = mxrl.ops
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
             "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}

    def run(model):
        assert model.model.embed_tokens.weight.dtype == torch.bfloat16
        bad, seen = [], 0
        for name, m in model.named_modules():
            if getattr(m, "mxrl_linears", None) is None:
                continue
            kinds, layer = K.linear_kinds(name)
            x = torch.randn(3, m.mxrl_linears[0].k, generator=torch.Generator().manual_seed(seen)).to(torch.bfloat16)
            y = m.quant_method.apply(m, x, None)
            x32 = x.to(torch.float32).numpy()
            refs = []
            for kind in kinds:
                w = W.get("lm_head.weight", W["model.embed_tokens.weight"]) if kind == "lm_head" else \
                    W[f"model.layers.{layer}.{names[kind]}.weight"]
                refs.append(ops.Linear(np.ascontiguousarray(w), precision=ops.plan_precision("mxfp8", kind, layer))
                            .forward(x32))
            ref = torch.from_numpy(np.concatenate(refs, axis=1)).to(torch.bfloat16)
            seen += 1
            if y.dtype != torch.bfloat16 or not torch.equal(y[:, : ref.shape[1]].view(torch.int16),
                                                             ref.view(torch.int16)):
                bad.append(name)
        return bad, seen

    bad, seen = e.call(run)
    assert bad == [] and seen == 4 * 4 + 1
