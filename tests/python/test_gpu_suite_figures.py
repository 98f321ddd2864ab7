"""The GPU suite's figure arithmetic (tests/gpu/python/torch_suite.py), which runs only on a
GPU machine: checked here on recorded shapes of its inputs, without torch or a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_suite():
    spec = importlib.util.spec_from_file_location("torch_suite", REPO / "tests/gpu/python/torch_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_planned_times_under_the_marker_route_are_the_programs_own_timings_of_planned_iterations():
    suite = load_suite()
    # GPT-2 without eviction on an H200: the program's timings and the report's states.
    program = [2.5514, 2.1927, 0.0192, 0.0195, 0.0167, 0.0173, 0.0145, 0.0198, 0.0158, 0.0159]
    states = ["trace", "trace", "validate"] + ["steady"] * 7
    assert suite.planned_times(program, states) == program[2:]


def test_planned_times_under_auto_detection_are_the_programs_last_iterations():
    suite = load_suite()
    # `sublinear run --iteration auto`: the report starts once the period is found, so it
    # has fewer iterations than the program; they are the program's last ones.
    program = [3.4007, 2.7412, 2.6313, 2.6020, 2.5606, 0.3510, 0.0564, 0.0546, 0.0622, 0.0615]
    states = ["trace", "trace", "validate", "steady", "steady", "steady"]
    assert suite.planned_times(program, states) == [0.0564, 0.0546, 0.0622, 0.0615]


def test_planned_times_give_nothing_when_the_report_has_more_iterations_than_the_program_timed():
    suite = load_suite()
    assert suite.planned_times([0.1, 0.2], ["trace", "steady", "steady"]) == []
