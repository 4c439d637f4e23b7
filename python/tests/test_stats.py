"""mxrl.stats and mxrl.tasks: the matching experiment's measurement, for samplers outside mxrl."""

import numpy as np
import pytest

import mxrl


def _logsoftmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_match_sums_is_exact_kl_from_full_rows():
    rng = np.random.default_rng(0)
    s = rng.standard_normal((6, 50)).astype(np.float32)
    l = (s + 0.3 * rng.standard_normal((6, 50))).astype(np.float32)
    tok = rng.integers(0, 50, 6).astype(np.int32).tolist()
    got = mxrl.stats.match_sums(s, l, tok)
    ls, ll = _logsoftmax(s), _logsoftmax(l)
    kl = (np.exp(ls) * (ls - ll)).sum(axis=-1)
    assert got["tokens"] == 6
    assert got["kl"] == pytest.approx(kl.sum(), rel=1e-6)
    d = ll[np.arange(6), tok] - ls[np.arange(6), tok]
    assert got["abs_dlogp"] == pytest.approx(np.abs(d).sum(), rel=1e-5)
    assert got["unequal"] == 6


def test_match_sums_of_identical_rows_is_zero_and_temperature_applies():
    s = np.random.default_rng(1).standard_normal((3, 17)).astype(np.float32)
    got = mxrl.stats.match_sums(s, s.copy(), [0, 5, 16])
    assert got["kl"] == 0.0 and got["unequal"] == 0 and got["abs_dlogp_max"] == 0.0
    cold = mxrl.stats.match_sums(s, s * 0.5, [0, 5, 16], temperature=0.5)  # s/0.5 vs (s/2)/0.5
    ls, ll = _logsoftmax(s / 0.5), _logsoftmax(s)
    assert cold["kl"] == pytest.approx((np.exp(ls) * (ls - ll)).sum(), rel=1e-6)


def test_match_sums_rejects_bad_input_in_one_line():
    s = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="do not match"):
        mxrl.stats.match_sums(s, np.zeros((3, 4), np.float32), [0, 1])
    with pytest.raises(ValueError, match="outside"):
        mxrl.stats.match_sums(s, s, [0, 4])
    with pytest.raises(TypeError):
        mxrl.stats.match_sums(s.astype(np.float64), s, [0, 1])


def test_bootstrap_brackets_the_mean_and_pairs_ratios():
    tok = [10, 12, 8, 9, 11]
    kl = [0.1, 0.3, 0.2, 0.05, 0.15]
    mean, lo, hi = mxrl.stats.bootstrap_mean(tok, kl, 500, 3)
    assert mean == pytest.approx(sum(kl) / sum(tok))
    assert lo <= mean <= hi and lo < hi
    r, rlo, rhi = mxrl.stats.bootstrap_ratio(tok, [2 * k for k in kl], tok, kl, 500, 3)
    assert r == pytest.approx(2.0) and rlo == pytest.approx(2.0) and rhi == pytest.approx(2.0)  # paired: exact
    with pytest.raises(ValueError, match="same prompts"):
        mxrl.stats.bootstrap_ratio(tok, kl, tok[:2], kl[:2], 10, 0)


def test_problems_are_deterministic_and_eval_never_meets_train():
    ev = mxrl.tasks.problems("addition:digits=3", "eval", seed=4, count=20)
    assert ev == mxrl.tasks.problems("addition:digits=3", "eval", seed=4, count=20)
    assert ev[5:] == mxrl.tasks.problems("addition:digits=3", "eval", seed=4, count=15, start=5)
    tr = mxrl.tasks.problems("addition:digits=3", "train", seed=4, count=200)
    assert not {p for p, _ in ev} & {p for p, _ in tr}
    for p, a in ev:
        x, y = p[:-1].split("+")
        assert int(a) == int(x) + int(y)
    with pytest.raises(ValueError, match="unknown task"):
        mxrl.tasks.problems("nope")
    with pytest.raises(ValueError, match="split"):
        mxrl.tasks.problems("addition", "dev")


def test_sampler_full_rows_are_the_learners_logits_on_its_grid(tiny_dense):
    m = mxrl.Model.load(tiny_dense, "mxfp8")
    prompt = [3, 4, 5, 6]
    (samples,) = mxrl.Sampler(m).generate([prompt], n=2, max_new_tokens=5, seed=3, full_rows=True)
    for g in samples:
        t = len(g["tokens"])
        assert g["logits"].shape == (t, m.logits(prompt).shape[1])
        learner = m.logits(prompt + list(g["tokens"]))[len(prompt) - 1:len(prompt) - 1 + t]
        assert np.array_equal(learner, g["logits"])
        sums = mxrl.stats.match_sums(g["logits"], np.ascontiguousarray(learner), list(g["tokens"]))
        assert sums["kl"] == 0.0 and sums["unequal"] == 0
    (plain,) = mxrl.Sampler(m).generate([prompt], n=1, max_new_tokens=5, seed=3)
    assert "logits" not in plain[0]
