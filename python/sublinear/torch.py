"""sublinear as PyTorch's CUDA allocator.

    import sublinear.torch
    sublinear.torch.enable(budget="8GiB", policy="reforward", report="sublinear.json")

Note [enable()]
Rationale: PyTorch lets a program replace its CUDA caching allocator with a pluggable one
  made of two C functions, once, before CUDA is first used; sublinear exports exactly
  those (sublinear_alloc, sublinear_free). The optimizer's step is the natural iteration
  boundary and PyTorch has a global hook for it.
Approach: check every setting (ValueError names the setting and its forms), check that a
  GPU is there and that PyTorch's allocator is still untouched (RuntimeError says what to
  do), put the settings in the process environment where the native library reads them at
  its first allocation, swap the allocator, and register one global optimizer-step hook
  that calls sublinear_mark_iteration.
Limitations: from Python only alloc and free reach sublinear: Tensor.record_stream() and
  torch.cuda.empty_cache() do nothing under a pluggable allocator (use
  sublinear.empty_cache(); for tensors shared across streams, synchronize or use the
  LibTorch helper, include/sublinear/torch.hpp, which sets those hooks too). The
  torch.cuda.memory_* statistics read PyTorch's own allocator: use stats(). With several
  optimizers, the iteration is marked on the steps of the first one that steps (see
  _on_optimizer_step).
"""

from __future__ import annotations

import importlib
import os
import threading
import weakref
from typing import Any, Callable, Dict, Optional

from . import _native, _settings
from . import empty_cache, library_path, mark_iteration, reset_peaks, stats, status, write_report

__all__ = [
    "enable",
    "is_enabled",
    "stats",
    "status",
    "write_report",
    "reset_peaks",
    "mark_iteration",
    "empty_cache",
    "library_path",
]

_lock = threading.Lock()
_enabled_with: Optional[Dict[str, str]] = None
_hook_handle: Any = None
_allocator: Any = None  # keeps PyTorch's wrapper of our allocator alive
_marker: Optional[Callable[[], None]] = None
_iteration_optimizer: Optional["weakref.ReferenceType[Any]"] = None


def is_enabled() -> bool:
    """True after a successful enable() in this process."""
    return _enabled_with is not None


def _import_torch() -> Any:
    try:
        import torch  # noqa: PLC0415 - imported on use: `import sublinear` needs no torch
    except ImportError as e:
        raise RuntimeError(
            "sublinear.torch.enable() needs PyTorch: `pip install torch` (this package does not "
            "depend on it)") from e
    return torch


def _check_preload_route() -> None:
    preload = os.environ.get("LD_PRELOAD", "")
    if _native.PRELOAD_NAME in preload:
        raise RuntimeError(
            "sublinear.torch.enable(): this process already runs under sublinear's preload library "
            f"(LD_PRELOAD={preload}), as `sublinear run` sets it up. Use one route, not both: drop "
            "the enable() call, or start the program without `sublinear run`.")


def _check_cuda(torch: Any) -> None:
    if not torch.cuda.is_available():
        built = getattr(torch.version, "cuda", None)
        why = ("this PyTorch was built without CUDA" if not built
               else f"PyTorch (CUDA {built}) finds no CUDA device or driver")
        raise RuntimeError(
            f"no CUDA device: sublinear.torch.enable() needs a GPU ({why}). On a machine without one, "
            "`sublinear demo` shows the engine on its CPU host device.")
    if torch.cuda.is_initialized():
        used = 0
        try:
            used = int(torch.cuda.memory_allocated())
        except Exception:  # noqa: BLE001 - only for the message
            pass
        raise RuntimeError(
            "sublinear.torch.enable() must run before CUDA is first used: PyTorch's CUDA allocator "
            f"is already initialized ({used} bytes allocated through it), and PyTorch cannot swap an "
            "allocator after that. Call sublinear.torch.enable() first, before any CUDA tensor, "
            ".cuda()/.to('cuda') or torch.cuda call other than torch.cuda.is_available().")


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """Global optimizer-step post hook: one iteration marker per training iteration.

    With several optimizers (a GAN's two, one per parameter group set) each steps once per
    iteration, so marking on every step would split an iteration in pieces. The iteration
    is marked on the steps of the first optimizer seen stepping; when that one is gone
    (garbage collected), the next one to step takes over.
    """
    global _iteration_optimizer
    del args, kwargs
    current = _iteration_optimizer() if _iteration_optimizer is not None else None
    if current is None:
        try:
            _iteration_optimizer = weakref.ref(optimizer)
        except TypeError:  # an optimizer that cannot be weakly referenced: mark every step
            _iteration_optimizer = None
            current = optimizer
        else:
            current = optimizer
    if current is optimizer and _marker is not None:
        _marker()


