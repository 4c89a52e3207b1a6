"""Shared fixtures. Tests import the package from this checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets in ../shared/data; skipped where absent (a user's machine)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} is absent (it exists only in the project's CI)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The bundled default model (created by the README's setup command)."""
    from belief_tasks.model import default_model_path, is_ready

    path = default_model_path()
    if not is_ready(path):
        pytest.fail(f"default model missing at {path}: run the README's setup (python -m belief_tasks fetch-model)")
    return path
