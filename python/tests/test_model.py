"""mxrl.Model / Sampler: the log-probs and samples of `mxrl score` and `mxrl generate`, bit for bit."""

import json

import numpy as np
import pytest

import mxrl
from conftest import read_jsonl


def sequences(vocab, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(rng.integers(3, 30))).tolist() for _ in range(n)]


def f32(values):
    return np.array([np.float32(v) for v in values], np.float32)


@pytest.mark.parametrize("plan", ["mxfp8", "bf16", "fp8-block128"])
@pytest.mark.parametrize("which", ["tiny_dense", "tiny_moe"])
def test_score_equals_cli(cli, request, tmp_path, plan, which):
    model_dir = request.getfixturevalue(which)
    m = mxrl.Model.load(model_dir, plan)
    assert m.plan == plan
    seqs = sequences(m.config["vocab_size"])
    prompt_len = [1, 2, 1, 2, 1]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"tokens": s, "prompt_len": p}) + "\n" for s, p in zip(seqs, prompt_len)))
    cli("score", "--model", model_dir, "--plan", plan, "--in", inp, "--out", tmp_path / "out.jsonl")
    want = read_jsonl(tmp_path / "out.jsonl")
    got = m.score(seqs, prompt_len=prompt_len)
    assert len(got) == len(want)
    for g, w, s, p in zip(got, want, seqs, prompt_len):
        assert g.dtype == np.float32 and len(g) == len(s) - p
        np.testing.assert_array_equal(g.view(np.uint32), f32(w["logprobs"]).view(np.uint32))
    # batching does not change a bit
    small = m.score(seqs, prompt_len=prompt_len, batch_tokens=7)
    for a, b in zip(got, small):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_logits_match_score(tiny_dense):
    m = mxrl.Model.load(tiny_dense, "mxfp8")
    seq = sequences(m.config["vocab_size"], 1, 3)[0]
    logits = m.logits(seq).astype(np.float64)
    assert logits.shape == (len(seq), m.config["vocab_size"])
    lp = m.score([seq])[0]
    mx = logits.max(axis=1, keepdims=True)
    ref = (logits - mx - np.log(np.exp(logits - mx).sum(axis=1, keepdims=True)))[np.arange(len(seq) - 1), seq[1:]]
    np.testing.assert_allclose(lp, ref, atol=1e-5)


def test_generate_equals_cli(cli, tiny_dense, tmp_path):
    m = mxrl.Model.load(tiny_dense, "mxfp8")
    tk = m.tokenizer
    assert tk is not None
    prompts = [tk.encode("12+34="), tk.encode("7+8="), tk.encode("100+1=")]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"tokens": p}) + "\n" for p in prompts))
    cli("generate", "--model", tiny_dense, "--prompts", tmp_path / "p.jsonl", "--out", tmp_path / "o.jsonl",
        "--n", 3, "--max-new-tokens", 12, "--seed", 11, "--temperature", 1.0)
    want = read_jsonl(tmp_path / "o.jsonl")
    got = mxrl.Sampler(m).generate(prompts, n=3, max_new_tokens=12, seed=11)
    assert [len(g) for g in got] == [3, 3, 3]
    for w in want:
        g = got[w["prompt_index"]][w["sample_index"]]
        assert g["tokens"].tolist() == w["tokens"]
        np.testing.assert_array_equal(g["logprobs"].view(np.uint32), f32(w["logprobs"]).view(np.uint32))
        assert g["finish_reason"] == w["finish_reason"]
        assert g["version"] == w["version"] == 0
    # the sampler's log-probs are the scorer's for the same tokens (temperature 1)
    for p, samples in zip(prompts, got):
        for g in samples:
            if len(g["tokens"]) == 0:
                continue
            lp = m.score([p + g["tokens"].tolist()], prompt_len=len(p))[0]
            np.testing.assert_array_equal(lp.view(np.uint32), g["logprobs"].view(np.uint32))
    # a smaller KV budget and no prefix sharing change nothing
    other = mxrl.Sampler(m, kv_budget=64, prefix_sharing=False).generate(prompts, n=3, max_new_tokens=12, seed=11)
    for a, b in zip(got, other):
        assert [s["tokens"].tolist() for s in a] == [s["tokens"].tolist() for s in b]


def test_default_stop_is_the_eos_rl_rollouts_stop_on(tiny_dense):
    """One stop-token default everywhere: the config's eos_token_id (what RL and SFT rollouts stop on), not
    <|im_end|>; the same as `mxrl generate`'s (test_generate_equals_cli)."""
    m = mxrl.Model.load(tiny_dense, "mxfp8")
    eos = m.config["eos_token_id"]
    im_end = m.tokenizer.encode("<|im_end|>")[0]
    assert eos != im_end
    prompts = [m.tokenizer.encode("12+34="), m.tokenizer.encode("The quick brown fox")]
    s = mxrl.Sampler(m)
    default = s.generate(prompts, n=16, max_new_tokens=48, seed=7)
    rollout = s.generate(prompts, n=16, max_new_tokens=48, seed=7, stop_tokens=[eos])
    assert [[g["tokens"].tolist() for g in p] for p in default] == [[g["tokens"].tolist() for g in p] for p in rollout]
    assert any(im_end in g["tokens"][:-1].tolist() for p in rollout for g in p), "no sample tells the defaults apart"
    assert "eos_token_id" in mxrl.Sampler.generate.__doc__


def test_bad_inputs(tiny_dense, tmp_path):
    m = mxrl.Model.load(tiny_dense, "mxfp8")
    v = m.config["vocab_size"]
    with pytest.raises(ValueError, match=rf"sequences\[1\]\[2\]: token id {v} is outside the model's vocabulary \[0, {v}\)"):
        m.score([[1, 2, 3], [1, 2, v]])
    with pytest.raises(ValueError, match=r"sequences\[0\]: a sequence needs at least 2 tokens, got 1"):
        m.score([[1]])
    with pytest.raises(ValueError, match=r"sequences\[0\]: prompt_len 3 must be in \[1, 2\]"):
        m.score([[1, 2, 3]], prompt_len=3)
    with pytest.raises(ValueError, match="prompt_len: 1 values for 2 sequences"):
        m.score([[1, 2], [1, 2]], prompt_len=[1])
    with pytest.raises(ValueError, match="top_p"):
        mxrl.Sampler(m).generate([[1, 2]], top_p=0.0)
    with pytest.raises(ValueError, match=r"prompts\[0\]: an empty prompt"):
        mxrl.Sampler(m).generate([[]])
    with pytest.raises(ValueError, match="needs .* KV cache positions, more than kv_budget 8"):
        mxrl.Sampler(m, kv_budget=8).generate([[1, 2]], max_new_tokens=20)
    with pytest.raises(ValueError, match="plan"):
        mxrl.Model.load(tiny_dense, "mxfp9")
    with pytest.raises(ValueError, match=str(tmp_path / "missing")):
        mxrl.Model.load(tmp_path / "missing", "mxfp8")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json"):
        mxrl.Model.load(tmp_path / "bad", "mxfp8")


def test_tokenizer(tiny_dense):
    tk = mxrl.Model.load(tiny_dense, "bf16").tokenizer
    ids = tk.encode("12+34=46")
    assert tk.decode(ids) == "12+34=46"
    assert mxrl.Tokenizer.builtin_char().encode("12+34=46") == ids
