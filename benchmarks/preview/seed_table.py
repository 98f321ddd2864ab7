"""The full-scale seed table of docs/benchmarks.md: each model captured on the meta device
(benchmarks/preview/models.py), planned by every planner over a budget sweep, read at the
papers' figures. Durations are roofline estimates for an H100 (docs/preview.md).

    python benchmarks/preview/seed_table.py OUT_DIR [--only NAME,...] [--sqrt] [--timing]
    python benchmarks/preview/seed_table.py OUT_DIR --report

Writes OUT_DIR/NAME.json (the preview's JSON) and NAME.svg per model and prints the
Markdown rows (--report prints them again from the JSON files). --sqrt adds the depth
sweep (least peaks against depth); --timing captures a ResNet of about 20,000 launches
and times each planner on it at 0.8x and 0.5x (`sublinear plan --trace`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from sublinear import preview as sp  # noqa: E402
from sublinear.capture import capture_step, load_model  # noqa: E402
from sublinear.trace_file import write_planning_trace  # noqa: E402

MODELS = os.path.join(HERE, "models.py")
SWEEP = "0.05x:0.95x:0.05x"
COARSE = "0.1x:0.9x:0.1x"

# name, factory, batch, dtype, paper (cut, overhead) or None, sweep
ROWS = [
    ("ResNet-1001 (Chen et al. 2016: ResNet-1000)", "resnet_1001", 32, "float32", (1 - 7 / 48, 0.30), COARSE),
    ("VGG-19 (Re-forwarding)", "vgg19", 64, "float32", (0.48, 0.29), SWEEP),
    ("ResNet-152 (Re-forwarding)", "resnet152", 64, "float32", (0.80, 0.39), SWEEP),
    ("DenseNet-121 (Re-forwarding)", "densenet121", 64, "float32", (0.81, 0.42), SWEEP),
    ("GPT-2 124M, seq 1024", "gpt2_124m", 8, "bfloat16", None, SWEEP),
    ("Llama-style 1B, seq 4096", "llama_1b", 1, "bfloat16", None, SWEEP),
    ("ViT-B/16", "vit_b_16", 64, "float32", None, SWEEP),
]


def read_curve(result):
    """Per planner: [(cut, added fraction)] over the feasible budgets, cut = 1 - peak/baseline."""
    base = result["baseline_peak_bytes"]
    curves = {}
    for row in result["budgets"]:
        for q in row["planners"]:
            if q["feasible"] and q["planner"] != "none":
                curves.setdefault(q["planner"], []).append((1 - q["predicted_peak_bytes"] / base,
                                                            q["added_time_fraction"]))
    return curves


def at_paper(points, paper):
    cut, overhead = paper
    cuts = [c for c, a in points if a <= overhead + 1e-9]
    overheads = [a for c, a in points if c >= cut - 1e-9]
    return (max(cuts) if cuts else None), (min(overheads) if overheads else None)


def fmt(x, pct=True):
    return "—" if x is None else (f"{x * 100:.0f}%" if pct else f"{x:.2f}")


PLANNERS = ("sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr")


def table_row(name, factory, batch, dtype, paper, result, took):
    """One Markdown row: per planner, at the paper's figures (cut at its overhead / overhead
    at its cut) for paper rows, else the leanest plan (cut, added time)."""
    curves = read_curve(result)
    split = result["baseline_breakdown"]
    cells = []
    for planner in PLANNERS:
        pts = curves.get(planner, [])
        if paper:
            cut, over = at_paper(pts, paper)
            cells.append(f"{fmt(cut)} / {'+' + fmt(over) if over is not None else '—'}")
        elif pts:
            cut, added = max(pts, key=lambda p: (p[0], -p[1]))
            cells.append(f"{fmt(cut)} at +{fmt(added)}")
        else:
            cells.append("—")
    paper_cell = f"{paper[0] * 100:.0f}% at +{paper[1] * 100:.0f}%" if paper else "—"
    took_cell = f" {took:.0f} s |" if took is not None else ""
    return (f"| {name}, batch {batch}, {dtype} | {result['capture']['operations']} | "
            f"{result['baseline_peak_bytes'] / 2**30:.1f} GiB ({split['activations_bytes'] / 2**30:.1f}) | "
            f"{paper_cell} | " + " | ".join(cells) + " |" + took_cell)


def run_row(name, factory, batch, dtype, paper, budgets, out_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs, loss_fn = load_model(f"{MODELS}:{factory}", batch, None, dtype)
        started = time.perf_counter()
        result = sp.preview(model, inputs, loss_fn=loss_fn, budgets=sp.parse_budgets(budgets), dtype=dtype,
                            gpu="h100", json_path=os.path.join(out_dir, f"{factory}.json"),
                            plot_path=os.path.join(out_dir, f"{factory}.svg"),
                            description=f"{name}, batch {batch}, {dtype}")
    return table_row(name, factory, batch, dtype, paper, result, time.perf_counter() - started)


def report(out_dir):
    """The table again from the JSON files a run left in out_dir."""
    for name, factory, batch, dtype, paper, _ in ROWS:
        path = os.path.join(out_dir, f"{factory}.json")
        if os.path.exists(path):
            with open(path) as f:
                print(table_row(name, factory, batch, dtype, paper, json.load(f), None))


def timing(out_dir, program):
    """Each planner's time on a ResNet of about 20,000 launches at 0.8x and 0.5x."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs, loss_fn = load_model(f"{MODELS}:resnet_2600", 8, None, None)
        t = time.perf_counter()
        cap = capture_step(model, inputs, loss_fn)
        capture_s = time.perf_counter() - t
    trace = os.path.join(out_dir, "resnet_2600.sltrace")
    write_planning_trace(cap, trace, "h100")
    print(f"ResNet-2600 batch 8: {len(cap.ops)} launches, captured in {capture_s:.0f} s")
    rows = {}
    for planner, budget in [(p, b) for b in ("0.8x", "0.5x") for p in PLANNERS]:
        out = os.path.join(out_dir, f"timing_{planner}_{budget}.json")
        t = time.perf_counter()
        try:
            subprocess.run([program, "plan", "--trace", trace, "--budget", budget, "--policy", planner,
                            "--json", out], capture_output=True, text=True, timeout=900)
            (row,) = json.load(open(out))["planners"]
            rows[(planner, budget)] = row
            print(f"| {planner} at {budget} | {row['planning_s']:.2f} s | {'feasible' if row['feasible'] else 'infeasible'} "
                  f"{'+' + format(row['added_compute_s'] / json.load(open(out))['iteration_compute_s'] * 100, '.0f') + '%' if row['feasible'] else ''} |",
                  flush=True)
        except subprocess.TimeoutExpired:
            print(f"| {planner} at {budget} | > 900 s (stopped) | |", flush=True)
        print(f"  (wall {time.perf_counter() - t:.0f} s)", flush=True)
    return rows


