"""Whose answers a ``--use_cache`` file holds: the model, the backend and the settings that change numbers.

lm-eval keys its request cache (``<prefix>_rank<r>.db``, sqlite) by the request alone: pointed at a
cache that another model filled, it answers every request from it and files model A's numbers under
model B. ``belief-eval`` therefore keeps an identity beside the cache, ``<prefix>.identity.json``,
written the first time the prefix is used, and refuses a run of another identity before the model loads
(docs/scale.md, "Resuming a run").

The identity: the backend (``--model``), every ``--model_args`` key except those that only place or batch
the work (``IGNORED``), and for each argument naming a local file or folder (a model, a tokenizer, an
adapter) a fingerprint of it: its ``config.json`` / tokenizer files hashed, its weight files' sizes and
modification times (cheap: nothing large is read). A hub name is identified by name and revision
(``main`` when none is given) and, where the hub cache holds it, the commit that revision points to. A server
(``base_url``) is identified by the model it reports serving (``served_model``: its ``/v1/models`` card, vLLM's
``root`` and ``max_model_len``), not by its address, so a server back on another port finds its answers; one that
reports no ``root``, or does not answer, keeps ``base_url`` in the identity.

``belief-eval`` keeps a cache by default (``with_answer_cache``): with an ``--output_path`` and no ``--use_cache`` of
the command's own, every answer goes to ``<output>/cache/<model>-<hash>``, the hash of the run's identity and of
the code that computes answers (``software``: lm-eval, torch, transformers, vLLM and belief-tasks' own modules), so
the same command run again resumes, and a run of another model, setting or code opens another cache: a stale answer
is never read. ``--no_answer_cache`` turns it off.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

#: model arguments that do not change the numbers (where and in what batches the work runs)
IGNORED = frozenset(
    {
        "batch_size",
        "max_batch_size",
        "device",
        "device_map",
        "parallelize",
        "max_memory_per_gpu",
        "max_cpu_memory",
        "offload_folder",
        "trust_remote_code",
        "cache_dir",
        "num_concurrent",
        "max_retries",
        "timeout",
        "tokenized_requests",
        "verify_certificate",
        "auth_token",  # a secret, and no part of the answers
    }
)
#: small files of a model folder that are hashed (config, tokenizer, generation settings)
HASHED = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "adapter_config.json",
)
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf", "*.pth", "*.msgpack")
SUFFIX = ".identity.json"
#: ``belief-eval``'s opt-out of the default cache (removed from the command before lm-eval parses it)
NO_ANSWER_CACHE = "--no_answer_cache"
#: the folder of the default cache, inside the output path
CACHE_FOLDER = "cache"
#: the packages whose code computes a model's answers (versions recorded in a default cache's identity)
SOFTWARE = ("lm_eval", "torch", "transformers", "vllm")


class CacheIdentityError(ValueError):
    """A request cache filled under another identity."""


def parse_model_args(values: Iterable[str]) -> dict[str, Any]:
    """``--model_args`` as lm-eval reads them: JSON objects or ``k=v,k2=v2`` strings, later ones merged in."""
    out: dict[str, Any] = {}
    for value in values:
        value = value.strip()
        if value.startswith("{"):
            try:
                out.update(json.loads(value))
            except json.JSONDecodeError:
                continue  # refused with its own message by command_checks.check_json_arguments
        else:
            for part in filter(None, (p.strip() for p in value.split(","))):
                key, _, val = part.partition("=")
                out[key.strip()] = val.strip()
    return out


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def fingerprint(path: Path) -> dict[str, Any]:
    """A local model file or folder: hashes of its small files, sizes and times of its weights."""
    if path.is_file():
        st = path.stat()
        return {"file": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    found: dict[str, Any] = {}
    for name in HASHED:
        if (path / name).is_file():
            found[name] = _file_hash(path / name)
    for pattern in WEIGHTS:
        for w in sorted(path.glob(pattern)):
            st = w.stat()
            found[w.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return found


def _hub_commit(name: str, revision: str) -> str | None:
    """The commit ``revision`` of hub model ``name`` points to in the local hub cache (None if not there)."""
    root = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    ref = root / f"models--{name.replace('/', '--')}" / "refs" / revision
    try:
        return ref.read_text().strip() or None
    except OSError:
        return None


def software() -> dict[str, str]:
    """The code that computes answers: the versions of ``SOFTWARE`` installed, and a hash of belief-tasks' own
    modules (a fix in our backends changes answers without changing a version)."""
    found = {}
    for name in SOFTWARE:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    found["belief_tasks"] = digest.hexdigest()[:16]
    return found


_served: dict[str, dict[str, Any] | None] = {}


def served_model(base_url: str, model: str | None, token: str = "") -> dict[str, Any] | None:
    """What the OpenAI-style server at ``base_url`` says of the model it serves as ``model``: its card in
    ``/v1/models`` (vLLM's: ``id``, ``root``, the path or hub name it loaded, and ``max_model_len``), or None when
    the server does not answer or names no ``root`` (asked once per process)."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    head, v1, _ = parts.path.partition("/v1")
    url = f"{parts.scheme}://{parts.netloc}{head}/v1/models" if v1 else f"{parts.scheme}://{parts.netloc}/v1/models"
    if url not in _served:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                cards = json.loads(answer.read().decode("utf-8")).get("data") or []
        except (OSError, ValueError, AttributeError):
            cards = []
        card = next((c for c in cards if c.get("id") == model), cards[0] if len(cards) == 1 else None)
        _served[url] = (
            {k: card[k] for k in ("id", "root", "max_model_len") if k in card} if card and card.get("root") else None
        )
    return _served[url]


def identity(backend: str | None, model_args: dict[str, Any], with_software: bool = False) -> dict[str, Any]:
    """The identity of a run's answers (module docstring); ``with_software``: the code's too (``software``)."""
    args = {k: str(v) for k, v in sorted(model_args.items()) if k not in IGNORED}
    served = None
    if args.get("base_url"):  # a server: the model it serves, wherever it serves it (a new port is the same model)
        token = str(model_args.get("auth_token") or os.environ.get("OPENAI_API_KEY", ""))
        served = served_model(args["base_url"], args.get("model"), token)
        if served is not None:
            del args["base_url"]
    local = {}
    for key, value in [*args.items(), *([("served_model", served["root"])] if served else [])]:
        if value and (os.sep in value or value.startswith((".", "~"))):
            path = Path(value).expanduser()
            if path.exists():
                local[key] = {"path": str(path.resolve()), **fingerprint(path)}
    ident: dict[str, Any] = {"backend": backend or "hf", "model_args": args}
    if served is not None:
        ident["served_model"] = served
    if local:
        ident["local_files"] = local
    name = args.get("pretrained") or args.get("model")
    if name and "pretrained" not in local and "model" not in local:
        revision = args.get("revision", "main")
        ident["hub"] = {"name": name, "revision": revision, "commit": _hub_commit(name, revision)}
    if with_software:
        ident["software"] = software()
    return ident


def identity_path(prefix: str) -> Path:
    return Path(prefix + SUFFIX)


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Readable differences between two identities ("model_args.dtype: 'float32' here, 'bfloat16' in the cache")."""
    out = []

    def walk(a, b, where):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        elif a != b:
            out.append(f"{where}: {b!r} here, {a!r} in the cache")

    walk(old, new, "")
    return out


def check(prefix: str, backend: str | None, model_args: dict[str, Any]) -> str | None:
    """Refuse ``prefix`` when its recorded identity differs from this run's; record it when there is none.
    Returns a warning to print when an existing cache had no identity (written by plain ``lm_eval``)."""
    path, here = identity_path(prefix), identity(backend, model_args)
    dbs = sorted(Path(prefix).parent.glob(Path(prefix).name + "_rank*.db"))
    if path.is_file():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise CacheIdentityError(
                f"--use_cache {prefix}: its identity file {path} cannot be read ({e}); delete the "
                "cache files (" + ", ".join(str(d) for d in dbs) + f" and {path}) or use another prefix"
            ) from None
        if "software" in recorded:  # a default cache (``with_answer_cache``) named on the command line
            here = identity(backend, model_args, with_software=True)
        diff = differences(recorded, here)
        if diff:
            raise CacheIdentityError(
                f"--use_cache {prefix} holds the answers of another model or setting ({'; '.join(diff[:4])}"
                f"{'; ...' if len(diff) > 4 else ''}), and lm-eval would return them as this model's: give this run "
                f"its own cache prefix (e.g. --use_cache {prefix}-{_short(here)}), or delete "
                f"{', '.join(str(d) for d in dbs) or 'the cache files'} and {path} to start over"
            )
        return None
    warning = None
    if dbs:
        warning = (
            f"belief-eval: --use_cache {prefix} was filled without an identity record (by plain lm_eval or an "
            "older belief-tasks), so whose answers it holds cannot be checked; it is now recorded as this "
            "run's. If another model filled it, stop and use another prefix."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.part")
    tmp.write_text(json.dumps(here, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)  # processes of one launch write the same text; never a half-written file
    return warning


def _short(ident: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]


# --- the default cache of belief-eval ----------------------------------------------------------------------


def _option(args: list[str], *names: str, several: bool = False) -> list[str]:
    """The values of an lm-eval option (``--name v``, ``--name=v``, ``-n v``; ``several``: ``nargs="+"``)."""
    found = []
    for i, arg in enumerate(args):
        if arg in names:
            rest = args[i + 1 :]
            end = next((j for j, a in enumerate(rest) if a.startswith("-")), len(rest))
            found += rest[: end if several else min(1, len(rest))]
        elif any(arg.startswith(n + "=") for n in names if n.startswith("--")):
            found.append(arg.split("=", 1)[1])
    return found


def default_prefix(
    output_path: str, backend: str | None, model_args: dict[str, Any], ident: dict[str, Any] | None = None
) -> str:
    """``<output>/cache/<model>-<backend>-<hash of the identity with software>`` (``<output>``: the folder of an
    output path ending in ``.json``, as lm-eval writes its files beside it); ``ident``: that identity, if known."""
    out = Path(output_path)
    folder = (out.parent if out.suffix == ".json" else out) / CACHE_FOLDER
    ident = ident or identity(backend, model_args, with_software=True)
    name = str(model_args.get("pretrained") or model_args.get("model") or backend or "hf").rstrip("/").split("/")[-1]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"
    return str(folder / f"{name}-{ident['backend']}-{_short(ident)}")


def with_answer_cache(args: list[str]) -> list[str]:
    """``belief-eval``'s command line with its default cache: ``--use_cache <default_prefix>`` added when the command
    has an ``--output_path`` and neither a ``--use_cache`` of its own (which wins) nor ``--no_answer_cache`` (removed
    here: lm-eval does not know it). The identity file is written beside the cache when the process ends and the
    cache exists, so a command refused before the model loads leaves no file behind."""
    if NO_ANSWER_CACHE in args:
        return [a for a in args if a != NO_ANSWER_CACHE]
    outputs = _option(args, "--output_path", "-o")
    if not outputs or _option(args, "--use_cache", "-c"):
        return args
    backend = next(iter(reversed(_option(args, "--model", "-M"))), None)
    model_args = parse_model_args(_option(args, "--model_args", "-a", several=True))
    ident = identity(backend, model_args, with_software=True)
    prefix = default_prefix(outputs[-1], backend, model_args, ident)
    folder = Path(prefix).parent
    existed = [p for p in (folder.parent, folder) if p.exists()]
    atexit.register(_at_exit, prefix, ident, existed)
    return [*args, "--use_cache", prefix]


def answers_held(db: Path) -> int:
    """Answers held by an lm-eval cache file (sqlitedict's table), 0 if it holds none, is absent or cannot be read
    (not created yet, or locked for a moment)."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM unnamed").fetchone()[0]
    except sqlite3.Error:
        return 0


def _at_exit(prefix: str, ident: dict[str, Any], existed: list[Path]) -> None:
    """A run that kept no answer (refused after lm-eval opened the cache with the model, before any scoring)
    leaves no file: its empty cache files go, then the folders this run made; else the identity is recorded."""
    from belief_tasks.hooks.answer_store import flush_all

    flush_all()  # answers still held in memory first (whichever exit handler runs first)
    dbs = list(Path(prefix).parent.glob(Path(prefix).name + "_rank*.db"))
    if dbs and not any(answers_held(db) for db in dbs):
        for db in dbs:
            db.unlink(missing_ok=True)
        for folder in (Path(prefix).parent, Path(prefix).parent.parent):
            if folder not in existed and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        return
    _record_identity(prefix, ident)


def _record_identity(prefix: str, ident: dict[str, Any]) -> None:
    path = identity_path(prefix)
    if path.is_file() or not list(Path(prefix).parent.glob(Path(prefix).name + "_rank*.db")):
        return
    tmp = path.with_name(path.name + f".{os.getpid()}.part")
    tmp.write_text(json.dumps(ident, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
