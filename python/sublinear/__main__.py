"""`python -m sublinear ARGS...` runs the `sublinear` command line (run, demo, plan, report,
bench) that the package ships in sublinear/bin; `python -m sublinear run --budget 8GiB --
python train.py` is the preload route of docs/pytorch.md."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional


def cli_path() -> Optional[str]:
    """The package's `sublinear` program, else one on PATH, else None."""
    bundled = Path(__file__).resolve().parent / "bin" / "sublinear"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return shutil.which("sublinear")


def main(argv: List[str]) -> int:
    program = cli_path()
    if program is None:
        print("sublinear: the command line is not in this package (it was built with "
              "SUBLINEAR_PYTHON_CLI=OFF) nor on PATH; build it with "
              "`cmake --build <build dir> --target sublinear_cli`, or reinstall with `pip install .`",
              file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program, *argv])
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
