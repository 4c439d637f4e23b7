"""mxrl.rl: a GRPO run whose rollout and weight sync a Python object does.

The remote here is a pure-Python fake inference engine built on mxrl's own
Python API, as an adapter over vLLM would be built on vLLM's: it serves a
compressed-tensors export (made by the CLI, as one deploys a model to vLLM),
loads each sync's bundle into it by rewriting its safetensors file (the MXFP8
codes and E8M0 scales byte for byte), generates with mxrl.Sampler over the
loaded model, and checks what it loaded with mxrl.sync.verify against the
learner's reference (and, when due, its probe logits bit for bit).
"""

import json
import time

import numpy as np
import pytest

import mxrl
import st

PLAN = "mxfp8"
TASK = "addition:digits=1"
CONFIG = {
    "task": TASK,
    "steps": 2,
    "prompts_per_step": 4,
    "samples_per_prompt": 4,
    "eval_problems": 4,
    "probe_prompts": 2,
}
LAYER0_GATE_UP = ("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight")


class FakeEngine:
    """The remote: generate(step, requests) and sync(version, bundle, reference) (see mxrl.rl)."""

    def __init__(self, served_dir, swap_gate_up_from=None):
        self.dir = served_dir
        self.weights = next(served_dir.glob("*.safetensors"))
        _, self.metadata = st.read(self.weights)
        self.tied = json.loads((served_dir / "config.json").read_text())["tie_word_embeddings"]
        self.swap_gate_up_from = swap_gate_up_from  # a loader bug from that version on (swap-gate-up)
        self.model = self.sampler = self.version = None
        self.syncs = []  # (version, reference, report) of each sync
        self.bundle_bytes = []
        self.steps = []  # the step of each generate call

    def load(self, bundle, version):
        """Writes the bundle's tensors as the compressed-tensors file vLLM would load, and loads it."""
        path = self.dir / "bundle.safetensors"
        path.write_bytes(bundle)
        tensors, _ = st.read(path)
        if self.tied:
            del tensors["lm_head.weight"]  # a tied head is the embedding's (no tensor of its own)
        for name, (dtype, a) in list(tensors.items()):
            if dtype == "F8_E8M0":
                tensors[name] = ("U8", a)  # E8M0 exponents, as compressed-tensors labels them
        if self.swap_gate_up_from is not None and version >= self.swap_gate_up_from:
            for suffix in ("", "_scale"):
                g, u = (n + suffix for n in LAYER0_GATE_UP)
                tensors[g], tensors[u] = tensors[u], tensors[g]
        st.write(self.weights, tensors, self.metadata)
        return mxrl.Model.load(self.dir, PLAN)

    def generate(self, step, requests):
        self.steps.append(step)
        (n, max_new, temperature, seed, stop), = {
            (r["n"], r["max_new_tokens"], r["temperature"], r["seed"], tuple(r["stop_tokens"])) for r in requests}
        out = self.sampler.generate([r["prompt"] for r in requests], n=n, max_new_tokens=max_new,
                                    temperature=temperature, seed=seed, stop_tokens=list(stop))
        samples = []
        for r, group in zip(requests, out):
            for i, s in enumerate(group):
                tokens = s["tokens"].tolist()
                # The full rows the tokens were drawn from: position p predicts token p + 1.
                rows = self.model.logits(r["prompt"] + tokens[:-1])[len(r["prompt"]) - 1:]
                samples.append({"request": r["id"], "index": i, "tokens": tokens, "logprobs": s["logprobs"].tolist(),
                                "finish": s["finish_reason"], "version": self.version, "logits": rows})
        return samples

    def sync(self, version, bundle, reference):
        t0 = time.perf_counter()
        assert mxrl.sync.inspect(bundle)["version"] == version  # every digest verified
        self.bundle_bytes.append(len(bundle))
        previous = self.model.manifest() if self.model is not None else None
        self.model = self.load(bundle, version)
        self.sampler = mxrl.Sampler(self.model)
        self.version = version
        t1 = time.perf_counter()
        checks = []
        if reference["checks"] != "off":
            found = mxrl.sync.verify(reference["manifest"], self.model.manifest(), previous=previous)
            for name, c in found.items():
                checks.append({"name": name, "ran": True, "passed": c["passed"], "findings": c["findings"],
                               "seconds": 0.0})
            if reference["agreement"]:
                assert reference["bound"]["bitwise"]  # the sampler runs the learner's plan
                findings = []
                for i, (tokens, want) in enumerate(zip(reference["probe"]["tokens"], reference["probe_logits"])):
                    got = self.model.logits(tokens)
                    assert got.shape == want.shape and want.dtype == np.float32
                    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                        findings.append(f"probe {i}: logits differ from the learner's")
                checks.append({"name": "agreement", "ran": True, "passed": not findings, "findings": findings,
                               "seconds": 0.0, "measured": {"probes": len(reference["probe_logits"])}})
        report = {"applied": True, "apply_seconds": t1 - t0, "check_seconds": time.perf_counter() - t1,
                  "checks": checks}
        self.syncs.append((version, reference, report))
        return report


