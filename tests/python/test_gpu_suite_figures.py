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


def test_part_four_runs_the_checks_budget_again_with_recompute_only_and_compares_it(tmp_path, monkeypatch):
    """run_model with the GPU workers replaced by recorded shapes of their results: the
    recompute-only run gets the checks' budget and SUBLINEAR_OFFLOAD=off, and the figures
    compare it with the default run (offload beside recompute)."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    suite = load_suite()
    calls = []
    states = ["trace", "trace", "validate", "steady", "steady"]

    def worker(args, env, timeout, prefix=None, log=None):
        mode = args[args.index("--mode") + 1]
        calls.append({"mode": mode, "args": args, "env": env, "prefix": prefix})
        result = {"status": "passed", "state_sha256": "same", "peak_bytes": [1000], "iteration_s": [1.0] * 5}
        if mode == "checkpoint":
            result["iteration_s"] = [0.5] * 5
        if mode in ("enable", "preload"):
            off = env.get("SUBLINEAR_OFFLOAD") == "off"
            result["iteration_s"] = [1.0, 1.0, 0.4, 0.4, 0.4] if off else [1.0, 1.0, 0.3, 0.3, 0.3]
            copies = 0 if off else 4096
            where = (prefix or args)[(prefix or args).index("--report") + 1]
            report = {"plan": {"budget_bytes": 1000, "planner": "reforward", "link_source": "measured",
                               "link_to_host_bytes_per_s": 5.0e10,
                               "link_to_device_bytes_per_s": 5.5e10, "offloads": 0 if off else 2,
                               "offloaded_bytes": copies, "predicted_stall_s": 0.0},
                      "iterations": [{"state": st, "peak_mapped_bytes": 900, "budget_bytes": 1000 if st != "trace" else 0,
                                      "offloaded_bytes": copies if st != "trace" else 0,
                                      "fetched_bytes": copies if st != "trace" else 0,
                                      "link_busy_s": 0.002 if st != "trace" and not off else 0.0,
                                      "copy_stall_s": 0.0,
                                      "host_held_bytes": 8192 if st != "trace" and not off else 0} for st in states]}
            Path(where).write_text(json.dumps(report))
        return result

    monkeypatch.setattr(suite, "run_worker", worker)
    monkeypatch.setattr(suite, "trace_diagnosis", lambda *a, **k: {})
    a = argparse.Namespace(quick=True, timeout=60.0, cli="sublinear")
    out = suite.run_model("gpt2", a, tmp_path)

    enables = [c for c in calls if c["mode"] == "enable"]
    assert len(enables) == 3, "at the checks' budget, at 2x, and recompute only"
    off = [c for c in enables if c["env"].get("SUBLINEAR_OFFLOAD") == "off"]
    assert len(off) == 1, "one recompute-only run"
    assert off[0]["args"][off[0]["args"].index("--budget") + 1] == "1000", "at the checks' budget"
    assert all("SUBLINEAR_OFFLOAD" not in c["env"] for c in enables if c is not off[0])
    fig = out["figures"]
    assert fig["enable_recompute_only_iteration_s"] == 0.4
    assert fig["offload_vs_recompute_only"] == 0.75
    assert fig["enable_offload"]["link_source"] == "measured"
    assert fig["enable_offload"]["to_device_gb_s"] == 55.0
    assert fig["enable_offload"]["offloaded_bytes"] == 4096
    assert fig["enable_offload"]["host_held_bytes"] == 8192, "the pinned memory the planned iterations held"
    assert out["checks"]["enable_recompute_only_bit_identical"]["passed"] is True
    assert out["status"] == "passed", out.get("reason")
