"""One version number: the installed package's, mxrl.__version__ and `mxrl --version` are CMakeLists.txt's."""

import importlib.metadata

import mxrl


def test_version_is_the_clis(cli):
    assert mxrl.__version__ == importlib.metadata.version("mxrl")
    assert cli("--version").stdout == f"mxrl {mxrl.__version__}\n"
