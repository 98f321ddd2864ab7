#!/usr/bin/env python3
"""PyTorch end to end for the GPU suite: runs torch_e2e.py once per configuration, each in
its own process, compares the results and prints one JSON object.

    torch_suite.py [--quick] [--models resnet50,gpt2] [--cli PATH] [--workdir DIR]
                   [--timeout SECONDS]

Per model, in this order:
  baseline     PyTorch's caching allocator, no checkpointing (the reference parameters)
  checkpoint   torch.utils.checkpoint on every stage/block; its peak reserved memory is the
               budget of the two sublinear runs ("at equal memory")
  enable       sublinear.torch.enable(budget=<checkpoint's peak>); when the planner finds
               that budget infeasible (a figure: equal_memory), again at the smallest
               feasible budget it named plus 10% (the smallest feasible budget moves
               between runs of the same model: 516 and 543 MiB for ResNet-50 on an H200),
               which the checks then use
  preload      `sublinear run --budget <that budget> --iteration auto -- python ...`
               with PYTORCH_NO_CUDA_MEMORY_CACHING=1: the zero-code-change route
  enable_no_eviction  enable at twice the traced peak: the cost of interception alone
  enable_recompute_only  enable at the checks' budget with SUBLINEAR_OFFLOAD=off (recompute
               only), against enable's offload beside recompute
  baseline2    (without --quick) the baseline again: the model's own reproducibility

Checks (each passed or failed), the budget ones read from sublinear's report: the parameters
of every sublinear run are bit-identical to baseline's; for enable, preload and
enable_recompute_only a plan was made, the run ended in planned iterations (any divergence
is named) and no iteration mapped more than its budget. Figures: median iteration time of
each configuration (sublinear's over its budgeted iterations), peaks, the ratios to
baseline and to checkpoint, enable's against enable_recompute_only's
(offload_vs_recompute_only), and enable's link and copies (enable_offload). Checkpoint's own bit-identity is a figure, not a check: recomputing BatchNorm in
train mode updates its running statistics twice, which is the point sublinear makes.

Status: passed when every check passed, skipped when torch, a GPU or the sublinear package
is missing (with the reason), failed otherwise. Exit status 0, 77 or 1 accordingly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
WORKER = HERE / "torch_e2e.py"
SKIP = 77


DEADLINE = float("inf")  # time.monotonic() by which every run must have finished (--time-limit)


def run_worker(args: List[str], env: Dict[str, str], timeout: float, prefix: Optional[List[str]] = None,
               log: Optional[Path] = None) -> Dict[str, Any]:
    cmd = (prefix or []) + [sys.executable, str(WORKER)] + args
    timeout = min(timeout, DEADLINE - time.monotonic() - 3)
    if timeout < 10:
        return {"status": "skipped", "reason": "not run: the suite's time limit was reached", "command": cmd}
    start = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s", "command": cmd}
    wall = time.perf_counter() - start
    if log is not None:
        log.write_text(p.stderr)  # sublinear's log lines (divergences, plan errors) for every run
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"status": "failed", "reason": f"exit status {p.returncode} and no JSON result"}
    if p.returncode not in (0, SKIP) and result.get("status") == "passed":
        result["status"] = "failed"
        result["reason"] = f"exit status {p.returncode} after training"
    result["exit_status"] = p.returncode
    result["process_s"] = round(wall, 3)
    if result.get("status") == "failed":
        result["stderr_tail"] = p.stderr[-3000:]
    return result


def clean_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBLINEAR_")}
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    return env


def median_of(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def steady_times(r: Dict[str, Any]) -> List[float]:
    """Iteration times to compare: after the first (warm-up) iteration; under sublinear.enable
    only the iterations with a budget in force."""
    times = r.get("iteration_s") or []
    budgets = r.get("budget_bytes")
    if budgets:
        return [t for t, b in zip(times, budgets) if b > 0]
    return times[1:]


def planned_times(program_times: List[float], states: List[str]) -> List[float]:
    """The program's own timings (start of the step to the synchronize after it, as the
    baseline and checkpoint runs are timed) of the iterations sublinear's report says were
    planned. The report's iterations are the program's last ones: as many as the program ran
    under the marker route, fewer under `--iteration auto`, which starts counting once it has
    found the period. Empty when the report has more iterations than the program timed.

    Not the report's `wall_s`: the time between two iteration markers also covers making
    the batch and the script's bookkeeping, which the baseline's timing leaves out, so it
    would overstate sublinear's time against the baseline."""
    offset = len(program_times) - len(states)
    if offset < 0:
        return []
    return [program_times[offset + k] for k, st in enumerate(states) if st in PLANNED]


