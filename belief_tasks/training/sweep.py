"""``belief-eval sweep``: one command over many checkpoints of one model, ending in one report.

    belief-eval sweep --checkpoints runs/my-model --model hf --model_args dtype=float32 \\
        --tasks belief_bear --metadata '{"source": "sample", "budget": 0.05}' --output_path runs/sweep

    belief-eval sweep --revisions step1000,step2000,step4000 --model hf \\
        --model_args pretrained=EleutherAI/pythia-160m --tasks belief_bear --output_path runs/pythia

``--checkpoints``: a folder (its ``checkpoint-*`` / ``step*`` / ``*-stepN`` sub-folders that hold a model; the
folder itself when it holds one), a glob, or several of those separated by commas. ``--revisions``: hub
revisions of the ``pretrained=`` model, passed as lm-eval's own ``revision=`` model argument (Pythia and
OLMo publish their checkpoints as revisions ``stepN``). Checkpoints run in the order of their step.

* The tasks are built once, before any model loads (``checkpoint_eval.build_tasks``: bad knobs and data are
  refused then, exit 2), and handed to every checkpoint's ``simple_evaluate``.
* Each checkpoint's answers go to lm-eval's request cache (``OUT/cache/<label>``) as they are computed, its
  results and samples to ``OUT/<label>/``. A checkpoint whose results are there is skipped, so a killed sweep
  run again with the same command resumes: the interrupted checkpoint reads back what its cache holds.
* At the end: ``belief-report OUT`` (training curves with their interval bands, paired differences) into
  ``OUT/report``; with ``--split`` (default: the ``facts_split.json`` beside the checkpoints, written by
  ``scripts/train_checkpoint_series.py``) the curves per side of the split, paired differences between
  consecutive checkpoints and first against last on the same facts, and the probes' agreement per step.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from belief_tasks.report.training import STEP

SPLIT_FILE = "facts_split.json"


@dataclass(frozen=True)
class Checkpoint:
    label: str  # its output folder's name
    model_args: dict  # lm-eval model arguments: pretrained= (and revision=) of this checkpoint
    step: float


class SweepError(ValueError):
    """A sweep command that cannot run: refused before any model loads."""


def _step(text: str) -> float | None:
    found = list(STEP.finditer(text))
    return float(found[-1].group(1)) if found else float(text) if text.isdigit() else None


def _is_model(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def find_checkpoints(spec: str) -> list[Path]:
    """Model folders named by ``spec`` (folders, globs, comma-separated), each once, sorted by their step."""
    found: list[Path] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        matches = sorted(Path(m) for m in glob.glob(part)) if any(c in part for c in "*?[") else [Path(part)]
        if not matches:
            raise SweepError(f"--checkpoints {part}: nothing matches")
        for m in matches:
            if not m.is_dir():
                raise SweepError(f"--checkpoints {m}: not a folder")
            subs = sorted(s for s in m.iterdir() if s.is_dir() and _is_model(s) and _step(s.name) is not None)
            if subs:
                found += subs
            elif _is_model(m):
                found.append(m)
            else:
                raise SweepError(
                    f"--checkpoints {m}: holds no model (config.json) and no checkpoint-N / stepN sub-folder with one"
                )
    unique = list(dict.fromkeys(p.resolve() for p in found))
    unstepped = [p for p in unique if _step(p.name) is None]
    if unstepped and len(unique) > 1:
        raise SweepError(
            f"{unstepped[0]}: no step in its name (checkpoint-N, stepN, ...), so it cannot be ordered among the others"
        )
    return sorted(unique, key=lambda p: (_step(p.name) or 0.0, str(p)))


def plan(checkpoints: str | None, revisions: str | None, model_args: dict) -> list[Checkpoint]:
    """The checkpoints of a sweep, in step order, with the model arguments of each."""
    if bool(checkpoints) == bool(revisions):
        raise SweepError("give either --checkpoints (folders) or --revisions (hub revisions of pretrained=)")
    if revisions:
        if not model_args.get("pretrained"):
            raise SweepError("--revisions needs --model_args pretrained=<hub model id or folder>")
        if "revision" in model_args:
            raise SweepError("--revisions sets revision= for each checkpoint: leave it out of --model_args")
        out = []
        for rev in [r.strip() for r in revisions.split(",") if r.strip()]:
            step = _step(rev)
            if step is None:
                raise SweepError(f"--revisions {rev}: no step in it (stepN, or a number), so it cannot be ordered")
            out.append(Checkpoint(f"revision-{rev}", {**model_args, "revision": rev}, step))
        return sorted(out, key=lambda c: c.step)
    if "pretrained" in model_args:
        raise SweepError("--checkpoints sets pretrained= for each checkpoint: leave it out of --model_args")
    return [
        Checkpoint(p.name, {**model_args, "pretrained": str(p)}, _step(p.name) or 0.0)
        for p in find_checkpoints(checkpoints or "")
    ]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="belief-eval sweep", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", metavar="DIR_OR_GLOB[,...]", help="checkpoint folders (see above)")
    p.add_argument("--revisions", metavar="REV[,...]", help="hub revisions of --model_args pretrained=")
    p.add_argument("--model", default="hf", help="lm-eval model type: hf, hf-shared, ... (default hf)")
    p.add_argument("--model_args", default="", help="model arguments besides pretrained= / revision=")
    p.add_argument("--tasks", required=True, help="comma-separated task or group names")
    p.add_argument("--metadata", default="{}", help="knobs, a JSON object (as belief-eval's --metadata)")
    p.add_argument("--output_path", required=True, type=Path, help="results, caches and the report go here")
    p.add_argument("--batch_size", default="8")
    p.add_argument("--device", default="cuda:0", help="as lm-eval's --device (its default: cuda:0, else the CPU)")
    p.add_argument("--bootstrap_iters", type=int, default=1000)
    p.add_argument(
        "--split",
        type=Path,
        default=None,
        help=f"a fact split (default: {SPLIT_FILE} beside the checkpoints, when there is one)",
    )
    p.add_argument("--title", default=None, help="the report's heading")
    return p


def _model_args(text: str) -> dict:
    from belief_tasks.hooks.lm_eval_api import parse_args_string

    return parse_args_string(text) if text else {}


def _split_path(args, checkpoints: list[Checkpoint]) -> Path | None:
    if args.split is not None:
        if not args.split.is_file():
            raise SweepError(f"--split {args.split}: no such file")
        return args.split
    parents = {Path(c.model_args["pretrained"]).parent for c in checkpoints if "revision" not in c.model_args}
    found = [p / SPLIT_FILE for p in parents if (p / SPLIT_FILE).is_file()]
    return found[0] if len(found) == 1 else None


def refuse(error: BaseException) -> None:
    """Bad input: one paragraph, no traceback, exit code 2 (as ``belief-eval``)."""
    text = str(error).rstrip()
    print(
        f"belief-eval sweep: stopped before loading any checkpoint. {text}{'' if text.endswith('.') else '.'} "
        "Nothing was computed; fix the command and run it again (docs/training.md).",
        file=sys.stderr,
    )
    raise SystemExit(2)


def _metadata(text: str) -> dict:
    """The ``--metadata`` knobs: a JSON object (refused otherwise)."""
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as e:
        raise SweepError(f"--metadata is not JSON ({e})") from e
    if not isinstance(metadata, dict):
        raise SweepError("--metadata must be a JSON object")
    return metadata


def _write_results(results: dict, out: Path, ck: Checkpoint) -> None:
    """Write a checkpoint's results and samples to ``out/<label>``."""
    from belief_tasks.training import checkpoint_eval

    folder = out / ck.label
    # written beside, then renamed: a sweep killed while writing leaves no results folder that looks finished
    partial = out / f".{ck.label}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    checkpoint_eval.write(results, partial, ck.model_args)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def _report(args, checkpoints: list[Checkpoint], split) -> None:
    """Build the sweep's report into ``OUT/report`` and print its summary."""
    from belief_tasks.report import build_report

    out = args.output_path
    report = build_report(
        [out / c.label for c in checkpoints],
        out / "report",
        title=args.title or f"Knowledge over training: {args.tasks}",
        split=split,
    )
    print("\n".join(report.summary))


