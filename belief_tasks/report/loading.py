"""Reading lm-eval ``--output_path`` folders: results JSON and ``--log_samples`` files.

lm-eval 0.4.13 (``loggers/evaluation_tracker.py``) writes, for ``--output_path OUT``:

* ``OUT/<model_name_sanitized>/results_<date_id>.json``: the aggregated metrics
  (``results[task]["<metric>,<filter>"]`` and ``"<metric>_stderr,<filter>"``),
  ``configs``, ``n-samples``, ``model_name``, ...;
* ``OUT/<model_name_sanitized>/samples_<task>_<date_id>.jsonl``: one line per doc
  and filter, with ``doc``, ``resps``, ``filtered_resps``, ``filter``, ``metrics``
  (the metric names) and, under each metric name, what ``process_results``
  returned: for our tasks the per-doc record under the first metric (BELIEF-ICL: per pair) and under
  every other metric a ``<same as METRIC>`` reference to it (runs before this layout: the record again).

When ``OUT`` ends in ``.json`` the files sit beside it instead
(``OUT-stem_<date_id>.json`` and ``samples_<task>_<date_id>.jsonl``). We find every
results JSON below the given folders, so a single model folder, an output path
holding several model folders, or several output paths all work. One folder
holding results files is one *model run*; when several runs in it cover the
same task, the newest wins.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from tqdm.auto import tqdm

from belief_tasks.scoring.common import SAME_AS

log = logging.getLogger("belief_tasks.report")

#: sample files larger than this show a progress bar while they are read
PROGRESS_BYTES = 5_000_000
_DATE = r"(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)"


class ReportInputError(ValueError):
    """A folder that holds no lm-eval results, or a results file that cannot be read."""


@dataclass
class TaskRun:
    """One task of one model run: its aggregated results and, when logged, its per-doc records."""

    name: str
    results: dict  # results[task] of the results JSON: {"acc,none": 0.5, "acc_stderr,none": 0.1, "alias": ...}
    config: dict  # configs[task]
    n_samples: dict  # n-samples[task]: {"original": .., "effective": ..}
    samples_path: Path | None
    date_id: str
    _records: dict | None = field(default=None, repr=False)
    #: why ``samples_path`` is None ("" when it is not): ``belief-report --strict`` fails on it
    samples_missing: str = ""

    def metric_names(self) -> list[str]:
        """Metric names in the results JSON, in their order (without the filter or stderr keys)."""
        names = []
        for key in self.results:
            if "," not in key or "_stderr," in key:
                continue
            name = key.split(",", 1)[0]
            if name not in names:
                names.append(name)
        return names

    def value(self, metric: str, stderr: bool = False):
        """The harness's own number for ``metric`` (first filter), ``None`` where absent or ``N/A``."""
        for key, v in self.results.items():
            if "," not in key:
                continue
            name, _ = key.split(",", 1)
            if name == (f"{metric}_stderr" if stderr else metric):
                return v if isinstance(v, (int, float)) else None
        return None

    @property
    def family(self) -> str:
        """The family our task class stamped into the task's metadata ("" for other tasks)."""
        return str((self.config.get("metadata") or {}).get("family") or "")

    @property
    def probe(self) -> str:
        """The task that defines this task's data (``belief_demo_bear`` -> ``belief_bear``); its own name
        for other tasks."""
        return str((self.config.get("metadata") or {}).get("probe") or self.name)

    @property
    def dataset(self) -> str:
        """The dataset whose fact ids this task's records carry ("sample", "bear", "bear_big", ...), as our
        task class stamped it; facts of two tasks are the same facts only when this is equal."""
        md = self.config.get("metadata") or {}
        return str(md.get("dataset") or ("sample" if md.get("source") == "sample" else self.probe))

    @property
    def budget_design(self) -> dict | None:
        """A budgeted run's draw as the task recorded it (budget, facts drawn and in the population, per
        relation); None for a run of every fact."""
        return (self.config.get("metadata") or {}).get("budget_design")

    @property
    def has_records(self) -> bool:
        return self.samples_path is not None

    def records(self, metric: str | None = None) -> list:
        """Per-doc values lm-eval logged under ``metric`` (default: the first metric)."""
        if self._records is None:
            self._records = read_samples(self.samples_path) if self.samples_path else {}
            self._check_count()
        if not self._records:
            return []
        return self._records.get(metric or next(iter(self._records)), [])

    def _check_count(self) -> None:
        """As many records as the results JSON counts samples of the task (``n-samples``), else the two
        files do not belong together."""
        effective = self.n_samples.get("effective")
        # a metric may skip docs (MONITOR's acc_frame_6 on 6-frame relations): the fullest one counts them all
        most = max((len(v) for v in (self._records or {}).values()), default=0)
        if effective is not None and most and most != int(effective):
            raise ReportInputError(
                f"{self.samples_path}: {most} records, but its results JSON "
                f"counts {effective} samples of {self.name}: the two files come from different runs"
            )

    def fact_count(self) -> int | None:
        """How many facts the task's records cover (distinct ``fact_id``: a subject-relation pair for
        BELIEF, an instance for BEAR and IC-LKE, a fact for MONITOR); None without a samples file."""
        if not self.has_records:
            return None
        return len({r["fact_id"] for r in self.records() if isinstance(r, dict) and "fact_id" in r}) or None

    def logged_metrics(self) -> list[str]:
        """The metric names the samples file holds values for."""
        self.records()
        return list(self._records or {})