@pytest.fixture(scope="module")
def warm(cli, tiny_dense, tmp_path_factory):
    """tiny-dense after a short SFT on the task: right now and then when sampling, so that
    groups of samples have mixed rewards and GRPO has gradients."""
    out = tmp_path_factory.mktemp("sft")
    cli("sft", "--model", tiny_dense, "--task", TASK, "--steps", 60, "--batch-size", 16, "--eval-problems", 0,
        "--samples", 0, "--out", out)
    return out / "final"


@pytest.fixture
def served(cli, warm, tmp_path):
    """The model as deployed to an inference engine: a compressed-tensors export."""
    out = tmp_path / "served"
    cli("export", "--model", warm, "--recipe", PLAN, "--format", "compressed-tensors", "--out", out)
    return out


def test_a_two_step_run_through_a_python_remote(warm, served, tmp_path):
    remote = FakeEngine(served)
    run = mxrl.rl.start(warm, CONFIG, remote)
    assert run.step == 0 and [v for v, _, _ in remote.syncs] == [0]
    assert run.config["steps"] == 2 and run.config["optim"]["lr"] == 1e-4  # the defaults under the given keys
    assert run.last_sync["version"] == 0 and run.last_sync["applied"]
    assert run.learner_manifest() == remote.model.manifest()
    probe = run.probe
    assert len(probe["tokens"]) == 2 and len(probe["prompt_len"]) == 2 and probe["temperature"] == 1.0
    ref = remote.syncs[0][1]
    assert ref["probe"] == probe and ref["plan"] == PLAN and ref["checks"] == "stop" and ref["agreement"]
    steps, evals, syncs = [], [], []
    result = run.run(str(tmp_path / "out"), on_step=steps.append, on_eval=evals.append, on_sync=syncs.append)
    assert run.step == 2 and remote.steps == [0, 1]
    assert [s["step"] for s in steps] == [1, 2]
    assert any(s["trained_sequences"] > 0 and s["grad_norm"] > 0 for s in steps), steps  # the learner trained
    for s in steps:
        assert 0.0 <= s["reward_mean"] <= 1.0 and s["samples"] == 16
        # The learner scores what the remote's model sampled, with the same weights: the same log-probs.
        mm = s["mismatch"]
        assert mm["tokens"] > 0 and mm["kl_tokens"] == mm["tokens"] and mm["bitwise_equal"], mm
        assert s["sync"]["applied"] and s["sync"]["version"] == s["step"]
    # Every sync after the first reaches on_sync, with the checks the remote ran.
    assert [r["version"] for r in syncs] == [1, 2]
    for r in syncs:
        assert sorted(r["checks"]) == sorted(["coverage", "placement", "grid", "exceptions", "agreement"])
        assert all(c["passed"] and not c["findings"] for c in r["checks"].values()), r
        assert r["build_s"] > 0 and r["checks"]["agreement"]["measured"] == {"probes": 2}
    assert [r["bytes"] for r in syncs] == remote.bundle_bytes[1:]  # the default: what was handed over
    assert result == evals and [e["step"] for e in evals] == [0, 2]
    assert all(e["eval_total"] == 4 and 0 <= e["eval_correct"] <= 4 for e in evals)
    again = run.evaluate()  # greedy, on the same weights: the same result
    assert {k: v for k, v in again.items() if k != "eval_seconds"} == \
        {k: v for k, v in evals[-1].items() if k != "eval_seconds"}
    # The learner moved, and the remote serves its weights.
    assert run.learner_manifest() == remote.model.manifest() != remote.syncs[0][1]["manifest"]
    # Resume: the saved version goes to the remote first.
    other = FakeEngine(served)
    resumed = mxrl.rl.resume(tmp_path / "out" / "final", other)
    assert resumed.step == 2 and [v for v, _, _ in other.syncs] == [2]
    assert other.model.manifest() == remote.model.manifest()
    with pytest.raises(ValueError, match="taken all its 2 steps"):
        resumed.step_once()


