"""Checks SUBLINEAR_* settings in Python before they reach the native library.

Note [Settings checked at enable()]
Rationale: the native library reads its settings when it creates its allocator, at the
  first CUDA allocation. A malformed value found there can only fail that allocation, and
  PyTorch reports a failed pluggable allocation as an out-of-memory error, far from the
  call that set it. enable() therefore checks every value when it is called and raises
  ValueError naming the setting, the value and the accepted forms.
Approach: the native parser decides, through the C API: sublinear_check_setting() runs
  the runtime's own reader (runtime/settings.cpp) on one value, and
  sublinear_setting_info() lists the settings with their forms. Python only turns its
  own types into text (a bool for a switch, an int budget as bytes) and refuses what has
  no text form (a float budget).
Limitations: checking loads the package's libsublinear.so (or, under `sublinear run`, the
  preloaded library's C API), as enable() does anyway.
"""

from __future__ import annotations

import ctypes
import os
from typing import Dict, Mapping, Optional, Tuple, Union

from . import _native

Value = Union[str, int, float, bool, os.PathLike]

_table: Optional[Tuple[Dict[str, str], Tuple[str, ...]]] = None


def _settings_table() -> Tuple[Dict[str, str], Tuple[str, ...]]:
    """(name -> accepted forms, names of the yes/no switches), from the native library."""
    global _table
    if _table is None:
        info = _native.function("sublinear_setting_info")
        forms: Dict[str, str] = {}
        switches = []
        index = 0
        name, text, switch = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_int()
        while info(index, ctypes.byref(name), ctypes.byref(text), ctypes.byref(switch)) == 0:
            decoded = (name.value or b"").decode()
            forms[decoded] = (text.value or b"").decode()
            if switch.value:
                switches.append(decoded)
            index += 1
        _table = (forms, tuple(switches))
    return _table


def settings() -> Dict[str, str]:
    """Every setting's variable name -> its accepted forms, in the order of docs/settings.md."""
    return dict(_settings_table()[0])


def _forms(name: str) -> str:
    return _settings_table()[0].get(name, "see docs/settings.md")


def check(name: str, value: str) -> None:
    """Raises ValueError, with the native parser's reason, when `value` is not an accepted
    form of setting `name` (or `name` is no setting)."""
    if "\0" in name or "\0" in value:
        raise ValueError(f"sublinear: {name}={value!r}: a setting cannot contain a NUL character")
    fn = _native.function("sublinear_check_setting")
    if fn(os.fsencode(name), os.fsencode(value)) != 0:
        raise ValueError(_native.last_error() or f"sublinear: {name}={value!r} is not valid; accepted: {_forms(name)}")


def _as_text(name: str, value: Value) -> str:
    if isinstance(value, bool):
        if name in _settings_table()[1]:
            return "1" if value else "0"
        raise ValueError(f"sublinear: {name}={value!r}: only yes/no settings take a bool; accepted: {_forms(name)}")
    if isinstance(value, int):
        if name == "SUBLINEAR_BUDGET" and value <= 0:
            raise ValueError(f"sublinear: {name}={value!r}: a budget must be greater than zero; "
                             f"accepted: {_forms(name)}")
        return str(value)
    if isinstance(value, float):
        if name == "SUBLINEAR_BUDGET":
            raise ValueError(
                f"sublinear: {name}={value!r}: a float is ambiguous for a budget (bytes, a share or a "
                f"multiple?); give a string such as '0.5x' or '60%', or bytes as an int; accepted: "
                f"{_forms(name)}")
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        return text
    raise ValueError(f"sublinear: {name}={value!r}: expected a string; accepted: {_forms(name)}")


def from_arguments(budget: Optional[Value] = None, policy: Optional[Value] = None,
                   report: Optional[Value] = None, **given: Value) -> Dict[str, str]:
    """enable()'s arguments as SUBLINEAR_* variables, each checked. None leaves a setting out.

    Keyword names are the settings' names without the prefix, in any case:
    log="info", validate="always", trace_iterations=1, iteration="auto", disable=True.
    """
    arguments = {"budget": budget, "policy": policy, "report": report, **given}
    known = _settings_table()[0]
    out: Dict[str, str] = {}
    for key, value in arguments.items():
        if value is None:
            continue
        name = "SUBLINEAR_" + key.upper()
        if name not in known:
            keywords = ", ".join(n[len("SUBLINEAR_"):].lower() for n in known)
            raise ValueError(f"sublinear: unknown setting {key!r}; the settings are: {keywords} "
                             f"(docs/settings.md)")
        text = _as_text(name, value)
        check(name, text)
        out[name] = text
    return out


def check_environment(environ: Mapping[str, str]) -> None:
    """Checks every SUBLINEAR_* variable of `environ` as the native library will read it (the
    build scripts' own SUBLINEAR_ROOT, SUBLINEAR_BUILD_TYPE, ... are not settings and pass)."""
    for name, value in environ.items():
        if name.startswith("SUBLINEAR_"):
            check(name, value)
