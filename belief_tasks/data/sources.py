"""Choosing where a dataset is read from, and the one error when it cannot be.

Resolution order, the harness way (``--metadata`` first, then the environment):

1. ``source: sample`` in ``--metadata`` (or ``BELIEF_SOURCE=sample``): the bundled
   offline sample, for every family.
2. ``<dataset>_path`` in ``--metadata`` (or ``BELIEF_<DATASET>_PATH``): a local copy.
3. The public default: the Hugging Face hub id at ``<dataset>_revision`` (a commit, tag or
   branch; recorded in the results JSON), or for FKTC the pinned GitHub commit.

``source: sample`` together with a ``<dataset>_path`` is refused (one of them would be
ignored). When the public default cannot be reached the run stops with ``DataSourceError``
saying exactly which key or variable points at a local copy. There is no silent fallback
to other data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from belief_tasks.options import Knob, KnobError


class DataSourceError(RuntimeError):
    """A dataset could not be found where the run asked for it; ``task``: the task being built when it was raised
    (set by ``tasks.base.BeliefTask``: "" outside one)."""

    task: str = ""


@dataclass(frozen=True)
class DatasetInfo:
    key: str  # our short name: "bear", "fktc", ...
    title: str
    public: str  # hub id or GitHub repository
    config: str | None = None
    layout: str = ""  # what a local copy looks like, for the error message

    @property
    def metadata_key(self) -> str:
        return f"{self.key}_path"

    @property
    def env_var(self) -> str:
        return f"BELIEF_{self.key.upper()}_PATH"

    @property
    def revision_key(self) -> str:
        return f"{self.key}_revision"


DATASETS: dict[str, DatasetInfo] = {
    "myriadlama": DatasetInfo(
        "myriadlama",
        "MyriadLAMA",
        "iszhaoxin/MyriadLAMA",
        layout="a folder saved with datasets.save_to_disk, or .parquet/.jsonl/.csv files in the hub's column layout",
    ),
    "bear": DatasetInfo(
        "bear",
        "BEAR",
        "lm-pub-quiz/BEAR",
        config="BEAR",
        layout="the lm-pub-quiz layout: metadata_relations.json and P*.jsonl (relation_info.json beside or above)",
    ),
    "bear_big": DatasetInfo(
        "bear_big",
        "BEAR-big",
        "lm-pub-quiz/BEAR",
        config="BEAR_big",
        layout="the lm-pub-quiz layout: metadata_relations.json and P*.jsonl",
    ),
    "fktc": DatasetInfo(
        "fktc",
        "FKTC",
        "github.com/Vicky-Wil/MONITOR",
        layout="the FKTC/ folder of Vicky-Wil/MONITOR (P*-subclass.json files)",
    ),
    "trex_mc": DatasetInfo(
        "trex_mc",
        "T-REx-MC",
        "QinyuanWu/T-Rex-MC",
        layout="a folder saved with datasets.save_to_disk, or train/test .parquet/.jsonl/.csv files in the hub's "
        "column layout",
    ),
}


def key_is_hub(dataset: str) -> bool:
    """Whether the public copy of ``dataset`` is on the Hugging Face hub (FKTC is a pinned GitHub commit)."""
    return dataset != "fktc"


#: the data-source knobs every task accepts (``--metadata``; environment variables as in the table)
SOURCE_KNOBS: tuple[Knob, ...] = (
    Knob(
        "source",
        "str",
        None,
        "'sample': the bundled offline sample for every family (BELIEF_SOURCE)",
        choices=("sample",),
    ),
    *(
        Knob(info.metadata_key, "str", None, f"a local copy of {info.title} ({info.env_var})")
        for info in DATASETS.values()
    ),
    *(
        Knob(
            info.revision_key,
            "str",
            None,
            f"the hub revision of {info.title} (commit, tag or branch; default: the newest)",
        )
        for info in DATASETS.values()
        if key_is_hub(info.key)
    ),
)


@dataclass(frozen=True)
class Source:
    kind: str  # "sample" | "local" | "public"
    dataset: str
    location: str | None = None  # local path or public id
    revision: str | None = None  # hub revision (public hub sources only)

    @property
    def cache_key(self) -> tuple:
        return (self.kind, self.dataset, self.location, self.revision)

    @property
    def where(self) -> str:
        """The location of a local or public source (the bundled sample has none)."""
        if self.location is None:
            raise ValueError(f"the {self.kind} source of {self.dataset} has no location")
        return self.location


def _get(metadata: Mapping[str, Any] | None, key: str, env: str) -> str | None:
    value = (metadata or {}).get(key)
    if value in (None, ""):
        value = os.environ.get(env)
    return None if value in (None, "") else str(value)


def resolve_source(dataset: str, metadata: Mapping[str, Any] | None = None) -> Source:
    """Where ``dataset`` comes from for this run (see the module docstring)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {sorted(DATASETS)}")
    info = DATASETS[dataset]
    if (_get(metadata, "source", "BELIEF_SOURCE") or "").lower() == "sample":
        paths = [i.metadata_key for i in DATASETS.values() if (metadata or {}).get(i.metadata_key) not in (None, "")]
        if paths:
            raise KnobError(
                "source",
                f"'sample' reads the bundled sample, so {', '.join(paths)} would be ignored: give one source, not both",
            )
        return Source("sample", dataset)
    local = _get(metadata, info.metadata_key, info.env_var)
    if local:
        path = Path(local).expanduser()
        if not path.exists():
            raise DataSourceError(
                f"{info.title}: local copy {str(path)!r} (from {info.metadata_key} / {info.env_var}) does not exist."
            )
        return Source("local", dataset, str(path))
    revision = (metadata or {}).get(info.revision_key) if key_is_hub(dataset) else None
    return Source("public", dataset, info.public, str(revision) if revision not in (None, "") else None)


def how_to_point_at_local(dataset: str) -> str:
    info = DATASETS[dataset]
    return (
        f'Point at a local copy with --metadata \'{{"{info.metadata_key}": "/path/to/copy"}}\' '
        f"or the environment variable {info.env_var}=/path/to/copy ({info.layout}), "
        f'or run on the bundled offline sample with --metadata \'{{"source": "sample"}}\' (BELIEF_SOURCE=sample).'
    )


def unreachable(dataset: str, cause: BaseException | str) -> DataSourceError:
    """The error raised when the public copy cannot be loaded."""
    info = DATASETS[dataset]
    return DataSourceError(
        f"{info.title}: could not load the public copy {info.public}"
        + (f" (config {info.config})" if info.config else "")
        + f": {cause}. {how_to_point_at_local(dataset)}"
    )


def hub_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def inside(root: Path, relative: str, *, file: str, row, field: str) -> Path:
    """``root / relative``, refusing paths that escape ``root`` (configs may not point elsewhere)."""
    from belief_tasks.facts.schema import SchemaError

    root = root.resolve()
    path = (root / relative).resolve()
    if root != path and root not in path.parents:
        raise SchemaError(f"path {relative!r} leaves the data folder {str(root)!r}", file=file, row=row, field=field)
    return path
