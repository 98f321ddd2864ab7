"""enable()'s settings: every accepted form passes, every malformed value raises ValueError
naming the setting and its accepted forms, and the rules are the native parser's."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
from pathlib import Path

import pytest

import sublinear
from sublinear import _native, _settings
from sublinear.__main__ import cli_path

from conftest import REPO

GOOD = [
    ("SUBLINEAR_BUDGET", v) for v in ("8GiB", "512MiB", "1.5GB", "1048576", "60%", "100%", "0.5x", "1.5X",
                                      "8gib", "8 GB", " 2TiB ", "1B", "3KB")
] + [
    ("SUBLINEAR_POLICY", v) for v in ("none", "sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr")
] + [
    ("SUBLINEAR_LOG", v) for v in ("error", "warn", "info", "debug", "INFO", "info:/tmp/sublinear.log")
] + [
    ("SUBLINEAR_VALIDATE", v) for v in ("off", "first", "always", "Always")
] + [
    ("SUBLINEAR_TRACE_ITERATIONS", "1"), ("SUBLINEAR_TRACE_ITERATIONS", "2"),
    ("SUBLINEAR_ITERATION", "marker"), ("SUBLINEAR_ITERATION", "auto"), ("SUBLINEAR_ITERATION", "AUTO"),
    ("SUBLINEAR_REPORT", "/tmp/report.json"), ("SUBLINEAR_TRACE", "run.trace"),
    ("SUBLINEAR_BUDGET", ""), ("SUBLINEAR_REPORT", ""),
] + [
    ("SUBLINEAR_DISABLE", v) for v in ("1", "true", "yes", "on", "0", "false", "no", "off", "TRUE")
]

BAD = [
    ("SUBLINEAR_BUDGET", v) for v in ("8G", "8g", "0", "0GiB", "101%", "0%", "-1GiB", "GiB", "1.GiB", "8 GiBs",
                                      "0.1B", "1e9", "lots", "x")
] + [
    ("SUBLINEAR_POLICY", v) for v in ("Chen", "optimal", "")
] + [
    ("SUBLINEAR_LOG", v) for v in ("verbose", "info:", "")
] + [
    ("SUBLINEAR_VALIDATE", "sometimes"), ("SUBLINEAR_TRACE_ITERATIONS", "3"),
    ("SUBLINEAR_TRACE_ITERATIONS", "0"), ("SUBLINEAR_ITERATION", "optimizer"),
    ("SUBLINEAR_DISABLE", "maybe"), ("SUBLINEAR_DISABLE", ""), ("SUBLINEAR_VALIDATE", ""),
]


def docs_table():
    """name -> accepted forms, from the generated table of docs/settings.md."""
    text = (REPO / "docs" / "settings.md").read_text()
    table = text[text.index("<!-- settings-table:begin"):text.index("<!-- settings-table:end")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`SUBLINEAR_"):
            rows[cells[0].strip("`")] = cells[3]
    return rows


def test_the_settings_and_their_forms_are_the_documented_ones():
    assert docs_table() == _settings.settings()


def test_python_keeps_no_copy_of_the_rules():
    # The values are checked by the native parser (sublinear_check_setting): the package's
    # Python source holds neither the budget units nor the planner names.
    source = (Path(_settings.__file__)).read_text()
    for rule in ("GiB", "KiB", "reforward", "sqrtn", "warning"):
        assert rule not in source, rule


def native_message(name, value):
    lib = ctypes.CDLL(sublinear.library_path())
    lib.sublinear_check_setting.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.sublinear_last_error.restype = ctypes.c_char_p
    assert lib.sublinear_check_setting(name.encode(), value.encode()) == -1
    return lib.sublinear_last_error().decode()


@pytest.mark.parametrize("name,value", [("SUBLINEAR_BUDGET", "8G"), ("SUBLINEAR_BUDGET", "101%"),
                                        ("SUBLINEAR_POLICY", "optimal"), ("SUBLINEAR_BUGDET", "1")])
def test_the_error_is_the_native_parsers_message(name, value):
    with pytest.raises(ValueError) as caught:
        _settings.check(name, value)
    assert str(caught.value) == native_message(name, value)


@pytest.mark.parametrize("name,value", GOOD)
def test_accepted_form_passes(name, value):
    _settings.check(name, value)


@pytest.mark.parametrize("name,value", BAD)
def test_malformed_value_raises_value_error_naming_setting_and_forms(name, value):
    with pytest.raises(ValueError) as caught:
        _settings.check(name, value)
    message = str(caught.value)
    assert f"{name}='{value}'" in message
    assert "accepted" in message or "expected" in message


def test_enable_arguments_become_environment_variables():
    env = _settings.from_arguments(budget="8GiB", policy="chen", report="r.json", log="info",
                                   trace_iterations=1, disable=False, validate=None)
    assert env == {"SUBLINEAR_BUDGET": "8GiB", "SUBLINEAR_POLICY": "chen", "SUBLINEAR_REPORT": "r.json",
                   "SUBLINEAR_LOG": "info", "SUBLINEAR_TRACE_ITERATIONS": "1", "SUBLINEAR_DISABLE": "0"}


def test_budget_given_as_int_is_bytes():
    assert _settings.from_arguments(budget=8 << 30) == {"SUBLINEAR_BUDGET": str(8 << 30)}


def test_budget_given_as_float_is_refused_as_ambiguous():
    with pytest.raises(ValueError, match=r"SUBLINEAR_BUDGET=0\.5: a float is ambiguous"):
        _settings.from_arguments(budget=0.5)


def test_budget_with_single_letter_unit_names_the_setting_and_the_fix():
    with pytest.raises(ValueError, match=r"SUBLINEAR_BUDGET='8G'.*ambiguous: write GiB or GB.*8GiB, 512MiB"):
        _settings.from_arguments(budget="8G")


def test_unknown_keyword_lists_the_settings():
    with pytest.raises(ValueError, match=r"unknown setting 'bugdet'.*budget, policy, report, log"):
        _settings.from_arguments(bugdet="8GiB")


def test_unknown_environment_variable_lists_the_settings():
    with pytest.raises(ValueError, match="unknown setting SUBLINEAR_BUGDET; the settings are: SUBLINEAR_BUDGET"):
        _settings.check_environment({"SUBLINEAR_BUGDET": "8GiB"})


def test_script_variables_are_not_settings():
    _settings.check_environment({"SUBLINEAR_ROOT": "/src", "SUBLINEAR_SANITIZER": "x", "SUBLINEAR_STRESS_OPS": "7"})
    _settings.check_environment({"SUBLINEAR_BUILD_TYPE": "Debug", "SUBLINEAR_BUILD_TARGETS": "sublinear_cli"})


def test_variables_without_the_prefix_are_ignored():
    _settings.check_environment({"PATH": "/bin", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})


def native_accepts(name, value):
    """Whether the native settings reader accepts `name=value`, asked through
    `sublinear run --print-env`, which checks every SUBLINEAR_* variable before anything runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBLINEAR_")}
    env[name] = value
    done = subprocess.run([cli_path(), "run", "--print-env", "--", "true"],
                          env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        assert re.search(re.escape(name), done.stderr), done.stderr  # refused for this setting, not else
    return done.returncode == 0


@pytest.mark.parametrize("name,value", GOOD + BAD)
def test_python_and_the_command_line_agree(name, value):
    if cli_path() is None:
        pytest.skip("the sublinear command line is not in the package nor on PATH")
    try:
        sublinear.preload_library_path()
    except FileNotFoundError:
        pytest.skip("this source tree has no preload library (integrations/preload)")
    assert native_accepts(name, value) == (value in dict.fromkeys(v for n, v in GOOD if n == name))
