"""The bundled sample's BELIEF facts as a local MyriadLAMA copy, in the hub's column layout.

MyriadLAMA is published only on the Hugging Face hub. Where the hub cannot be reached, the profile
(`belief_profile`) still needs its BELIEF-ICL tasks to read "MyriadLAMA" beside the real BEAR, BEAR-big
and FKTC files (`source: sample` would switch every family to the sample). This writes the sample's
facts in MyriadLAMA's layout (docs/data.md): one row per subject-relation pair and template, columns
``uuid``, ``rel_uri``, ``sub_ent`` (the pair's subject expressions, label first), ``obj_uris``,
``obj_ents``, ``obj_aliases`` (one list per object), ``template``, ``is_manual``; then

    BELIEF_MYRIADLAMA_PATH=DIR belief-eval --tasks belief_profile ...

reads it as a local copy. With the hub, leave ``myriadlama_path`` out (``myriadlama_revision`` pins a commit).

    python scripts/sample_as_myriadlama.py DIR
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's belief_tasks, as other scripts do

#: the file it writes in DIR (the loader reads every .jsonl file of a folder)
FILE = "train.jsonl"


def rows() -> list[dict]:
    """The sample's BELIEF facts as MyriadLAMA rows (fact ids become uuids derived from them)."""
    from belief_tasks.data import load_facts

    fs = load_facts("myriadlama", {"source": "sample"})
    out = []
    for fact in fs.facts:
        pair = str(uuid.uuid5(uuid.NAMESPACE_URL, f"belief-tasks-sample/{fact.id}"))
        for template in fs.relations[fact.relation].templates:
            out.append(
                {
                    "uuid": pair,
                    "rel_uri": fact.relation,
                    "sub_ent": list(fact.subject.expressions),
                    "obj_uris": [o.id or "" for o in fact.objects] if all(o.id for o in fact.objects) else [],
                    "obj_ents": [o.label for o in fact.objects],
                    "obj_aliases": [list(o.aliases) for o in fact.objects],
                    "template": template.text,
                    "is_manual": template.manual,
                }
            )
    return out


def write(folder: Path) -> Path:
    """Write the copy into ``folder`` (created); returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE
    with path.open("w", encoding="utf-8") as fh:
        for row in rows():
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    path = write(Path(args[0]))
    print(f"{path}: {sum(1 for _ in path.open(encoding='utf-8'))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