def sqrt_law(out_dir, program):
    """Per depth: baseline activations and the least peak chain and sqrtn plan (batch 32, 224x224)."""
    print("| depth | launches | baseline | persistent | sqrtn peak | chain smallest |")
    for depth in (50, 101, 152, 302, 602, 1001):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, inputs, loss_fn = load_model(f"{MODELS}:resnet_{depth}", 32, None, None)
            cap = capture_step(model, inputs, loss_fn)
        trace = os.path.join(out_dir, f"sqrt_{depth}.sltrace")
        write_planning_trace(cap, trace, "h100")
        out = os.path.join(out_dir, f"sqrt_{depth}.json")
        subprocess.run([program, "plan", "--trace", trace, "--budget", "0.01x", "--policy", "chain",
                        "--json", out], capture_output=True, text=True)
        chain = json.load(open(out))
        out2 = os.path.join(out_dir, f"sqrt_{depth}_sqrtn.json")
        subprocess.run([program, "plan", "--trace", trace, "--budget", "1x", "--policy", "sqrtn",
                        "--json", out2], capture_output=True, text=True)
        sq = json.load(open(out2))
        _, _, split = cap.live_profile()
        persistent = split["parameters"] + split["gradients"] + split["optimizer_state"]
        print(f"| {depth} | {len(cap.ops)} | {chain['unplanned_peak_bytes'] / 2**30:.2f} GiB | "
              f"{persistent / 2**30:.2f} GiB | {sq['planners'][0]['predicted_peak_bytes'] / 2**30:.2f} GiB | "
              f"{chain['planners'][0]['smallest_feasible_bytes'] / 2**30:.2f} GiB |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--only", default="")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--sqrt", action="store_true")
    parser.add_argument("--report", action="store_true", help="print the table from OUT_DIR's JSON files")
    args = parser.parse_args()
    if args.report:
        report(args.out_dir)
        return
    os.makedirs(args.out_dir, exist_ok=True)
    program = sp._cli(None)
    only = set(filter(None, args.only.split(",")))
    print("| model | launches | baseline peak | paper | sqrtn | chen | chain | tiered | reforward | greedy | dtr | time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, factory, batch, dtype, paper, budgets in ROWS:
        if only and factory not in only:
            continue
        print(run_row(name, factory, batch, dtype, paper, budgets, args.out_dir), flush=True)
    if args.sqrt:
        sqrt_law(args.out_dir, program)
    if args.timing:
        timing(args.out_dir, program)


if __name__ == "__main__":
    main()
