"""``belief-eval --shard_by_relation N``: one command run as N relation shards, one after another, pooled into the
results of one run.

Why: lm-eval keeps every request (``Instance``), its response and every logged sample of every task of a command
until the command ends (``evaluator.evaluate``), so a command's memory grows with its requests (docs/scale.md). A
shard holds about 1/N of them, and its memory goes back to the system when its process ends.

How:

* shard K of N is the command itself with the ``shard`` knob "K/N" added to its ``--metadata`` (each task evaluates
  block K of its relations, cut after every draw over all of them: ``facts.shard``) and its own output folder,
  ``<output>/shards/K-of-N``; all shards read and write the command's answer cache (``<output>/cache``, or the
  command's ``--use_cache``), so a shard killed on the way resumes where it stopped, and a finished shard (its folder
  holds ``shard.json`` naming the same command, and its results) is not run again;
* when all N are done, they are pooled as ``belief-report`` pools shards (``report.shards``) and written into the
  output path as the results JSON and samples files of one run (``report.pooled_run``); the shard folders are then
  removed, since the pooled files hold everything they held.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from belief_tasks.hooks.answer_cache import _option as option_values  # lm-eval's option syntax, one parser

FLAG = "--shard_by_relation"
#: a finished shard's record in its folder: the command it ran
DONE = "shard.json"


class ShardRunError(ValueError):
    """A command that cannot run as shards (refused before anything runs)."""


def check(args: list[str], n: int) -> Path:
    """The command's output folder; ``ShardRunError`` when the command cannot run as ``n`` shards."""
    from belief_tasks.hooks.harness import launch_world_size

    outputs = option_values(args, "--output_path", "-o")
    if n < 1:
        raise ShardRunError(f"{FLAG} {n}: give the number of shards, 1 or more")
    if not outputs or outputs[-1].endswith(".json"):
        raise ShardRunError(
            f"{FLAG} needs --output_path FOLDER: each shard writes its results below it, and the pooled run is written "
            "there"
        )
    if "--log_samples" not in args and "-s" not in args:
        raise ShardRunError(f"{FLAG} needs --log_samples: the pooled numbers are recomputed from the shards' records")
    if option_values(args, "--limit", "-L"):
        raise ShardRunError(
            f"{FLAG} with --limit: each shard would score only part of its documents, and the shards would not pool "
            "into a run (give the relations or max_facts_per_relation knob to run less)"
        )
    if launch_world_size() > 1:
        raise ShardRunError(
            f"{FLAG} under accelerate launch: the shards run one after another, each its own belief-eval; launch "
            'each shard by hand instead (--metadata \'{"shard": "K/N"}\', docs/scale.md)'
        )
    if shard_given(args):
        raise ShardRunError(f"{FLAG} with the shard knob in --metadata: give one of the two")
    return Path(outputs[-1])


def shard_given(args: list[str]) -> bool:
    return any("shard" in (_metadata(v) or {}) for v in option_values(args, "--metadata"))


def _metadata(value: str) -> dict | None:
    try:
        found = json.loads(value)
    except json.JSONDecodeError:
        return None  # lm-eval's parser (and ours, commands.checks) says what is wrong with it
    return found if isinstance(found, dict) else None


def shard_args(args: list[str], k: int, n: int, folder: Path) -> list[str]:
    """The command of shard ``k`` of ``n``: ``args`` with the knob added to its ``--metadata`` (or one made) and
    ``--output_path`` set to ``folder``."""
    out: list[str] = []
    i, metadata = 0, dict[str, object]()
    while i < len(args):
        a = args[i]
        name, _, inline = a.partition("=")
        if name in ("--metadata", "--output_path", "-o") and (inline or i + 1 < len(args)):
            value = inline if "=" in a else args[i + 1]
            i += 1 if "=" in a else 2
            if name == "--metadata":
                metadata = {**metadata, **(_metadata(value) or {})}
            continue
        out.append(a)
        i += 1
    return [*out, "--metadata", json.dumps({**metadata, "shard": f"{k}/{n}"}), "--output_path", str(folder)]


def finished(folder: Path, command: list[str]) -> bool:
    """A shard whose folder records the same command and holds its results: nothing to run again."""
    record = folder / DONE
    if not record.is_file():
        return False
    try:
        done = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return done.get("command") == command and any(folder.rglob("results_*.json"))


def run_shards(args: list[str], n: int, out: Path) -> Path:
    """Run the command ``args`` (``check``-ed, with its answer cache; ``out``: its output folder) as ``n`` shards,
    then pool them; the pooled results JSON's path. A shard that fails stops the command with its exit status,
    finished shards kept."""
    folders = [out / "shards" / f"{k}-of-{n}" for k in range(1, n + 1)]
    spent: list[float] = []
    for k, folder in enumerate(folders, 1):
        command = shard_args(args, k, n, folder)
        if finished(folder, command):
            say(f"shard {k} of {n}: finished by an earlier run of this command ({folder}), not run again")
            continue
        say(f"shard {k} of {n}: block {k} of every task's relations, into {folder}{_eta(spent, n - k + 1)}")
        start = time.time()
        status = _run(command)
        if status != 0:
            if status != 2:  # 2: refused, in the shard's own paragraph
                say(
                    f"shard {k} of {n} stopped (exit status {status}). Run the same command again: the "
                    f"{k - 1} finished shards are kept and this one resumes from the answer cache."
                )
            raise SystemExit(status)
        spent.append(time.time() - start)
        (folder / DONE).write_text(json.dumps({"command": command}, indent=1), encoding="utf-8")
    results = pool(out, folders)
    say(f"pooled the {n} shards into {results} (and its samples files); removed {out / 'shards'}")
    return results


def _run(command: list[str]) -> int:
    """One shard in its own process (its memory goes back to the system when it ends); Ctrl-C stops both."""
    proc = subprocess.Popen([sys.executable, "-m", "belief_tasks.commands.belief_eval", *command])
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        say("interrupted: run the same command again to go on (finished shards are kept, answers are cached)")
        raise SystemExit(130) from None


def pool(out: Path, folders: list[Path]) -> Path:
    """The shards in ``folders`` pooled and written into ``out`` as one run (``report.pooled_run``); then removed."""
    from belief_tasks.report import pooled_run, shards
    from belief_tasks.report.loading import load_runs

    runs = load_runs(folders)
    pooled = shards.pool(runs)
    if len(pooled) != 1 or not pooled[0].shards:
        raise ShardRunError(f"the shards in {out / 'shards'} did not pool into one run")
    ordered = [next(r for r in runs if r.folder == f) for f in pooled[0].shards]
    model_folder = out / pooled_run.results_file(ordered[0]).parent.name
    results = pooled_run.write(ordered, pooled[0], model_folder)
    shutil.rmtree(out / "shards")
    print_table(results)
    return results


def print_table(results: Path) -> None:
    """lm-eval's results table of the pooled run, as an unsharded command ends with it."""
    from belief_tasks.hooks.lm_eval_api import results_tables

    print(results_tables(json.loads(results.read_text(encoding="utf-8"))))


def _eta(spent: list[float], left: int) -> str:
    if not spent:
        return ""
    from belief_tasks.planning.progress import duration

    return f"; {left} to go, about {duration(left * sum(spent) / len(spent))} at the finished shards' pace"


def say(text: str) -> None:
    print(f"belief-eval: {text}", file=sys.stderr, flush=True)
