"""Memory and time of a PyTorch model under every budget, planned on a CPU (docs/preview.md).

    import sublinear
    result = sublinear.preview(model, example_inputs, budgets=["0.3x", "0.5x"])

and the command line `sublinear plan --model torchvision.models:resnet152 --batch 64
--input-shape 3,224,224 --budget 0.2x,0.4x,0.6x`, which runs `python -m sublinear.preview`.

Note [Model preview]
Rationale: a user who asks "how much memory at what cost" should get the answer before
  owning the GPU: the capture (capture.py) needs no device, and the planners need no more
  than a trace.
Approach: capture one step on the meta device, write it as a planning trace with roofline
  durations for the named GPU (trace_file.py, gpus.py), and run `sublinear plan --trace`
  on it once per budget: the same analysis and planners as for a recorded run. The
  baseline's split (parameters, gradients, optimizer state, activations) comes from the
  capture, which knows what each storage is. Every duration is an estimate, and every
  output says so.
Limitations: see capture.py and gpus.py; predicted peaks count live buffers at the
  allocator's page granularity (2 MiB), without the allocator's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import gpus
from .capture import KINDS, CaptureError, capture_step, load_model
from .trace_file import write_planning_trace

__all__ = ["preview", "main", "PreviewError", "parse_budgets", "render", "write_svg"]

SCHEMA = "sublinear.preview/1"


class PreviewError(RuntimeError):
    """The preview could not be made; the message says why and what to do."""


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def parse_budgets(text: str) -> List[str]:
    """"0.2x,0.4x" -> ["0.2x", "0.4x"]; "0.1x:0.9x:0.1x" -> 0.1x, 0.2x, ..., 0.9x. Other
    forms (8GiB, 60%) pass through to `sublinear plan --budget`."""
    out: List[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            raise PreviewError(f"--budget has an empty item in {text!r}; give budgets like 0.2x,0.4x")
        if ":" in item:
            parts = item.split(":")
            try:
                lo, hi, step = (float(p.rstrip("x")) for p in parts)
                if len(parts) != 3 or not all(p.endswith("x") for p in parts) or step <= 0 or hi < lo:
                    raise ValueError
            except ValueError:
                raise PreviewError(f"--budget range {item!r}: give FROMx:TOx:STEPx, e.g. 0.1x:0.9x:0.1x") from None
            k = 0
            while lo + k * step <= hi + 1e-9:
                out.append(f"{lo + k * step:.4g}x")
                k += 1
        else:
            out.append(item)
    return out


def _cli(program: Optional[str] = None) -> str:
    if program:
        return program
    from .__main__ import cli_path

    found = cli_path()
    if found is None:
        raise PreviewError("sublinear preview: the `sublinear` program is not in this package nor on PATH; build "
                           "it (`cmake --build build --target sublinear_cli`) and put build/bin on PATH")
    return found


def _plan(program: str, trace: str, budget: str, policies: str) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sublinear-preview-") as tmp:
        out_json = os.path.join(tmp, "plan.json")
        run = subprocess.run([program, "plan", "--trace", trace, "--budget", budget, "--policy", policies,
                              "--json", out_json], capture_output=True, text=True)
        if run.returncode not in (0, 1) or not os.path.exists(out_json):
            raise PreviewError(f"sublinear preview: `sublinear plan --budget {budget}` failed (exit "
                               f"{run.returncode}): {run.stderr.strip() or run.stdout.strip()}")
        with open(out_json) as f:
            return json.load(f)


def preview(model: Any, example_inputs: Any, loss_fn: Optional[Callable[[Any], Any]] = None,
            budgets: Sequence[str] = ("0.5x",), policies: str = "all", optimizer: str = "sgd",
            dtype: Optional[str] = None, gpu: str = "h100", json_path: Optional[str] = None,
            plot_path: Optional[str] = None, trace_path: Optional[str] = None,
            description: str = "", program: Optional[str] = None) -> Dict[str, Any]:
    """Captures one training step of `model` on `example_inputs` (on the meta device: build
    the model under `with torch.device("meta"):` to skip initialising weights) and plans it
    at each budget ("0.5x" of the baseline peak, "8GiB", ...) with each planner. Returns the
    result as a dict (the JSON schema of docs/preview.md); writes it to `json_path` and the
    memory/time curve to `plot_path` (SVG) when given. Durations are roofline estimates for
    `gpu` (h100, h200, a100), not measurements. `program` is the `sublinear` program that
    plans (default: the package's, else one on PATH)."""
    spec = gpus.get(gpu)
    if isinstance(budgets, str):
        budgets = parse_budgets(budgets)
    program = _cli(program)
    started = time.perf_counter()
    capture = capture_step(model, example_inputs, loss_fn=loss_fn, optimizer=optimizer, dtype=dtype)
    capture_s = time.perf_counter() - started
    seconds = capture.estimate_seconds(gpu)
    exact_peak, _, split = capture.live_profile()
    with tempfile.TemporaryDirectory(prefix="sublinear-preview-") as tmp:
        trace = trace_path or os.path.join(tmp, "capture.sltrace")
        write_planning_trace(capture, trace, gpu, seconds)
        plans = [(b, _plan(program, trace, b, policies)) for b in budgets]
    # The step's estimated time as the planners sum it (the same durations, in whole ns).
    step_s = plans[0][1]["iteration_compute_s"] if plans else sum(seconds)
    result: Dict[str, Any] = {
        "schema": SCHEMA,
        "estimate": True,
        "note": f"durations are roofline estimates for the {spec.name}, not measurements",
        "model": description or type(model).__name__,
        "optimizer": optimizer,
        "dtype": dtype or "float32",
        "gpu": {"key": gpu, "name": spec.name, "memory_bytes": spec.memory_bytes, "source": spec.source},
        "capture": {"operations": len(capture.ops), "storages": len(capture.storages),
                    "forward": sum(o.phase == "forward" for o in capture.ops),
                    "backward": sum(o.phase == "backward" for o in capture.ops),
                    "optimizer": sum(o.phase == "optimizer" for o in capture.ops),
                    "seconds": round(capture_s, 3)},
        "estimated_step_s": step_s,
        "baseline_peak_bytes": plans[0][1]["unplanned_peak_bytes"] if plans else 0,
        "baseline_breakdown": dict({"peak_bytes": exact_peak}, **{f"{k}_bytes": split[k] for k in KINDS}),
        "budgets": [],
    }
    for budget, p in plans:
        row = {"budget": budget, "budget_bytes": p["budget_bytes"],
               "planner_budget_bytes": p["planner_budget_bytes"],
               "recompute_floor": _floor(p["recompute_floor"], step_s),
               "planners": []}
        for q in p["planners"]:
            row["planners"].append({
                "planner": q["planner"],
                "feasible": q["feasible"],
                "baseline_peak_bytes": result["baseline_peak_bytes"],
                "predicted_peak_bytes": q.get("predicted_peak_bytes", 0) if q["feasible"] else None,
                "added_time_s": q.get("added_compute_s", 0.0) if q["feasible"] else None,
                "added_time_fraction": (q.get("added_compute_s", 0.0) / step_s if step_s else 0.0)
                if q["feasible"] else None,
                "evicted_buffers": q.get("evicted_buffers", 0),
                "evicted_bytes": q.get("evicted_bytes", 0),
                "recomputed_launches": q.get("recomputed_launches", 0),
                "smallest_feasible_bytes": q.get("smallest_feasible_bytes"),
                "planning_s": q.get("planning_s"),
                "error": q.get("error", ""),
            })
        result["budgets"].append(row)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if plot_path:
        write_svg(result, plot_path)
    return result


def _floor(floor: Dict[str, Any], step_s: float) -> Dict[str, Any]:
    added = floor.get("added_compute_s") if floor.get("feasible") else None
    return {"feasible": bool(floor.get("feasible")), "added_time_s": added,
            "added_time_fraction": (added / step_s if step_s else 0.0) if added is not None else None}


def render(result: Dict[str, Any]) -> str:
    """The result as text, as `sublinear plan --model` prints it."""
    b = result["baseline_breakdown"]
    lines = [
        f"sublinear plan --model (ESTIMATE): {result['model']}, {result['dtype']}, {result['optimizer']}",
        f"durations: roofline estimates for the {result['gpu']['name']}, not measurements",
        f"captured on the meta device: {result['capture']['operations']} operations "
        f"({result['capture']['forward']} forward, {result['capture']['backward']} backward, "
        f"{result['capture']['optimizer']} optimizer), {result['capture']['storages']} storages, "
        f"in {result['capture']['seconds']:.1f} s",
        f"baseline peak {_gib(result['baseline_peak_bytes'])} (2 MiB pages; exact {_gib(b['peak_bytes'])}): "
        f"parameters {_gib(b['parameters_bytes'])}, gradients {_gib(b['gradients_bytes'])}, optimizer state "
        f"{_gib(b['optimizer_state_bytes'])}, activations {_gib(b['activations_bytes'])}, inputs and buffers "
        f"{_gib(b['other_bytes'])}",
        f"estimated step time: {result['estimated_step_s'] * 1e3:.1f} ms",
    ]
    for row in result["budgets"]:
        floor = row["recompute_floor"]
        floor_text = (f"+{floor['added_time_fraction'] * 100:.0f}%" if floor["feasible"] else "infeasible")
        lines += ["", f"budget {row['budget']} = {_gib(row['budget_bytes'])} (recompute floor {floor_text})",
                  f"  {'planner':<10} {'predicted peak':>14} {'added time':>11} {'evictions':>22}"]
        for q in row["planners"]:
            if q["feasible"]:
                lines.append(f"  {q['planner']:<10} {_gib(q['predicted_peak_bytes']):>14} "
                             f"{'+' + format(q['added_time_fraction'] * 100, '.0f') + '%':>11} "
                             f"{str(q['evicted_buffers']) + ' / ' + _gib(q['evicted_bytes']):>22}")
            else:
                need = q.get("smallest_feasible_bytes")
                lines.append(f"  {q['planner']:<10} {'infeasible':>14} {'':>11} "
                             f"{('needs ' + _gib(need)) if need else '':>22}")
    return "\n".join(lines) + "\n"


def write_svg(result: Dict[str, Any], path: str) -> None:
    """The memory/time curve: per planner, predicted peak (x) against added time (y), one
    point per feasible budget, with the recompute floor; labelled as an estimate."""
    series: Dict[str, List[tuple]] = {}
    for row in result["budgets"]:
        if row["recompute_floor"]["feasible"]:
            series.setdefault("floor", []).append((row["planner_budget_bytes"],
                                                   row["recompute_floor"]["added_time_fraction"]))
        for q in row["planners"]:
            if q["feasible"]:
                series.setdefault(q["planner"], []).append((q["predicted_peak_bytes"], q["added_time_fraction"]))
    W, H, L, R, T, B = 720, 460, 70, 130, 60, 50
    xs = [x for s in series.values() for x, _ in s] + [result["baseline_peak_bytes"]]
    ys = [y for s in series.values() for _, y in s] + [0.0]
    x_hi = max(xs) * 1.05 or 1
    y_hi = max(ys) * 1.1 or 0.1
    px = lambda x: L + (W - L - R) * x / x_hi  # noqa: E731
    py = lambda y: H - B - (H - T - B) * y / y_hi  # noqa: E731
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#000000"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="20" font-size="14">{result["model"]}</text>',
           f'<text x="{L}" y="38">predicted peak against added time per planner: ESTIMATE (roofline for the '
           f'{result["gpu"]["name"]})</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">predicted peak (GiB)</text>',
           f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
           f'text-anchor="middle">added time (% of step)</text>']
    for i in range(6):
        x = x_hi * i / 5
        y = y_hi * i / 5
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x / 2**30:.1f}</text>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y * 100:.0f}</text>')
    bx = px(result["baseline_peak_bytes"])
    out.append(f'<line x1="{bx:.1f}" y1="{T}" x2="{bx:.1f}" y2="{H - B}" stroke="#999" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{bx - 4:.1f}" y="{T + 12}" text-anchor="end" fill="#666">baseline</text>')
    names = sorted(series)
    for k, name in enumerate(names):
        color = colors[k % len(colors)]
        pts = sorted(series[name])
        poly = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="5 3"' if name == "floor" else ""
        # Earlier series are drawn wider, so that one a later series coincides with shows round it.
        width = 1.2 + 2.0 * (len(names) - 1 - k) / max(1, len(names) - 1)
        out.append(f'<polyline points="{poly}" fill="none" stroke="{color}" stroke-width="{width:.1f}"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{1.5 + width:.1f}" fill="{color}"/>')
        out.append(f'<text x="{W - R + 10}" y="{T + 16 * k + 10}" fill="{color}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def _shape(text: str) -> List[int]:
    try:
        dims = [int(p) for p in text.split(",")]
        if not dims or any(d <= 0 for d in dims):
            raise ValueError
        return dims
    except ValueError:
        raise PreviewError(f"--input-shape needs positive integers separated by commas (3,224,224), "
                           f"got {text!r}") from None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sublinear plan",
        description="Capture one training step of a PyTorch model on the meta device (no GPU, no weights "
                    "downloaded) and preview memory and time per budget and planner. Durations are "
                    "roofline ESTIMATES for --gpu. docs/preview.md.")
    parser.add_argument("--model", required=True,
                        help="module:callable (torchvision.models:resnet152) or path/to/file.py:factory")
    parser.add_argument("--batch", type=int, help="batch size (a factory file receives it)")
    parser.add_argument("--input-shape", help="one sample's shape, e.g. 3,224,224 (module:callable models)")
    parser.add_argument("--budget", default="0.5x",
                        help="budgets separated by commas (0.2x,0.4x, 8GiB) or a range FROMx:TOx:STEPx")
    parser.add_argument("--policy", default="all", help="planners, separated by commas, or all")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument("--gpu", choices=sorted(gpus.GPUS), default="h100")
    parser.add_argument("--json", dest="json_path", help="write the result as JSON (docs/preview.md)")
    parser.add_argument("--plot", dest="plot_path", help="write the memory/time curve as SVG")
    parser.add_argument("--trace-out", help="keep the planning trace at this path")
    parser.add_argument("--python", metavar="PATH",
                        help="the Python that captures (read by `sublinear plan`; default python3 on PATH)")
    parser.add_argument("--cli", help=argparse.SUPPRESS)  # the program that planned: `sublinear plan --model` passes itself
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401 (the capture needs it; say so before anything else)
    except ImportError as e:
        print(f"sublinear plan --model: this Python ({sys.executable}) has no torch ({e}); install torch, or give "
              f"`sublinear plan --model` the Python of your training environment with --python PATH", file=sys.stderr)
        return 2
    try:
        if args.batch is not None and args.batch <= 0:
            raise PreviewError(f"--batch needs a positive integer, got {args.batch}")
        budgets = parse_budgets(args.budget)
        shape = _shape(args.input_shape) if args.input_shape else None
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchvision's note about its compiled operators on meta
            model, inputs, loss_fn = load_model(args.model, args.batch, shape, args.dtype)
            what = args.model + (f", batch {args.batch}" if args.batch else "") + \
                (f", input {'x'.join(map(str, shape))}" if shape else "")
            result = preview(model, inputs, loss_fn=loss_fn, budgets=budgets, policies=args.policy,
                             optimizer=args.optimizer, dtype=args.dtype, gpu=args.gpu,
                             json_path=args.json_path, plot_path=args.plot_path, trace_path=args.trace_out,
                             description=what, program=args.cli)
    except (PreviewError, CaptureError, ValueError) as e:
        print(f"sublinear plan: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(result))
    feasible = any(q["feasible"] for row in result["budgets"] for q in row["planners"])
    return 0 if feasible else 1



class _CallableModule(types.ModuleType):
    """`sublinear.preview(model, inputs, ...)` calls preview(): the module is callable, so the
    package attribute and the submodule (`python -m sublinear.preview`) are one object."""

    def __call__(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        return preview(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
