"""The meta-device capture and the model preview (python/sublinear/capture.py, preview.py;
docs/preview.md). They need torch (CPU is enough); the planning round trips need the
`sublinear` program (the package's, or one on PATH)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest


@pytest.fixture
def nn(torch):
    return torch.nn


@pytest.fixture
def program():
    from sublinear.__main__ import cli_path

    path = cli_path()
    if not path:
        pytest.skip("needs the sublinear program (pip install . ships it; or put it on PATH)")
    return path


def capture(torch, model_cls, x, **kw):
    from sublinear.capture import capture_step

    with torch.device("meta"):
        model = model_cls()
    return capture_step(model, x.to("meta"), **kw)


def forward_ops(cap):
    return [op for op in cap.ops if op.phase == "forward"]


def test_views_in_place_and_out_arguments_resolve_to_storages(torch, nn):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            y = self.lin(x)          # a new storage
            y.relu_()                # in place: writes y's storage
            flat = y.view(-1)        # a view: no launch, same storage
            out = torch.empty(32, device=x.device)
            torch.mul(flat.detach(), 2.0, out=out)  # out=: writes out's storage, reads y's
            return out.view(4, 8) + y

    cap = capture(torch, Model, torch.randn(4, 8))
    ops = forward_ops(cap)
    names = [op.name for op in ops]
    assert "aten::view" not in names and "aten::empty.memory_format" not in names, names
    addmm = ops[names.index("aten::addmm")]
    relu = ops[names.index("aten::relu_")]
    mul = ops[names.index("aten::mul.out")]
    (y,) = addmm.writes
    assert relu.writes == [y] and relu.reads == []
    assert mul.reads == [y]
    (out,) = mul.writes
    assert out != y and cap.storages[out].nbytes == 32 * 4
    # empty() allocates without a launch: its alloc comes before mul.out, and no op writes it earlier.
    alloc_at = cap.events.index(("alloc", out))
    assert alloc_at < cap.events.index(("op", cap.ops.index(mul)))
    assert all(out not in op.writes for op in cap.ops[:cap.ops.index(mul)])


def test_saved_activations_live_until_backward_and_gradients_are_allocated_there(torch, nn):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 16)
            self.b = nn.Linear(16, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x) * 3.0))

    cap = capture(torch, Model, torch.randn(8, 16))
    pos = {e: i for i, e in enumerate(cap.events)}
    relu = next(op for op in cap.ops if op.name == "aten::relu")
    mul = next(op for op in cap.ops if op.name == "aten::mul.Tensor" and op.phase == "forward")
    first_backward = min(pos[("op", i)] for i, op in enumerate(cap.ops) if op.phase == "backward")
    # relu's output is saved for backward: freed only after the backward began.
    assert pos[("free", relu.writes[0])] > first_backward
    # mul's output is read by relu only and saved by nothing: freed in the forward pass.
    assert pos[("free", mul.writes[0])] < first_backward
    grads = [s for s in cap.storages.values() if s.kind == "gradients" and not s.preexisting]
    params = sorted(s.nbytes for s in cap.storages.values() if s.kind == "parameters")
    assert sorted(s.nbytes for s in grads) == params
    for g in grads:
        assert pos[("alloc", g.id)] > first_backward
    # The warm-up's gradients are freed by zero_grad at the start of the step.
    old = [s for s in cap.storages.values() if s.kind == "gradients" and s.preexisting]
    assert len(old) == len(params) and all(pos[("free", s.id)] < first_backward for s in old)


def test_a_branch_and_a_skip_are_captured_as_a_dag(torch, nn):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.left = nn.Conv2d(8, 8, 3, padding=1)
            self.right = nn.Conv2d(8, 8, 1)
            self.head = nn.Linear(8, 10)

        def forward(self, x):
            s = self.stem(x)
            y = self.left(s) + self.right(s) + s   # two branches and a skip
            return self.head(y.mean(dim=(2, 3)))

    cap = capture(torch, Block, torch.randn(2, 3, 8, 8))
    ops = forward_ops(cap)
    producer = {}
    readers = {}
    for i, op in enumerate(ops):
        for s in op.reads:
            readers.setdefault(s, set()).add(i)
        for s in op.writes:
            producer.setdefault(s, i)
    stem = next(i for i, op in enumerate(ops) if op.name == "aten::convolution")
    s = ops[stem].writes[0]
    # The stem's output fans out to both branches and the skip's add.
    assert len(readers[s]) >= 3
    convs = [i for i, op in enumerate(ops) if op.name == "aten::convolution"]
    first_add = next(i for i, op in enumerate(ops) if op.name == "aten::add.Tensor")
    # The first add joins the two branch convolutions: two producers, neither the other's input.
    joined = {producer[r] for r in ops[first_add].reads}
    assert joined == set(convs[1:3])


def test_an_operation_that_cannot_run_on_meta_is_named(torch, nn):
    from sublinear.capture import CaptureError

    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y[y.nonzero(as_tuple=True)].sum()

    with pytest.raises(CaptureError, match=r"aten::nonzero \(forward pass\) cannot run on the meta device"):
        capture(torch, DataDependent, torch.randn(2, 4))

    class Item(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * float(y.sum().item())

    with pytest.raises(CaptureError, match=r"aten::_local_scalar_dense.*item\(\)"):
        capture(torch, Item, torch.randn(2, 4))


def mlp(nn, layers=4, width=128, inputs=64, classes=10):
    parts = []
    for i in range(layers):
        parts.append(nn.Linear(inputs if i == 0 else width, classes if i + 1 == layers else width))
        if i + 1 < layers:
            parts.append(nn.ReLU(inplace=True))
    return nn.Sequential(*parts)


def test_capture_agrees_with_a_host_device_trace_of_the_same_mlp(torch, nn, program, tmp_path):
    """The host workload `mlp` (workloads/models/mlp.cpp: 4 linear layers 64 -> 128 -> 128 ->
    128 -> 10, in-place ReLU, batch 32) and the same network in PyTorch allocate the same
    forward activations in the same order and free them in reverse order in backward. The
    rest differs by design: the workload fuses softmax and cross-entropy and keeps its
    gradients allocated across iterations; PyTorch allocates them in each backward."""
    from sublinear.capture import capture_step
    from sublinear.trace_file import read_events

    host = tmp_path / "mlp.sltrace"
    run = subprocess.run([program, "demo", "--model", "mlp", "--iterations", "2", "--budget", "none"],
                         env=dict(os.environ, SUBLINEAR_TRACE=str(host)), capture_output=True, text=True)
    if not host.exists():
        run = subprocess.run([program, "demo", "--model", "mlp", "--iterations", "2", "--budget", "0.9x"],
                             env=dict(os.environ, SUBLINEAR_TRACE=str(host)), capture_output=True, text=True)
    assert host.exists(), run.stderr
    events = read_events(str(host))
    markers = [i for i, e in enumerate(events) if e[0] == 8]
    body = events[markers[-2] + 1:markers[-1]]
    copied = {e[2] for e in body if e[0] == 4}  # the batch's upload
    host_allocs = [(e[2], e[3]) for e in body if e[0] == 1 and e[2] not in copied]
    host_forward = [size for _, size in host_allocs[:4]]
    # The first three allocations' frees, in order (the host allocator reuses addresses).
    live, k, host_free_order = {}, 0, []
    for kind, _, address, _ in body:
        if kind == 1 and address not in copied:
            if k < 3:
                live[address] = k
            k += 1
        elif kind == 2 and address in live:
            host_free_order.append(live.pop(address))

    with torch.device("meta"):
        model = mlp(nn)
    cap = capture_step(model, torch.randn(32, 64, device="meta"))
    forward_allocs = [ident for what, ident in cap.events if what == "alloc"][:4]
    assert [cap.storages[i].nbytes for i in forward_allocs] == host_forward == [32 * 128 * 4] * 3 + [32 * 10 * 4]
    capture_free_order = [ident for what, ident in cap.events if what == "free" and ident in forward_allocs[:3]]
    assert capture_free_order == list(reversed(forward_allocs[:3]))
    assert host_free_order == [2, 1, 0]


def test_a_planning_trace_plans_like_any_other_and_is_marked(torch, nn, program, tmp_path):
    from sublinear.capture import capture_step
    from sublinear.trace_file import write_planning_trace

    with torch.device("meta"):
        model = mlp(nn, layers=12, width=256)
    cap = capture_step(model, torch.randn(8192, 64, device="meta"), optimizer="adamw")
    path = tmp_path / "mlp.sltrace"
    write_planning_trace(cap, str(path), "a100")
    assert int.from_bytes(path.read_bytes()[28:32], "little") & 1 == 1  # the planning flag
    out = tmp_path / "plan.json"
    run = subprocess.run([program, "plan", "--trace", str(path), "--budget", "0.8x", "--json", str(out)],
                         capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr
    plan = json.loads(out.read_text())
    assert plan["device"] == "meta:a100"
    assert plan["estimated_times"] is True
    assert plan["launches"] == len(cap.ops) == plan["observed_launches"]
    assert plan["buffers"] == len(cap.storages)
    assert plan["unproduced_count"] == 0
    assert plan["iteration_compute_s"] == pytest.approx(sum(cap.estimate_seconds("a100")), rel=1e-3)
    assert any(p["feasible"] and p["planner"] != "none" for p in plan["planners"])


def test_plans_are_monotone_in_the_budget(torch, nn, program, tmp_path):
    """A budget sweep on a captured model: a planner that meets a budget meets every larger
    one, and a larger budget never adds more compute (the chain planner; the others are
    checked in tests/policy)."""
    from sublinear.capture import capture_step
    from sublinear.trace_file import write_planning_trace

    with torch.device("meta"):
        model = mlp(nn, layers=12, width=256)
    cap = capture_step(model, torch.randn(8192, 64, device="meta"))
    path = tmp_path / "mlp.sltrace"
    write_planning_trace(cap, str(path), "h100")
    rows = []
    for k in range(3, 13):
        out = tmp_path / f"plan{k}.json"
        subprocess.run([program, "plan", "--trace", str(path), "--budget", f"{k / 10}x", "--policy", "chain",
                        "--json", str(out)], capture_output=True, text=True)
        (row,) = json.loads(out.read_text())["planners"]
        rows.append(row)
    feasible = [r["feasible"] for r in rows]
    assert any(feasible)
    first = feasible.index(True)
    assert all(feasible[first:]), feasible
    added = [r["added_compute_s"] for r in rows[first:]]
    assert all(b <= a + 1e-12 for a, b in zip(added, added[1:])), added


def test_preview_of_a_torchvision_model_writes_the_documented_json(torch, program, tmp_path, monkeypatch):
    torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed (pip install torchvision)")
    import sublinear
    import sublinear.preview as sp

    with torch.device("meta"):
        model = torchvision.models.resnet18()
    out = tmp_path / "preview.json"
    svg = tmp_path / "curve.svg"
    result = sublinear.preview(model, torch.randn(4, 3, 64, 64), budgets=sp.parse_budgets("0.3x:0.9x:0.3x"),
                        json_path=str(out), plot_path=str(svg), gpu="h200", program=program)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["estimate"] is True and "estimate" in result["note"]
    assert [row["budget"] for row in result["budgets"]] == ["0.3x", "0.6x", "0.9x"]
    split = result["baseline_breakdown"]
    assert split["parameters_bytes"] == 11689512 * 4  # resnet18's parameters, float32
    assert split["optimizer_state_bytes"] == split["parameters_bytes"]  # SGD momentum
    assert split["activations_bytes"] > 0
    assert sum(split[k] for k in split if k != "peak_bytes") == split["peak_bytes"]
    for row in result["budgets"]:
        for q in row["planners"]:
            assert q["baseline_peak_bytes"] == result["baseline_peak_bytes"]
            if q["feasible"]:
                assert q["predicted_peak_bytes"] <= row["budget_bytes"]
                assert q["added_time_fraction"] >= 0
    assert svg.read_text().startswith("<svg") and "ESTIMATE" in svg.read_text()
    assert "ESTIMATE" in sp.render(result)


def test_a_factory_file_and_bad_specs(torch, tmp_path):
    from sublinear.capture import CaptureError, load_model

    f = tmp_path / "factory.py"
    f.write_text("import torch\n"
                 "def make(batch):\n"
                 "    return torch.nn.Linear(8, 2), torch.randn(batch, 8), lambda out: out.sum()\n")
    model, inputs, loss_fn = load_model(f"{f}:make", batch=5)
    assert inputs.shape == (5, 8) and inputs.device.type == "meta" and loss_fn is not None
    with pytest.raises(CaptureError, match="has no callable nothere"):
        load_model(f"{f}:nothere", batch=5)
    with pytest.raises(CaptureError, match="module:callable"):
        load_model("resnet152", batch=1, input_shape=(3, 8, 8))
    with pytest.raises(CaptureError, match="needs --batch N and --input-shape"):
        load_model("torch.nn:Identity")


def test_sublinear_plan_model_runs_the_capture_in_the_given_python(torch, program, tmp_path):
    import sys

    f = tmp_path / "tiny.py"
    f.write_text("import torch\n"
                 "def factory(batch):\n"
                 "    layers = [torch.nn.Linear(256, 256) for _ in range(8)]\n"
                 "    return torch.nn.Sequential(*layers), torch.randn(batch, 256)\n")
    out = tmp_path / "out.json"
    run = subprocess.run([program, "plan", "--model", f"{f}:factory", "--batch", "4096", "--budget", "0.5x,0.8x",
                          "--policy", "chain,greedy", "--python", sys.executable, "--json", str(out)],
                         capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr
    assert "ESTIMATE" in run.stdout and "budget 0.8x" in run.stdout
    result = json.loads(out.read_text())
    assert [q["planner"] for q in result["budgets"][0]["planners"]] == ["chain", "greedy"]
    assert result["capture"]["operations"] > 0

    missing = subprocess.run([program, "plan", "--model", f"{f}:factory", "--python", str(tmp_path / "nopython")],
                             capture_output=True, text=True)
    assert missing.returncode != 0
    assert "cannot be started" in missing.stderr and "--python PATH" in missing.stderr
