"""FKTC, the corpus of MONITOR (Vicky-Wil/MONITOR, folder ``FKTC/``).

Each ``P*-subclass.json`` file is JSON Lines despite its name: line 1 is
``{"relations": [QA prompts with [X]]}`` (7, or 6 for P264 and P276), every later
line ``{"subject", "object", "taxonomy": [5 same-type negative entities]}``.
Upstream names one file ``P276-subclass..json`` (two dots); we keep that name.

The prompts become the relation's ``frames`` (question templates, the first is the
base question used for the positive and negative contexts).
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path

from belief_tasks.data.io import Repeats, check_size, load_relation_files, parse_list, read_jsonl, require
from belief_tasks.facts.schema import (
    Entity,
    Fact,
    FactSet,
    Relation,
    SchemaError,
    Template,
    check_label,
    check_template_text,
)
from belief_tasks.paths import cache_dir

REPO = "Vicky-Wil/MONITOR"
COMMIT = "654674a409ce2120eafe0b54f9886806e0a6ecf6"  # 2024-05-16
RELATION_IDS = (
    "P101",
    "P103",
    "P108",
    "P127",
    "P1376",
    "P1412",
    "P159",
    "P17",
    "P176",
    "P178",
    "P19",
    "P20",
    "P264",
    "P27",
    "P276",
    "P30",
    "P364",
    "P37",
    "P495",
    "P740",
)
RELATION_NAMES = {
    "P101": "field of work",
    "P103": "native language",
    "P108": "employer",
    "P127": "owned by",
    "P1376": "capital of",
    "P1412": "languages spoken, written or signed",
    "P159": "headquarters location",
    "P17": "country",
    "P176": "manufacturer",
    "P178": "developer",
    "P19": "place of birth",
    "P20": "place of death",
    "P264": "record label",
    "P27": "country of citizenship",
    "P276": "location",
    "P30": "continent",
    "P364": "original language of film or TV show",
    "P37": "official language",
    "P495": "country of origin",
    "P740": "location of formation",
}
#: FKTC's documented shape: 5 negatives per fact, 7 question prompts (6 for P264 and P276)
NEGATIVES = 5
MAX_PROMPTS = 7
_FILE = re.compile(r"^(P\d+)-subclass\.+json$")


def file_name(rid: str) -> str:
    return f"{rid}-subclass..json" if rid == "P276" else f"{rid}-subclass.json"


def load_relation_file(path: Path) -> tuple[Relation, list[Fact]]:
    file = str(path)
    m = _FILE.match(path.name)
    if not m:
        raise SchemaError("not an FKTC relation file name (P<id>-subclass.json)", file=file)
    rid = m.group(1)
    rows = read_jsonl(path)
    try:
        lineno, header = next(rows)
    except StopIteration:
        raise SchemaError("empty file", file=file) from None
    prompts = parse_list(
        require(header, "relations", file=file, lineno=lineno), file=file, row=lineno, field="relations"
    )
    if len(prompts) > MAX_PROMPTS:
        raise SchemaError(
            f"{len(prompts):,} prompts, but FKTC's documented shape has at most {MAX_PROMPTS} (6 for P264 and P276)",
            file=file,
            row=lineno,
            field="relations",
        )
    frames = []
    for i, p in enumerate(prompts):
        check_template_text(p, file=file, row=lineno, field=f"relations[{i}]", need_object=False)
        frames.append(Template(f"{rid}_f{i}", f"{p} [Y]", "question", True))
    facts = []
    # A subject-object pair may repeat with other negatives: the published copy has 12 such repeats in 4
    # files, each its own fact with its own negative contexts (docs/data.md). A row that repeats one
    # in subject, object and negatives is refused: it would be scored twice.
    repeats = Repeats(file, "taxonomy", "the same subject, object and negatives")
    for lineno, row in rows:
        sub = check_label(require(row, "subject", file=file, lineno=lineno), file=file, row=lineno, field="subject")
        obj = check_label(require(row, "object", file=file, lineno=lineno), file=file, row=lineno, field="object")
        negs = parse_list(require(row, "taxonomy", file=file, lineno=lineno), file=file, row=lineno, field="taxonomy")
        check_size(negs, NEGATIVES, file=file, row=lineno, field="taxonomy", what="negatives")
        if len({n.strip().casefold() for n in negs}) != len(negs):
            raise SchemaError(f"a negative entity appears twice in {negs}", file=file, row=lineno, field="taxonomy")
        repeats.check((sub, obj, frozenset(negs)), lineno, f"{sub!r} -> {obj!r}")
        for n in negs:
            if n.strip().casefold() == obj.casefold():
                raise SchemaError(f"negative entity {n!r} equals the object", file=file, row=lineno, field="taxonomy")
        facts.append(
            Fact(f"{rid}_{lineno}", rid, Entity(sub), (Entity(obj),), tuple(Entity(n) for n in negs), split="test")
        )
    if not facts:
        raise SchemaError("no facts after the prompt line", file=file)
    space = tuple({f.object.label: f.object for f in facts}.values())
    rel = Relation(
        rid, RELATION_NAMES.get(rid, rid), "N:1", templates=tuple(frames), frames=tuple(frames), answer_space=space
    )
    return rel, facts


def load_fktc_folder(folder: str | Path, source: str = "fktc") -> FactSet:
    folder = Path(folder)
    if (folder / "FKTC").is_dir():
        folder = folder / "FKTC"
    files = sorted(p for p in folder.glob("P*-subclass*.json") if _FILE.match(p.name))
    if not files:
        raise SchemaError("no FKTC files (P<id>-subclass.json)", file=str(folder))
    return load_relation_files(files, load_relation_file, source)


#: SHA-256 of each FKTC file at ``COMMIT`` (checked at download and before a cached copy is reused)
SHA256_FILE = Path(__file__).with_name("fktc_sha256.json")


def expected_sha256() -> dict[str, str]:
    import json

    return json.loads(SHA256_FILE.read_text())


def check_sha256(path: Path, expected: str) -> None:
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise SchemaError(
            f"SHA-256 {digest} is not FKTC's at commit {COMMIT} ({expected}): the copy is corrupt or "
            "from another version; delete it to download it again",
            file=str(path),
        )


def download(commit: str = COMMIT) -> Path:
    """Fetch the 20 FKTC files at ``commit`` once into the cache, each checked against its SHA-256."""
    sums = expected_sha256() if commit == COMMIT else {}
    target = cache_dir() / "fktc" / commit
    target.mkdir(parents=True, exist_ok=True)
    for rid in RELATION_IDS:
        name = file_name(rid)
        dest = target / name
        if not dest.is_file():
            url = f"https://raw.githubusercontent.com/{REPO}/{commit}/FKTC/{urllib.parse.quote(name)}"
            tmp = dest.with_suffix(".part")
            with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 - fixed https URL
                tmp.write_bytes(r.read())
            if name in sums:
                check_sha256(tmp, sums[name])
            tmp.replace(dest)  # never leave a half-written or unverified file under the final name
        elif name in sums:
            check_sha256(dest, sums[name])
    return target
