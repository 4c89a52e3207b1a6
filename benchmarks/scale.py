"""Harness overhead of a task at MyriadLAMA scale: documents, requests, wall, peak RSS, CPU, logs.

1. Writes a deterministic synthetic MyriadLAMA in the hub's layout (one row per subject-relation
   pair and template: ``uuid``, ``rel_uri``, ``sub_ent`` a string, ``obj_uris``, ``obj_ents``,
   ``obj_aliases`` a flat list, ``template`` with ``[X]``/``[Y]``, ``is_manual``) at ``--fraction``
   of the real size: 41 relations x 100 templates (5 manual, 20 question-style), 24,643 pairs at
   1.0, 2.635 subject expressions per pair on average, i.e. 6,492,800 prompts per context with
   ``mp_templates: all``. Lengths of subjects, objects and templates are those of real LAMA text.
   The copy is written once per (fraction, version) under ``--data-dir`` and reused.
2. Runs the task through lm-eval in a child process (``python -m belief_tasks.commands.belief_eval``, the dummy
   model unless ``--model`` says otherwise, ``myriadlama_path`` pointing at the copy) and reads the
   child's own peak RSS and CPU time from ``wait4``.
3. Prints documents, requests (greedy / sampled), wall and CPU time, peak RSS, samples-file bytes,
   per prompt, and the linear extrapolation to the 6,492,800 prompts of the full setting: with
   ``--baseline-fraction`` a second, smaller run gives the intercept (startup memory, imports), so
   the slope per prompt is measured rather than assumed.

    python -m benchmarks scale --fraction 0.1 --log-samples                # new code, dummy model
    python -m benchmarks scale --fraction 0.1 --log-samples --python /path/to/old/.venv/bin/python
    python -m benchmarks scale --fraction 0.002 --model hf-shared \\
        --model-args pretrained=/path/to/SmolLM2-135M-Instruct,dtype=float32 --log-samples
    python -m benchmarks scale --fraction 1.0 --log-samples --json full.json   # 6.49M prompts
    python -m benchmarks scale --fraction 0.1 --log-samples --answer-cache     # with belief-eval's default cache

The child is ``python -m belief_tasks.commands.belief_eval`` of ``--python``'s environment, so the same benchmark
measures an older checkout installed in another virtual environment side by side: it runs this file by its path
(``PYTHONSAFEPATH``, from a temporary folder, so that it imports that environment's ``belief_tasks``, not the
checkout's), which is why this module imports only the standard library at its top.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

#: MyriadLAMA (Zhao et al., v3): pairs, relations, templates per relation, prompts with all templates
REAL_PAIRS = 24_643
RELATIONS = 41
TEMPLATES = 100
MANUAL = 5
QUESTIONS = 20
FULL_PROMPTS = 6_492_800
#: subject expressions per pair: weights for 1..6 forms, mean 2.635 (= 6,492,800 / 24,643 / 100)
FORM_WEIGHTS = (0.275, 0.26, 0.2, 0.13, 0.09, 0.045)
DATA_VERSION = 1

SYLLABLES = (
    "ka",
    "ro",
    "mi",
    "ten",
    "sal",
    "vor",
    "lin",
    "da",
    "bre",
    "sto",
    "ne",
    "gar",
    "u",
    "pe",
    "ril",
    "mon",
    "tha",
    "zi",
    "cor",
    "ble",
    "an",
    "fe",
    "dis",
    "ho",
    "qua",
    "ler",
    "i",
    "son",
)
VERBS = (
    "was born in",
    "is located in",
    "is a member of",
    "works for",
    "plays",
    "speaks",
    "is part of",
    "was founded in",
    "is the capital of",
    "shares a border with",
    "is named after",
    "is owned by",
    "belongs to",
    "is produced by",
    "was developed by",
    "has the position of",
    "is affiliated with",
)
ADVERBS = ("", "officially", "originally", "currently", "historically", "formally", "mainly", "also")
HEADS = ("", "It is known that", "As is well known,", "According to records,", "In fact,", "Notably,")
QUESTION_WORDS = ("What", "Which place", "Which entity", "Who", "Which organisation", "What thing")


def _word(rng: random.Random, lo: int = 2, hi: int = 3) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(lo, hi)))


def _name(rng: random.Random, words: tuple[int, int] = (1, 3)) -> str:
    return " ".join(_word(rng).capitalize() for _ in range(rng.randint(*words)))


def _templates(rng: random.Random, relation: int) -> list[tuple[str, bool]]:
    """100 distinct templates; every fifth is a question (20), the first five are the manual ones."""
    verb = VERBS[relation % len(VERBS)]
    out: list[tuple[str, bool]] = []
    seen: set[str] = set()
    while len(out) < TEMPLATES:
        k = len(out)
        adverb = rng.choice(ADVERBS)
        phrase = f"{adverb} {verb}".strip() if rng.random() < 0.5 else f"{verb} {_word(rng, 1, 2)}"
        if k % 5 == 4:
            text = f"{rng.choice(QUESTION_WORDS)} {phrase} [X]? [Y]."
        else:
            head = rng.choice(HEADS)
            text = f"{head} [X] {phrase} [Y].".strip() if rng.random() < 0.8 else f"[Y] is what [X] {phrase}."
        if text not in seen:
            seen.add(text)
            out.append((text, k < MANUAL))
    return out


def pairs_per_relation(fraction: float) -> list[int]:
    total = max(RELATIONS, round(REAL_PAIRS * fraction))
    return [total // RELATIONS + (1 if r < total % RELATIONS else 0) for r in range(RELATIONS)]


def _cached_synthetic(marker: Path, fraction: float, seed: int) -> dict | None:
    """The summary in ``marker`` when it describes this (version, fraction, seed); else None."""
    if marker.is_file():
        info = json.loads(marker.read_text())
        if info.get("version") == DATA_VERSION and info.get("fraction") == fraction and info.get("seed") == seed:
            return info
    return None


def _synthetic_schema():
    """The parquet schema of the hub's layout (pyarrow imported here, not at the top)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("uuid", pa.string()),
            ("rel_uri", pa.string()),
            ("sub_ent", pa.string()),
            ("obj_uris", pa.list_(pa.string())),
            ("obj_ents", pa.list_(pa.string())),
            ("obj_aliases", pa.list_(pa.string())),
            ("template", pa.string()),
            ("is_manual", pa.bool_()),
        ]
    )


