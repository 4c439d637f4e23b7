"""Fixtures: tiny models made and exported by the mxrl CLI ($MXRL_BIN), and vLLM engines on them.

vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with a 1 GiB KV
cache (VLLM_CPU_KVCACHE_SPACE=1) unless the environment says otherwise. An
engine takes about 15 s to start, so ``llm_factory`` shares engines for the
whole session: a test that changes an engine's weights puts them back before
it ends, or asks for an engine of its own (``fresh=True``).
"""

import os
import pathlib
import subprocess

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROOT = pathlib.Path(__file__).resolve().parents[4]

# What every test engine is built with: token ids in and out (the tiny presets'
# tokenizers are mxrl's), every log-prob available, eager mode (no compile time).
LLM_DEFAULTS = dict(
    skip_tokenizer_init=True,
    max_logprobs=-1,
    max_model_len=256,
    enforce_eager=True,
    seed=0,
)


def _bin() -> pathlib.Path:
    p = pathlib.Path(os.environ.get("MXRL_BIN", ROOT / "build" / "mxrl"))
    if not p.is_file():
        raise RuntimeError(f"{p}: no mxrl binary (build it with scripts/build.sh or set MXRL_BIN)")
    return p


def run_cli(*args, check=True):
    """Runs the mxrl CLI; returns the completed process (stdout/stderr as text)."""
    r = subprocess.run([str(_bin()), *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"mxrl {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r


@pytest.fixture(scope="session")
def cli():
    return run_cli


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory):
    """``make(preset, seed, dtype="bf16")``: a checkpoint from ``mxrl init`` (made once per session)."""
    made = {}

    def make(preset="tiny-dense", seed=0, dtype="bf16"):
        key = (preset, seed, dtype)
        if key not in made:
            d = tmp_path_factory.mktemp("models") / f"{preset}-{dtype}-seed{seed}"
            run_cli("init", "--preset", preset, "--out", d, "--dtype", dtype, "--seed", seed)
            made[key] = d
        return made[key]

    return make


@pytest.fixture(scope="session")
def export_factory(tmp_path_factory):
    """``export(model_dir)``: its MXFP8 compressed-tensors export (``mxrl export``), made once per session."""
    made = {}

    def export(model_dir):
        key = str(model_dir)
        if key not in made:
            out = tmp_path_factory.mktemp("exports") / pathlib.Path(model_dir).name
            run_cli("export", "--model", model_dir, "--format", "compressed-tensors", "--out", out)
            made[key] = out
        return made[key]

    return export


@pytest.fixture(scope="session")
def mxfp8_model(checkpoint_factory, export_factory):
    """``mxfp8_model(preset, seed)``: the MXFP8 compressed-tensors export of ``mxrl init``'s model."""

    def make(preset="tiny-dense", seed=0):
        return export_factory(checkpoint_factory(preset, seed))

    return make


@pytest.fixture(scope="session")
def tiny_dense_mx(mxfp8_model):
    return mxfp8_model("tiny-dense", 0)


@pytest.fixture(scope="session")
def tiny_dense_mx_seed1(mxfp8_model):
    return mxfp8_model("tiny-dense", 1)


def _shutdown(llm):
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


@pytest.fixture(scope="session")
def llm_factory():
    """``make(model_dir, fresh=False, **overrides)``: a ``vllm.LLM`` on ``model_dir`` with LLM_DEFAULTS.

    Engines with the same model and arguments are shared for the session;
    ``fresh=True`` builds one that only the caller uses (shut down at the
    session's end all the same).
    """
    from vllm import LLM

    shared = {}
    owned = []

    def make(model_dir, fresh=False, **overrides):
        kw = {**LLM_DEFAULTS, **overrides}
        key = (str(model_dir), tuple(sorted((k, repr(v)) for k, v in kw.items())))
        if fresh:
            owned.append(LLM(model=str(model_dir), **kw))
            return owned[-1]
        if key not in shared:
            shared[key] = LLM(model=str(model_dir), **kw)
        return shared[key]

    yield make
    for llm in [*shared.values(), *owned]:
        _shutdown(llm)


@pytest.fixture(scope="session")
def bundles(cli, checkpoint_factory, tmp_path_factory):
    """bundles(preset) -> (v1 bytes, v2 bytes): mxfp8 ship bundles of two different checkpoints."""
    made = {}

    def make(preset):
        if preset not in made:
            d = tmp_path_factory.mktemp("bundles")
            out = []
            for v, seed in ((1, 1), (2, 2)):
                f = d / f"{preset}-v{v}.st"
                cli("sync", "export", "--model", checkpoint_factory(preset, seed), "--out", f, "--version", v,
                    "--sync", "ship")
                out.append(f.read_bytes())
            made[preset] = tuple(out)
        return made[preset]

    return make


@pytest.fixture
def closing():
    """``closing(engine)``: the engine, shut down when the test ends (each holds a KV cache)."""
    made = []

    def keep(engine):
        made.append(engine)
        return engine

    yield keep
    for e in made:
        e.close()


def head_keeps_own_copy(model):
    """Whether the tied LM head computes with a copy of the embedding made at load (vLLM's CPU GEMM
    re-pack: sgl-kernel or oneDNN, where this CPU has them) rather than with the live embedding: one
    embedding row is changed in place, the head's output for that token compared, the row restored."""
    import torch

    head, embed = model.lm_head, model.model.embed_tokens.weight
    x = torch.eye(embed.shape[1], dtype=embed.dtype)[:4]
    with torch.no_grad():
        before = head.quant_method.apply(head, x).clone()
        saved = embed[0].clone()
        embed[0] += 1.0
        after = head.quant_method.apply(head, x).clone()
        embed[0].copy_(saved)
    return torch.equal(before[:, 0], after[:, 0])


@pytest.fixture(scope="session")
def tied_head_packed(llm_factory, checkpoint_factory):
    """Whether vLLM keeps a packed copy of the tiny dense model's tied head on this CPU: on an AMD EPYC
    with AVX-512 it does (and the refit leaves it stale); on one with AVX2 only its GEMMs fall back to
    torch's linear over the live weights, so there is no copy to go stale."""
    return llm_factory(checkpoint_factory("tiny-dense", 0)).apply_model(head_keeps_own_copy)[0]
