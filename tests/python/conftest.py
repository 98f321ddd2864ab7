"""Shared fixtures for the Python package's tests (tests/python/README in docs/pytorch.md).

They run against the installed package (`pip install .`), not python/ on sys.path: the
native library exists only in the installed copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch():
    """PyTorch, or a skip naming what is missing. CPU torch is enough for every test here."""
    return pytest.importorskip("torch", reason="PyTorch is not installed in this environment (pip install torch)")


@pytest.fixture
def gpu(torch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    return torch


@pytest.fixture
def clean_settings(monkeypatch):
    """No SUBLINEAR_* variable from the calling environment, and none left behind."""
    for name in list(os.environ):
        if name.startswith("SUBLINEAR_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return monkeypatch
