"""The installed package: its version is mxrl's, its entry points are declared, importing it loads no vLLM."""

import importlib.metadata as md
import subprocess
import sys

import mxrl


def test_version_is_mxrls():
    # Both read CMakeLists.txt's project(mxrl VERSION ...) when built.
    assert md.version("mxrl-vllm") == mxrl.__version__


def test_vllm_plugin_entry_point():
    eps = {ep.name: ep.value for ep in md.entry_points(group="vllm.general_plugins")}
    assert eps.get("mxrl_mxfp8") == "mxrl_vllm.plugin:register"


def test_console_script_entry_point():
    eps = {ep.name: ep.value for ep in md.entry_points(group="console_scripts")}
    assert eps.get("mxrl-vllm") == "mxrl_vllm.__main__:main"


def test_import_loads_neither_vllm_nor_torch():
    code = "import sys, mxrl_vllm; print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
