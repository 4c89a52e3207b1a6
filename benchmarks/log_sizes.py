"""Facts, documents, requests and bytes of a run's samples files, per task: the columns of docs/scale.md's table of
whole-dataset runs, read from what the run wrote (without parsing each line whole: BELIEF's files run to gigabytes).

    python -m benchmarks log_sizes OUTPUT_PATH [--json FILE]

A document's requests are its ``arguments`` (lm-eval writes one ``gen_args_<i>`` per request of the document, each
of BELIEF's sampled answers its own); its fact is the first ``fact_id`` of its line (the document's own).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

_FACT = re.compile(r'"fact_id": "([^"]*)"')
_TASK = re.compile(r"^samples_(.+)_\d{4}-\d{2}-\d{2}T[\d.-]+\.jsonl$")


def count(path: Path) -> dict:
    facts: set[str] = set()
    documents = requests = 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            documents += 1
            head = line.split('"arguments": ', 1)
            requests += head[1].split('"resps": ', 1)[0].count('"gen_args_') if len(head) == 2 else 0
            found = _FACT.search(head[0])
            if found:
                facts.add(found.group(1))
    return {"facts": len(facts), "documents": documents, "requests": requests, "bytes": path.stat().st_size}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output_path")
    ap.add_argument("--json", help="also write the counts here")
    args = ap.parse_args(argv)
    found = {}
    for path in sorted(Path(args.output_path).rglob("samples_*.jsonl")):
        m = _TASK.match(path.name)
        found[m.group(1) if m else path.name] = count(path)
    total = {k: sum(v[k] for v in found.values()) for k in ("facts", "documents", "requests", "bytes")}
    for task, c in [*found.items(), ("all", total)]:
        sizes = f"{c['facts']:>9,} facts {c['documents']:>9,} docs {c['requests']:>11,} requests"
        print(f"{task:<32} {sizes} {c['bytes'] / 1e9:7.2f} GB")
    if args.json:
        Path(args.json).write_text(json.dumps({"tasks": found, "all": total}, indent=1))


if __name__ == "__main__":
    main()
