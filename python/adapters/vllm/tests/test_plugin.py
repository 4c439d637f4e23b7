"""The vLLM plugin: MXFP8 exports of mxrl load on vLLM's CPU platform, keep their bytes and reload in place.

The engine tests share one engine on the tiny dense model (seed 0); the reload
test puts its weights back before it ends.
"""

import re

import mxrl
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.nn.parameter import Parameter

from mxrl_vllm import plugin
from mxrl_vllm.plugin import MxrlMxfp8LinearKernel

from vllm import SamplingParams
from vllm.inputs import TokensPrompt
from vllm.model_executor.kernels.linear import Mxfp8LinearLayerConfig
from vllm.model_executor.layers.linear import LinearBase

# vLLM fuses these checkpoint projections into one linear each, rows in this order.
FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


def u8(t):
    return t.contiguous().view(torch.uint8)


def mxrl_dequantize(codes, scales):
    return torch.from_numpy(mxrl.dequantize(u8(codes).numpy(), u8(scales).numpy()))


def expected_layers(tensors):
    """{vLLM linear name: (codes, scales)} from an export's tensors, the fused ones concatenated by rows."""
    out = {}
    for key in tensors:
        if not key.endswith(".weight_scale"):
            continue
        prefix = key[: -len(".weight_scale")]
        parent, _, proj = prefix.rpartition(".")
        fused = next((f for f, parts in FUSED.items() if proj in parts), None)
        if fused is None:
            out[prefix] = (tensors[prefix + ".weight"], tensors[key])
        elif proj == FUSED[fused][0]:
            parts = [f"{parent}.{p}" for p in FUSED[fused]]
            out[f"{parent}.{fused}"] = (
                torch.cat([u8(tensors[p + ".weight"]) for p in parts]),
                torch.cat([tensors[p + ".weight_scale"] for p in parts]),
            )
    return out


def read_linears(model):
    """Every linear layer of the engine's model: its kernel, bytes, BF16 copy and digest (copied out)."""
    out = {}
    for name, m in model.named_modules():
        if not isinstance(m, LinearBase):
            continue
        kernel = getattr(getattr(m, "scheme", None), "kernel", None)
        bf16 = getattr(m, "mxrl_weight_bf16", None)
        out[name] = dict(
            kernel=type(kernel).__name__,
            codes=u8(m.weight.data).clone(),
            scales=m.weight_scale.data.clone(),
            bf16=None if bf16 is None else bf16.clone(),
            bf16_ptr=None if bf16 is None else bf16.data_ptr(),
            derived_from=getattr(m, "mxrl_derived_from", None),
            current=plugin.derived_from(m.weight.data, m.weight_scale.data),
        )
    return out


def check_engine_holds(llm, export_dir):
    """Asserts each linear holds the export's bytes, the BF16 copy is their dequantization, the digest theirs."""
    want = expected_layers(load_file(str(export_dir / "model.safetensors")))
    got = llm.apply_model(read_linears)[0]
    assert sorted(got) == sorted(want)
    for name, g in got.items():
        codes, scales = want[name]
        assert g["kernel"] == "MxrlMxfp8LinearKernel", name
        assert torch.equal(g["codes"], u8(codes)), name
        assert torch.equal(g["scales"], scales), name
        assert g["bf16"].dtype == torch.bfloat16
        assert torch.equal(g["bf16"].float(), mxrl_dequantize(codes, scales)), name
        assert g["derived_from"] == g["current"] == plugin.derived_from(codes, scales), name
    return got


def greedy(llm, prompt=(1, 5, 9), n=8):
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, detokenize=False)
    out = llm.generate([TokensPrompt(prompt_token_ids=list(prompt))], params, use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


LONG_PROMPT = [(7 * i + 3) % 80 for i in range(40)]  # longer than a KV block, so a stale prefix cache would show


def greedy_logprobs(llm, prompt=LONG_PROMPT, n=6):
    """Greedy tokens and the log-prob of each, as the engine computes them."""
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, detokenize=False, logprobs=0)
    out = llm.generate([TokensPrompt(prompt_token_ids=list(prompt))], params, use_tqdm=False)[0].outputs[0]
    return list(out.token_ids), [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)]


def reload(llm, export_dir):
    tensors = load_file(str(export_dir / "model.safetensors"))
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors.items())})


