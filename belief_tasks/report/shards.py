"""Shards of one run, pooled into one run (docs/scale.md, "Splitting a run across machines").

A run too large for one machine is split by relation: each machine runs the same command with its own block of
relations (the ``relations`` knob) and its own ``--output_path``. ``belief-report`` pools such shards: their records
are concatenated, shard after shard in the order the folders were given, and every number is recomputed from the
pooled records with the tasks' own aggregations, as for one run (never an average of the shards' numbers).

Which runs are shards (``pool``). Only runs given the ``relations`` knob can be shards. Among them, runs that agree in
everything a shard may not change (``signature``: the model, backend, model arguments that change numbers, every
task's lm-eval configuration with its knobs, seed and dataset, lm-eval's seeds and versions; only the knobs of
``FREE`` may differ) are pooled when their relation sets are disjoint, and stay separate runs when their relation
sets are equal (the same block run twice). Runs on the same relations that differ (several models, settings or
checkpoints compared on the same facts) stay separate runs, as do runs without the knob: today's multi-run report.

Refused (``ShardError``, one paragraph naming the folders and the field), because pooling would be wrong and showing
them side by side would compare different facts:

* runs of one setting whose relation sets overlap without being equal (pooled, a fact would count twice);
* runs on disjoint relations that differ in anything ``signature`` holds (a shard run with another model, knob or
  seed);
* a shard without its samples file, with ``--limit``, or holding a task that is not ours (not split by relations, so
  every shard would hold all of it).

``belief-report --no-pool`` reports every folder as its own run.

Budgeted runs pool as they are: the draw is stratified by relation and each relation's draw depends on the seed and
its own facts only (``belief_tasks.facts.budget``), so the shards' records together are the unsharded run's, with its
design (every record carries its relation's population and drawn count).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from belief_tasks.hooks.answer_cache import IGNORED, parse_model_args
from belief_tasks.report.loading import (
    ModelRun,
    ReportInputError,
    TaskRun,
    home_relative,
    make_names_unique,
    short_name,
)
from belief_tasks.report.recompute import recompute

#: knobs a shard may set on its own: its block of relations, and its share of BELIEF's confidence subsample
#: (docs/scale.md); the rest of ``metadata`` is written by the run (the budget's draw, the requests cut)
FREE = frozenset({"relations", "confidence_prompts", "budget_design", "truncation", "shard", "shard_relations"})
#: ``metadata`` entries that say where a task's YAML was read, not what it computes
WHERE = frozenset({"config_source"})
#: run-level fields of the results JSON that say when and where a run ran, not what it computed
WHEN_AND_WHERE = frozenset(
    {
        "date",
        "start_time",
        "end_time",
        "total_evaluation_time_seconds",
        "pretty_env_info",
        "results_file",
        "git_hash",
        "upper_git_hash",
        "config",
    }
)
#: lm-eval's ``config`` entries that place or batch the work (``limit`` is checked on its own)
PLACING = frozenset({"batch_size", "batch_sizes", "device", "use_cache", "limit", "model_args"})


class ShardError(ReportInputError):
    """Runs that look like shards of one run but cannot be pooled."""


def task_relations(task: TaskRun) -> tuple[str, ...] | None:
    """The relations a task evaluated as a shard: its block under the ``shard`` knob (``shard_relations``, which it
    recorded), else its ``relations`` knob; None with neither."""
    meta = task.config.get("metadata") or {}
    value = meta.get("shard_relations", meta.get("relations"))
    if value in (None, "", []):
        return None
    names = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return tuple(dict.fromkeys(n.strip() for n in names if n.strip())) or None


def relations_by_task(run: ModelRun) -> dict[str, frozenset[str]] | None:
    """task -> the relations it evaluated as a shard (``task_relations``); None when a task has neither knob."""
    out = {}
    for name, task in run.tasks.items():
        found = task_relations(task)
        if found is None:
            return None
        out[name] = frozenset(found)
    return out


def relations_of(run: ModelRun) -> tuple[str, ...] | None:
    """The relations the run was given (its tasks' ``relations`` knob or ``shard`` block, in order), None without
    either."""
    if relations_by_task(run) is None:
        return None
    return tuple(dict.fromkeys(r for task in run.tasks.values() for r in task_relations(task) or ())) or None


def shard_index(run: ModelRun) -> tuple[int, int] | None:
    """(K, N) of a run given the ``shard`` knob ("K/N", the same in each of its tasks), None without it."""
    from belief_tasks.options import Options, parse_options

    found = {parse_options(Options, {"shard": _meta(t).get("shard")}).shard for t in run.tasks.values()}
    return found.pop() if len(found) == 1 else None


def _meta(task: TaskRun) -> dict:
    return task.config.get("metadata") or {}


def signature(run: ModelRun) -> dict:
    """Everything shards of one run must share (module docstring), as a nested dict."""
    config = run.info.get("config") or {}
    args = config.get("model_args", run.info.get("model_args"))
    args = args if isinstance(args, dict) else parse_model_args([str(args)] if args else [])
    tasks = {}
    for name, task in sorted(run.tasks.items()):
        # a function's repr carries its address in the process ("<function f at 0x7f...>"): not the function
        conf = json.loads(re.sub(r" at 0x[0-9a-fA-F]+", "", json.dumps(task.config, default=str)))
        meta = conf.get("metadata") or {}
        conf["metadata"] = {k: v for k, v in meta.items() if k not in FREE | WHERE and k not in IGNORED}
        tasks[name] = conf
    return {
        "model_name": run.model_name,
        "run": {k: v for k, v in run.info.items() if k not in WHEN_AND_WHERE},
        "lm-eval config": {k: v for k, v in config.items() if k not in PLACING},
        "model_args": {k: str(v) for k, v in sorted(args.items()) if k not in IGNORED},
        "tasks": sorted(run.tasks),
        "configs": tasks,
    }


def differences(a: Any, b: Any, where: str = "") -> list[tuple[str, object, object]]:
    """(field, value in a, value in b) for every leaf that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(dict.fromkeys([*a, *b])):
            out += differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
        return out
    return [] if a == b else [(where, a, b)]


@dataclass
class PooledTask(TaskRun):
    """One task of a pooled run: the shards' own ``TaskRun``s (``parts``), their records concatenated in order."""

    parts: list[TaskRun] = field(default_factory=list)

    @property
    def has_records(self) -> bool:
        return True

    def records(self, metric: str | None = None) -> list:
        if self._records is None:
            pooled: dict[str, list] = {}
            for part in self.parts:
                part.records()  # reads the shard's file and checks its count against its results JSON
                for name, values in (part._records or {}).items():
                    pooled.setdefault(name, []).extend(values)
            self._records = pooled
        return self._records.get(metric or next(iter(self._records), ""), [])

    def forget(self) -> None:
        """Drop the records read so far (read again when asked)."""
        self._records = None
        for part in self.parts:
            part._records = None


def pool(runs: list[ModelRun]) -> list[ModelRun]:
    """``runs`` with the shards of each run pooled into one ``ModelRun`` (its ``shards``: their folders), in the
    place of its first shard; misfits refused (module docstring)."""
    candidates = [r for r in runs if relations_of(r) is not None]
    clusters: list[list[ModelRun]] = []
    keys: list[str] = []
    for run in candidates:
        key = json.dumps(signature(run), sort_keys=True, default=str)
        if key in keys:
            clusters[keys.index(key)].append(run)
        else:
            keys.append(key)
            clusters.append([run])
    blocks: list[list[ModelRun]] = []  # the runs each pooled run is made of (one run: nothing to pool)
    for cluster in clusters:
        sets = [relations_by_task(r) or {} for r in cluster]
        if all(s == sets[0] for s in sets):
            blocks += [[r] for r in cluster]
            continue
        for i, a in enumerate(cluster):
            for b, other in zip(cluster[i + 1 :], sets[i + 1 :]):
                # per task: a relation may be in one shard for one task and in another for another task
                common = set().union(*(sets[i][t] & other[t] for t in sets[i] if t in other))
                if common:
                    raise ShardError(
                        f"{_where(a)} and {_where(b)} are runs of one setting on overlapping relations "
                        f"({', '.join(sorted(common))}), so they are neither shards of one run (pooled, the facts of "
                        "those relations would count twice) nor runs to compare (they evaluate different facts). "
                        "Shards take disjoint blocks of relations (docs/scale.md); give --no-pool to report each "
                        "folder as its own run."
                    )
        blocks.append(cluster)
    _refuse_misfits(blocks)
    pooled = {id(b[0]): _pooled(b) for b in blocks if len(b) > 1}
    if not pooled:
        return runs
    members = {id(r) for b in blocks if len(b) > 1 for r in b}
    out = [pooled.get(id(r), r) for r in runs if id(r) in pooled or id(r) not in members]
    for run in out:  # named again among the runs that remain (the shards' names told the shards apart)
        run.name = short_name(run.model_name, run.folder if not run.shards else run.shards[0])
    make_names_unique(out)
    return out


def _refuse_misfits(blocks: list[list[ModelRun]]) -> None:
    """Two groups of runs on disjoint relations that differ in their signature: a shard of another setting."""
    unions = [set().union(*(relations_of(r) or () for r in b)) for b in blocks]
    for i, a in enumerate(blocks):
        for b, relations in zip(blocks[i + 1 :], unions[i + 1 :]):
            if unions[i] & relations:
                continue
            diff = differences(signature(a[0]), signature(b[0]))
            shown = "; ".join(f"{f}: {_short(x)} in the first, {_short(y)} in the second" for f, x, y in diff[:4])
            raise ShardError(
                f"{_folders(a)} and {_folders(b)} look like shards of one run (the same kind of run on disjoint "
                f"relations: {', '.join(sorted(unions[i]))} and {', '.join(sorted(relations))}) but differ: {shown}"
                f"{'; ...' if len(diff) > 4 else ''}. Pooled, their records would mix two settings; side by side, "
                "they would compare different facts. Shards must come from one command that differs only in the "
                "relations knob (and confidence_prompts; docs/scale.md); give --no-pool to report each folder as its "
                "own run."
            )


def _pooled(shards: list[ModelRun]) -> ModelRun:
    for run in shards:
        if run.limit is not None:
            raise ShardError(
                f"{_where(run)} ran with --limit {run.limit:g}, so it scored only part of its relations' "
                "documents and its records do not pool into a run: run the shard again without --limit, "
                "or give --no-pool to report each folder as its own run."
            )
        for name, task in sorted(run.tasks.items()):
            if not task.family:
                raise ShardError(
                    f"{_where(run)}: task {name} is not one of ours, so the relations knob does not split "
                    "it and every shard holds all of it: run it once, apart from the shards, or give "
                    "--no-pool to report each folder as its own run."
                )
            if not task.has_records:
                raise ShardError(
                    f"{_where(run)}: task {name} has {task.samples_missing}, and pooling recomputes every "
                    "number from the shards' records: run the shard with --log_samples and keep its "
                    "samples files beside its results JSON."
                )
    shards = in_shard_order(shards)
    first = shards[0]
    tasks: dict[str, TaskRun] = {name: _pooled_task([run.tasks[name] for run in shards]) for name in first.tasks}
    folders = [run.folder for run in shards]
    return ModelRun(
        name="",
        model_name=first.model_name,
        folder=Path(os.path.commonpath(folders)),
        tasks=tasks,
        groups={},
        info=dict(first.info),
        shards=folders,
    )


def in_shard_order(shards: list[ModelRun]) -> list[ModelRun]:
    """Runs of the ``shard`` knob in block order (their records then follow the unsharded run's), every block K of
    their N present; other runs as given."""
    index = [shard_index(run) for run in shards]
    if not all(index):
        return shards
    found = sorted(((i, run) for i, run in zip(index, shards) if i), key=lambda pair: pair[0])
    counts = {n for (_, n), _ in found}
    missing = sorted(set(range(1, max(counts) + 1)) - {k for (k, _), _ in found})
    if len(counts) > 1 or missing:
        blocks = f"block{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {max(counts)}"
        what = f"{blocks} {'are' if len(missing) > 1 else 'is'} missing" if missing else "they mix two cuts"
        raise ShardError(
            f"{_folders(shards)} are shards of one command given the shard knob, but {what} "
            f"({', '.join(f'{k}/{n}' for (k, n), _ in found)} here): pooled, they would not be the whole run. Pool "
            "every shard K/N of one N (belief-eval --shard_by_relation N runs them all), or give --no-pool to report "
            "each folder as its own run."
        )
    return [run for _, run in found]


def _pooled_task(parts: list[TaskRun]) -> PooledTask:
    first = parts[0]
    config = json.loads(json.dumps(first.config, default=str))
    meta = config.setdefault("metadata", {})
    if "shard_relations" in meta:  # the shard knob: the unsharded command's metadata (its own relations knob kept)
        meta.pop("shard_relations")
        meta.pop("shard", None)
    else:
        meta["relations"] = ",".join(
            dict.fromkeys(
                r.strip()
                for p in parts
                for r in str((p.config.get("metadata") or {}).get("relations", "")).split(",")
                if r.strip()
            )
        )
    designs: list[Any] = [(p.config.get("metadata") or {}).get("budget_design") for p in parts]
    if all(designs):
        meta["budget_design"] = {
            "budget": designs[0]["budget"],
            "seed": designs[0]["seed"],
            "facts_drawn": sum(d["facts_drawn"] for d in designs),
            "facts_in_population": sum(d["facts_in_population"] for d in designs),
            "relations": {r: v for d in designs for r, v in d["relations"].items()},
        }
    cuts = [c for p in parts if isinstance(c := (p.config.get("metadata") or {}).get("truncation"), dict)]
    if cuts:
        meta["truncation"] = _pooled_truncation(cuts)
    n = lambda key: sum(int(p.n_samples.get(key) or 0) for p in parts)  # noqa: E731
    # the metric names in the results JSON's order, without values: a pooled run has no results JSON of its own
    results = {k: (None if "," in k else v) for k, v in first.results.items()}
    return PooledTask(
        name=first.name,
        results=results,
        config=config,
        n_samples={"original": n("original"), "effective": n("effective")},
        samples_path=first.samples_path,
        date_id=max(p.date_id for p in parts),
        parts=parts,
    )


def _pooled_truncation(cuts: list[dict]) -> dict:
    """The shards' truncation records as one run's: counts added up, extremes over the shards."""
    out = dict(cuts[0])
    for key in ("requests", "truncated_requests", "total_tokens_cut"):
        if all(isinstance(c.get(key), int) for c in cuts):
            out[key] = sum(c[key] for c in cuts)
    for key in ("longest_request_tokens", "max_tokens_cut"):
        if all(isinstance(c.get(key), int) for c in cuts):
            out[key] = max(c[key] for c in cuts)
    return out


def checks(runs: list[ModelRun]) -> list[tuple[str, bool]]:
    """Each shard's numbers recomputed from its own records against its own results JSON: (what, equal?). A pooled
    run's numbers have no results JSON of their own; these checks say its records are the ones its shards scored."""
    out = []
    for run in runs:
        for name, task in sorted(run.tasks.items()):
            for part, folder in zip(getattr(task, "parts", ()), run.shards):
                for metric, number in recompute(part).items():
                    if number.matches is not None:
                        out.append((f"{_where_path(folder)}:{name}/{metric}", bool(number.matches)))
    return out


def note(run: ModelRun) -> str:
    """What a pooled run is made of ("" for a run of one folder)."""
    if not run.shards:
        return ""
    return (
        f"pooled from {len(run.shards)} shards ({', '.join(_where_path(f) for f in run.shards)}): every number is "
        "recomputed from their records together"
    )


def _where(run: ModelRun) -> str:
    return _where_path(run.folder)


def _where_path(folder: Path) -> str:
    return home_relative(str(folder))


def _folders(block: list[ModelRun]) -> str:
    return " + ".join(_where(r) for r in block)


def _short(value) -> str:
    if value is None:
        return "absent"
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