@dataclass
class ModelRun:
    """Every task found in one folder of results files: one model, one configuration."""

    name: str  # display name, unique within a report
    model_name: str  # as lm-eval recorded it (e.g. the pretrained path)
    folder: Path
    tasks: dict[str, TaskRun]
    groups: dict[str, dict]  # results[group] of the groups' summary rows
    info: dict  # run-level fields of the newest results JSON (model_args, lm-eval version, date, ...)
    shards: list[Path] = field(default_factory=list)  # a run pooled from shards (``report.shards``): their folders

    @property
    def date(self) -> str:
        """When the newest results file was written (lm-eval's date id, local time of the run)."""
        ids = sorted(t.date_id for t in self.tasks.values() if t.date_id)
        return f"{ids[-1][:10]} {ids[-1][11:19].replace('-', ':')}" if ids else ""

    @property
    def backend(self) -> str:
        """The lm-eval model type the run used (``hf``, ``hf-shared``, ...): Ovconf's samples differ by it."""
        return str((self.info.get("config") or {}).get("model") or "")

    @property
    def limit(self) -> float | None:
        """lm-eval's ``--limit`` of the run (None: every document)."""
        return (self.info.get("config") or {}).get("limit")


def home_relative(text: str) -> str:
    """``text`` with the user's home folder written ``~`` (cards and reports are shared beyond the machine)."""
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~" + os.sep) if home not in ("", "/", "~") else text


def limit_note(run: ModelRun) -> str:
    """What ``--limit`` means for a run's numbers ("" without a limit)."""
    if run.limit is None:
        return ""
    n = float(run.limit)
    share = f"{n:.0%} of its documents" if n < 1 else f"its first {int(n)} document{'s' if int(n) != 1 else ''}"
    return (
        f"--limit {n:g}: each task scored only {share}, so these numbers are not the tasks' values "
        "(lm-eval: 'only for testing')"
    )


# --------------------------------------------------------------------------- discovery


def find_results_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.suffix == ".json":
            files.append(p)
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*.json") if _is_results_file(f))
            if not found:
                raise ReportInputError(
                    f"{p}: no lm-eval results_*.json below this folder "
                    f"(run lm_eval / belief-eval with --output_path {p})"
                )
            files.extend(found)
        else:
            raise ReportInputError(f"{p}: no such folder")
    return list(dict.fromkeys(f.resolve() for f in files))


def _is_results_file(f: Path) -> bool:
    if f.name.startswith("samples_") or not re.search(_DATE + r"\.json$", f.name):
        return False
    try:
        with f.open(encoding="utf-8") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return '"results"' in head or f.name.startswith("results_")


def _date_id(f: Path) -> str:
    m = re.search(_DATE + r"\.jsonl?$", f.name)
    return m.group(1) if m else ""


def _samples_file(folder: Path, task: str, date_id: str) -> tuple[Path | None, str]:
    """The samples file of the same run, or None and why: lm-eval stamps a run's results and samples
    with one date id. Never another run's (an older samples file would pair records with the wrong numbers)."""
    exact = folder / f"samples_{task}_{date_id}.jsonl"
    if exact.is_file():
        return exact, ""
    others = sorted(folder.glob(f"samples_{task}_*.jsonl"))
    if others:
        log.warning(
            "%s: no samples file of run %s for %s (only %s): its breakdowns are left out",
            folder,
            date_id,
            task,
            ", ".join(p.name for p in others),
        )
        return None, f"no samples file of run {date_id} (only {', '.join(p.name for p in others)}: other runs)"
    return None, "no samples file (run without --log_samples?)"


def _read_results(f: Path) -> dict:
    """The parsed results JSON ``f`` (refused when unreadable or without a ``results`` key)."""
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ReportInputError(f"{f}: not a readable results JSON ({e})") from e
    if not isinstance(data, dict) or "results" not in data:
        raise ReportInputError(f"{f}: no 'results' key; is this an lm-eval results file?")
    return data


