"""The shards of one run written out as that run (``belief-eval --shard_by_relation``): the results JSON and samples
files lm-eval would have written had the command run in one process.

The shards are pooled as ``belief-report`` pools them (``report.shards.pool``); then every number of each task is
recomputed from the pooled records with the objects lm-eval aggregated with (``scoring.wiring.metric_list``: each
metric's ``Aggregation``, its standard error as our ``stderr_for_metric`` hook hands it to lm-eval, a budgeted run's
``<metric>_ci95``), never averaged over shards. The samples are the shards' lines, shard after shard (their blocks
follow the data order, ``facts.shard``), with lm-eval's ``doc_id`` counted on across the shards; the task hashes are
lm-eval's, over the pooled samples. What says when and how long the run ran is the shards' together (the first
start, the last end, the evaluation seconds added up); everything else is the first shard's, which the shards share
(``report.shards.signature``).

Pure: no lm-eval (its JSON conventions are written out here: ``_jsonable`` is lm-eval's
``utils.handle_non_serializable``).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from belief_tasks.families import FAMILIES, budget_estimators
from belief_tasks.report.loading import ModelRun, ReportInputError, TaskRun
from belief_tasks.report.shards import PooledTask
from belief_tasks.scoring import wiring

#: the start of a samples line as lm-eval writes it (``doc_id`` first), and the three hashes it ends with
_DOC_ID = re.compile(r'^\{"doc_id": (\d+), ')
_HASHES = re.compile(r'"doc_hash": "([0-9a-f]{64})", "prompt_hash": "([0-9a-f]{64})", "target_hash": "([0-9a-f]{64})"')
_FILTER = re.compile(r'"filter": "([^"]*)"')


def results_file(run: ModelRun) -> Path:
    """The results JSON a (shard) run was read from."""
    return Path(run.info["results_file"])


def pooled_results(shards: list[ModelRun], pooled: ModelRun) -> dict:
    """The results JSON of the run ``pooled`` was pooled from ``shards`` (in its order), without ``task_hashes``
    (``write_samples`` computes them)."""
    data = [json.loads(results_file(run).read_text(encoding="utf-8")) for run in shards]
    out = json.loads(json.dumps(data[0]))
    bootstrap = (out.get("config") or {}).get("bootstrap_iters", 100000)
    for name, task in pooled.tasks.items():
        out["results"][name] = task_results(task, data[0]["results"][name], bootstrap)
        if isinstance(task, PooledTask):
            task.forget()  # one task's records in memory at a time
        out["configs"][name] = task.config
        out["n-samples"][name] = {
            key: sum(int(d["n-samples"][name][key]) for d in data) for key in ("original", "effective")
        }
    starts = [float(d["start_time"]) for d in data if isinstance(d.get("start_time"), (int, float))]
    ends = [float(d["end_time"]) for d in data if isinstance(d.get("end_time"), (int, float))]
    if starts and ends:
        out["start_time"], out["end_time"] = min(starts), max(ends)
    seconds = [float(d["total_evaluation_time_seconds"]) for d in data if d.get("total_evaluation_time_seconds")]
    if seconds:
        out["total_evaluation_time_seconds"] = str(sum(seconds))
    return out


def task_results(task: TaskRun, row: dict, bootstrap_iters: Any) -> dict:
    """One task's row of ``results`` (the first shard's ``row``: its keys in lm-eval's order) with every metric and
    standard error computed from the pooled records as lm-eval computes them."""
    family = task.family
    if family not in FAMILIES:
        raise ReportInputError(f"task {task.name} is not one of ours: its shards cannot be pooled")
    entries = wiring.metric_list(family, FAMILIES[family].metrics, budget_estimators(family), budgeted=True)
    aggregations = {e["metric"]: e["aggregation"] for e in entries}
    out: dict[str, Any] = {}
    for key, value in row.items():
        if "," not in key:  # name, alias; sample_len: what lm-eval counted, the records here
            out[key] = max(len(task.records(m)) for m in task.logged_metrics()) if key == "sample_len" else value
            continue
        metric, filter_key = key.split(",", 1)
        stderr = metric.endswith("_stderr")
        name = metric.removesuffix("_stderr") if stderr else metric
        agg = aggregations.get(name)
        if agg is None:
            raise ReportInputError(f"task {task.name}: metric {name} is not in its family's metric table")
        items = task.records(name)
        out[key] = _stderr(agg, items, bootstrap_iters) if stderr else agg(items)
    return out


def _stderr(agg: wiring.Reported, items: list, bootstrap_iters: Any) -> Any:
    """What lm-eval writes as the standard error: our hook's (``hooks.harness.install_stderr_hook``: a float, or
    ``NoStderr``, lm-eval's own "N/A"), "N/A" for one item or without bootstrap iterations."""
    if not isinstance(bootstrap_iters, int) or bootstrap_iters <= 0 or len(items) <= 1:
        return "N/A"
    return agg.stderr(items)


def write_samples(task: PooledTask, path: Path) -> str:
    """The shards' samples lines of ``task`` into ``path``, shard after shard, ``doc_id`` counted on; lm-eval's task
    hash of the pooled samples (the hash of every sample's three hashes, in order)."""
    digest = hashlib.sha256()
    offset = 0
    with path.open("w", encoding="utf-8") as out:
        for part in task.parts:
            if part.samples_path is None:
                raise ReportInputError(f"task {task.name}: a shard has no samples file")
            with part.samples_path.open(encoding="utf-8") as fh:
                for line_no, line in enumerate(fh, 1):
                    found, hashes, filt = _DOC_ID.match(line), _HASHES.search(line), _FILTER.search(line)
                    if not (found and hashes and filt):
                        raise ReportInputError(f"{part.samples_path}, line {line_no}: not a samples line of lm-eval")
                    if filt.group(1) != "none":
                        raise ReportInputError(
                            f"{part.samples_path}, line {line_no}: filter {filt.group(1)!r}; only unfiltered tasks "
                            "(ours) pool"
                        )
                    out.write(f'{{"doc_id": {int(found.group(1)) + offset}, {line[found.end() :]}')
                    digest.update("".join(hashes.groups()).encode("utf-8"))
            offset += int(part.n_samples.get("original") or 0)
    return digest.hexdigest()


def write(shards: list[ModelRun], pooled: ModelRun, folder: Path) -> Path:
    """The pooled run's results JSON and samples files into ``folder`` (lm-eval's model folder of the output path),
    stamped with one new date id as lm-eval stamps a run; each file is written under a temporary name and then
    renamed, so an interrupted write leaves no file that looks finished. Returns the results JSON's path."""
    folder.mkdir(parents=True, exist_ok=True)
    results = pooled_results(shards, pooled)
    date_id = datetime.now().isoformat().replace(":", "-")
    hashes = {}
    for name, task in pooled.tasks.items():
        assert isinstance(task, PooledTask)
        final = folder / f"samples_{name}_{date_id}.jsonl"
        part = final.with_name(final.name + ".part")
        hashes[name] = write_samples(task, part)
        part.replace(final)
    results["task_hashes"] = hashes
    final = folder / f"results_{date_id}.json"
    part = final.with_name(final.name + ".part")
    part.write_text(json.dumps(results, indent=2, default=_jsonable, ensure_ascii=False), encoding="utf-8")
    part.replace(final)
    return final


def _jsonable(value: Any) -> Any:
    """lm-eval's ``handle_non_serializable``: numpy scalars as numbers, sets as lists, anything else as its string."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with every install
        return list(value) if isinstance(value, set) else str(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, set):
        return list(value)
    return str(value)