def _objects(rng: random.Random, n: int) -> list[tuple[str, str, list[str]]]:
    """A relation's objects for ``n`` pairs: (QID, label, aliases), one per eight pairs, at least ten."""
    return [
        (
            f"Q{rng.randint(1, 9_999_999)}",
            _name(rng, (1, 2)),
            [_name(rng, (1, 2)) for _ in range(rng.choice((0, 0, 1, 2, 3)))],
        )
        for _ in range(max(10, n // 8))
    ]


def _subject_forms(rng: random.Random) -> list[str]:
    """A pair's subject expressions: its label first, then up to five more (FORM_WEIGHTS), duplicates dropped."""
    label = _name(rng)
    forms = [label] + [
        f"{label} {_word(rng, 1, 2).capitalize()}" if rng.random() < 0.5 else _name(rng)
        for _ in range(rng.choices(range(1, 7), FORM_WEIGHTS)[0] - 1)
    ]
    return list(dict.fromkeys(forms))


def _relation_columns(rng: random.Random, r: int, n: int, names: list[str]) -> tuple[dict[str, list], int, int]:
    """Relation ``r``'s rows (``n`` pairs x its templates) as columns; with the rows' and prompts' counts."""
    rid = f"P{100 + r * 7}"
    templates = _templates(rng, r)
    objects = _objects(rng, n)
    cols: dict[str, list] = {name: [] for name in names}
    n_rows = n_prompts = 0
    for _ in range(n):
        pair = str(uuid.UUID(int=rng.getrandbits(128)))
        forms = _subject_forms(rng)
        qid, obj, aliases = rng.choice(objects)
        for t, (text, manual) in enumerate(templates):
            for name, value in (
                ("uuid", pair),
                ("rel_uri", rid),
                ("sub_ent", forms[t % len(forms)]),
                ("obj_uris", [qid]),
                ("obj_ents", [obj]),
                ("obj_aliases", aliases),
                ("template", text),
                ("is_manual", manual),
            ):
                cols[name].append(value)
        n_rows += len(templates)
        n_prompts += len(templates) * len(forms)
    return cols, n_rows, n_prompts


def write_synthetic(folder: Path, fraction: float, seed: int = 0) -> dict:
    """The synthetic copy under ``folder`` (one parquet file, written in row groups); its summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = folder / "SYNTHETIC"  # no .json suffix: the loader reads every .json/.parquet file here
    info = _cached_synthetic(marker, fraction, seed)
    if info is not None:
        return info
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    schema = _synthetic_schema()
    rng = random.Random(seed)
    n_rows = n_prompts = n_pairs = 0
    with pq.ParquetWriter(folder / "train-00000-of-00001.parquet", schema) as writer:
        for r, n in enumerate(pairs_per_relation(fraction)):
            cols, rows, prompts = _relation_columns(rng, r, n, schema.names)
            n_rows += rows
            n_prompts += prompts
            n_pairs += n
            writer.write_table(pa.table(cols, schema=schema))
    info = {
        "version": DATA_VERSION,
        "fraction": fraction,
        "seed": seed,
        "pairs": n_pairs,
        "rows": n_rows,
        "prompts_all_templates": n_prompts,
        "relations": RELATIONS,
    }
    marker.write_text(json.dumps(info, indent=1))
    return info


# --------------------------------------------------------------------------- the child process

CHILD_FLAG = "--bench-child"


def _rss_mb() -> float:
    """This process's resident memory in MiB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _sample_memory(stats: dict, phase: list[str]) -> None:
    """Forever, every 0.2 s: the current phase's peak resident memory into ``stats``."""
    while True:
        peaks = stats["peak_rss_mb"]
        peaks[phase[0]] = max(peaks.get(phase[0], 0), round(_rss_mb()))
        time.sleep(0.2)


def _time_phase(stats: dict, phase: list[str], owner, name: str, label: str, after=None) -> None:
    """Wraps ``owner.name`` so that its calls are phase ``label``: their seconds added to ``stats``, ``after(*args)``
    called once each returns."""
    original = getattr(owner, name)

    def wrapper(*a, **kw):
        before, phase[0] = phase[0], label
        t = time.perf_counter()
        try:
            out = original(*a, **kw)
            if after:
                after(*a)
            return out
        finally:
            stats["seconds"][label] = round(stats["seconds"].get(label, 0) + time.perf_counter() - t, 1)
            # after the requests: the model runs and lm-eval scores and logs each document
            phase[0] = before if label != "build requests" else "run model, score documents"

    setattr(owner, name, wrapper)


def _count_requests(stats: dict, task, **_) -> None:
    """A task's documents, requests and sampled requests into ``stats``, once it built its requests."""
    inst = task._instances or []
    sampled = sum(1 for i in inst if isinstance(i.args[-1], dict) and i.args[-1].get("do_sample"))
    stats["tasks"][task.config.task] = {
        "documents": len({i.doc_id for i in inst}),
        "requests": len(inst),
        "sampled_requests": sampled,
    }


def _run_belief_eval(cli_args: list[str]) -> None:
    """``belief_tasks.commands.belief_eval`` on ``cli_args`` (without ``--no_answer_cache`` for an older checkout)."""
    from belief_tasks.commands.belief_eval import main
    from belief_tasks.hooks import answer_cache

    if not hasattr(answer_cache, "NO_ANSWER_CACHE"):  # an older checkout (--python) keeps no answers anyway
        cli_args = [a for a in cli_args if a != "--no_answer_cache"]
    main(cli_args)


def child_main(counts_file: str, cli_args: list[str]) -> None:
    """Inside the child: count each task's documents and requests (greedy / sampled), time the
    phases and sample the resident memory in each, then run ``belief_tasks.commands.belief_eval`` unchanged."""
    import atexit
    import functools
    import threading

    from lm_eval import evaluator
    from lm_eval.api import task as lm_task
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker
    from lm_eval.tasks import TaskManager

    stats: dict = {"tasks": {}, "seconds": {}, "peak_rss_mb": {}}
    phase = ["start"]
    threading.Thread(target=_sample_memory, args=(stats, phase), daemon=True).start()
    timed = functools.partial(_time_phase, stats, phase)
    timed(TaskManager, "load", "load data, build documents")
    timed(lm_task.Task, "build_all_requests", "build requests", after=functools.partial(_count_requests, stats))
    timed(evaluator, "_process_results", "aggregate")
    timed(EvaluationTracker, "save_results_samples", "write samples")
    atexit.register(lambda: Path(counts_file).write_text(json.dumps(stats)))
    _run_belief_eval(cli_args)


# --------------------------------------------------------------------------- the parent


def run_task(args, data: Path | None, fraction_info: dict, out: Path) -> dict:
    meta = {**({"myriadlama_path": str(data)} if data else {}), **json.loads(args.metadata)}
    # the harness alone unless --answer-cache: belief-eval's default cache adds a look-up and a write per request
    cli = [
        "--model",
        args.model,
        "--tasks",
        args.task,
        "--metadata",
        json.dumps(meta),
        "--output_path",
        str(out),
        "--batch_size",
        str(args.batch_size),
        *([] if args.answer_cache else ["--no_answer_cache"]),
    ]
    if args.model_args:
        cli += ["--model_args", args.model_args]
    if args.log_samples:
        cli.append("--log_samples")
    counts = out / "counts.json"
    cmd = [args.python, str(Path(__file__).resolve()), CHILD_FLAG, str(counts), *cli]
    from benchmarks import measure  # here, not at the top: the child runs this file outside the package

    env = {**measure.child_env(int(os.environ.get("OMP_NUM_THREADS", "1"))), "PYTHONSAFEPATH": "1"}
    run = measure.run_child(cmd, env, out / "child.log", cwd=tempfile.gettempdir())
    if run["status"] != 0:
        tail = (out / "child.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"child failed ({run['status']}):\n{tail}")
    stats = json.loads(counts.read_text())
    task = stats["tasks"][args.task] if args.task in stats["tasks"] else _sum(stats["tasks"])
    build_s = stats["seconds"].get("build requests", 0.0)
    samples = sorted(out.rglob("samples_*.jsonl"))
    log_bytes = sum(f.stat().st_size for f in samples)
    prompts = task["requests"] - task["sampled_requests"]
    return {
        "fraction": fraction_info["fraction"],
        "pairs": fraction_info["pairs"],
        "documents": task["documents"],
        "prompts": prompts,
        "requests": task["requests"],
        "sampled_requests": task["sampled_requests"],
        "wall_s": round(run["wall_s"], 1),
        "cpu_s": round(run["cpu_s"], 1),
        "build_requests_s": build_s,
        "peak_rss_mb": round(run["peak_mb"]),
        "log_bytes": log_bytes,
        "per_prompt": {
            "cpu_ms": round(1000 * run["cpu_s"] / prompts, 3),
            "rss_bytes": round(run["peak_mb"] * 2**20 / prompts),
            "log_bytes": round(log_bytes / prompts),
        },
        "phases_s": stats["seconds"],
        "phases_peak_rss_mb": stats["peak_rss_mb"],
    }


def _sum(tasks: dict) -> dict:
    return {k: sum(t[k] for t in tasks.values()) for k in ("documents", "requests", "sampled_requests")}


def extrapolate(big: dict, small: dict | None, prompts: int) -> dict:
    """Linear in prompts; with a smaller run, through both points (slope = marginal cost per prompt)."""
    out = {}
    for key, _scale in (("wall_s", 1), ("cpu_s", 1), ("peak_rss_mb", 1), ("log_bytes", 1)):
        if small and big["prompts"] != small["prompts"]:
            slope = (big[key] - small[key]) / (big["prompts"] - small["prompts"])
            out[key] = round(small[key] + slope * (prompts - small["prompts"]))
        else:
            out[key] = round(big[key] * prompts / big["prompts"])
    out["wall_min"] = round(out["wall_s"] / 60, 1)
    out["peak_rss_gb"] = round(out.pop("peak_rss_mb") / 1024, 2)
    out["log_gb"] = round(out.pop("log_bytes") / 1e9, 2)
    return out


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--fraction",
        type=float,
        default=0.1,
        help="share of MyriadLAMA's 24,643 pairs; 0: no synthetic copy (the task's own data, --metadata)",
    )
    ap.add_argument(
        "--baseline-fraction",
        type=float,
        default=None,
        help="also run this smaller fraction and extrapolate through both points",
    )
    ap.add_argument("--task", default="belief_mp_4template")
    ap.add_argument("--metadata", default='{"mp_templates": "all"}', help="task knobs (JSON), myriadlama_path added")
    ap.add_argument("--model", default="dummy")
    ap.add_argument("--model-args", default="")
    ap.add_argument("--batch-size", default="64")
    ap.add_argument("--log-samples", action="store_true")
    ap.add_argument(
        "--answer-cache", action="store_true", help="keep belief-eval's default answer cache (off by default here)"
    )
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose belief_tasks is measured")
    ap.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "belief_synthetic_myriadlama"))
    ap.add_argument("--out", default=None, help="output folder of the runs (default: a temporary one, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the output folders")
    ap.add_argument("--json", default=None, help="write the result here too")
    ap.add_argument(
        "--extrapolate-to",
        type=int,
        default=FULL_PROMPTS,
        help="prompts (non-sampled requests) of the full setting (default: MyriadLAMA, all templates; 0: none)",
    )
    return ap