def test_a_failed_check_stops_the_run_naming_the_finding(warm, served):
    remote = FakeEngine(served, swap_gate_up_from=1)
    run = mxrl.rl.start(warm, CONFIG, remote)  # version 0 loads clean
    with pytest.raises(ValueError, match=r"sync of version 1 failed its checks .*placement: .*gate_proj.*up_proj"):
        run.step_once()
    assert not remote.syncs[-1][2]["checks"][1]["passed"]


def test_a_learner_fault_is_in_the_bundle_the_remote_gets(warm, served):
    run = mxrl.rl.start(warm, {**CONFIG, "inject": ["col-blocks"]}, FakeEngine(served))
    with pytest.raises(ValueError, match=r"grid: .*q_proj"):
        run.step_once()


class Broken(FakeEngine):
    """Returns the samples with one field of the first sample changed."""

    def __init__(self, served_dir, edit):
        super().__init__(served_dir)
        self.edit = edit

    def generate(self, step, requests):
        samples = super().generate(step, requests)
        self.edit(samples)
        return samples


@pytest.mark.parametrize("edit, message", [
    (lambda s: s[0]["logprobs"].pop(), r"sample 0 \(request 0\): logprobs has (\d+) entries for (?!\1)\d+ tokens"),
    (lambda s: s[0].update(finish="eos"), r"sample 0 \(request 0\): finish must be 'stop' or 'length'"),
    (lambda s: s[0].update(tokens="abc"), r"sample 0 \(request 0\): tokens must be a list of ints, got str"),
    (lambda s: s[0].update(tokens=[100000]), r"sample 0 \(request 0\): tokens\[0\] = 100000 is outside the vocab"),
    (lambda s: s[0].update(logits=s[0]["logits"][:, :5]), r"sample 0 \(request 0\): logits has shape \[\d+, 5\]"),
    (lambda s: s[0].update(logits=s[0]["logits"].astype(np.float64)),
     r"sample 0 \(request 0\): logits must be float32"),
    (lambda s: s[0].update(token_versions=[]), r"sample 0 \(request 0\): token_versions has 0 entries for \d+"),
    (lambda s: s[0].update(version="0"), r"sample 0 \(request 0\): version must be an int, got str"),
    (lambda s: s[0].update(finish_reason="stop"), r"sample 0 \(request 0\): unknown key 'finish_reason'"),
    (lambda s: s[0].pop("index"), r"sample 0 \(request 0\): missing 'index'"),
    (lambda s: s.pop(), r"request \d+ got 3 samples, expected n = 4"),
    (lambda s: s[1].update(index=0), r"sample 1 \(request 0\): index 0 is returned twice"),
    (lambda s: s[0].update(request=99), r"sample 0 \(request 99\): request 99 is none of this step's requests"),
])
def test_a_malformed_sample_is_refused_naming_the_field(warm, served, edit, message):
    run = mxrl.rl.start(warm, CONFIG, Broken(served, edit))
    with pytest.raises(ValueError, match="remote.generate: " + message):
        run.step_once()
    assert run.step == 0  # nothing trained on them


