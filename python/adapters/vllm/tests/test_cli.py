"""mxrl-vllm's command line: settings parsing, errors in one line, the check command."""

import pytest

from mxrl_vllm.__main__ import main, settings


def test_set_builds_nested_settings_with_json_values():
    assert settings(["steps=3", "optim.lr=1e-4", "task=addition:digits=2", "inject=[\"drop-tensor@2\"]"]) == {
        "steps": 3, "optim": {"lr": 1e-4}, "task": "addition:digits=2", "inject": ["drop-tensor@2"]}


def test_a_set_without_a_value_is_refused():
    with pytest.raises(SystemExit, match="--set steps: expected KEY=VALUE"):
        settings(["steps"])


def test_an_unknown_setting_is_one_line_naming_it(checkpoint_factory, capsys):
    assert main(["rl", "--model", str(checkpoint_factory("tiny-dense", 0)), "--set", "no_such_setting=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mxrl-vllm: error: ") and "no_such_setting" in err[-1]


def test_check_refits_and_reports_each_check(checkpoint_factory, bundles, tmp_path, capsys):
    b1, b2 = bundles("tiny-dense")
    (tmp_path / "v1.st").write_bytes(b1)
    (tmp_path / "v2.st").write_bytes(b2)
    rc = main(["check", "--model", str(checkpoint_factory("tiny-dense", 0)), "--bundle", str(tmp_path / "v2.st"),
               "--previous", str(tmp_path / "v1.st")])
    out = capsys.readouterr().out
    assert rc == 0
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "coverage", "placement", "grid", "exceptions", "freshness", "atomicity"]
    assert all(line.endswith("pass") for line in out.splitlines())