def _run_info(data: dict, f: Path) -> dict:
    """The run's own entries of results JSON ``f`` (model, lm-eval's settings, ...: not per task) and its path."""
    info = {
        k: v
        for k, v in data.items()
        if k
        not in (
            "results",
            "configs",
            "samples",
            "n-samples",
            "groups",
            "group_subtasks",
            "higher_is_better",
            "versions",
            "task_hashes",
            "n-shot",
        )
    }
    info["results_file"] = str(f)
    return info


def load_runs(paths: Iterable[str | os.PathLike]) -> list[ModelRun]:
    """Every model run below ``paths`` (folders or results files), tasks merged per folder (the shards of a run split
    by relation pooled into one: ``report.shards.pool``)."""
    by_folder: dict[Path, list[Path]] = {}
    for f in find_results_files(paths):
        by_folder.setdefault(f.parent, []).append(f)
    runs = []
    for folder, files in by_folder.items():
        tasks: dict[str, TaskRun] = {}
        groups: dict[str, dict] = {}
        info: dict = {}
        for f in sorted(files, key=_date_id):  # newest last: it wins
            data = _read_results(f)
            date_id = _date_id(f)
            info = _run_info(data, f)
            group_names = set(data.get("group_subtasks", {})) | set(data.get("groups", {}))
            for task, res in data["results"].items():
                if task in group_names and task not in data.get("configs", {}):
                    groups[task] = res  # a group's summary row, not a task
                    continue
                samples, missing = _samples_file(folder, task, date_id)
                tasks[task] = TaskRun(
                    name=task,
                    results=res,
                    config=data.get("configs", {}).get(task, {}),
                    n_samples=data.get("n-samples", {}).get(task, {}),
                    samples_path=samples,
                    date_id=date_id,
                    samples_missing=missing,
                )
        model_name = str(info.get("model_name") or folder.name)
        runs.append(
            ModelRun(
                name=short_name(model_name, folder),
                model_name=model_name,
                folder=folder,
                tasks=tasks,
                groups=groups,
                info=info,
            )
        )
    make_names_unique(runs)
    return runs


def short_name(model_name: str, folder: Path) -> str:
    name = model_name.rstrip("/").split("/")[-1] if model_name else folder.name
    return name or folder.name


def make_names_unique(runs: list[ModelRun]) -> None:
    seen: dict[str, list[ModelRun]] = {}
    for r in runs:
        seen.setdefault(r.name, []).append(r)
    for name, group in seen.items():
        if len(group) < 2:
            continue
        for r in group:  # the output folder above the model folder tells runs of one model apart
            r.name = f"{name} ({f'shards in {r.folder.name}' if r.shards else r.folder.parent.name or r.folder.name})"
        if len({r.name for r in group}) < len(group):
            for i, r in enumerate(group, 1):
                r.name = f"{name} #{i}"


# --------------------------------------------------------------------------- samples


def iter_samples(path: Path, desc: str | None = None) -> Iterator[dict]:
    """Lines of a samples JSONL file; a progress bar (bytes read) on large files."""
    size = path.stat().st_size
    bar = tqdm(
        total=size,
        unit="B",
        unit_scale=True,
        desc=desc or path.name,
        leave=False,
        disable=size < PROGRESS_BYTES or None,
    )
    with path.open("rb") as fh:
        for line_no, line in enumerate(fh, 1):
            bar.update(len(line))
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ReportInputError(f"{path}, line {line_no}: not JSON ({e.msg})") from e
    bar.close()


def read_samples(path: Path) -> dict[str, list]:
    """``{metric: [per-doc value, ...]}`` in file order, first filter only.

    File order is the order lm-eval handed the values to the aggregations (also
    after gathering ranks), which order-sensitive aggregations (seeded draws,
    tie-breaking) need to reproduce the harness's numbers.

    Our tasks log one record per doc, under the first metric name, and under the others either
    the same record again or a ``<same as METRIC>`` reference to it; either way every metric
    gets the one record object (kept once in memory).
    """
    out: dict[str, list] = {}
    first_filter = None
    for s in iter_samples(path):
        filt = s.get("filter", "none")
        first_filter = filt if first_filter is None else first_filter
        if filt != first_filter:
            continue
        names = s.get("metrics") or []
        shared = s.get(names[0]) if names else None
        for m in names:
            out.setdefault(m, []).append(_resolve(s, m, shared))
    return out


def _resolve(sample: dict, metric: str, shared):
    v = sample.get(metric)
    if isinstance(v, str) and (ref := SAME_AS.fullmatch(v)) and ref.group(1) in sample and ref.group(1) != metric:
        v = sample[ref.group(1)]
    return shared if v == shared else v
