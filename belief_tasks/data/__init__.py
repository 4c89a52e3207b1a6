"""Loaders: every source into the one fact schema, lazily, cached per process.

``load_facts(dataset, metadata)`` is the only entry point tasks use; which copy it
reads is decided by ``belief_tasks.data.sources.resolve_source``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from belief_tasks.data.sources import DATASETS, Source, hub_offline, resolve_source, unreachable
from belief_tasks.facts.schema import FactSet


@lru_cache(maxsize=16)
def _load(kind: str, dataset: str, location: str | None, revision: str | None) -> FactSet:
    source = Source(kind, dataset, location, revision)
    if kind == "sample":
        from belief_tasks.data.bundled import load_sample

        return load_sample()
    if dataset in ("bear", "bear_big"):
        from belief_tasks.data.bear import find_layout, load_bear_folder

        if kind == "local":
            return load_bear_folder(source.where, dataset)
        layout = DATASETS[dataset].config or ""
        return load_bear_folder(find_layout(_hub_snapshot(dataset, revision), layout), dataset)
    if dataset == "fktc":
        from belief_tasks.data import fktc

        if kind == "local":
            return fktc.load_fktc_folder(source.where)
        try:
            folder = fktc.download()
        except OSError as e:
            raise unreachable("fktc", f"{type(e).__name__}: {e}") from e
        return fktc.load_fktc_folder(folder)
    if dataset == "myriadlama":
        from belief_tasks.data.myriadlama import load_myriadlama

        return load_myriadlama(source)
    if dataset == "trex_mc":
        from belief_tasks.data.trex_mc import load_trex_mc

        return load_trex_mc(source)
    raise ValueError(dataset)


def _hub_snapshot(dataset: str, revision: str | None) -> Path:
    info = DATASETS[dataset]
    if hub_offline():
        raise unreachable(dataset, "the hub is switched off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(info.public, repo_type="dataset", revision=revision))
    except Exception as e:
        raise unreachable(dataset, f"{type(e).__name__}: {e}") from e


def load_facts(dataset: str, metadata: Mapping[str, Any] | None = None) -> FactSet:
    """The facts of ``dataset`` ("myriadlama", "bear", "bear_big", "fktc", "trex_mc") for this run."""
    return _load(*resolve_source(dataset, metadata).cache_key)
