"""Tabular hub datasets (MyriadLAMA, T-REx-MC): the hub or a local copy in the hub's columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from belief_tasks.data.sources import Source, hub_offline, unreachable
from belief_tasks.facts.schema import SchemaError

_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
#: rows made into Python dicts at a time while a table is read
BATCH_ROWS = 10_000


class Rows:
    """A dataset's rows as dicts, made a batch at a time as they are read: all of MyriadLAMA's 2.46 M rows as dicts
    took 3.4 GiB at once (docs/scale.md), while the Arrow table behind them is a memory-mapped file. ``len`` and
    indexing as a list of the rows."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return int(self.dataset.num_rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return dict(self.dataset[i])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.dataset.iter(batch_size=BATCH_ROWS):
            names = list(batch)
            for values in zip(*batch.values()):
                yield dict(zip(names, values))


def _local_files(path: Path, split: str) -> tuple[str, list[str]]:
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.suffix in _FORMATS and split in p.stem)
        if not files:  # a single-split folder (MyriadLAMA has only "train")
            files = sorted(p for p in path.rglob("*") if p.suffix in _FORMATS)
    if not files:
        raise SchemaError(f"no .parquet/.jsonl/.csv files for split {split!r}", file=str(path))
    formats = {_FORMATS[p.suffix] for p in files}
    if len(formats) > 1:
        raise SchemaError(f"mixed file formats {sorted(formats)}", file=str(path))
    return formats.pop(), [str(p) for p in files]


def load_rows(source: Source, split: str, config: str | None = None) -> tuple[str, Rows]:
    """(a file name for error messages, the rows of ``split``, made as they are read: ``Rows``) from a local copy or
    the hub."""
    import datasets

    if source.kind == "local":
        path = Path(source.where)
        if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise SchemaError(f"no split {split!r} (has {list(ds)})", file=str(path))
                ds = ds[split]
            return str(path), Rows(ds)
        fmt, files = _local_files(path, split)
        try:
            ds = datasets.load_dataset(fmt, data_files=files, split="train")
        except UnicodeDecodeError as e:
            raise SchemaError(f"not UTF-8 text: {e.reason}", file=files[0]) from None
        except Exception as e:  # malformed files: name them
            raise SchemaError(f"could not read {fmt} data: {e}", file=", ".join(files)) from None
        return files[0] if len(files) == 1 else str(path), Rows(ds)
    if hub_offline():
        raise unreachable(source.dataset, "the hub is switched off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)")
    try:
        ds = datasets.load_dataset(source.where, config, split=split, revision=source.revision)
    except Exception as e:  # no network, gated, renamed: all end the same way
        raise unreachable(source.dataset, f"{type(e).__name__}: {e}") from e
    return f"{source.location}:{split}", Rows(ds)


def require_columns(rows: Rows | list[dict], columns: tuple[str, ...], file: str) -> None:
    if not rows:
        raise SchemaError("no rows", file=file)
    for col in columns:
        if col not in rows[0]:
            raise SchemaError(f"missing column (has {sorted(rows[0])})", file=file, row=1, field=col)
