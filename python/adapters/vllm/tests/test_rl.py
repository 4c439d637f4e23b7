"""GRPO with mxrl's learner and vLLM sampling, every sync checked; faults at vLLM's seams."""

import json

import pytest

from mxrl_vllm import faults as F
from mxrl_vllm.checks import NAMES
from mxrl_vllm.matrix import INJECT_AT, run_one, write_task
from mxrl_vllm.rl import run

CONFIG = { "steps": 3, "prompts_per_step": 4, "samples_per_prompt": 4, "eval_problems": 8,
          "probe_prompts": 4}


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(str(tmp_path_factory.mktemp("task") / "task.jsonl"))


@pytest.fixture(scope="module")
def warm(cli, checkpoint_factory, tmp_path_factory, task):
    """tiny-dense after a short SFT on the matrix's task, so that rollouts earn some reward."""
    out = tmp_path_factory.mktemp("sft")
    cli("sft", "--model", checkpoint_factory("tiny-dense", 0), "--task", task, "--steps", 150, "--batch-size", 32,
        "--lr", 3e-3, "--warmup", 10, "--schedule", "cosine", "--eval-problems", 0, "--samples", 0, "--out", out)
    return out / "final"


def lines(path):
    return [json.loads(x) for x in open(path)]


def test_a_run_with_vllm_sampling_checks_every_sync(warm, task, tmp_path):
    m = tmp_path / "metrics.jsonl"
    res = run(str(warm), str(tmp_path / "out"), {**CONFIG, "task": task}, metrics=str(m))
    assert res["steps"] == 3 and len(res["evals"]) == 2
    steps = [o for o in lines(m) if "reward_mean" in o]
    assert [o["step"] for o in steps] == [1, 2, 3]
    for o in steps:
        assert o["engine"] == "vllm" and o["samples"] == 16
        assert o["version"] == o["step"] - 1  # generated under the weights of the step before
        assert o["mismatch"]["kl_tokens"] > 0 and o["mismatch"]["kl_mean"] >= 0  # exact KL from vLLM's full rows
        assert o["mismatch"]["kl_mean"] < 0.05  # same weights, another engine's BF16 kernels
        checks = o["sync"]["checks"]
        assert set(checks) == set(NAMES)
        assert all(c["passed"] for c in checks.values()), checks
        assert checks["agreement"]["measured"]["tokens"] > 0
    assert (tmp_path / "out" / "final" / "model.safetensors").is_file()


def test_a_fault_stops_the_run_at_the_first_sync_it_touches(warm, task):
    with pytest.raises(ValueError, match=r"sync of version 2 failed its checks .*placement: .*gate_proj.*up_proj"):
        run(str(warm), "", {**CONFIG, "task": task, "inject": ["swap-gate-up@2"]})


def test_an_unknown_fault_is_refused(warm, task):
    with pytest.raises(ValueError, match="no-such-fault"):
        run(str(warm), "", {**CONFIG, "task": task, "inject": ["no-such-fault"]})


def test_faults_that_cannot_apply_are_refused_in_one_line(warm, task):
    with pytest.raises(ValueError, match="drop-experts needs a MoE model"):
        run(str(warm), "", {**CONFIG, "task": task, "inject": ["drop-experts"]})


def test_every_vllm_fault_has_mxrls_name_and_condition():
    cat = F.catalogue()
    assert {c["name"] for c in cat} == set(F.BY_NAME)
    assert all(1 <= c["condition"] <= 6 for c in cat)


@pytest.mark.parametrize("fault", [None, "drop-tensor", "stale-tied-head", "swap-gate-up", "transposed",
                                   "requant-floor", "stale-prefix-cache", "partial-sync"])
def test_the_dense_matrix_row(fault, warm, task, tied_head_packed):
    """Each fault is caught at the first sync it touches by its condition's check; the clean run raises nothing."""
    if fault == "stale-tied-head" and not tied_head_packed:
        pytest.skip("vLLM computes the tied head from the live embedding on this CPU: no packed copy to leave stale")
    row = run_one(str(warm), None, fault, log=None, task=task)
    if fault is None:
        assert row["caught_at"] is None and not row["false_alarm_versions"], row
        return
    cond = {c["name"]: c["condition"] for c in F.catalogue()}[fault]
    assert all(n > 0 for n in row["trained_sequences"][:INJECT_AT]), row  # the weights moved: the fault can show
    assert row["caught_at"] == INJECT_AT and not row["false_alarm_versions"], row
    assert NAMES[cond - 1] in row["failed_checks"], row
