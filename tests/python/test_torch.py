"""sublinear.torch: enable()'s checks and the optimizer-step iteration marker on CPU torch;
the allocator swap itself on a GPU (skipped without one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import sublinear
import sublinear.torch as st
from sublinear import _native


@pytest.fixture
def cpu_only(torch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the test is about the message without one")
    return torch


def test_enable_without_torch_says_to_install_it(clean_settings):
    clean_settings.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(RuntimeError, match=r"needs PyTorch: `pip install torch`"):
        st.enable(budget="8GiB")


def test_enable_without_cuda_raises_the_no_gpu_message(cpu_only, clean_settings):
    with pytest.raises(RuntimeError, match=r"^no CUDA device: sublinear\.torch\.enable\(\) needs a GPU"):
        st.enable(budget="8GiB")
    assert not st.is_enabled()
    assert "SUBLINEAR_BUDGET" not in os.environ  # nothing is set when enable() fails


def test_enable_checks_settings_before_looking_for_a_gpu(torch, clean_settings):
    with pytest.raises(ValueError, match=r"SUBLINEAR_POLICY='optimal' is not valid; accepted: none, sqrtn"):
        st.enable(policy="optimal")


def test_enable_rejects_a_malformed_setting_already_in_the_environment(torch, clean_settings):
    clean_settings.setenv("SUBLINEAR_VALIDATE", "sometimes")
    with pytest.raises(ValueError, match=r"SUBLINEAR_VALIDATE='sometimes' is not valid; accepted: off, first, always"):
        st.enable()


def test_enable_rejects_a_misspelt_setting_in_the_environment(torch, clean_settings):
    clean_settings.setenv("SUBLINEAR_BUGDET", "8GiB")
    with pytest.raises(ValueError, match="unknown setting SUBLINEAR_BUGDET"):
        st.enable()


def test_argument_overrides_the_environment_before_checking(cpu_only, clean_settings):
    clean_settings.setenv("SUBLINEAR_BUDGET", "8G")  # malformed, but the argument replaces it
    with pytest.raises(RuntimeError, match="no CUDA device"):
        st.enable(budget="8GiB")


def test_enable_after_cuda_was_used_says_to_call_it_first(torch, clean_settings):
    clean_settings.setattr(torch.cuda, "is_available", lambda: True)
    clean_settings.setattr(torch.cuda, "is_initialized", lambda: True)
    clean_settings.setattr(torch.cuda, "memory_allocated", lambda *a, **k: 4096)
    with pytest.raises(RuntimeError, match=r"already initialized \(4096 bytes.*Call sublinear\.torch\.enable\(\) first"):
        st.enable(budget="8GiB")
    assert not st.is_enabled()


def test_enable_under_the_preload_library_refuses_a_second_route(torch, clean_settings):
    clean_settings.setenv("LD_PRELOAD", "/opt/sublinear/lib/libsublinear_preload.so")
    with pytest.raises(RuntimeError, match="already runs under sublinear's preload library"):
        st.enable()


def test_enable_after_status_refuses_settings_it_can_no_longer_apply(torch, clean_settings):
    clean_settings.setattr(torch.cuda, "is_available", lambda: True)
    clean_settings.setattr(torch.cuda, "is_initialized", lambda: False)
    clean_settings.setattr(_native, "settings_read", True)
    with pytest.raises(RuntimeError, match=r"sublinear\.status\(\) was called before enable\(\)"):
        st.enable(budget="8GiB")


@pytest.fixture
def counted_marker(torch, monkeypatch):
    """Installs the iteration marker with sublinear_mark_iteration wrapped in a counter (the
    real C function still runs), and removes the hook afterwards."""
    calls = []
    real_function = _native.function

    def counting(name):
        fn = real_function(name)
        if name != "sublinear_mark_iteration":
            return fn

        def marker():
            calls.append(1)
            fn()
        return marker

    monkeypatch.setattr(_native, "function", counting)
    handle = st._install_iteration_marker(torch)
    yield calls
    handle.remove()
    monkeypatch.setattr(st, "_marker", None)
    monkeypatch.setattr(st, "_iteration_optimizer", None)


def sgd(torch):
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)


def test_optimizer_step_marks_one_iteration(torch, counted_marker):
    optimizer = sgd(torch)
    for _ in range(3):
        optimizer.param_groups[0]["params"][0].grad = torch.ones(3)
        optimizer.step()
    assert len(counted_marker) == 3


def test_second_optimizer_does_not_split_the_iteration(torch, counted_marker):
    first, second = sgd(torch), sgd(torch)
    for _ in range(2):
        for optimizer in (first, second):
            optimizer.param_groups[0]["params"][0].grad = torch.ones(3)
            optimizer.step()
    assert len(counted_marker) == 2


def test_next_optimizer_marks_once_the_first_is_gone(torch, counted_marker):
    first = sgd(torch)
    first.param_groups[0]["params"][0].grad = torch.ones(3)
    first.step()
    del first  # a new training phase with a new optimizer
    import gc
    gc.collect()
    second = sgd(torch)
    second.param_groups[0]["params"][0].grad = torch.ones(3)
    second.step()
    assert len(counted_marker) == 2


# ---- GPU: the swap itself, in child processes (enable() is once per process) ---------------

TRAIN = textwrap.dedent("""
    import json, sys, torch
    use = sys.argv[1] == "sublinear"
    if use:
        import sublinear, sublinear.torch
        sublinear.torch.enable(budget=sys.argv[2] if len(sys.argv) > 2 else None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(512, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(64, 256, device="cuda")
    target = torch.randint(0, 10, (64,), device="cuda")
    for _ in range(6):
        loss = torch.nn.functional.cross_entropy(model(data), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    out = {"params": [p.detach().cpu().flatten().tolist()[:64] for p in model.parameters()]}
    if use:
        out["stats"] = sublinear.stats()
        out["status"] = sublinear.status()
    print(json.dumps(out))
""")


def run_child(*args):
    done = subprocess.run([sys.executable, "-c", TRAIN, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_enable_routes_pytorch_allocations_through_sublinear(gpu, clean_settings):
    result = run_child("sublinear")
    assert result["stats"]["allocs"] > 0
    assert result["status"].startswith("active")


def test_parameters_are_bit_identical_with_and_without_sublinear(gpu, clean_settings):
    assert run_child("sublinear", "0.5x")["params"] == run_child("plain")["params"]
