"""Two lm-eval output folders of the same command, compared: the results JSON key by key, the samples files record
by record (what "numbers kept" means for a refactor).

    python scripts/compare_runs.py BEFORE_OUTPUT_DIR AFTER_OUTPUT_DIR

Run-dependent keys (dates, hashes, environment) are left out. Lines of the results JSON's ``configs`` that hold a
callable's text (its source, or ``<function f at 0x...>``) are listed apart: they change with the code's text or
the process, not with the numbers. Exits 1 when a number or a sample record differs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

SKIP = {
    "date",
    "start_time",
    "end_time",
    "total_evaluation_time_seconds",
    "pretty_env_info",
    "git_hash",
    "transformers_version",
    "lm_eval_version",
    "upper_git_hash",
    "model_source",
    "system_instruction_sha",
    "chat_template_sha",
    "task_hashes",
    "config",
}


def flat(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flat(v, f"{prefix}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from flat(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def code_text(key: str) -> bool:
    """A ``configs`` entry holding a callable's text rather than a setting."""
    if not key.startswith("configs/"):
        return False
    last = key.rsplit("/", 1)[-1]
    return last in ("aggregation", "custom_dataset") or last.startswith("doc_to_") or "/fewshot_config/" in key


def main(before: str, after: str) -> int:
    a_json = json.loads(next(Path(before).rglob("results_*.json")).read_text())
    b_json = json.loads(next(Path(after).rglob("results_*.json")).read_text())
    numbers, code, checked = [], [], 0
    for top in sorted((set(a_json) | set(b_json)) - SKIP):
        a, b = dict(flat(a_json.get(top))), dict(flat(b_json.get(top)))
        for key in sorted(set(a) | set(b)):
            checked += 1
            if not same(a.get(key, "<missing>"), b.get(key, "<missing>")):
                (code if code_text(top + key) else numbers).append((top + key, a.get(key), b.get(key)))
    print(f"results JSON: {checked} keys compared; {len(numbers)} differ; {len(code)} configs entries hold code text")
    for key, x, y in numbers[:20]:
        print(f"  {key}: {str(x)[:80]!r} -> {str(y)[:80]!r}")
    bad = 0
    for path in sorted(Path(before).rglob("samples_*.jsonl")):
        name = path.name.rsplit("_", 1)[0]
        other = next(Path(after).rglob(f"{name}_*.jsonl"), None)
        xs = [json.loads(line) for line in path.open()]
        ys = [json.loads(line) for line in other.open()] if other else []
        differ = [i for i, (x, y) in enumerate(zip(xs, ys)) if x != y]
        differ += list(range(min(len(xs), len(ys)), max(len(xs), len(ys))))
        bad += len(differ)
        first = f" (first: {differ[:3]})" if differ else ""
        print(f"{name}: {len(xs)} and {len(ys)} records, {len(differ)} differ{first}")
    return 1 if numbers or bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