def enable(budget: Optional[_settings.Value] = None, policy: Optional[str] = None,
           report: Optional[_settings.Value] = None, **settings: _settings.Value) -> None:
    """Makes sublinear PyTorch's CUDA allocator. Call it first, before CUDA is used.

    budget: "8GiB", 8 * 2**30 (bytes), "60%" (of device memory) or "0.5x" (of the traced peak).
    policy: none, sqrtn, chen, chain, tiered, reforward (default), greedy or dtr.
    report: a path; the JSON report is written there at exit (or call write_report()).
    settings: any other setting of docs/settings.md by its name without SUBLINEAR_, e.g.
      log="info", validate="always", trace="run.trace", iteration="auto", disable=True.

    Arguments left as None keep what the environment says. Raises ValueError for a malformed
    setting (naming it and the accepted forms) and RuntimeError when there is no GPU, when
    CUDA was already used in this process, or when the process runs under `sublinear run`.
    A second call with the same settings does nothing; with different ones it raises.
    """
    global _enabled_with, _hook_handle, _allocator
    chosen = _settings.from_arguments(budget=budget, policy=policy, report=report, **settings)
    with _lock:
        if _enabled_with is not None:
            if chosen and any(_enabled_with.get(k) != v for k, v in chosen.items()):
                raise RuntimeError(
                    "sublinear.torch.enable() was already called with other settings "
                    f"({_enabled_with}); the native library has read them and they cannot change now")
            return
        # The environment the native library will see: what is there, overridden by the arguments.
        environment = {k: v for k, v in os.environ.items() if k.startswith("SUBLINEAR_")}
        environment.update(chosen)
        _check_preload_route()
        _settings.check_environment(environment)
        torch = _import_torch()
        _check_cuda(torch)
        if chosen and _native.settings_read:
            raise RuntimeError(
                "sublinear.torch.enable(): sublinear.status() was called before enable() and has "
                "already created sublinear's runtime with the settings of that moment; call enable() "
                "first, or set the SUBLINEAR_* variables before the program starts")

        if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
            raise RuntimeError(
                f"sublinear.torch.enable() needs PyTorch 2.0 or newer (CUDAPluggableAllocator); this is "
                f"{torch.__version__}")
        path = library_path()
        _native.load()  # the same handle PyTorch's ctypes.CDLL(path) gets (Note [One copy of the library])
        for name in ("sublinear_alloc", "sublinear_free"):
            _native.function(name)  # a missing entry point fails here, by name
        os.environ.update(chosen)
        allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "sublinear_alloc", "sublinear_free")
        torch.cuda.memory.change_current_allocator(allocator)
        _allocator = allocator
        _hook_handle = _install_iteration_marker(torch)
        _enabled_with = dict(environment)


def _install_iteration_marker(torch: Any) -> Any:
    """Registers the global optimizer-step hook that calls sublinear_mark_iteration.

    Returns the hook's handle (handle.remove() unregisters it)."""
    global _marker, _iteration_optimizer
    _marker = _native.function("sublinear_mark_iteration")
    _iteration_optimizer = None
    hooks = importlib.import_module("torch.optim.optimizer")  # not an attribute of torch.optim until imported
    return hooks.register_optimizer_step_post_hook(_on_optimizer_step)