def head_is_embedding(model):
    """Whether the tied LM head computes with the embedding the model now holds (x @ W^T for x = I)."""
    head, embed = model.lm_head, model.model.embed_tokens.weight
    x = torch.eye(embed.shape[1], dtype=embed.dtype)
    return torch.equal(head.quant_method.apply(head, x).t(), embed)


def reprocess_tied_head(model):
    model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


@pytest.fixture(scope="module")
def dense_llm(llm_factory, tiny_dense_mx):
    return llm_factory(tiny_dense_mx)


def test_export_loads_and_generates(dense_llm, tiny_dense_mx):
    got = check_engine_holds(dense_llm, tiny_dense_mx)
    assert len(got) == 4 * 4  # tiny-dense: 4 layers of qkv, o, gate_up, down
    tokens = greedy(dense_llm)
    assert len(tokens) == 8 and all(0 <= t < 86 for t in tokens)


def test_plugin_registered_once(dense_llm):
    # vLLM ran the entry point while starting the engine; registering again adds nothing.
    from vllm.model_executor.kernels import linear
    from vllm.platforms import PlatformEnum

    plugin.register()
    cpu_kernels = linear._POSSIBLE_MXFP8_KERNELS[PlatformEnum.CPU]  # read only, to count
    assert cpu_kernels.count(MxrlMxfp8LinearKernel) == 1


def test_mxrl_codec_agrees_with_vllms(tiny_dense_mx):
    from vllm.model_executor.layers.quantization.utils.mxfp8_utils import dequant_mxfp8_to_bf16

    for name, (codes, scales) in expected_layers(load_file(str(tiny_dense_mx / "model.safetensors"))).items():
        ours = plugin.dequantize_bf16(codes, scales, name)
        assert torch.equal(ours, dequant_mxfp8_to_bf16(codes.view(torch.float8_e4m3fn), scales)), name


def test_reload_weights_rebuilds_the_bf16_copy(dense_llm, tiny_dense_mx, tiny_dense_mx_seed1):
    before = check_engine_holds(dense_llm, tiny_dense_mx)
    tokens_before = greedy(dense_llm)
    try:
        reload(dense_llm, tiny_dense_mx_seed1)
        after = check_engine_holds(dense_llm, tiny_dense_mx_seed1)
        for name in after:
            assert after[name]["derived_from"] != before[name]["derived_from"], name
            assert after[name]["bf16_ptr"] == before[name]["bf16_ptr"], f"{name}: BF16 copy not rewritten in place"
        assert len(greedy(dense_llm)) == 8
    finally:
        reload(dense_llm, tiny_dense_mx)
        dense_llm.apply_model(reprocess_tied_head)
    check_engine_holds(dense_llm, tiny_dense_mx)
    assert greedy(dense_llm) == tokens_before


def test_reloaded_engine_computes_as_a_fresh_one(dense_llm, llm_factory, tiny_dense_mx, tiny_dense_mx_seed1,
                                                 tied_head_packed):
    """After reload_weights the engine's log-probs are a fresh engine's on the new export, bit for bit,
    once the tied LM head is processed again: vLLM 0.32.0 on CPU reloads the embedding but leaves the
    tied head computing with the copy it packed at load time, where it packs one (reload's
    tied-parameter limitation; tied_head_packed)."""
    want = greedy_logprobs(llm_factory(tiny_dense_mx_seed1))
    greedy_logprobs(dense_llm)  # the long prompt in the prefix cache, with the old weights
    try:
        reload(dense_llm, tiny_dense_mx_seed1)
        # stale where vLLM packs the head: if this fails there, vLLM fixed it
        assert dense_llm.apply_model(head_is_embedding) == [not tied_head_packed]
        dense_llm.apply_model(reprocess_tied_head)
        assert dense_llm.apply_model(head_is_embedding) == [True]
        assert greedy_logprobs(dense_llm) == want
    finally:
        reload(dense_llm, tiny_dense_mx)
        dense_llm.apply_model(reprocess_tied_head)
    assert dense_llm.apply_model(head_is_embedding) == [True]


# --- the kernel on its own, without an engine -------------------------------------------------------


def test_k_not_a_multiple_of_32_is_refused():
    ok, reason = MxrlMxfp8LinearKernel.can_implement(Mxfp8LinearLayerConfig(weight_shape=(64, 48)))
    assert not ok
    assert "48" in reason and "32" in reason
    assert MxrlMxfp8LinearKernel.can_implement(Mxfp8LinearLayerConfig(weight_shape=(64, 96))) == (True, None)
    assert MxrlMxfp8LinearKernel.is_supported() == (True, None)


