"""Where things live: task YAMLs, the bundled sample, the cache."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def task_yamls_dir() -> Path:
    """The folder to pass to ``lm_eval --include_path``."""
    installed = PACKAGE_DIR / "task_yamls"  # wheel layout
    if installed.is_dir():
        return installed
    return PACKAGE_DIR.parent / "task_yamls"  # source checkout


def docs_dir() -> Path:
    """The documentation pages: installed with the wheel as ``belief_tasks/docs``, ``docs/`` in a checkout."""
    installed = PACKAGE_DIR / "docs"
    return installed if installed.is_dir() else PACKAGE_DIR.parent / "docs"


def sample_data_dir() -> Path:
    """The bundled sample, or ``$BELIEF_SAMPLE_DIR`` (a folder of the same P*.json files:
    your own hand-written facts, or the stress test's deliberately broken copies)."""
    env = os.environ.get("BELIEF_SAMPLE_DIR")
    return Path(env).expanduser() if env else PACKAGE_DIR / "sample_data"


def cache_dir() -> Path:
    """``$BELIEF_TASKS_CACHE``, else ``$XDG_CACHE_HOME/belief_tasks``, else ``~/.cache/belief_tasks``."""
    env = os.environ.get("BELIEF_TASKS_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "belief_tasks"