def run(argv: list[str]) -> int:
    from belief_tasks.data.sources import DataSourceError
    from belief_tasks.facts.schema import SchemaError
    from belief_tasks.facts.split import FactSplit
    from belief_tasks.options import KnobError
    from belief_tasks.training import checkpoint_eval

    args = parser().parse_args(argv)
    try:
        metadata = _metadata(args.metadata)
        model_args = _model_args(args.model_args)
        checkpoints = plan(args.checkpoints, args.revisions, model_args)
        split_path = _split_path(args, checkpoints)
        split = FactSplit.load(split_path) if split_path else None
        tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        # as lm-eval merges --model_args into the tasks' metadata: tasks that count the model's tokens read them
        first = checkpoints[0].model_args
        manager, built = checkpoint_eval.build_tasks(tasks, {**first, **metadata}, first)
    except (SweepError, KnobError, SchemaError, DataSourceError, ValueError) as e:
        refuse(e)
        return 2
    from lm_eval.api.registry import get_model

    out = args.output_path
    print(f"belief-eval sweep: {len(checkpoints)} checkpoints, tasks {', '.join(tasks)} -> {out}", flush=True)
    timings = []
    for i, ck in enumerate(checkpoints):
        folder = out / ck.label
        if checkpoint_eval.finished(folder):
            print(f"[{i + 1}/{len(checkpoints)}] {ck.label}: done before, skipped", flush=True)
            continue
        start = time.monotonic()
        extra = {"batch_size": args.batch_size, "device": args.device}
        lm = get_model(args.model).create_from_arg_obj(ck.model_args, extra)
        results = checkpoint_eval.evaluate(
            lm,
            manager,
            built,
            model_args=ck.model_args,
            cache=out / "cache" / ck.label,
            bootstrap_iters=args.bootstrap_iters,
        )
        _write_results(results, out, ck)
        del lm, results
        gc.collect()
        seconds = time.monotonic() - start
        timings.append({"checkpoint": ck.label, "seconds": round(seconds, 1)})
        print(f"[{i + 1}/{len(checkpoints)}] {ck.label}: {seconds:.0f} s", flush=True)
    if timings:
        (out / "timings.json").write_text(json.dumps(timings, indent=1) + "\n", encoding="utf-8")
    _report(args, checkpoints, split)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(list(sys.argv[1:] if argv is None else argv))
