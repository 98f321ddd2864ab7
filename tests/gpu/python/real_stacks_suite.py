#!/usr/bin/env python3
"""The GPU suite's part 5, real training stacks: runs real_stacks.py once per configuration,
each in its own process, compares them and prints one JSON object.

    real_stacks_suite.py [--quick] [--models gpt,resnet50,ddp,gpt_compile] [--cli PATH]
                         [--workdir DIR] [--time-limit SECONDS] [--dry-run]

Per model (in phases across the models: every model's baseline and enable_2x first, then
their checkpoint runs, then 0.5x, then recompute only; a run that would pass the time limit is skipped and the
model's `not_run` names it):
  baseline     PyTorch's allocator, trained twice in one process from the same seeds: the
               reference parameters, and whether the model is deterministic here
  enable_2x    sublinear.torch.enable(budget="2x"): twice the traced peak plans no eviction,
               so its planned iterations cost only interception (the overhead figure)
  checkpoint   torch.utils.checkpoint on every block/stage: its peak reserved memory is the
               next run's budget
  enable_ckpt  sublinear at the checkpoint run's memory (when infeasible, at the smallest
               feasible budget the planner names plus 10%, and the figure says so)
  enable_0.5x  sublinear at half the traced peak
  enable_ckpt_recompute  enable_ckpt's budget with SUBLINEAR_OFFLOAD=off: recompute only,
               against the default's offload beside recompute
Checks: every run trains with finite losses; sublinear's runs end with the baseline's
parameters bit for bit when the baseline's two trainings agree (otherwise their losses stay
within the baseline's own run-to-run spread, and the kernels PyTorch names as
nondeterministic are listed); at the checkpoint's memory and at 0.5x a plan is made, it is
in force at the end and no iteration maps more than its budget; under DDP no evicted
buffer is produced by an NCCL kernel. Figures: median times of the planned iterations and
their ratios (enable_2x against the baseline: the no-eviction overhead; enable_ckpt against
checkpoint; enable_ckpt against enable_ckpt_recompute: what offload buys), the engine's
per-launch cost and VMM calls per planned iteration from the report, the link it measured
and what crossed it, peaks.

--dry-run runs every configuration on the CPU with tiny models (sublinear's runs train
without it): it checks the scripts end to end, not sublinear (tests/python runs it).
Exit status 0 (passed), 77 (skipped: no torch or GPU), 1 (failed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torch_suite  # noqa: E402 - the part-4 helpers: report figures, budget checks, planned times

WORKER = HERE / "real_stacks.py"
SKIP = 77
DEADLINE = float("inf")
MODELS = {"gpt": ["--model", "gpt"], "gpt_compile": ["--model", "gpt", "--compile"],
          "resnet50": ["--model", "resnet50"], "ddp": ["--model", "ddp"]}


def run_worker(args: List[str], timeout: float) -> Dict[str, Any]:
    cmd = [sys.executable, str(WORKER)] + args
    timeout = min(timeout, DEADLINE - time.monotonic() - 3)
    if timeout < 10:
        return {"status": "skipped", "reason": "not run: the suite's time limit was reached", "command": cmd}
    start = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=torch_suite.clean_env(), capture_output=True, text=True, timeout=timeout,
                           check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s", "command": cmd}
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"status": "failed", "reason": f"exit status {p.returncode} and no JSON result"}
    result["exit_status"] = p.returncode
    result["command"] = cmd
    result["process_s"] = round(time.perf_counter() - start, 3)
    if result.get("status") == "failed":
        result["stderr_tail"] = p.stderr[-3000:]
    return result


def median_ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 3) if a and b else None


def loss_spread(base: Dict[str, Any]) -> Optional[float]:
    """The largest difference between the baseline's two trainings' losses, or None."""
    again = (base.get("repeats") or [{}])[0].get("loss")
    if not again or not base.get("loss"):
        return None
    return max(abs(x - y) for x, y in zip(base["loss"], again))


def same_training(name: str, base: Dict[str, Any], run: Dict[str, Any], deterministic: bool) -> Dict[str, Any]:
    if deterministic:
        same = base.get("state_sha256") is not None and base.get("state_sha256") == run.get("state_sha256")
        return {name: {"passed": same, "detail": "every tensor of the state dict has the baseline's bytes" if same
                       else "parameters differ from the baseline's, which its own two trainings reproduce"}}
    spread = loss_spread(base) or 0.0
    diff = max((abs(x - y) for x, y in zip(base.get("loss", []), run.get("loss", []))), default=None)
    ok = diff is not None and diff <= 2 * spread + 1e-6
    return {name: {"passed": ok, "detail": f"loss differs from the baseline's by at most {diff}, the baseline's own "
                                           f"run-to-run spread is {spread} (nondeterministic ops: "
                                           f"{base.get('nondeterministic_ops')})"}}


def report_costs(report: Path) -> Dict[str, Any]:
    """Note [Interception cost]: per planned iteration, the engine's ns per launch and VMM
    calls; what the plan's offloads moved over the link (docs/offload.md); and the engine's
    write checks."""
    try:
        doc = json.loads(report.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    planned = [i for i in doc.get("iterations", []) if i.get("state") in torch_suite.PLANNED]
    plan = doc.get("plan") or {}

    def per_iteration(key: str) -> Optional[float]:
        values = [i[key] for i in planned if key in i]
        return statistics.median(values) if values else None

    return {"launch_hook_ns": per_iteration("launch_hook_ns"),
            "vmm_calls_per_planned_iteration": per_iteration("vmm_calls"),
            "launches_per_iteration": planned[-1].get("launches") if planned else None,
            "evicted_producers": sorted({e.get("producer", "") for e in doc.get("evictions", [])}),
            # The link the plan was made for (measured at start on CUDA) and, per planned
            # iteration, what crossed it and how long the stream waited for a copy.
            "link": {"source": plan.get("link_source"),
                     "to_host_gb_s": (plan.get("link_to_host_bytes_per_s") or 0) / 1e9,
                     "to_device_gb_s": (plan.get("link_to_device_bytes_per_s") or 0) / 1e9},
            "planned_offloads": plan.get("offloads"),
            "planned_offloaded_bytes": plan.get("offloaded_bytes"),
            "predicted_stall_s": plan.get("predicted_stall_s"),
            "offloaded_bytes_per_iteration": per_iteration("offloaded_bytes"),
            "fetched_bytes_per_iteration": per_iteration("fetched_bytes"),
            "link_busy_s_per_iteration": per_iteration("link_busy_s"),
            "copy_stall_s_per_iteration": per_iteration("copy_stall_s"),
            "host_held_bytes_per_iteration": per_iteration("host_held_bytes"),
            # The engine's write checks (Note [Write check work]): where and at what cost
            # the device hashes, the plan's count, and the bytes a planned iteration hashed.
            "write_checks": {key: plan.get(key) for key in ("hash_probe", "hash_issue_s", "hash_wait_s", "hash_byte_s",
                                                            "predicted_hashes", "predicted_hashed_bytes",
                                                            "predicted_check_waits", "predicted_check_s")},
            "hashed_bytes_per_iteration": per_iteration("hashed_bytes"),
            "check_waits_per_iteration": per_iteration("check_waits"),
            "settle_waits_per_iteration": per_iteration("settle_waits")}


def run_phase(phase: str, model: str, a: argparse.Namespace, work: Path, out: Dict[str, Any]) -> None:
    """One phase of one model's runs (Note [Part 5 phases] in main)."""
    common = MODELS[model] + (["--quick"] if a.quick else []) + (["--dry-run"] if a.dry_run else [])
    timeout = 150.0 if a.quick else 300.0
    runs = out["runs"]

    def enable(tag: str, budget: str, extra: Optional[List[str]] = None) -> Dict[str, Any]:
        report = work / f"{model}-{tag}-report.json"
        r = run_worker(common + ["--mode", "enable", "--budget", budget, "--report", str(report)] + (extra or []),
                       timeout)
        if not a.dry_run and report.exists():
            r["report"] = torch_suite.report_figures(report)
            r["costs"] = report_costs(report)
        return r

    if phase == "overhead":
        runs["baseline"] = run_worker(common + ["--mode", "baseline", "--repeat", "2",
                                                "--dump", str(work / f"{model}-baseline.hashes.json")], timeout)
        if runs["baseline"].get("status") == "passed":
            runs["enable_2x"] = enable("enable_2x", "2x")
        return
    if runs.get("baseline", {}).get("status") != "passed":
        return
    if phase == "checkpoint":
        runs["checkpoint"] = run_worker(common + ["--mode", "checkpoint"], timeout)
        ck_peak = max(runs["checkpoint"].get("peak_bytes") or [0])
        budget = str(ck_peak) if ck_peak > 0 else "0.6x"
        runs["enable_ckpt"] = enable("enable_ckpt", budget)
        error = ((runs["enable_ckpt"].get("report") or {}).get("plan") or {}).get("error") or ""
        smallest = torch_suite.smallest_feasible(error)
        out["figures"]["equal_memory"] = {"budget": budget, "feasible": not error, "error": error or None}
        if smallest:
            budget = str((smallest * 11 // 10 + (2 << 20) - 1) // (2 << 20) * (2 << 20))
            runs["enable_ckpt"] = enable("enable_ckpt", budget)
            out["figures"]["equal_memory"]["retried_at"] = budget
    elif phase == "half":
        runs["enable_0.5x"] = enable("enable_0.5x", "0.5x")
    elif phase == "recompute_only" and "enable_ckpt" in runs:
        memory = out["figures"].get("equal_memory") or {}
        budget = memory.get("retried_at") or memory.get("budget") or "0.6x"
        runs["enable_ckpt_recompute"] = enable("enable_ckpt_recompute", budget, ["--offload", "off"])


def finish_model(model: str, a: argparse.Namespace, out: Dict[str, Any]) -> Dict[str, Any]:
    runs = out["runs"]
    base = runs.get("baseline", {})
    if base.get("status") != "passed":
        out["status"] = base.get("status", "skipped")
        out["reason"] = f"baseline: {base.get('reason', 'not run')}"
        return out
    deterministic = bool(base.get("repeats")) and base["repeats"][0].get("state_sha256") == base.get("state_sha256")
    fig = out["figures"]
    fig["deterministic"] = deterministic
    fig["nondeterministic_ops"] = base.get("nondeterministic_ops", [])
    checks = out["checks"]
    for tag in ("enable_2x", "checkpoint", "enable_ckpt", "enable_0.5x", "enable_ckpt_recompute"):
        r = runs.get(tag)
        if r is None or r.get("status") == "skipped":
            continue
        checks[f"{tag}_trained"] = {"passed": r.get("status") == "passed", "detail": r.get("reason") or "finite losses"}
        if tag != "checkpoint" and r.get("status") == "passed":
            checks.update(same_training(f"{tag}_same_as_baseline", base, r, deterministic))
        if tag in ("enable_ckpt", "enable_0.5x", "enable_ckpt_recompute") and r.get("status") == "passed" \
                and not a.dry_run:
            checks.update(torch_suite.budget_checks(tag, r.get("report", {})))
    if model == "ddp" and not a.dry_run:
        nccl = [p for r in runs.values() for p in (r.get("costs") or {}).get("evicted_producers", [])
                if "nccl" in p.lower()]
        checks["nccl_never_replayed"] = {"passed": not nccl, "detail": nccl or "no evicted buffer has an NCCL producer"}
    # Medians of the program's own timings: the baseline's after the first iteration,
    # sublinear's of the iterations its report says were planned.
    base_t = torch_suite.median_of((base.get("iteration_s") or [])[1:])
    ck = runs.get("checkpoint", {})
    ck_t = torch_suite.median_of((ck.get("iteration_s") or [])[1:])
    fig.update(baseline_s=base_t, checkpoint_s=ck_t, checkpoint_vs_baseline=median_ratio(ck_t, base_t),
               baseline_peak_bytes=max(base.get("peak_bytes") or [0]),
               checkpoint_peak_bytes=max(ck.get("peak_bytes") or [0]))
    for tag in ("enable_2x", "enable_ckpt", "enable_0.5x", "enable_ckpt_recompute"):
        r = runs.get(tag, {})
        states = (r.get("report") or {}).get("states", [])
        times = torch_suite.planned_times(r.get("iteration_s") or [], states) if states else \
            (r.get("iteration_s") or [])[1:]
        t = torch_suite.median_of(times)
        fig[f"{tag}_s"] = t
        fig[f"{tag}_vs_baseline"] = median_ratio(t, base_t)
        fig[f"{tag}_peak_bytes"] = max(r.get("peak_bytes") or [0])
        fig[f"{tag}_costs"] = r.get("costs")
    fig["enable_2x_overhead"] = fig["enable_2x_vs_baseline"]
    fig["enable_ckpt_vs_checkpoint"] = median_ratio(fig["enable_ckpt_s"], ck_t)
    fig["enable_ckpt_recompute_vs_checkpoint"] = median_ratio(fig["enable_ckpt_recompute_s"], ck_t)
    fig["offload_vs_recompute_only"] = median_ratio(fig["enable_ckpt_s"], fig["enable_ckpt_recompute_s"])
    failed = [k for k, v in checks.items() if not v["passed"]]
    missing = [k for k in ("enable_2x", "checkpoint", "enable_ckpt", "enable_0.5x", "enable_ckpt_recompute")
               if runs.get(k, {}).get("status", "skipped") == "skipped"]
    out["status"] = "failed" if failed else "passed"
    if failed:
        out["reason"] = "failed: " + ", ".join(failed)
    if missing:
        out["not_run"] = missing  # the time limit: a figure, not a failure
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--models", default="gpt,resnet50,ddp,gpt_compile")
    p.add_argument("--cli", default=None, help="unused; accepted for symmetry with torch_suite.py")
    p.add_argument("--workdir", default=None)
    p.add_argument("--time-limit", type=float, default=0, help="seconds for everything (default: none)")
    p.add_argument("--dry-run", action="store_true", help="tiny models on the CPU, without sublinear")
    a = p.parse_args()
    global DEADLINE
    if a.time_limit > 0:
        DEADLINE = time.monotonic() + a.time_limit
    unknown = [m for m in a.models.split(",") if m and m not in MODELS]
    if unknown:
        print(f"real_stacks_suite.py: unknown model(s) {unknown}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sublinear-stacks-"))
    work.mkdir(parents=True, exist_ok=True)
    result: Dict[str, Any] = {"quick": a.quick, "dry_run": a.dry_run, "workdir": str(work), "models": {}}
    start = time.perf_counter()
    # Note [Part 5 phases]: the no-eviction overhead of every model first (the issue's
    # 3% target), then equal memory against checkpoint, then half the traced peak, then
    # checkpoint's memory with recompute only, so that a time limit cuts the least needed runs.
    models = [m for m in a.models.split(",") if m]
    state: Dict[str, Dict[str, Any]] = {m: {"runs": {}, "checks": {}, "figures": {}} for m in models}
    for phase in ("overhead", "checkpoint", "half", "recompute_only"):
        for model in models:
            run_phase(phase, model, a, work, state[model])
    for model in models:
        result["models"][model] = finish_model(model, a, state[model])
    result["wall_s"] = round(time.perf_counter() - start, 3)
    statuses = [m.get("status") for m in result["models"].values()]
    if statuses and all(s == "skipped" for s in statuses):
        result["status"] = "skipped"
    elif not statuses or any(s not in ("passed", "skipped") for s in statuses):
        result["status"] = "failed"
    else:
        result["status"] = "passed"
    reasons = [f"{k}: {m['reason']}" for k, m in result["models"].items() if m.get("reason")]
    if reasons:
        result["reason"] = "; ".join(reasons)
    print(json.dumps(result, indent=1))
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return {"passed": 0, "skipped": SKIP}.get(result["status"], 1)


if __name__ == "__main__":
    sys.exit(main())