def _synthetic_data(args, fraction: float) -> tuple[Path | None, dict]:
    """The synthetic copy's folder and summary at ``fraction`` (written if need be); none at 0."""
    data, info = None, {"fraction": 0, "pairs": None}
    if fraction:
        data = Path(args.data_dir) / f"f{fraction:g}"
        t = time.perf_counter()
        info = write_synthetic(data, fraction)
        print(
            f"synthetic MyriadLAMA {fraction:g}: {info['pairs']:,} pairs, {info['rows']:,} rows "
            f"({time.perf_counter() - t:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return data, info


def _run_fraction(args, fraction: float) -> dict:
    """One run of the task at ``fraction`` in a fresh output folder (removed unless ``--keep``); its measurements."""
    data, info = _synthetic_data(args, fraction)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_scale_")) / f"f{fraction:g}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run = run_task(args, data, info, out)
    print(json.dumps(run), file=sys.stderr, flush=True)
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return run


def _report(args, runs: dict) -> dict:
    """The runs with the settings and, unless ``--extrapolate-to 0``, the extrapolation to the full setting."""
    big = runs[args.fraction]
    small = runs.get(args.baseline_fraction)
    return {
        "task": args.task,
        "metadata": json.loads(args.metadata),
        "model": args.model,
        "log_samples": args.log_samples,
        "python": args.python,
        "runs": list(runs.values()),
        **(
            {f"extrapolated_to_{args.extrapolate_to}_prompts": extrapolate(big, small, args.extrapolate_to)}
            if args.extrapolate_to
            else {}
        ),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == CHILD_FLAG:
        return child_main(argv[1], argv[2:])
    args = _parser().parse_args(argv)
    runs = {}
    for fraction in [f for f in (args.baseline_fraction, args.fraction) if f is not None]:
        runs[fraction] = _run_fraction(args, fraction)
    report = _report(args, runs)
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
