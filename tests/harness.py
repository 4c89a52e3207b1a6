"""Running the harness from tests: in-process (fast) or as a subprocess (what a user types)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def env_with_checkout(**extra: str) -> dict[str, str]:
    """The environment of a subprocess run from the checkout root, as a user types it there (offline)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(extra)
    return env


def evaluate(
    tasks: list[str],
    model_args: str,
    *,
    model: str = "hf",
    metadata: dict | None = None,
    limit: int | None = None,
    batch_size: int | str = 8,
    log_samples: bool = True,
    **kwargs: Any,
) -> dict:
    """``lm_eval.simple_evaluate`` with our task folder included; returns the results dict."""
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval import simple_evaluate
    from lm_eval.utils import simple_parse_args_string

    from belief_tasks.hooks import lm_eval_api
    from belief_tasks.paths import task_yamls_dir

    meta = {"source": "sample", **(metadata or {})}
    # as the CLI does: tasks see the model args (pretrained=...) in their metadata
    tm_meta = {**(simple_parse_args_string(model_args) if isinstance(model_args, str) else dict(model_args)), **meta}
    # as belief-eval builds it: our folder alone where it holds every task (lm-eval's own index costs 10-15 s)
    tm = lm_eval_api.task_manager(tasks, str(task_yamls_dir()), task_yamls_dir(), metadata=tm_meta)
    import torch

    if "device" not in (model_args if isinstance(model_args, str) else ",".join(model_args)):
        kwargs.setdefault("device", "cuda" if torch.cuda.is_available() else "cpu")
    return simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=tasks,
        task_manager=tm,
        limit=limit,
        batch_size=batch_size,
        log_samples=log_samples,
        metadata=meta,
        **kwargs,
    )


def run_cli(
    args: list[str], *, program: str = "belief-eval", timeout: int = 900, **env: str
) -> subprocess.CompletedProcess:
    """Run ``belief-eval`` / ``lm_eval`` / ``python -m belief_tasks`` as a subprocess."""
    if program == "belief-eval":
        cmd = [sys.executable, "-m", "belief_tasks.commands.belief_eval", *args]
    elif program == "lm_eval":
        cmd = [sys.executable, "-m", "lm_eval", *args]
    elif program == "python_code":
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", program, *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env_with_checkout(**env), cwd=str(ROOT)
    )


def read_results(output_path: Path) -> dict:
    """The results JSON lm-eval wrote under ``output_path``."""
    files = sorted(Path(output_path).rglob("results_*.json"))
    return json.loads(files[-1].read_text())


def report_check(stdout: str) -> tuple[int, int] | None:
    """The main job's recomputation check, as ``belief_eval`` prints it: (numbers equal, numbers checked); None
    unless exactly one such line was printed."""
    import re

    found = re.findall(r"^check: (\d+)/(\d+) recomputed numbers equal the results JSON$", stdout, re.M)
    return (int(found[0][0]), int(found[0][1])) if len(found) == 1 else None
