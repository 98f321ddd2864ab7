"""ctypes bindings to libsublinear.so (include/sublinear/sublinear.h).

Note [One copy of the library]
Rationale: torch.cuda.memory.CUDAPluggableAllocator opens the library with ctypes.CDLL
  by path. dlopen of the same path returns the same handle, so the allocator PyTorch calls
  and the one stats() reads are one instance: load() must open exactly library_path().
Approach: open the library once, lazily (importing sublinear costs nothing), and declare
  each function's signature when it is first needed, so a library that lacks a newer
  entry point still serves the others and the missing one fails with a message naming it.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any, Dict, Optional

LIBRARY_NAME = "libsublinear.so"
PRELOAD_NAME = "libsublinear_preload.so"

_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None
# Set once sublinear_status() has run: it creates the runtime, which reads the settings then.
settings_read = False


class sublinear_stats(ctypes.Structure):
    """Mirrors `sublinear_stats` in include/sublinear/sublinear.h, field for field."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "allocated", "allocated_peak",
        "mapped", "mapped_peak",
        "reserved", "reserved_peak",
        "evicted", "evicted_total",
        "budget",
        "allocs", "frees", "evictions", "restores",
        "map_calls", "unmap_calls", "set_access_calls",
        "resident_peak",
    )]


# name -> (restype, argtypes), as declared in include/sublinear/sublinear.h.
_SIGNATURES: Dict[str, Any] = {
    "sublinear_alloc": (ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "sublinear_free": (None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "sublinear_record_stream": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "sublinear_empty_cache": (None, []),
    "sublinear_get_stats": (ctypes.c_int, [ctypes.POINTER(sublinear_stats)]),
    "sublinear_reset_peaks": (None, []),
    "sublinear_mark_iteration": (None, []),
    "sublinear_last_error": (ctypes.c_char_p, []),
    "sublinear_status": (ctypes.c_char_p, []),
    "sublinear_write_report": (ctypes.c_int, [ctypes.c_char_p]),
    "sublinear_version": (ctypes.c_char_p, []),
    "sublinear_check_setting": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p]),
    "sublinear_setting_info": (ctypes.c_int, [ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                              ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int)]),
}


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def library_path() -> str:
    """The absolute path of the libsublinear.so this package ships."""
    path = package_dir() / "lib" / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"sublinear's native library is missing: looked for {path}. The package must be installed "
            f"with `pip install .` from the source tree, which builds it; putting python/ on sys.path "
            f"is not enough.")
    return str(path)


def preload_library_path() -> str:
    """The path of libsublinear_preload.so (the `sublinear run` / LD_PRELOAD route)."""
    path = package_dir() / "lib" / PRELOAD_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"sublinear's preload library is missing: looked for {path}. It is built with the package "
            f"when the source tree has it (integrations/preload); reinstall with `pip install .`.")
    return str(path)


def preloaded() -> bool:
    """True when this process runs under `sublinear run`: libsublinear_preload.so is loaded
    in its global scope (its marker symbol is there), not merely named in LD_PRELOAD."""
    try:
        return hasattr(ctypes.CDLL(None), "sublinear_preload_version")
    except OSError:
        return False


def load() -> ctypes.CDLL:
    """Opens libsublinear.so once; every caller gets the same handle.

    Under `sublinear run` the preloaded library already holds the process's runtime (the one
    the program's cudaMalloc reaches), and it exports the same C API: the functions are taken
    from it, through the global scope, so that stats(), status() and mark_iteration() talk to
    that runtime and not to a second, idle copy in libsublinear.so."""
    global _library
    with _lock:
        if _library is None:
            if preloaded():
                _library = ctypes.CDLL(None)
                return _library
            path = library_path()
            try:
                _library = ctypes.CDLL(path)
            except OSError as e:
                raise RuntimeError(f"sublinear: cannot load {path}: {e}") from e
        return _library


def function(name: str) -> Any:
    """The C function `name` with its declared signature; RuntimeError if the library lacks it."""
    lib = load()
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise RuntimeError(
            f"sublinear: {library_path()} has no function {name}(): the library is older than this "
            f"Python package. Reinstall the package from one source tree (`pip install .`).") from None
    restype, argtypes = _SIGNATURES[name]
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def last_error() -> str:
    raw = function("sublinear_last_error")()
    return raw.decode("utf-8", "replace") if raw else ""