def test_samples_without_logits_leave_the_kl_unknown(warm, served):
    def plain(samples):  # an engine that returns log-probs only, as numpy arrays
        for s in samples:
            del s["logits"]
            s["tokens"], s["logprobs"] = np.array(s["tokens"], np.int32), np.array(s["logprobs"], np.float32)
            s["token_versions"] = np.full(len(s["tokens"]), s["version"], np.int64)

    stats = mxrl.rl.start(warm, CONFIG, Broken(served, plain)).step_once()
    mm = stats["mismatch"]
    assert mm["tokens"] > 0 and mm["kl_tokens"] == 0 and mm["kl_mean"] is None and mm["bitwise_equal"], mm


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["checks"][0].update(name="covrage"), r"checks\[0\]\.name: unknown check 'covrage'"),
    (lambda r: r["checks"][0].update(passed="yes"), r"checks\[0\]\.passed must be a bool, got str"),
    (lambda r: r.update(applied=False), r"applied is false but no 'error' says why"),
    (lambda r: r.pop("apply_seconds"), r"missing 'apply_seconds'"),
    (lambda r: r.update(apply_s=1.0), r"unknown key 'apply_s'"),
    (lambda r: r["checks"].append(dict(r["checks"][0])), r"checks\[\d\]: check 'coverage' is reported twice"),
])
def test_a_malformed_sync_report_is_refused_naming_the_field(warm, served, edit, message):
    class BadReport(FakeEngine):
        def sync(self, version, bundle, reference):
            r = super().sync(version, bundle, reference)
            edit(r)
            return r

    with pytest.raises(ValueError, match="remote.sync: " + message):
        mxrl.rl.start(warm, CONFIG, BadReport(served))


def test_a_refused_sync_is_reported_with_its_error(warm, served):
    class Refuses(FakeEngine):
        def sync(self, version, bundle, reference):
            r = super().sync(version, bundle, reference)
            return r if version == 0 else {"applied": False, "error": "out of memory", "apply_seconds": 0.0,
                                           "check_seconds": 0.0, "checks": []}

    run = mxrl.rl.start(warm, {**CONFIG, "checks": "warn"}, Refuses(served))
    stats = run.step_once()  # warn: the run goes on
    assert stats["sync"]["applied"] is False and stats["sync"]["error"] == "out of memory"
    with pytest.raises(ValueError, match="sync: out of memory"):
        mxrl.rl.start(warm, CONFIG, Refuses(served)).step_once()


class Boom(Exception):
    pass


def test_exceptions_in_the_remote_and_callbacks_propagate_unchanged(warm, served):
    class FailsOnce(FakeEngine):
        fail = True

        def generate(self, step, requests):
            if self.fail:
                self.fail = False
                raise Boom("engine died")
            return super().generate(step, requests)

    run = mxrl.rl.start(warm, CONFIG, FailsOnce(served))
    with pytest.raises(Boom, match="engine died"):
        run.step_once()
    assert run.step == 0
    assert run.step_once()["step"] == 1  # the run is whole: the step is taken again

    def on_step(stats):
        raise Boom(f"on_step {stats['step']}")

    with pytest.raises(Boom, match="on_step 2"):
        run.run("", on_step=on_step)

    class SyncFails(FakeEngine):
        def sync(self, version, bundle, reference):
            raise KeyError("no such device")

    with pytest.raises(KeyError, match="no such device"):
        mxrl.rl.start(warm, CONFIG, SyncFails(served))

    fresh = mxrl.rl.start(warm, CONFIG, FakeEngine(served))

    def reenter(stats):
        fresh.step_once()

    with pytest.raises(RuntimeError, match="already in progress"):
        fresh.run("", on_step=reenter)
    assert fresh.step == 1 and fresh.step_once()["step"] == 2


def test_config_is_a_partial_dict_of_known_keys(warm, served):
    with pytest.raises(ValueError, match="unknown key 'bogus_key'"):
        mxrl.rl.start(warm, {**CONFIG, "bogus_key": 1}, FakeEngine(served))
    with pytest.raises(ValueError, match="unknown key 'optim.bogus'"):
        mxrl.rl.start(warm, {"optim": {"bogus": 1}}, FakeEngine(served))
    with pytest.raises(ValueError, match="steps must be an integer"):
        mxrl.rl.start(warm, {"steps": "2"}, FakeEngine(served))
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        mxrl.rl.start(warm, {"steps": 0}, FakeEngine(served))
    run = mxrl.rl.start(warm, {**CONFIG, "optim": {"lr": 3e-4}}, FakeEngine(served))
    assert run.config["optim"]["lr"] == 3e-4 and run.config["prompts_per_step"] == 4
    with pytest.raises(TypeError, match="object has no method 'generate'"):
        mxrl.rl.start(warm, CONFIG, object())


