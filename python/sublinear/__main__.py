"""The `sublinear` command (the console script `pip install .` puts on PATH) and
`python -m sublinear ARGS...`: both run the `sublinear` command line (run, demo, plan,
report, bench) that the package ships in sublinear/bin; `sublinear run --budget 8GiB --
python train.py` is the preload route of docs/pytorch.md."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

from . import __version__


def _is_program(path: Path) -> bool:
    """An executable ELF file: the command line itself, not a script that starts this module
    (the console script is also called `sublinear`, and would start itself again)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF" and os.access(path, os.X_OK)
    except OSError:
        return False


def cli_path() -> Optional[str]:
    """The package's `sublinear` program, else one on PATH, else None."""
    bundled = Path(__file__).resolve().parent / "bin" / "sublinear"
    if bundled.is_file() and _is_program(bundled):
        return str(bundled)
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which("sublinear", path=directory or os.curdir)
        if found is not None and _is_program(Path(found)):
            return found
    return None


def main(argv: List[str]) -> int:
    program = cli_path()
    if program is None:
        if argv == ["--version"]:
            print(f"sublinear {__version__}")
            return 0
        print("sublinear: the command line is not in this package (it was built with "
              "SUBLINEAR_PYTHON_CLI=OFF) nor on PATH; build it with "
              "`cmake --build <build dir> --target sublinear_cli`, or reinstall with `pip install .`",
              file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program, *argv])
    return 0  # not reached: execv replaces this process


def console_main() -> int:
    """The console script's entry point ([project.scripts] in pyproject.toml)."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
