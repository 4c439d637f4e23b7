"""Fixtures: the mxrl CLI the Python calls are checked against, and tiny checkpoints made by it."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
def tiny_dense(tmp_path_factory):
    d = tmp_path_factory.mktemp("models") / "tiny-dense"
    run_cli("init", "--preset", "tiny-dense", "--out", d, "--seed", "3")
    return d


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory):
    d = tmp_path_factory.mktemp("models") / "tiny-moe"
    run_cli("init", "--preset", "tiny-moe", "--out", d, "--seed", "4")
    return d


def read_jsonl(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line.strip()]
