#!/usr/bin/env python3
"""Offload beside recompute, paired: `sublinear demo` runs of each case with
SUBLINEAR_OFFLOAD=off (recompute only) and auto (the planner chooses keep, recompute or
offload), repeated; prints medians with ranges (docs/runtime.md, "Offload execution").

Each demo run trains the baseline and the budgeted run in turns (Note [Paired timing]), so
`time` is the median over planned iterations of the budgeted iteration's time over the
baseline's same iteration. With `off` among the modes, each other mode also gets its runs'
`time` over the `off` run of the same repeat (adjacent runs, paired): the median with its
range and how many pairs are below 1. Figures, never assertions.

Time predictions (Note [Predicted iteration time] in runtime/iteration_time.hpp), each over
the measured planned iteration: predicted/measured, each planned iteration's prediction,
made before it ran, over its own time (the median of those ratios); plan's/measured and
device/measured, over the median planned iteration: the plan's own prediction, from the
traced iteration, and the simulator's device time alone. VMM calls: the plan's predicted
VMM calls per planned iteration over a steady iteration's (medians); VMM ms: the plan's
VMM term at the device's probed cost; hooks ms: a steady iteration's time in the engine's
launch hooks; checks ms: the plan's term for the engine's write checks at the device's
probed hash cost (Note [Write check work]); hashed plan/steady: the bytes the plan says
the checks hash over a steady iteration's.

Modes: off (SUBLINEAR_OFFLOAD=off), auto (SUBLINEAR_OFFLOAD=auto, offloaded sub-page
buffers in packs), nopacks (auto with SUBLINEAR_OFFLOAD_PACKS=0: each offloaded buffer
copied on its own; docs/offload.md, "Offload packs") and nomargin (auto with
SUBLINEAR_FETCH_MARGIN=0: each copy back as late as the link model allows; docs/offload.md,
"Fetch margin"). The modes of a case take turns, one run each, repeat after repeat.

    benchmarks/offload_pairs.py [--sublinear build/bin/sublinear] [--repeats 3]
                                [--iterations 8] [--modes off,auto] [--case NAME]
                                [--quick] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = [
    ("transformer-8 0.5x", ["--model", "transformer", "--depth", "8", "--budget", "0.5x"], "<= 1.15x"),
    ("resnet-434 b32 0.5x", ["--model", "resnet", "--depth", "434", "--batch", "32", "--budget", "0.5x"],
     "below recompute-only"),
    ("resnet-434 b32 0.25x", ["--model", "resnet", "--depth", "434", "--batch", "32", "--budget", "0.25x"],
     "below recompute-only"),
    ("lstm-512 0.5x", ["--model", "lstm", "--seq-len", "512", "--budget", "0.5x"], "below recompute-only"),
]


MODES = {"off": {"SUBLINEAR_OFFLOAD": "off"}, "auto": {"SUBLINEAR_OFFLOAD": "auto", "SUBLINEAR_OFFLOAD_PACKS": "1"},
         "nopacks": {"SUBLINEAR_OFFLOAD": "auto", "SUBLINEAR_OFFLOAD_PACKS": "0"},
         "nomargin": {"SUBLINEAR_OFFLOAD": "auto", "SUBLINEAR_OFFLOAD_PACKS": "1", "SUBLINEAR_FETCH_MARGIN": "0"}}


def run_demo(binary, args, mode, iterations, policy):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "demo.json")
        env = dict(os.environ, **MODES[mode])
        cmd = [binary, "demo", *args, "--iterations", str(iterations), "--policy", policy, "--json", out]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["exit %d" % proc.returncode]}
        with open(out) as f:
            return json.load(f)


def summary(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    m = statistics.median(values)
    if len(values) == 1:
        return fmt % m
    return (fmt % m) + " [" + (fmt % min(values)) + ".." + (fmt % max(values)) + "]"


def figures(d):
    if "error" in d:
        return None
    if d.get("plan_error"):
        return {"error": d["plan_error"]}
    iter_s = d.get("iter_s") or 0.0
    predicted = d.get("predicted_iter_s")
    at_plan = d.get("predicted_iter_at_plan_s")
    device = d.get("predicted_device_iter_s")
    return {
        "time": d.get("time_ratio"),
        "peak": d.get("peak_bytes", 0) / max(1, d.get("baseline_peak_bytes", 1)),
        "offloaded_buffers": d.get("offloaded_buffers", 0),
        "link_mib": d.get("offloaded_bytes", 0) / 2**20,
        "copies": d.get("link_copies", 0),
        "busy_share": d.get("link_busy_s", 0.0) / iter_s if iter_s else None,
        "stall_ms": d.get("copy_stall_s", 0.0) * 1e3,
        "predicted_s": predicted,
        "measured_s": iter_s,
        "pred_over_meas": d.get("predicted_over_measured") or None,
        "at_plan_over_meas": at_plan / iter_s if iter_s and at_plan else None,
        "device_over_meas": device / iter_s if iter_s and device else None,
        "vmm_calls_ratio": (d.get("predicted_vmm_calls", 0) / d["steady_vmm_calls"]
                            if d.get("steady_vmm_calls") else None),
        "vmm_ms": d.get("predicted_vmm_s", 0.0) * 1e3,
        "hooks_ms": d.get("steady_launch_hooks_s", 0.0) * 1e3,
        "checks_ms": d.get("predicted_check_s", 0.0) * 1e3,
        "hashed_ratio": (d.get("predicted_hashed_bytes", 0) / d["steady_hashed_bytes"]
                         if d.get("steady_hashed_bytes") else None),
        "recomputed": d.get("recomputed_launches", 0),
        "identical": d.get("params_bit_identical"),
        "link": d.get("link_source", ""),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sublinear", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "sublinear"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--policy", default="reforward")
    p.add_argument("--modes", default="off,auto", help="comma-separated: off, auto, nopacks, nomargin")
    p.add_argument("--case", help="only the cases whose name contains this")
    p.add_argument("--quick", action="store_true", help="Transformer-8 only, one repeat")
    p.add_argument("--json", help="also write every run's figures here")
    a = p.parse_args()
    cases = CASES[:1] if a.quick else [c for c in CASES if not a.case or a.case in c[0]]
    repeats = 1 if a.quick else a.repeats
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            p.error("--modes: unknown mode %r (off, auto, nopacks, nomargin)" % m)
    all_runs = {}
    print("%-22s %-8s %-24s %-14s %-8s %-10s %-10s %-16s %-16s %-18s %-18s %-18s %-18s %-16s %-16s %-16s %-18s %-9s" %
          ("case", "offload", "time vs baseline", "peak", "buffers", "MiB/iter", "copies", "link busy share", "stall ms/iter",
           "predicted/measured", "plan's/measured", "device/measured", "VMM calls", "VMM ms", "hooks ms", "checks ms",
           "hashed plan/steady", "exact"))
    for name, args, target in cases:
        by_mode = {mode: [] for mode in modes}
        for _ in range(repeats):
            for mode in modes:
                by_mode[mode].append(figures(run_demo(a.sublinear, args, mode, a.iterations, a.policy)))
        for mode in modes:
            runs = by_mode[mode]
            all_runs["%s %s" % (name, mode)] = runs
            ok = [r for r in runs if r and "error" not in r]
            if not ok:
                why = next((r["error"] for r in runs if r and "error" in r), "failed")
                print("%-22s %-8s %s" % (name, mode, why))
                continue
            print("%-22s %-8s %-24s %-14s %-8s %-10s %-10s %-16s %-16s %-18s %-18s %-18s %-18s %-16s %-16s %-16s %-18s %-9s" % (
                name, mode, summary([r["time"] for r in ok], "%.2fx"), summary([r["peak"] for r in ok], "%.2fx"),
                summary([r["offloaded_buffers"] for r in ok], "%d"), summary([r["link_mib"] for r in ok], "%.1f"),
                summary([r["copies"] for r in ok], "%d"),
                summary([r["busy_share"] for r in ok], "%.2f"), summary([r["stall_ms"] for r in ok], "%.1f"),
                summary([r["pred_over_meas"] for r in ok], "%.2f"), summary([r["at_plan_over_meas"] for r in ok], "%.2f"),
                summary([r["device_over_meas"] for r in ok], "%.2f"), summary([r["vmm_calls_ratio"] for r in ok], "%.2f"),
                summary([r["vmm_ms"] for r in ok], "%.0f"), summary([r["hooks_ms"] for r in ok], "%.0f"),
                summary([r["checks_ms"] for r in ok], "%.0f"), summary([r["hashed_ratio"] for r in ok], "%.3f"),
                all(r["identical"] for r in ok)))
        # Paired: each repeat's run of a mode over the run of `off` beside it (both already
        # over their own baseline), so a slow stretch of the machine moves both.
        if "off" in by_mode:
            for mode in modes:
                if mode == "off":
                    continue
                pairs = [r["time"] / o["time"] for r, o in zip(by_mode[mode], by_mode["off"])
                         if r and o and "error" not in r and "error" not in o and r["time"] and o["time"]]
                if pairs:
                    print("%-22s %-8s over off, paired: %s, below in %d of %d" % (
                        "", mode, summary(pairs, "%.3f"), sum(1 for x in pairs if x < 1.0), len(pairs)))
        print("%-22s target: %s" % ("", target))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(all_runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
