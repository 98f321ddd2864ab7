"""Checks SUBLINEAR_* settings in Python before they reach the native library.

Note [Settings checked twice]
Rationale: the native library reads its settings when it creates its allocator, at the
  first CUDA allocation. A malformed value found there can only fail that allocation, and
  PyTorch reports a failed pluggable allocation as an out-of-memory error, far from the
  call that set it. enable() therefore checks every value when it is called and raises
  ValueError naming the setting and the forms it accepts.
Approach: the rules of options_table() (runtime/settings.cpp) and parse_budget()
  (policy/budget.cpp) restated for the values a user passes; the messages use the same
  wording as docs/settings.md. The native library still checks everything itself.
Limitations: two copies of the rules: tests/python/test_settings.py pins each form of
  docs/settings.md, so a change to one side that the other misses fails there.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Mapping, Optional, Union

BUDGET_FORMS = (
    "bytes with a unit (8GiB, 512MiB, 1.5GB, 1048576), a share of device memory (60%), or a "
    "multiple of the traced peak (0.5x)"
)
POLICIES = ("none", "sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr")
BOOL_TRUE = ("1", "true", "yes", "on")
BOOL_FALSE = ("0", "false", "no", "off")

# name -> accepted forms, as the table of docs/settings.md words them (a test keeps them equal).
SETTINGS: Dict[str, str] = {
    "SUBLINEAR_BUDGET": BUDGET_FORMS,
    "SUBLINEAR_POLICY": ", ".join(POLICIES),
    "SUBLINEAR_REPORT": "a file path",
    "SUBLINEAR_LOG": "error, warn, info, debug, optionally followed by :PATH (info:/tmp/sublinear.log)",
    "SUBLINEAR_VALIDATE": "off, first, always",
    "SUBLINEAR_RETENTION": "1/true/yes/on or 0/false/no/off",
    "SUBLINEAR_MULTIPASS": "1/true/yes/on or 0/false/no/off",
    "SUBLINEAR_PACKS": "1/true/yes/on or 0/false/no/off",
    "SUBLINEAR_SCALED_CACHE": "1/true/yes/on or 0/false/no/off",
    "SUBLINEAR_TRACE": "a file path",
    "SUBLINEAR_TRACE_ITERATIONS": "1 or 2",
    "SUBLINEAR_ITERATION": "marker, auto",
    "SUBLINEAR_DISABLE": "1/true/yes/on or 0/false/no/off",
}
# Settings that take a boolean.
SWITCHES = ("SUBLINEAR_DISABLE", "SUBLINEAR_RETENTION", "SUBLINEAR_MULTIPASS", "SUBLINEAR_PACKS", "SUBLINEAR_SCALED_CACHE")
# Environment variables of the build and test scripts, not settings (docs/settings.md).
NOT_SETTINGS = ("SUBLINEAR_ROOT", "SUBLINEAR_SANITIZER", "SUBLINEAR_STRESS_OPS", "SUBLINEAR_BUILD_TYPE",
                "SUBLINEAR_BUILD_TARGETS")
# Settings whose default is unset: an empty value means unset.
OPTIONAL = ("SUBLINEAR_BUDGET", "SUBLINEAR_REPORT", "SUBLINEAR_TRACE")

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_NUMBER = re.compile(r"[ \t]*([0-9]+(?:\.[0-9]+)?)[ \t]*(.*?)[ \t]*\Z", re.S)
_SIZE_MAX = (1 << 64) - 1

Value = Union[str, int, float, bool, os.PathLike]


def _bad(name: str, value: str, why: str = "") -> ValueError:
    reason = f": {why}" if why else " is not valid"
    return ValueError(f"sublinear: {name}={value!r}{reason}; accepted: {SETTINGS[name]}")


def _check_budget(name: str, text: str) -> None:
    m = _NUMBER.match(text)
    if not m:
        raise _bad(name, text, "it does not start with a number")
    number, suffix = m.group(1), m.group(2)
    value = float(number)
    if not value > 0:
        raise _bad(name, text, "a budget must be greater than zero")
    if suffix == "%":
        if value > 100:
            raise _bad(name, text, "a percentage of device memory cannot exceed 100%")
        return
    if suffix in ("x", "X"):
        return
    multiplier = _BYTE_UNITS.get(suffix.lower())
    if multiplier is None:
        hint = " (single-letter units are ambiguous: write GiB or GB)" if len(suffix) == 1 else ""
        raise _bad(name, text, f"unknown unit {suffix!r}{hint}")
    if "." in number:
        whole, frac = number.split(".")
        num = int(whole + frac) * multiplier
        nbytes = num // (10 ** len(frac))
    else:
        nbytes = int(number) * multiplier
    if nbytes > _SIZE_MAX:
        raise _bad(name, text, "the value is too large")
    if nbytes == 0:
        raise _bad(name, text, "it is less than one byte")


def check(name: str, value: str) -> None:
    """Raises ValueError when `value` is not an accepted form of setting `name`."""
    if name not in SETTINGS:
        raise ValueError(f"sublinear: unknown setting {name}; the settings are: {', '.join(SETTINGS)}")
    if value == "":
        if name in OPTIONAL:
            return
        raise _bad(name, value, "the value is empty")
    lower = value.lower()
    if name == "SUBLINEAR_BUDGET":
        _check_budget(name, value)
    elif name == "SUBLINEAR_POLICY":
        if value not in POLICIES:  # planner names are taken as written
            raise _bad(name, value)
    elif name == "SUBLINEAR_LOG":
        level, colon, path = value.partition(":")
        if level.lower() not in ("error", "warn", "warning", "info", "debug"):
            raise _bad(name, value)
        if colon and not path:
            raise _bad(name, value, "a level followed by a non-empty path after ':'")
    elif name == "SUBLINEAR_VALIDATE":
        if lower not in ("off", "first", "always"):
            raise _bad(name, value)
    elif name == "SUBLINEAR_TRACE_ITERATIONS":
        if value not in ("1", "2"):
            raise _bad(name, value)
    elif name == "SUBLINEAR_ITERATION":
        if lower not in ("marker", "auto"):
            raise _bad(name, value)
    elif name in SWITCHES:
        if lower not in BOOL_TRUE + BOOL_FALSE:
            raise _bad(name, value)
    # SUBLINEAR_REPORT, SUBLINEAR_TRACE: any non-empty path.


def _as_text(name: str, value: Value) -> str:
    if isinstance(value, bool):
        if name in SWITCHES:
            return "1" if value else "0"
        raise ValueError(f"sublinear: {name}={value!r} is not valid; accepted: {SETTINGS[name]}")
    if isinstance(value, int):
        if name == "SUBLINEAR_BUDGET" and value <= 0:
            raise _bad(name, str(value), "a budget must be greater than zero")
        return str(value)
    if isinstance(value, float):
        if name == "SUBLINEAR_BUDGET":
            raise ValueError(
                f"sublinear: {name}={value!r}: a float is ambiguous for a budget (bytes, a share or a "
                f"multiple?); give a string such as '0.5x' or '60%', or bytes as an int; accepted: "
                f"{SETTINGS[name]}")
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        return text
    raise ValueError(f"sublinear: {name}={value!r}: expected a string; accepted: {SETTINGS[name]}")


def from_arguments(budget: Optional[Value] = None, policy: Optional[Value] = None,
                   report: Optional[Value] = None, **settings: Value) -> Dict[str, str]:
    """enable()'s arguments as SUBLINEAR_* variables, each checked. None leaves a setting out.

    Keyword names are the settings' names without the prefix, in any case:
    log="info", validate="always", trace_iterations=1, iteration="auto", disable=True.
    """
    given = {"budget": budget, "policy": policy, "report": report, **settings}
    out: Dict[str, str] = {}
    for key, value in given.items():
        if value is None:
            continue
        name = "SUBLINEAR_" + key.upper()
        if name not in SETTINGS:
            keywords = ", ".join(n[len("SUBLINEAR_"):].lower() for n in SETTINGS)
            raise ValueError(f"sublinear: unknown setting {key!r}; the settings are: {keywords} "
                             f"(docs/settings.md)")
        text = _as_text(name, value)
        check(name, text)
        out[name] = text
    return out


def check_environment(environ: Mapping[str, str]) -> None:
    """Checks every SUBLINEAR_* variable of `environ` as the native library will."""
    for name, value in environ.items():
        if not name.startswith("SUBLINEAR_") or name in NOT_SETTINGS:
            continue
        check(name, value)
