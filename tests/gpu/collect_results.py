#!/usr/bin/env python3
"""Writes the GPU suite's one results JSON from what scripts/gpu-suite.sh left in its work
directory (docs/gpu-suite.md describes the schema).

    collect_results.py --workdir DIR --out FILE [--quick] [--device TEXT] [--parts 1,2,3,4,5]
                       [--skip-all REASON] [--fail-all REASON]

Each part becomes {"status": "passed"|"failed"|"skipped", "reason": ..., "tests": {...},
"figures": {...}}. A part's gtest results come from --gtest_output JSON plus the text log
(the JSON does not carry skip messages); a program's from the JSON it printed. A missing
file means the step did not run or crashed, and the part fails saying so.
Exit status: 0 when no part failed and at least one passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

EXPECTED_ON_GPU = re.compile(r"\b(is|are) present\b")

PARTS = {
    "1_cuda_vmm": "the CUDA VMM backend under the VMM and allocator conformance suites, and VMM call costs by chunk size",
    "2_cupti_tracer": "the CUPTI collector on hand-written kernels (by-value structs, Philox RNG, in place, workspace), "
                      "the engine's hash kernel, and the process runtime and preload library it feeds",
    "3_cudnn_resnet": "a cuDNN + cuBLAS ResNet trained with and without a budget through sublinear's C API",
    "4_pytorch": "PyTorch ResNet-50 and GPT-2 blocks through sublinear.torch.enable() and `sublinear run`",
    "5_real_stacks": "GPT-2 124M (bf16, SDPA, fused AdamW) eager and under torch.compile, ResNet-50 bf16 channels-last "
                     "and DDP over NCCL at twice the traced peak, at checkpoint's memory and at 0.5x; a cluster kernel "
                     "replayed with its launch attributes and a captured CUDA graph",
}


def read_json(path: Path) -> Optional[Any]:
    try:
        text = path.read_text()
    except OSError:
        return None
    # A program's output may carry log lines before its JSON: take the last object.
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def rc_of(work: Path, name: str) -> Optional[int]:
    try:
        return int((work / f"{name}.rc").read_text().strip())
    except (OSError, ValueError):
        return None


def seconds_of(work: Path, name: str) -> Optional[float]:
    try:
        return float((work / f"{name}.seconds").read_text().strip())
    except (OSError, ValueError):
        return None


def gtest(work: Path, name: str) -> Dict[str, Any]:
    """One gtest binary's results: counts, failed and skipped names, first skip reason."""
    data = read_json(work / f"{name}.json")
    log = ""
    try:
        log = (work / f"{name}.log").read_text(errors="replace")
    except OSError:
        pass
    rc = rc_of(work, name)
    out: Dict[str, Any] = {"exit_status": rc, "seconds": seconds_of(work, name)}
    if data is None:
        # A crash or a timeout: name the test that was running.
        running = re.findall(r"\[ RUN      \] (\S+)", log)
        out["status"] = "failed"
        out["reason"] = (f"{name}: no results (exit status {rc}" + ("; timed out" if rc in (124, 137) else "")
                         + (f"; last test started: {running[-1]}" if running else "") + "); log tail: "
                         + log[-1500:])
        return out
    passed, failed, skipped = [], [], []
    for suite in data.get("testsuites", []):
        for t in suite.get("testsuite", []):
            full = f"{suite['name']}.{t['name']}"
            if t.get("failures"):
                failed.append({"test": full, "message": t["failures"][0].get("failure", "")[:1500]})
            elif t.get("result") == "SKIPPED":
                skipped.append(full)
            else:
                passed.append(full)
    # Skip messages, per test, from the text log ("[ RUN      ] name" ... ": Skipped\nmessage").
    reasons: Dict[str, str] = {}
    for block in log.split("[ RUN      ] ")[1:]:
        test = block.split("\n", 1)[0].strip()
        m = re.search(r": Skipped\n(.+)", block)
        if m:
            reasons[test] = m.group(1).strip()
    # A case that skips *because* a GPU is there ("a CUDA driver is present") is expected
    # here; any other skip means that part of the suite did not run.
    unexpected = {n: r for n, r in reasons.items() if not EXPECTED_ON_GPU.search(r)}
    out.update(passed=len(passed), failed=len(failed), skipped=len(skipped), failures=failed,
               skip_reasons=reasons)
    if failed or rc not in (0, None):
        out["status"] = "failed"
        out["reason"] = (f"{len(failed)} test(s) failed: " + ", ".join(f["test"] for f in failed[:5])) if failed \
            else f"{name} exited with status {rc}"
    elif unexpected or not passed:
        out["status"] = "skipped"
        first = next(iter(unexpected.values()), None) or next(iter(reasons.values()), None)
        out["reason"] = f"{len(skipped)} of {len(skipped) + len(passed)} tests skipped: {first or 'no reason given'}"
    else:
        out["status"] = "passed"
    return out