def report_figures(path: Path) -> Dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return {"error": f"no report at {path}: {e}"}
    its = report.get("iterations", [])
    return {
        "summary": report.get("summary", {}),
        "plan": report.get("plan"),
        "peak_bytes": [i.get("peak_mapped_bytes", 0) for i in its],
        "budget_bytes": [i.get("budget_bytes", 0) for i in its],
        "wall_s": [i.get("wall_s", 0.0) for i in its],
        "engine_s": [i.get("engine_s", 0.0) for i in its],
        # Note [Stray pointer words]: parameter words into evicted blocks left alone.
        "stray_pointers": [i.get("stray_pointers", 0) for i in its],
        "states": [i.get("state", "") for i in its],
        "diverged": [i.get("divergence", "") if i.get("diverged") else "" for i in its],
        # Offload (docs/offload.md): what crossed the link and how long the stream waited.
        "offloaded_bytes": [i.get("offloaded_bytes", 0) for i in its],
        "fetched_bytes": [i.get("fetched_bytes", 0) for i in its],
        "link_busy_s": [i.get("link_busy_s", 0.0) for i in its],
        "copy_stall_s": [i.get("copy_stall_s", 0.0) for i in its],
        # Host memory held for copies (pinned on CUDA): pool, input copies (Note [Host budget]).
        "host_held_bytes": [i.get("host_held_bytes", 0) for i in its],
        # Write checks (Note [Unseen writes]): bytes hashed, where (the plan's hash_probe),
        # and the host's waits for the stream (Note [Unsettled releases]).
        "hashed_bytes": [i.get("hashed_bytes", 0) for i in its],
        "check_waits": [i.get("check_waits", 0) for i in its],
        "settle_waits": [i.get("settle_waits", 0) for i in its],
    }