def fake_layer(codes_u8, scales, pad=(0, 0), prefix="model.layers.0.mlp.down_proj"):
    """A module shaped as vLLM's compressed-tensors MXFP8 scheme leaves it before processing (scales padded)."""
    layer = torch.nn.Module()
    layer.prefix = prefix
    n, kb = scales.shape
    padded = torch.full((n + pad[0], kb + pad[1]), 0x7F, dtype=torch.uint8)
    padded[:n, :kb] = torch.from_numpy(scales)
    layer.weight = Parameter(torch.from_numpy(codes_u8).view(torch.float8_e4m3fn), requires_grad=False)
    layer.weight_scale = Parameter(padded, requires_grad=False)
    return layer


def test_process_keeps_bytes_trims_padding_and_rewrites_in_place():
    rng = np.random.default_rng(0)
    n, k = 48, 96
    kernel = MxrlMxfp8LinearKernel(Mxfp8LinearLayerConfig(weight_shape=(n, k)))
    codes, scales = mxrl.quantize(rng.standard_normal((n, k), dtype=np.float32))
    layer = fake_layer(codes, scales, pad=(16, 5))
    kernel.process_weights_after_loading(layer)
    assert layer.weight.dtype == torch.float8_e4m3fn and tuple(layer.weight.shape) == (n, k)
    assert layer.weight_scale.dtype == torch.uint8 and tuple(layer.weight_scale.shape) == (n, k // 32)
    assert np.array_equal(u8(layer.weight).numpy(), codes)
    assert np.array_equal(layer.weight_scale.numpy(), scales)
    assert not isinstance(layer.mxrl_weight_bf16, Parameter)
    assert np.array_equal(layer.mxrl_weight_bf16.float().numpy(), mxrl.dequantize(codes, scales))
    assert layer.mxrl_derived_from == plugin.derived_from(layer.weight, layer.weight_scale)

    x = torch.randn(3, k, dtype=torch.bfloat16)
    y = kernel.apply_weights(layer, x)
    assert torch.equal(y, torch.nn.functional.linear(x, layer.mxrl_weight_bf16))

    # As vLLM's reload does: new parameters on the same module, processed again.
    ptr, digest = layer.mxrl_weight_bf16.data_ptr(), layer.mxrl_derived_from
    codes2, scales2 = mxrl.quantize(rng.standard_normal((n, k), dtype=np.float32))
    fresh = fake_layer(codes2, scales2)
    layer.weight, layer.weight_scale = fresh.weight, fresh.weight_scale
    kernel.process_weights_after_loading(layer)
    assert layer.mxrl_weight_bf16.data_ptr() == ptr
    assert np.array_equal(layer.mxrl_weight_bf16.float().numpy(), mxrl.dequantize(codes2, scales2))
    assert layer.mxrl_derived_from != digest


def test_a_value_not_exact_in_bf16_is_refused_naming_the_layer():
    # Scale 2^-127 times E4M3's smallest subnormal 2^-9 is 2^-136, under BF16's smallest subnormal 2^-133.
    codes = np.zeros((32, 64), dtype=np.uint8)
    codes[3, 7] = 0x01
    scales = np.full((32, 2), 127, dtype=np.uint8)
    scales[3, 0] = 0
    kernel = MxrlMxfp8LinearKernel(Mxfp8LinearLayerConfig(weight_shape=(32, 64)))
    with pytest.raises(ValueError, match=re.escape("model.layers.2.self_attn.o_proj: ") + r".*not exact in BF16.*\[3, 7\]"):
        kernel.process_weights_after_loading(fake_layer(codes, scales, prefix="model.layers.2.self_attn.o_proj"))


def test_digest_sees_every_byte():
    codes = torch.zeros(32, 64, dtype=torch.uint8)
    scales = torch.full((32, 2), 127, dtype=torch.uint8)
    d = plugin.derived_from(codes.view(torch.float8_e4m3fn), scales)
    codes[31, 63] = 1
    assert plugin.derived_from(codes.view(torch.float8_e4m3fn), scales) != d
    codes[31, 63] = 0
    scales[0, 1] = 128
    assert plugin.derived_from(codes.view(torch.float8_e4m3fn), scales) != d
