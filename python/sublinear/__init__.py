"""sublinear: train under a GPU memory budget by evicting activations and replaying the
forward kernels that produced them.

    import sublinear.torch
    sublinear.torch.enable(budget="8GiB")   # before the first CUDA tensor
    ...                                     # train as usual
    print(sublinear.stats())
    sublinear.write_report("sublinear.json")

The functions here need no torch: they talk to the package's libsublinear.so through
ctypes. docs/pytorch.md describes both ways of using sublinear with PyTorch.
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

from . import _native
from ._native import library_path, preload_library_path

__all__ = [
    "__version__",
    "library_path",
    "preload_library_path",
    "stats",
    "status",
    "write_report",
    "reset_peaks",
    "mark_iteration",
    "empty_cache",
    "preview",
]


def __getattr__(name: str):
    # sublinear.preview(model, inputs, ...) (docs/preview.md): imported on first use, since it
    # needs torch and the rest of the package does not.
    if name == "preview":
        from . import preview

        return preview
    raise AttributeError(f"module 'sublinear' has no attribute {name!r}")
try:
    # Written by `pip install .` from project(VERSION) in CMakeLists.txt (pyproject.toml).
    from ._version import __version__
except ImportError:  # python/ put on sys.path by hand: no build, no version
    __version__ = "0+unknown"


def stats() -> Dict[str, int]:
    """The allocator's statistics in bytes and counts (the fields of `sublinear_stats` in
    include/sublinear/sublinear.h): allocated, mapped, reserved and evicted bytes with their
    peaks, the budget, and counts of allocations, evictions, restores and VMM calls.

    torch.cuda.memory_allocated() and the rest of torch.cuda.memory_* cannot see a pluggable
    allocator; read these instead. Raises RuntimeError, with sublinear's reason, when no
    allocator is active in this process (see status()).
    """
    out = _native.sublinear_stats()
    if _native.function("sublinear_get_stats")(out) != 0:
        raise RuntimeError(_native.last_error() or "sublinear: sublinear_get_stats failed")
    return {name: int(getattr(out, name)) for name, _ in _native.sublinear_stats._fields_}


def status() -> str:
    """One line: "active on <device>, budget <X>, state <Y>" or "inactive: <why>".

    It creates sublinear's runtime if the process has none yet, which reads the settings:
    call sublinear.torch.enable() before it, not after."""
    fn = _native.function("sublinear_status")
    _native.settings_read = True
    raw = fn()
    return raw.decode("utf-8", "replace") if raw else ""


def write_report(path: Optional[Union[str, os.PathLike]] = None) -> None:
    """Writes the JSON report (docs/reports.md) now, to `path` or, with None, to the path of
    the `report` setting (SUBLINEAR_REPORT). RuntimeError says why it could not."""
    encoded = None if path is None else os.fsencode(os.fspath(path))
    if _native.function("sublinear_write_report")(encoded) != 0:
        raise RuntimeError(_native.last_error() or f"sublinear: cannot write the report to {path!r}")


def reset_peaks() -> None:
    """Starts the peak statistics (allocated_peak, mapped_peak, ...) again from now."""
    _native.function("sublinear_reset_peaks")()


def mark_iteration() -> None:
    """Marks a training-iteration boundary. sublinear.torch.enable() does this from the
    optimizer's step; call it yourself when no torch.optim optimizer steps each iteration."""
    _native.function("sublinear_mark_iteration")()


def empty_cache() -> None:
    """Gives sublinear's cached, unused pages back to the device. torch.cuda.empty_cache()
    does not reach a pluggable allocator from Python."""
    _native.function("sublinear_empty_cache")()
