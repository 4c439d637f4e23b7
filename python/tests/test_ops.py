"""mxrl.ops: the forward pass's kernels one by one, and Model.trace.

The main check recomposes the whole forward pass of the tiny presets from mxrl.ops
calls on the checkpoint's weights (with fused q|k|v and gate|up linears) and finds
every activation of Model.trace, and the logits, bit for bit.
"""

import json
import pathlib

import numpy as np
import pytest

import mxrl
import st
from mxrl import ops

PLANS = ["bf16", "mxfp8", "mxfp8-half"]


def bits(a):
    a = np.ascontiguousarray(a)
    assert a.dtype == np.float32
    return a.view(np.uint32)


def assert_bitwise(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if not np.array_equal(bits(got), bits(want)):
        bad = np.argwhere(bits(got) != bits(want))
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {bad[0].tolist()}")


def bf16_round(a):
    return (st.bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


def load_weights(model_dir):
    """name -> float32 master weights, from the checkpoint's safetensors files."""
    w = {}
    for f in sorted(pathlib.Path(model_dir).glob("*.safetensors")):
        for name, (dtype, a) in st.read(f)[0].items():
            if dtype == "F32":
                w[name] = np.ascontiguousarray(a, np.float32)
            elif dtype == "BF16":
                w[name] = (a.astype(np.uint32) << 16).view(np.float32)
            else:
                raise AssertionError(f"{name}: unexpected dtype {dtype}")
    return w


def recompose(model_dir, plan, tokens):
    """The forward pass of one sequence from mxrl.ops alone, under Model.trace's names."""
    cfg = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    W = load_weights(model_dir)
    info = ops.plan_info(plan)
    assert info["name"] == plan and not info["fp8_kv_cache"]
    copy = bf16_round if info["bf16_embeddings"] else (lambda a: a)  # embeddings and norm weights
    H, hd = cfg["hidden_size"], cfg["head_dim"]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    qd, kvd = nq * hd, nkv * hd
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    n = len(tokens)
    pos = np.arange(n, dtype=np.int64)

    def linear(names, kind, layer, expert=-1):
        """One Linear over the rows of every weight in names (fused when several)."""
        prec = ops.plan_precision(plan, kind, layer, expert)
        w = np.ascontiguousarray(np.concatenate([W[x] for x in names]))
        return ops.Linear(w, precision=prec, name="+".join(names))

    out = {}
    x = copy(W["model.embed_tokens.weight"])[tokens]
    out["embed"] = x
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t = f"layers.{l}."
        xn1 = ops.rmsnorm(x, copy(W[p + "input_layernorm.weight"]), eps)
        assert len({ops.plan_precision(plan, k, l) for k in "qkv"}) == 1
        qkv = linear([p + f"self_attn.{k}_proj.weight" for k in "qkv"], "q", l).forward(xn1)  # [n, qd + 2 kvd]
        q_raw, k_raw, v = np.split(qkv, [qd, qd + kvd], axis=1)
        q = ops.rmsnorm(np.ascontiguousarray(q_raw).reshape(n, nq, hd), copy(W[p + "self_attn.q_norm.weight"]), eps)
        k = ops.rmsnorm(np.ascontiguousarray(k_raw).reshape(n, nkv, hd), copy(W[p + "self_attn.k_norm.weight"]), eps)
        q, k = ops.rope(q, pos, theta), ops.rope(k, pos, theta)
        att = ops.attention(q, k, np.ascontiguousarray(v).reshape(n, nkv, hd), 0).reshape(n, qd)
        x_mid = x + linear([p + "self_attn.o_proj.weight"], "o", l).forward(att)
        xn2 = ops.rmsnorm(x_mid, copy(W[p + "post_attention_layernorm.weight"]), eps)
        out.update({t + "input_layernorm": xn1, t + "qkv_proj": qkv, t + "rotary_q": q.reshape(n, qd),
                    t + "rotary_k": k.reshape(n, kvd), t + "attn": att, t + "residual_mid": x_mid,
                    t + "post_attention_layernorm": xn2})
        if p + "mlp.gate.weight" in W:  # MoE
            router = linear([p + "mlp.gate.weight"], "router", l).forward(xn2)
            experts, weights = ops.moe_route(router, cfg["num_experts_per_tok"], cfg["norm_topk_prob"])
            E = cfg["num_experts"]
            lins = {m: [linear([p + f"mlp.experts.{e}.{m}_proj.weight"], m, l, e) for e in range(E)]
                    for m in ("gate", "up", "down")}
            y = ops.MoeExperts(lins["gate"], lins["up"], lins["down"]).forward(xn2, experts, weights)
            out[t + "router"] = router
        else:
            gate_up = linear([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"], "gate", l).forward(xn2)
            g, u = np.split(gate_up, 2, axis=1)
            h = ops.swiglu(np.ascontiguousarray(g), np.ascontiguousarray(u))
            y = linear([p + "mlp.down_proj.weight"], "down", l).forward(h)
            out.update({t + "gate_up_proj": gate_up, t + "act": h})
        x = x_mid + y
        out[t + "out"] = x
    out["norm"] = ops.rmsnorm(x, copy(W["model.norm.weight"]), eps)
    head = "lm_head.weight" if "lm_head.weight" in W and not cfg["tie_word_embeddings"] else "model.embed_tokens.weight"
    out["logits"] = linear([head], "lm_head", -1).forward(out["norm"])
    out["logprobs"] = ops.log_softmax(out["logits"])
    return out


def tokens_for(m, n=13, seed=0):
    return np.random.default_rng(seed).integers(0, m.config["vocab_size"], n).tolist()


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("which", ["tiny_dense", "tiny_moe"])
def test_ops_recompose_the_learners_forward(request, which, plan):
    model_dir = request.getfixturevalue(which)
    m = mxrl.Model.load(model_dir, plan, threads=2)
    tokens = tokens_for(m)
    want = m.trace(tokens)
    got = recompose(model_dir, plan, tokens)
    assert sorted(got) == sorted(want)
    for key in want:
        assert_bitwise(got[key], want[key], f"{which} {plan} {key}")
    assert_bitwise(got["logits"], m.logits(tokens), "logits vs Model.logits")


@pytest.mark.parametrize("plan", ["mxfp8", "bf16", "mxfp8+fp8kv"])
@pytest.mark.parametrize("which", ["tiny_dense", "tiny_moe"])
def test_trace_decode_equals_prefill(request, which, plan):
    m = mxrl.Model.load(request.getfixturevalue(which), plan)
    tokens = tokens_for(m, 11, 1)
    full = m.trace(tokens)
    c = m.config
    n, L = len(tokens), c["num_hidden_layers"]
    assert full["embed"].shape == (n, c["hidden_size"])
    assert full["logits"].shape == (n, c["vocab_size"])
    kvd = c["num_key_value_heads"] * c["head_dim"]
    assert full[f"layers.{L - 1}.qkv_proj"].shape == (n, c["num_attention_heads"] * c["head_dim"] + 2 * kvd)
    assert_bitwise(full["logits"], m.logits(tokens), "trace logits vs Model.logits")
    for step in (1, 3):
        part = m.trace(tokens, step=step)
        assert sorted(part) == sorted(full)
        for key in full:
            assert_bitwise(part[key], full[key], f"step {step} {key}")
    lp = full["logprobs"].astype(np.float64)
    assert np.allclose(np.exp(lp).sum(axis=1), 1, atol=1e-5)


def test_model_config_and_trace_errors(tiny_dense):
    m = mxrl.Model.load(tiny_dense, "bf16")
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "num_experts", "num_experts_per_tok", "norm_topk_prob", "rms_norm_eps",
              "rope_theta", "vocab_size", "tie_word_embeddings"):
        assert k in m.config, k
    assert m.config["num_experts"] == 0 and m.plan == "bf16"
    for bad, exc in (([], ValueError), ([m.config["vocab_size"]], ValueError)):
        with pytest.raises(exc) as e:
            m.trace(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="step"):
        m.trace([1, 2], step=-1)


def rng_f32(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def one_line(exc_type, f, *args, match=None, **kw):
    with pytest.raises(exc_type, match=match) as e:
        f(*args, **kw)
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_linear_precisions_and_payload():
    w = rng_f32(96, 64, seed=1, scale=0.1)
    x = rng_f32(5, 64, seed=2)
    L = ops.Linear(w, precision="mxfp8", name="proj")
    assert (L.n, L.k, L.precision, L.name) == (96, 64, "mxfp8(e4m3,rceil)", "proj")
    assert "proj" in repr(L)
    y = L.forward(x)
    assert y.dtype == np.float32 and y.shape == (5, 96)
    assert ops.Linear(w, precision="mxfp8(e4m3,rceil)").forward(x).tobytes() == y.tobytes()
    # the weights are the BF16 compute copy's row-wise MX quantization
    codes, scales = mxrl.quantize(bf16_round(w))
    assert np.array_equal(L.codes(), codes) and np.array_equal(L.scales(), scales)
    # shipped codes and scales give the same linear
    P = ops.Linear(codes=L.codes(), scales=L.scales(), precision="mxfp8", name="shipped")
    assert (P.n, P.k, P.precision) == (96, 64, "mxfp8(e4m3,rceil)")
    assert_bitwise(P.forward(x), y, "payload linear")
    assert np.array_equal(P.codes(), L.codes()) and np.array_equal(P.scales(), L.scales())
    # m = 0
    assert ops.Linear(w).forward(np.zeros((0, 64), np.float32)).shape == (0, 96)
    # every precision runs and stays close to fp32
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for prec in ("fp32", "bf16", "mxfp8(e4m3,floor)", "fp8-block128(e4m3)", "fp8-tensor(e4m3)"):
        got = ops.Linear(w, precision=prec).forward(x)
        assert np.abs(got - ref).max() < 0.2 * np.abs(ref).max(), prec
    assert np.abs(ops.Linear(w, precision="fp32").forward(x) - ref).max() < 1e-5
    one_line(ValueError, ops.Linear(w, precision="bf16").codes)


def test_linear_errors():
    w = rng_f32(8, 64)
    msg = one_line(ValueError, ops.Linear, w, precision="mxfp9")
    assert "mxfp8(e4m3,rceil)" in msg and "bf16" in msg and "fp8-block128(e4m3)" in msg
    one_line(TypeError, ops.Linear, w.astype(np.float64))
    one_line(ValueError, ops.Linear, w[0])
    one_line(ValueError, ops.Linear, np.asfortranarray(w))
    one_line(ValueError, ops.Linear, rng_f32(8, 48), precision="mxfp8")  # k % 32
    one_line(ValueError, ops.Linear)  # nothing given
    L = ops.Linear(w, precision="mxfp8", name="the_linear")
    one_line(ValueError, ops.Linear, w, codes=L.codes(), scales=L.scales(), precision="mxfp8")
    one_line(ValueError, ops.Linear, codes=L.codes(), scales=L.scales(), precision="bf16")
    one_line(ValueError, ops.Linear, codes=L.codes(), scales=L.scales()[:, :1], precision="mxfp8")
    one_line(TypeError, ops.Linear, codes=L.codes().astype(np.int8), scales=L.scales(), precision="mxfp8")
    one_line(ValueError, ops.Linear, codes=L.codes(), precision="mxfp8")
    msg = one_line(ValueError, L.forward, rng_f32(3, 32))
    assert "the_linear" in msg
    one_line(TypeError, L.forward, rng_f32(3, 64).astype(np.float16))
    one_line(ValueError, L.forward, rng_f32(64, 3).T)


def test_linear_from_torch_float8():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    L = ops.Linear(rng_f32(32, 64, scale=0.1), precision="mxfp8")
    codes = torch.from_numpy(L.codes()).view(torch.float8_e4m3fn)
    P = ops.Linear(codes=codes, scales=torch.from_numpy(L.scales()), precision="mxfp8")
    x = rng_f32(4, 64)
    assert_bitwise(P.forward(torch.from_numpy(x)), L.forward(x), "torch payload")


def test_plans():
    assert ops.plan_precision("mxfp8", "q", 0) == "mxfp8(e4m3,rceil)"
    assert ops.plan_precision("mxfp8", "router", 0) == "bf16"
    assert ops.plan_precision("mxfp8", "lm_head") == "bf16"
    assert ops.plan_precision("mxfp8-half", "gate", 0) == "mxfp8(e4m3,rceil)"
    assert ops.plan_precision("mxfp8-half", "gate", 1) == "bf16"
    assert ops.plan_precision("mxfp8-floor", "down", 3, 2) == "mxfp8(e4m3,floor)"
    assert ops.plan_precision("fp32", "v", 0) == "fp32"
    msg = one_line(ValueError, ops.plan_precision, "mxfp8", "qkv", 0)
    assert "lm_head" in msg and "router" in msg
    one_line(ValueError, ops.plan_precision, "nope", "q", 0)
    assert ops.plan_info("mxfp8") == {"name": "mxfp8", "bf16_embeddings": True, "fp8_kv_cache": False}
    assert ops.plan_info("fp32")["bf16_embeddings"] is False
    assert ops.plan_info("mxfp8+fp8kv")["fp8_kv_cache"] is True


def ref_rmsnorm(x, w, eps):
    x = x.astype(np.float64)
    return w * x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def ref_rope(x, pos, theta):
    hd = x.shape[-1]
    # the angles as RopeTable makes them: fp32(pos * fp32(inv_freq)); cos and sin in float64
    inv = (1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)).astype(np.float32)
    ang = (pos[:, None].astype(np.float32) * inv[None, :]).astype(np.float64)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : hd // 2].astype(np.float64), x[..., hd // 2:].astype(np.float64)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def ref_attention(q, k, v, p0, scale):
    T, heads, hd = q.shape
    G = heads // k.shape[1]
    out = np.zeros(q.shape)
    for t in range(T):
        for h in range(heads):
            kk, vv = k[: p0 + t + 1, h // G].astype(np.float64), v[: p0 + t + 1, h // G].astype(np.float64)
            s = kk @ q[t, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ vv
    return out


def test_elementwise_ops_match_references():
    x = rng_f32(6, 3, 64, seed=3)
    w = rng_f32(64, seed=4)
    y = ops.rmsnorm(x, w, 1e-6)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref_rmsnorm(x, w, 1e-6), rtol=1e-5, atol=1e-6)
    assert_bitwise(ops.rmsnorm(x.reshape(18, 64), w, 1e-6), y.reshape(18, 64), "rmsnorm rows")
    pos = np.array([0, 1, 2, 7, 100, 513], np.int64)
    r = ops.rope(x, pos, 10000.0)
    np.testing.assert_allclose(r, ref_rope(x, pos, 10000.0), atol=1e-5)
    assert_bitwise(ops.rope(x, pos.astype(np.int32), 10000.0), r, "rope int32 positions")
    g, u = rng_f32(7, 40, seed=5), rng_f32(7, 40, seed=6)
    g64 = g.astype(np.float64)
    np.testing.assert_allclose(ops.swiglu(g, u), g64 / (1 + np.exp(-g64)) * u, rtol=1e-5, atol=1e-6)
    logits = rng_f32(4, 50, seed=7, scale=3)
    l64 = logits.astype(np.float64)
    ref = l64 - l64.max(1, keepdims=True) - np.log(np.exp(l64 - l64.max(1, keepdims=True)).sum(1, keepdims=True))
    np.testing.assert_allclose(ops.log_softmax(logits), ref, atol=1e-5)


def test_attention_matches_reference():
    hd = 32
    q = rng_f32(5, 8, hd, seed=8)
    k, v = rng_f32(9, 2, hd, seed=9), rng_f32(9, 2, hd, seed=10)
    for p0 in (0, 4):
        got = ops.attention(q, k, v, p0)
        assert got.shape == q.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, ref_attention(q, k, v, p0, 1 / np.sqrt(hd)), atol=1e-5)
    np.testing.assert_allclose(ops.attention(q, k, v, 1, scale=0.3), ref_attention(q, k, v, 1, 0.3), atol=1e-5)
    # a token's output depends only on its own position: decode one token at a time
    full = ops.attention(q, k, v, 2)
    for t in range(5):
        assert_bitwise(ops.attention(q[t:t + 1], k, v, 2 + t), full[t:t + 1], f"token {t}")
    assert ops.attention(q[:0], k, v, 0).shape == (0, 8, hd)


def test_moe_route_and_experts():
    logits = rng_f32(10, 8, seed=11)
    experts, weights = ops.moe_route(logits, 2, True)
    assert experts.dtype == np.int32 and weights.dtype == np.float32 and experts.shape == (10, 2)
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(1, keepdims=True)
    top = np.argsort(-p, axis=1, kind="stable")[:, :2]
    assert np.array_equal(experts, top)
    sel = np.take_along_axis(p, top, 1)
    np.testing.assert_allclose(weights, sel / sel.sum(1, keepdims=True), rtol=1e-5)
    _, w_raw = ops.moe_route(logits, 2, False)
    np.testing.assert_allclose(w_raw, sel, rtol=1e-5)
    # the experts against each expert's Linear
    H, F, E = 64, 32, 8
    lin = {m: [ops.Linear(rng_f32(*((F, H) if m != "down" else (H, F)), seed=20 + 3 * e + i, scale=0.1),
                          precision="mxfp8") for e in range(E)] for i, m in enumerate(("gate", "up", "down"))}
    moe = ops.MoeExperts(lin["gate"], lin["up"], lin["down"])
    assert moe.num_experts == E
    x = rng_f32(10, H, seed=12)
    y = moe.forward(x, experts, weights)
    ref = np.zeros((10, H), np.float32)
    for e in range(E):
        rows, j = np.nonzero(experts == e)
        if len(rows):
            xr = np.ascontiguousarray(x[rows])
            gu = [lin[m][e].forward(xr) for m in ("gate", "up")]
            ye = lin["down"][e].forward(ops.swiglu(*gu))
            ref[rows] = ref[rows] + ye * weights[rows, j][:, None]
    assert_bitwise(y, ref, "MoeExperts vs per-expert Linears")
    assert_bitwise(moe.forward(x, experts.astype(np.int64), weights), y, "int64 expert ids")
    one_line(ValueError, moe.forward, x, experts + 8, weights)
    one_line(ValueError, moe.forward, x[:3], experts, weights)
    one_line(ValueError, ops.MoeExperts, lin["gate"], lin["up"], lin["down"][:2])
    one_line(ValueError, ops.MoeExperts, lin["up"], lin["down"], lin["gate"])
    one_line(ValueError, ops.moe_route, logits, 9, True)


def test_op_errors_are_one_line():
    x = rng_f32(4, 3, 32)
    one_line(TypeError, ops.rmsnorm, x.astype(np.float64), rng_f32(32), 1e-6)
    one_line(ValueError, ops.rmsnorm, x, rng_f32(31), 1e-6)
    one_line(ValueError, ops.rmsnorm, x[:, :, ::2], rng_f32(16), 1e-6)
    one_line(ValueError, ops.rope, x[0], np.arange(3), 1e4)
    one_line(ValueError, ops.rope, x, np.arange(3), 1e4)
    one_line(TypeError, ops.rope, x, np.arange(4, dtype=np.float32), 1e4)
    one_line(ValueError, ops.rope, x, -np.arange(4), 1e4)
    one_line(ValueError, ops.swiglu, rng_f32(3, 4), rng_f32(4, 3))
    k = rng_f32(6, 2, 32)
    one_line(ValueError, ops.attention, rng_f32(4, 3, 32), k, k, 0)  # 3 heads, 2 kv heads
    one_line(ValueError, ops.attention, rng_f32(4, 4, 32), k, k, 3)  # npos < p0 + T
    one_line(ValueError, ops.attention, rng_f32(4, 4, 16), k, k, 0)
    one_line(ValueError, ops.attention, rng_f32(4, 4, 32), k, rng_f32(5, 2, 32), 0)
    one_line(TypeError, ops.log_softmax, np.zeros((2, 3), np.float64))
    one_line(TypeError, ops.moe_route, np.zeros((2, 3), np.int32), 1, True)
    one_line(ValueError, ops.set_threads, -1)


def test_results_do_not_depend_on_threads():
    before = ops.get_threads()
    w = rng_f32(256, 256, seed=30, scale=0.05)
    x = rng_f32(33, 256, seed=31)
    q, kv = rng_f32(17, 8, 32, seed=32), rng_f32(40, 2, 32, seed=33)

    def run():
        return [ops.Linear(w, precision=p).forward(x) for p in ("mxfp8", "bf16")] + [
            ops.attention(q, kv, kv, 23), ops.rope(q, np.arange(17), 1e6), ops.rmsnorm(x, w[0], 1e-6),
            ops.log_softmax(x)]

    try:
        ops.set_threads(1)
        assert ops.get_threads() == 1
        one = run()
        ops.set_threads(2)
        assert ops.get_threads() == 2
        two = run()
    finally:
        ops.set_threads(before)
    for i, (a, b) in enumerate(zip(one, two)):
        assert_bitwise(a, b, f"result {i}")