def program(work: Path, name: str) -> Dict[str, Any]:
    data = read_json(work / f"{name}.json")
    rc = rc_of(work, name)
    if data is None:
        return {"status": "failed", "reason": f"{name}: no JSON output (exit status {rc}"
                + ("; timed out)" if rc in (124, 137) else ")"), "exit_status": rc}
    data.setdefault("status", "failed" if rc else "passed")
    data["exit_status"] = rc
    data["seconds"] = seconds_of(work, name)
    return data


def combine(steps: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    statuses = {k: v.get("status") for k, v in steps.items()}
    if any(s == "failed" for s in statuses.values()):
        status = "failed"
    elif any(s == "passed" for s in statuses.values()):
        status = "passed"
    else:
        status = "skipped"
    part: Dict[str, Any] = {"status": status}
    reasons = [f"{k}: {v.get('reason')}" for k, v in steps.items() if v.get("status") == status and v.get("reason")]
    if status != "passed" and reasons:
        part["reason"] = "; ".join(reasons)
    part["steps"] = steps
    return part


def resnet_figures(work: Path) -> Dict[str, Any]:
    figures: Dict[str, Any] = {}
    for tag in ("resnet-plain", "resnet-sublinear"):
        data = read_json(work / "resnet" / f"{tag}.json")
        if data is not None:
            figures[tag] = data
    report = read_json(work / "resnet" / "resnet-sublinear-report.json")
    if isinstance(report, dict):
        figures["sublinear_report_summary"] = report.get("summary")
    return figures


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="")
    p.add_argument("--parts", default="1,2,3,4,5", help="the parts that ran; the others are skipped")
    p.add_argument("--dry-run", action="store_true", help="part 5's scripts on the CPU: no GPU test binaries ran")
    p.add_argument("--skip-all", default=None)
    p.add_argument("--fail-all", default=None)
    a = p.parse_args()
    work = Path(a.workdir)

    parts: Dict[str, Any] = {}
    if a.skip_all or a.fail_all:
        for key, what in PARTS.items():
            parts[key] = {"status": "skipped" if a.skip_all else "failed", "reason": a.skip_all or a.fail_all,
                          "checks": what}
    else:
        bench = program(work, "vmm_bench")
        parts["1_cuda_vmm"] = combine({"vmm_conformance": gtest(work, "vmm_conformance"),
                                       "conformance": gtest(work, "conformance"), "vmm_bench": bench})
        parts["2_cupti_tracer"] = combine({"hand_written_kernels": gtest(work, "tracer"),
                                           "cupti_collector": gtest(work, "cupti"),
                                           "block_hash": gtest(work, "block_hash"),
                                           "process_runtime": gtest(work, "runtime")})
        resnet = combine({"training": gtest(work, "resnet")})
        resnet["figures"] = resnet_figures(work)
        parts["3_cudnn_resnet"] = resnet
        torch = program(work, "torch")
        libtorch = read_json(work / "libtorch.json") or {"status": "failed", "reason": "libtorch.json missing"}
        parts["4_pytorch"] = {"status": torch.get("status", "failed"), "reason": torch.get("reason"),
                              "steps": {"torch_suite": torch, "libtorch_example": libtorch}}
        if libtorch.get("status") == "failed":
            parts["4_pytorch"]["status"] = "failed"
        if parts["4_pytorch"]["reason"] is None:
            del parts["4_pytorch"]["reason"]
        stacks = combine({"real_stacks": program(work, "stacks")} if a.dry_run else
                         {"real_stacks": program(work, "stacks"), "launch_kinds": gtest(work, "launch_kinds")})
        parts["5_real_stacks"] = stacks
        chosen = {p.strip() for p in a.parts.split(",")}
        for key in PARTS:
            if key.split("_")[0] not in chosen:
                parts[key] = {"status": "skipped", "reason": f"not selected (--parts {a.parts})"}
        for key, what in PARTS.items():
            parts[key]["checks"] = what

    statuses = [v["status"] for v in parts.values()]
    status = "failed" if "failed" in statuses else ("passed" if "passed" in statuses else "skipped")
    result = {
        "suite": "sublinear GPU suite",
        "schema": 1,
        "status": status,
        "device": a.device,
        "quick": a.quick,
        "dry_run": a.dry_run,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": {k: v["status"] for k, v in parts.items()},
        "parts": parts,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if status == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