def trace_diagnosis(cli: List[str], trace: Path, budget: int, timeout: float, mapped_peak: int = 0
                    ) -> Dict[str, Any]:
    """What `sublinear plan` says of a kept trace: for how many launches writes were observed,
    and the blocks read before any observed write (Note [Unknown producers]) with the kernel
    that reads each first: where to look when the tracer missed a kernel's writes. With the
    traced iteration's mapped peak (the run's report), the planners' figures count the
    allocator's cache as the runtime does; without it, live buffers only."""
    if not trace.exists():
        return {"error": f"no trace at {trace}"}
    out_json = trace.with_suffix(".plan.json")
    cmd = cli + ["plan", "--trace", str(trace), "--budget", str(budget), "--json", str(out_json)]
    if mapped_peak > 0:
        cmd += ["--mapped-peak", str(mapped_peak)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}
    if done.returncode != 0:
        return {"error": f"{' '.join(cmd)} exited with {done.returncode}: {done.stderr.strip()[-500:]}"}
    try:
        p = json.loads(out_json.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return {"error": f"no JSON from sublinear plan at {out_json}: {e}"}
    return {
        "launches": p.get("launches"),
        "observed_launches": p.get("observed_launches"),
        "candidates": p.get("candidates"),
        "unproduced_count": p.get("unproduced_count"),
        "unproduced_bytes": p.get("unproduced_bytes"),
        "unproduced": (p.get("unproduced") or [])[:8],
        "mapped_peak_bytes": mapped_peak or None,
        "planners": {r.get("planner"): (r.get("predicted_mapped_bytes") if r.get("feasible")
                                        else {"internal_error": r.get("error")} if r.get("internal_error")
                                        else {"smallest_feasible_bytes": r.get("smallest_feasible_bytes")})
                     for r in p.get("planners", [])},
    }


PLANNED = ("validate", "steady")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def smallest_feasible(error: str) -> Optional[int]:
    """The smallest feasible budget an infeasible-budget error names, in bytes (rounded up to
    the MiB), or None."""
    m = re.search(r"smallest feasible budget for it is ([0-9.]+) (B|KiB|MiB|GiB|TiB)", error)
    if m is None:
        return None
    b = float(m.group(1)) * UNITS[m.group(2)]
    return int(-(-b // (1 << 20))) << 20


def budget_checks(name: str, rep: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """From sublinear's report (never from the process's own view of the allocator, whose
    budget after a refused plan is the device's capacity): a plan was made, the run ended in
    planned iterations, and no iteration with a budget mapped more than it."""
    plan = rep.get("plan") or {}
    states = rep.get("states", [])
    peaks, budgets = rep.get("peak_bytes", []), rep.get("budget_bytes", [])
    planned = [i for i, st in enumerate(states) if st in PLANNED and budgets[i] > 0]
    over = [{"iteration": i, "state": states[i], "peak": p, "budget": b}
            for i, (p, b) in enumerate(zip(peaks, budgets)) if b > 0 and p > b]
    error = plan.get("error") or rep.get("error") or ""
    diverged = [f"iteration {i}: {d}" for i, d in enumerate(rep.get("diverged", [])) if d]
    return {
        f"{name}_plan_made": {"passed": not error and plan.get("budget_bytes", 0) > 0,
                              "detail": error or f"planner {plan.get('planner')}, budget {plan.get('budget_bytes')}"},
        f"{name}_budget_in_force": {"passed": bool(planned) and bool(states) and states[-1] in PLANNED and
                                              budgets[-1] > 0,
                                    "detail": f"{len(planned)} of {len(states)} iterations planned; states "
                                              f"{states}" + (f"; divergences: {diverged}" if diverged else "")},
        f"{name}_peak_within_budget": {"passed": bool(budgets) and not over,
                                       "detail": over or "every iteration with a budget at or under it"},
    }


def identical(name: str, ref: Dict[str, Any], other: Dict[str, Any], ref_dump: Path, dump: Path
              ) -> Dict[str, Any]:
    same = ref.get("state_sha256") is not None and ref.get("state_sha256") == other.get("state_sha256")
    detail: Any = "every tensor of the state dict has the same bytes"
    if not same:
        try:
            a, b = json.loads(ref_dump.read_text()), json.loads(dump.read_text())
            differing = sorted(k for k in a if a.get(k) != b.get(k))
            detail = {"differing_tensors": len(differing), "of": len(a), "first": differing[:5]}
        except (OSError, json.JSONDecodeError):
            detail = "no per-tensor hashes to compare"
    return {name: {"passed": same, "detail": detail}}


def offload_figures(rep: Dict[str, Any]) -> Dict[str, Any]:
    """The link the plan was made for (measured at start on CUDA) and, over the planned
    iterations, medians of what crossed it and of the time the stream waited for a copy."""
    plan = rep.get("plan") or {}
    planned = [i for i, st in enumerate(rep.get("states", [])) if st in PLANNED]

    def median(key: str) -> Optional[float]:
        values = rep.get(key) or []
        return median_of([values[i] for i in planned if i < len(values)])

    return {"link_source": plan.get("link_source"),
            "to_host_gb_s": (plan.get("link_to_host_bytes_per_s") or 0) / 1e9,
            "to_device_gb_s": (plan.get("link_to_device_bytes_per_s") or 0) / 1e9,
            "planned_offloads": plan.get("offloads"), "planned_offloaded_bytes": plan.get("offloaded_bytes"),
            "predicted_stall_s": plan.get("predicted_stall_s"),
            "offloaded_bytes": median("offloaded_bytes"), "fetched_bytes": median("fetched_bytes"),
            "link_busy_s": median("link_busy_s"), "copy_stall_s": median("copy_stall_s"),
            "host_held_bytes": median("host_held_bytes")}


def check_figures(rep: Dict[str, Any]) -> Dict[str, Any]:
    """The engine's write checks (Note [Write check work]): where the device hashes and what
    the probe measured, the plan's count and cost, and the median bytes a planned iteration
    hashed and times it waited for the stream (Note [Unsettled releases])."""
    plan = rep.get("plan") or {}
    planned = [i for i, st in enumerate(rep.get("states", [])) if st in PLANNED]
    hashed = rep.get("hashed_bytes") or []
    figures = {key: plan.get(key) for key in ("hash_probe", "hash_issue_s", "hash_wait_s", "hash_byte_s",
                                              "predicted_hashes", "predicted_hashed_bytes",
                                              "predicted_check_waits", "predicted_check_s")}
    figures["hashed_bytes"] = median_of([hashed[i] for i in planned if i < len(hashed)])
    for key in ("check_waits", "settle_waits"):
        counts = rep.get(key) or []
        figures[key] = median_of([counts[i] for i in planned if i < len(counts)])
    return figures


def run_model(model: str, a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    out: Dict[str, Any] = {"runs": {}, "checks": {}, "figures": {}}
    runs = out["runs"]
    common = ["--model", model] + (["--quick"] if a.quick else [])
    dumps = {k: work / f"{model}-{k}.hashes.json" for k in ("baseline", "checkpoint", "enable", "preload", "baseline2")}

    runs["baseline"] = run_worker(common + ["--mode", "baseline", "--dump", str(dumps["baseline"])], clean_env(),
                                  a.timeout)
    if runs["baseline"]["status"] != "passed":
        out["status"] = runs["baseline"]["status"]
        out["reason"] = "baseline: " + str(runs["baseline"].get("reason"))
        return out
    runs["checkpoint"] = run_worker(common + ["--mode", "checkpoint", "--dump", str(dumps["checkpoint"])],
                                    clean_env(), a.timeout)
    ck = runs["checkpoint"]
    budget = max(ck.get("peak_bytes") or [0]) if ck.get("status") == "passed" else 0
    if budget <= 0:
        # Without checkpoint's figure, half of the baseline's peak.
        budget = max(runs["baseline"].get("peak_bytes") or [0]) // 2
    out["budget_bytes"] = budget

    enable_report = work / f"{model}-enable-report.json"

    def traced_env(route: str) -> Dict[str, str]:
        # The planned iteration's trace, for `sublinear plan --trace` on any machine later.
        env = clean_env()
        env["SUBLINEAR_TRACE"] = str(work / f"{model}-{route}.sltrace")
        return env

    def enable_at(b: Any, tag: str, settings: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        # tag "enable": the run the checks are about (its report, dump and trace keep their
        # names); any other tag gets files of its own and no trace. `settings`: SUBLINEAR_*
        # variables for this run.
        report = enable_report if tag == "enable" else work / f"{model}-{tag}-report.json"
        dump = dumps["enable"] if tag == "enable" else work / f"{model}-{tag}.hashes.json"
        env = traced_env("enable") if tag == "enable" else clean_env()
        env.update(settings or {})
        r = run_worker(common + ["--mode", "enable", "--budget", str(b), "--report", str(report),
                                 "--dump", str(dump)], env, a.timeout, log=work / f"{model}-{tag}.stderr")
        if r.get("status") == "passed":
            r["report"] = report_figures(report)
            r["dump"] = str(dump)
        return r

    runs["enable"] = enable_at(budget, "enable")
    # At the checkpoint run's memory the plan may be infeasible (sublinear's floor counts
    # its allocator's whole pages). That is a figure; the checks then run at the smallest
    # feasible budget the planner named, plus 10%: it varies between runs with the traced
    # durations and layout (by 5% between two runs of ResNet-50 on an H200), so one page
    # above it may be refused.
    error = ((runs["enable"].get("report") or {}).get("plan") or {}).get("error") or ""
    out["equal_memory"] = {"budget_bytes": budget, "feasible": not error, "error": error or None}
    smallest = smallest_feasible(error)
    if smallest is not None:
        budget = (smallest * 11 // 10 + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        out["budget_bytes"] = budget
        runs["enable_at_checkpoint_memory"] = runs["enable"]
        # Keep the first run's log and report: the retry writes the same files, and the
        # first run's log may hold the cause of a failure (validation mismatches) that the
        # retry does not repeat.
        for suffix in ("stderr", "report.json"):
            first = work / f"{model}-enable{'.' if suffix == 'stderr' else '-'}{suffix}"
            try:
                first.rename(work / f"{model}-enable-at-checkpoint-memory{'.' if suffix == 'stderr' else '-'}{suffix}")
            except OSError:
                pass
        runs["enable"] = enable_at(budget, "enable")
    preload_report = work / f"{model}-preload-report.json"
    env = traced_env("preload")
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    cli = a.cli.split() if a.cli else [sys.executable, "-m", "sublinear"]
    prefix = cli + ["run", "--budget", str(budget), "--report", str(preload_report), "--iteration", "auto", "--"]
    runs["preload"] = run_worker(common + ["--mode", "preload", "--dump", str(dumps["preload"])], env, a.timeout,
                                 prefix=prefix, log=work / f"{model}-preload.stderr")
    if runs["preload"].get("status") == "passed":
        runs["preload"]["report"] = report_figures(preload_report)
    # What sublinear costs with nothing to evict: a budget of twice the traced peak plans no
    # eviction, so its planned iterations carry only the launch interception, the budgeted
    # allocator and the report. Against the baseline it separates that fixed cost from
    # what recomputation adds.
    runs["enable_no_eviction"] = enable_at("2x", "enable-no-eviction")
    # The same budget with recompute only: what offload beside recompute buys (docs/offload.md).
    runs["enable_recompute_only"] = enable_at(budget, "enable-recompute-only", {"SUBLINEAR_OFFLOAD": "off"})
    if not a.quick:
        runs["baseline2"] = run_worker(common + ["--mode", "baseline", "--dump", str(dumps["baseline2"])],
                                       clean_env(), a.timeout)

    # The traces the budgeted runs kept, read back by `sublinear plan` on this machine.
    def traced_mapped_peak(route: str) -> int:
        # The peak the runtime took the planner's share from (the report's plan), else the
        # summary's traced peak, which is lower when the traced iterations offloaded under
        # the budget and so previews cheaper plans than the runtime made.
        report = (runs.get(route) or {}).get("report") or {}
        planned_from = int((report.get("plan") or {}).get("traced_mapped_peak_bytes") or 0)
        return planned_from or int((report.get("summary") or {}).get("traced_peak_bytes") or 0)

    out["traces"] = {route: trace_diagnosis(cli, work / f"{model}-{route}.sltrace", budget, a.timeout,
                                            traced_mapped_peak(route))
                     for route in ("enable", "preload")}

    checks = out["checks"]
    base = runs["baseline"]
    if "baseline2" in runs:
        if runs["baseline2"].get("status") == "passed":
            checks.update(identical("baseline_reproducible", base, runs["baseline2"], dumps["baseline"],
                                    dumps["baseline2"]))
        else:
            checks["baseline_reproducible"] = {"passed": False, "detail": runs["baseline2"].get("reason")}
    for route in ("enable", "preload"):
        r = runs[route]
        if r.get("status") == "skipped":
            checks[f"{route}_ran"] = {"passed": None, "detail": r.get("reason")}
            continue
        if r.get("status") != "passed":
            checks[f"{route}_ran"] = {"passed": False, "detail": r.get("reason")}
            continue
        checks.update(identical(f"{route}_bit_identical", base, r, dumps["baseline"], dumps[route]))
        checks.update(budget_checks(route, r.get("report", {})))

    fig = out["figures"]
    base_t = median_of(steady_times(base))
    ck_t = median_of(steady_times(ck)) if ck.get("status") == "passed" else None
    fig["baseline_iteration_s"] = base_t
    fig["baseline_peak_reserved_bytes"] = max(base.get("peak_bytes") or [0])
    fig["checkpoint_iteration_s"] = ck_t
    fig["checkpoint_peak_reserved_bytes"] = max(ck.get("peak_bytes") or [0]) if ck.get("status") == "passed" else None
    fig["sublinear_budget_bytes"] = budget
    fig["equal_memory_feasible"] = out["equal_memory"]["feasible"]
    if ck.get("status") == "passed":
        fig["checkpoint_bit_identical_to_baseline"] = ck.get("state_sha256") == base.get("state_sha256")
    ne = runs.get("enable_no_eviction") or {}
    if ne.get("status") == "passed":
        checks.update(identical("enable_no_eviction_bit_identical", base, ne, dumps["baseline"], Path(ne["dump"])))
    ro = runs.get("enable_recompute_only") or {}
    if ro.get("status") == "passed":
        checks.update(identical("enable_recompute_only_bit_identical", base, ro, dumps["baseline"], Path(ro["dump"])))
        checks.update(budget_checks("enable_recompute_only", ro.get("report", {})))
    for route in ("enable", "preload", "enable_no_eviction", "enable_recompute_only"):
        r = runs.get(route) or {}
        if r.get("status") != "passed":
            continue
        # Planned iterations only (the report's states): traced ones run at full memory.
        rep = r.get("report", {})
        planned = [i for i, st in enumerate(rep.get("states", [])) if st in PLANNED]
        t = median_of(planned_times(r.get("iteration_s") or [], rep.get("states", [])))
        peaks = [rep["peak_bytes"][i] for i in planned]
        fig[f"{route}_planned_iterations"] = len(planned)
        fig[f"{route}_iteration_s"] = t
        # Between two iteration markers, as the report measures it (batch making included).
        fig[f"{route}_marker_to_marker_s"] = median_of([rep["wall_s"][i] for i in planned]) if planned else None
        # The engine's own host time in those iterations (its hooks, recipes included).
        fig[f"{route}_engine_s"] = median_of([rep["engine_s"][i] for i in planned]) if planned else None
        fig[f"{route}_budgeted_peak_mapped_bytes"] = max(peaks) if peaks else None
        fig[f"{route}_stray_pointers"] = sum(rep.get("stray_pointers", []))
        if t and base_t:
            fig[f"{route}_time_vs_baseline"] = round(t / base_t, 4)
        if t and ck_t:
            fig[f"{route}_time_vs_checkpoint"] = round(t / ck_t, 4)
    if ck_t and base_t:
        fig["checkpoint_time_vs_baseline"] = round(ck_t / base_t, 4)
    t_off, t_on = fig.get("enable_recompute_only_iteration_s"), fig.get("enable_iteration_s")
    if t_off and t_on:
        fig["offload_vs_recompute_only"] = round(t_on / t_off, 4)
    fig["enable_offload"] = offload_figures((runs.get("enable") or {}).get("report") or {})
    fig["enable_write_checks"] = check_figures((runs.get("enable") or {}).get("report") or {})

    verdicts = [c["passed"] for c in checks.values()]
    if any(v is False for v in verdicts):
        out["status"] = "failed"
        out["reason"] = "failed checks: " + ", ".join(k for k, c in checks.items() if c["passed"] is False)
    elif any(v is None for v in verdicts):
        # Incomplete: say what did not run, whatever else passed.
        out["status"] = "skipped"
        out["reason"] = "; ".join(f"{k}: {c['detail']}" for k, c in checks.items() if c["passed"] is None)
    else:
        out["status"] = "passed"
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--models", default="resnet50,gpt2")
    p.add_argument("--cli", default=None, help="the `sublinear` program (default: python -m sublinear)")
    p.add_argument("--workdir", default=None, help="keep hashes and reports here (default: a temporary dir)")
    p.add_argument("--timeout", type=float, default=0, help="seconds per process (default 240, 120 with --quick)")
    p.add_argument("--time-limit", type=float, default=0, help="seconds for everything (default: none)")
    a = p.parse_args()
    global DEADLINE
    if a.time_limit > 0:
        DEADLINE = time.monotonic() + a.time_limit
    a.timeout = a.timeout or (120.0 if a.quick else 240.0)
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sublinear-torch-"))
    work.mkdir(parents=True, exist_ok=True)

    result: Dict[str, Any] = {"quick": a.quick, "workdir": str(work), "models": {}}
    start = time.perf_counter()
    for model in [m for m in a.models.split(",") if m]:
        result["models"][model] = run_model(model, a, work)
    result["wall_s"] = round(time.perf_counter() - start, 3)

    statuses = [m.get("status") for m in result["models"].values()]
    if statuses and all(s == "skipped" for s in statuses):
        result["status"] = "skipped"
        result["reason"] = "; ".join(f"{k}: {m.get('reason')}" for k, m in result["models"].items())
    elif any(s != "passed" and s != "skipped" for s in statuses) or not statuses:
        result["status"] = "failed"
        result["reason"] = "; ".join(f"{k}: {m.get('reason')}" for k, m in result["models"].items()
                                     if m.get("status") != "passed")
    else:
        result["status"] = "passed"
    print(json.dumps(result, indent=1))
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return {"passed": 0, "skipped": SKIP}.get(result["status"], 1)


if __name__ == "__main__":
    sys.exit(main())