def test_off_policy_and_sampler_faults_are_refused(warm, served):
    with pytest.raises(ValueError, match=r"^off_policy 1: .*not supported"):
        mxrl.rl.start(warm, {**CONFIG, "off_policy": 1}, FakeEngine(served))
    with pytest.raises(ValueError, match=r"inject swap-gate-up: a fault of the loader seam"):
        mxrl.rl.start(warm, {**CONFIG, "inject": ["swap-gate-up"]}, FakeEngine(served))


def test_verify_with_previous_names_an_untouched_tensor_under_coverage(cli, tiny_dense, tmp_path):
    v1 = tmp_path / "v1"
    cli("init", "--preset", "tiny-dense", "--out", v1, "--seed", "99")  # every weight differs from tiny_dense's
    before = mxrl.sync.export(tiny_dense, tmp_path / "v0.safetensors")["manifest"]
    want = mxrl.sync.export(v1, tmp_path / "v1.safetensors")["manifest"]
    q = "model.layers.0.self_attn.q_proj.weight"
    got = [old if d["name"] == q else d for d, old in zip(want, before)]  # the sync never wrote q_proj
    r = mxrl.sync.verify(want, got, previous=before)
    assert not r["coverage"]["passed"] and r["placement"]["passed"] and r["grid"]["passed"], r
    assert any(q in f for f in r["coverage"]["findings"]), r
    without = mxrl.sync.verify(want, got)  # no history: the stale bytes just differ
    assert without["coverage"]["passed"] and not without["grid"]["passed"], without
    assert mxrl.sync.verify(tmp_path / "v1.safetensors", want, previous=tmp_path / "v0.safetensors") == \
        mxrl.sync.verify(want, want)


def test_fault_catalogue_and_check_names():
    faults = {f["name"]: f for f in mxrl.faults.catalogue()}
    assert faults["swap-gate-up"]["condition"] == 2 and faults["swap-gate-up"]["check"] == "placement"
    assert faults["swap-gate-up"]["seam"] == "loader" and faults["col-blocks"]["seam"] == "learner"
    assert faults["sampler-killed"]["needs_mpi"] and faults["kv-scale-one"]["needs_fp8_kv"]
    assert [f["condition"] for f in mxrl.faults.catalogue()] == sorted(f["condition"] for f in faults.values())
    assert mxrl.sync.check_names() == ["coverage", "placement", "grid", "exceptions", "freshness", "atomicity",
                                       "agreement"]


def test_the_reference_carries_the_bundle_the_learner_expects(warm, served):
    """With a learner-seam fault the bundle sent differs from the one the checks compare against;
    the clean one's digests are the reference manifest's."""
    seen = []

    class Keep(FakeEngine):
        def sync(self, version, bundle, reference):
            seen.append((bytes(bundle), bytes(reference["expected_bundle"]), reference["manifest"]))
            return super().sync(version, bundle, reference)

    run = mxrl.rl.start(warm, {**CONFIG, "inject": ["col-blocks"], "checks": "warn"}, Keep(served))
    assert seen[0][0] == seen[0][1]  # version 0: the fault is not active yet
    run.step_once()
    sent, clean, manifest = seen[-1]
    assert sent != clean

    def digests(b):
        return {(t["name"], t["part"]): t["xxh3"] for t in mxrl.sync.inspect(b)["manifest"]}

    want = {(t["name"], t["part"]): t["xxh3"] for t in manifest}
    got_clean, got_sent = digests(clean), digests(sent)
    assert all(got_clean.get(k) == d for k, d in want.items())
    assert any(got_sent.get(k) != d for k, d in want.items())
