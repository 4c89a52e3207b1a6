"""A good neighbour: a run of ours leaves every other task of the same command exactly as lm-eval runs it.

Three stock-style tasks, written as a user writes them (a local JSON dataset, lm-eval's own task
machinery, no code of ours): a greedy ``generate_until``, a sampled ``generate_until`` with
``repeats``, and a ``multiple_choice``. They run alone under a bare ``lm_eval`` (nothing of ours is
imported), then in one command with one of our tasks, under ``lm_eval`` and under ``belief-eval``;
their per-sample responses and their results must be byte-identical to the run alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import run_cli

pytestmark = pytest.mark.e2e

STOCK = ("neighbour_greedy", "neighbour_sampled", "neighbour_choice")
OURS = "belief_demo_mp_4template"
LIMIT = "2"

DOCS = [
    {"question": "The capital of France is", "answer": "Paris", "choices": ["Paris", "Rome", "Berlin"], "label": 0},
    {
        "question": "The largest planet of the solar system is",
        "answer": "Jupiter",
        "choices": ["Mars", "Jupiter", "Venus"],
        "label": 1,
    },
    {
        "question": "Water freezes at a temperature of",
        "answer": "0",
        "choices": ["100 degrees", "50 degrees", "0 degrees"],
        "label": 2,
    },
    {
        "question": "The author of Hamlet is",
        "answer": "Shakespeare",
        "choices": ["Dickens", "Shakespeare", "Austen"],
        "label": 1,
    },
]

COMMON = """dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
doc_to_text: "Q: {{{{question}}}}\\nA:"
"""

YAMLS = {
    "neighbour_greedy": COMMON
    + """task: neighbour_greedy
output_type: generate_until
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 8
metric_list:
  - metric: exact_match
""",
    "neighbour_sampled": COMMON
    + """task: neighbour_sampled
output_type: generate_until
doc_to_target: answer
repeats: 3
generation_kwargs:
  until: ["\\n"]
  do_sample: true
  temperature: 1.0
  max_gen_toks: 8
filter_list:
  - name: maj
    filter:
      - function: majority_vote
      - function: take_first
metric_list:
  - metric: exact_match
""",
    "neighbour_choice": COMMON
    + """task: neighbour_choice
output_type: multiple_choice
doc_to_target: label
doc_to_choice: choices
metric_list:
  - metric: acc
""",
}


@pytest.fixture(scope="module")
def stock_tasks(tmp_path_factory) -> Path:
    """A folder holding the three stock tasks and their JSON data, as a user writes them."""
    folder = tmp_path_factory.mktemp("neighbours")
    data = folder / "facts.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    tasks = folder / "stock"
    tasks.mkdir()
    for name, text in YAMLS.items():
        (tasks / f"{name}.yaml").write_text(text.format(data=data))
    return tasks


def _run(program: str, tasks: list[str], include: Path, out: Path, model_path: Path) -> dict[str, dict]:
    args = [
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model_path},dtype=float32",
        "--tasks",
        ",".join(tasks),
        "--include_path",
        str(include),
        "--limit",
        LIMIT,
        "--batch_size",
        "1",
        "--log_samples",
        "--output_path",
        str(out),
    ]
    if OURS in tasks:
        args += [
            "--metadata",
            json.dumps({"source": "sample", "relations": "P36", "confidence_samples": 2, "max_facts_per_relation": 1}),
        ]
    done = run_cli(args, program=program, OMP_NUM_THREADS="1")
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    found = {}
    for name in STOCK:
        samples = [json.loads(line) for line in next(out.rglob(f"samples_{name}_*.jsonl")).read_text().splitlines()]
        found[name] = {
            "samples": [
                {
                    k: s[k]
                    for k in ("doc_id", "arguments", "resps", "filtered_resps", "filter", "metrics", *s["metrics"])
                }
                for s in samples
            ],
            "results": results["results"][name],
        }
    if OURS in tasks:
        assert OURS in results["results"], "our task did not run"
    return found


def test_stock_tasks_unchanged_beside_ours(stock_tasks, tiny_model_path, tmp_path):
    model_path = tiny_model_path  # agreement between runs: a tiny random model with the bundled tokenizer serves
    alone = _run("lm_eval", list(STOCK), stock_tasks, tmp_path / "alone", model_path)
    sampled = [s["resps"] for s in alone["neighbour_sampled"]["samples"]]
    assert len(sampled) == int(LIMIT) and all(len(r) == 1 and len(r[0]) == 3 for r in sampled), sampled
    assert len({text for r in sampled for text in r[0]}) > 1, "the sampled task draws different texts"
    # our task folder beside the stock tasks: one --include_path finds both
    both = tmp_path / "both"
    shutil.copytree(stock_tasks, both / "stock")
    from belief_tasks.paths import task_yamls_dir

    shutil.copytree(task_yamls_dir(), both / "ours")
    for program in ("lm_eval", "belief-eval"):
        mixed = _run(program, [OURS, *STOCK], both, tmp_path / program, model_path)
        for name in STOCK:
            assert json.dumps(mixed[name]["samples"]) == json.dumps(alone[name]["samples"]), (program, name)
            assert json.dumps(mixed[name]["results"], sort_keys=True) == json.dumps(
                alone[name]["results"], sort_keys=True
            )
