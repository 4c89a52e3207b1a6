"""docs/architecture.md's "How to add ..." recipes, followed step by step on a copy of the checkout, then run.

Each test copies the checkout, makes exactly the edits its recipe lists (an edit whose anchor text is gone
fails loudly: the recipe and the code drifted apart), runs the layout checks of ``tests/layout_checks.py``
on the copy in a process that imports the copy's ``belief_tasks`` (before the last step they name what is
missing; after it, nothing), and then runs what it added: through lm-eval (its ``dummy`` model, no weights)
and ``belief-report`` where the recipe touches what a run reports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT, env_with_checkout

IGNORE = shutil.ignore_patterns(
    ".venv", ".venv-vllm", "build", ".git", "*.egg-info", "__pycache__", "results", ".pytest_cache"
)


def checkout_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "checkout"
    shutil.copytree(ROOT, dest, symlinks=True, ignore=IGNORE)
    return dest


def edit(path: Path, anchor: str, new: str) -> None:
    """Replace the one occurrence of ``anchor`` in ``path`` by ``new``."""
    text = path.read_text(encoding="utf-8")
    assert text.count(anchor) == 1, f"{path.name}: the recipe's anchor {anchor!r} occurs {text.count(anchor)} times"
    path.write_text(text.replace(anchor, new), encoding="utf-8")


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def python(root: Path, code: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -c code`` in ``root`` (so ``belief_tasks`` is the copy's), or ``python -m ...`` with ``args``."""
    cmd = [sys.executable, *args] if args else [sys.executable, "-c", code]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(root), env=env_with_checkout(), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def problems(root: Path) -> dict[str, list[str]]:
    code = "import sys\nsys.path.insert(0, 'tests')\nimport layout_checks\nlayout_checks.main('.')\n"
    return json.loads(python(root, code).stdout.splitlines()[-1])


def no_problems(root: Path) -> dict[str, list[str]]:
    return {name: [] for name in ("metric_wiring", "doc_tables", "layers", "sample_relations")}


def add_table_row(page: Path, header: str, row: str) -> None:
    """``row`` at the end of the table whose header line is ``header``."""
    lines = page.read_text(encoding="utf-8").split("\n")
    i = lines.index(header) + 2
    while i < len(lines) and lines[i].startswith("|"):
        i += 1
    page.write_text("\n".join(lines[:i] + [row] + lines[i:]), encoding="utf-8")


def lm_eval_dummy(root: Path, tasks: str, metadata: dict) -> dict:
    """``lm_eval --model dummy`` (random log-likelihoods, no weights) on the copy's task folder; its results JSON."""
    python(
        root,
        "",
        "-m",
        "lm_eval",
        "--model",
        "dummy",
        "--tasks",
        tasks,
        "--include_path",
        "task_yamls",
        "--metadata",
        json.dumps(metadata),
        "--output_path",
        "out",
        "--log_samples",
    )
    return json.loads(next((root / "out").rglob("results_*.json")).read_text())


def report(root: Path) -> str:
    """``belief-report --strict`` on the run's output: every recomputed number equals the harness's."""
    python(root, "", "-m", "belief_tasks.report.cli", "out", "--out", "report", "--strict", "--quiet")
    return (root / "report" / "report.md").read_text(encoding="utf-8")


KNOB_HEADER = "| knob | accepts | default | what |"


# --- a knob ---------------------------------------------------------------------------------------------


def test_add_a_knob(tmp_path):
    co = checkout_copy(tmp_path)
    # one typed field in the family's knobs dataclass in belief_tasks/families.py
    edit(
        co / "belief_tasks" / "families.py",
        '    """BEAR\'s knobs (docs/bear.md)."""\n\n',
        '    """BEAR\'s knobs (docs/bear.md)."""\n\n    toy_knob: int = knob("int", 3, "a toy knob", minimum=1)\n',
    )
    assert problems(co)["doc_tables"] == ["docs/bear.md: knob table lacks toy_knob"]
    # its row in the knob table of the family's doc, as options.knob_table writes it
    from belief_tasks.options import Knob, knob_table

    add_table_row(
        co / "docs" / "bear.md",
        KNOB_HEADER,
        knob_table([Knob("toy_knob", "int", 3, "a toy knob", minimum=1)]).split("\n")[-1],
    )
    assert problems(co) == no_problems(co)
    # read from the task's parsed knobs (parse_options(OPTIONS, metadata)); refused by the table out of range; known to
    # every task of a command
    out = json.loads(
        python(
            co,
            """
import json
from belief_tasks import options
from belief_tasks.data import load_facts
from belief_tasks.families import IclkeOptions
from belief_tasks.tasks import bear
from belief_tasks.tasks.base import check_metadata
md = {"source": "sample", "relations": "P36", "max_facts_per_relation": 1, "templates": "0", "toy_knob": "5"}
read = lambda metadata: options.parse_options(bear.OPTIONS, metadata)
out = {"read": read(md).toy_knob, "default": read({}).toy_knob,
       "docs": len(bear.build_docs(load_facts("bear", md), read(md)))}
for value in (0, "many"):
    try:
        options.parse_options(bear.OPTIONS, {"toy_knob": value})
    except options.KnobError as e:
        out.setdefault("refused", []).append(str(e))
check_metadata({"toy_knob": 5}, IclkeOptions, model_args=())  # as under belief-eval: an unknown key is an error
try:
    check_metadata({"toy_knobs": 5}, IclkeOptions, model_args=())
except options.KnobError as e:
    out["unknown"] = str(e)
print(json.dumps(out))
""",
        ).stdout
    )
    assert out["read"] == 5 and out["default"] == 3 and out["docs"] == 1
    assert len(out["refused"]) == 2 and all("'toy_knob'" in e for e in out["refused"])
    assert "'toy_knobs'" in out["unknown"] and "did you mean 'toy_knob'?" in out["unknown"]


# --- a metric -------------------------------------------------------------------------------------------

TOP_TWO = '''

def top_two_rate(ranks) -> float:
    """Share of instances whose gold option ranks first or second: (1/N) sum_i 1[rank_i < 2] (0-based ranks)."""
    r = np.asarray(list(ranks))
    return float(np.mean(r < 2)) if r.size else float("nan")
'''

AGG_TOP_TWO = '''

def agg_top_two(records):
    """The share of records whose gold option ranks first or second."""
    return bear_metrics.top_two_rate(ranks_of(records))


def top_two_stderr(records):
    return bear_metrics.mean_stderr([int(r < 2) for r in ranks_of(records)])


#: lm-pub-quiz's uncertainty'''


def test_add_a_metric(tmp_path):
    co = checkout_copy(tmp_path)
    # a pure function in metrics/<family>.py, its equation in the docstring (tested below on hand values)
    append(co / "belief_tasks" / "metrics" / "bear.py", TOP_TWO)
    # its budgeted statistic in metrics/budgeted/<family>.py: P@2 of the per-fact top-k counts (a column for k = 2)
    edit(
        co / "belief_tasks" / "metrics" / "budgeted" / "bear.py",
        "PRECISION_KS = (1, 5, 10)",
        "PRECISION_KS = (1, 2, 5, 10)",
    )
    # in scoring/<family>.py an aggregation and its standard error, and its one declaration in METRICS
    scoring = co / "belief_tasks" / "scoring" / "bear.py"
    edit(scoring, "\n\n#: lm-pub-quiz's uncertainty", AGG_TOP_TWO)
    edit(
        scoring,
        '    "p_at_10": Metric(agg_p_at_10, p_at_10_stderr, True, budgeted.p_at(10)),\n',
        '    "p_at_10": Metric(agg_p_at_10, p_at_10_stderr, True, budgeted.p_at(10)),\n'
        '    "top_two": Metric(agg_top_two, top_two_stderr, True, budgeted.p_at(2)),\n',
    )
    # no YAML, no utils.py, no second table: the task class wires METRICS, a budgeted run reads its statistic there
    assert problems(co) == {**no_problems(co), "doc_tables": ["docs/bear.md: metric table lacks top_two"]}
    # a row in the metric table of the family's doc
    add_table_row(
        co / "docs" / "bear.md",
        "| metric | definition | stderr |",
        "| `top_two` | the gold option ranks first or second | over instances |",
    )
    assert problems(co) == no_problems(co)
    # hand values, then a budgeted run on one relation (its estimate of a pooled share is the drawn docs' share):
    # lm-eval reports it with its interval, belief-report recomputes both from the records
    python(
        co, "from belief_tasks.metrics.bear import top_two_rate as t\nassert t([0, 1, 2, 5]) == 0.5 and t([3]) == 0.0\n"
    )
    results = lm_eval_dummy(
        co, "belief_demo_bear", {"source": "sample", "relations": "P36", "budget": 0.1, "max_facts_per_relation": "all"}
    )
    bear = results["results"]["belief_demo_bear"]
    samples = [json.loads(line) for line in next((co / "out").rglob("samples_belief_demo_bear_*.jsonl")).open()]
    records = [s[s["metrics"][0]] for s in samples]  # one record per doc; the other metrics log a reference to it
    assert all(s["top_two"] == f"<same as {s['metrics'][0]}>" for s in samples)
    assert {r["budget"] for r in records} == {0.1} and len({r["fact_id"] for r in records}) < records[0]["population"]
    assert bear["top_two,none"] == pytest.approx(sum(r["rank"] < 2 for r in records) / len(records))
    low, high = bear["top_two_ci95,none"]
    assert isinstance(bear["top_two_stderr,none"], float) and low <= bear["top_two,none"] <= high
    report(co)


def test_add_a_monitor_metric(tmp_path):
    """A metric a sample cannot estimate: declared ``NotEstimable`` with its reason (NaN on a budgeted run)."""
    co = checkout_copy(tmp_path)
    scoring = co / "belief_tasks" / "scoring" / "monitor.py"
    # its statistic of per-fact rows (STATISTICS: the aggregation and its bootstrap stderr come from it) ...
    edit(
        scoring,
        '    "acc_relation_min": _relation_extreme("min"),\n',
        '    "acc_relation_min": _relation_extreme("min"),\n'
        '    "acc_frames_total": lambda facts: float(sum(sum(f["correct"]) for f in facts)),\n',
    )
    # ... and its declaration, NotEstimable with its reason
    edit(
        scoring,
        "from belief_tasks.scoring.common import Metric, NoStderr, once",
        "from belief_tasks.scoring.common import Metric, NoStderr, NotEstimable, once",
    )
    edit(
        scoring,
        '    "acc_relation_min": _metric("acc_relation_min", True, budgeted.across_relations("min")),\n',
        '    "acc_relation_min": _metric("acc_relation_min", True, budgeted.across_relations("min")),\n'
        '    "acc_frames_total": _metric("acc_frames_total", True, NotEstimable("a toy total of counts")),\n',
    )
    assert problems(co) == {**no_problems(co), "doc_tables": ["docs/monitor.md: metric table lacks acc_frames_total"]}
    add_table_row(
        co / "docs" / "monitor.md",
        "| metric | definition | better |",
        "| `acc_frames_total` | right frame answers, summed | higher |",
    )
    assert problems(co) == no_problems(co)
    out = python(co, "from belief_tasks.families import MONITOR\nprint(MONITOR.budgeted.not_estimable)\n").stdout
    assert out.strip() == "('acc_frames_total',)"


# --- a relation -----------------------------------------------------------------------------------------


def test_add_a_relation(tmp_path):
    co = checkout_copy(tmp_path)
    sample = co / "belief_tasks" / "sample_data"
    # one belief_tasks/sample_data/P*.json file ...
    text = (
        (sample / "P36.json")
        .read_text(encoding="utf-8")
        .replace('"P36', '"P9999')
        .replace('"capital"', '"toy capital"')
    )
    (sample / "P9999.json").write_text(text, encoding="utf-8")
    assert problems(co)["sample_relations"] == ["sample_data/README.md: no row for P9999"]
    # ... and its row in the README's relation table
    row = next(line for line in (sample / "README.md").read_text().splitlines() if line.startswith("| P36 |"))
    add_table_row(
        sample / "README.md",
        "| id | name | cardinality | domains | facts | answer space |",
        row.replace("P36", "P9999"),
    )
    assert problems(co) == no_problems(co)
    # every family selects it with the relations knob
    out = json.loads(
        python(
            co,
            """
import json
from belief_tasks.data import load_facts
from belief_tasks.families import MonitorOptions
from belief_tasks.options import parse_options
from belief_tasks.tasks import bear, belief_icl, iclke, monitor
md = {"source": "sample", "relations": "P9999", "max_facts_per_relation": 3}
print(json.dumps({
    "relations": len(load_facts("bear", md).relations),
    "bear": sorted({d["relation"] for d in bear.build_docs(load_facts("bear", md), parse_options(bear.OPTIONS, md))}),
    "monitor": sorted({d["relation"] for d in monitor.build_docs(load_facts("fktc", md),
                                                                 parse_options(MonitorOptions, md))}),
    "iclke": sorted({d["relation"] for d in iclke.iclke_docs(load_facts("trex_mc", md),
                                                             parse_options(iclke.OPTIONS, md))}),
    "belief_icl": sorted({d["relation"] for d in belief_icl.build_docs("mp", "4template",
                                                                       parse_options(belief_icl.OPTIONS, md))}),
}))
""",
        ).stdout
    )
    assert out == {
        "relations": 13,
        "bear": ["P9999"],
        "monitor": ["P9999"],
        "iclke": ["P9999"],
        "belief_icl": ["P9999"],
    }


# --- a family -------------------------------------------------------------------------------------------

TOY_FILES = {
    "belief_tasks/prompts/toy.py": '''
"""Toy prompts: "<subject> <separator> <relation name>:" and the relation's answer space as the options."""

from belief_tasks.facts.schema import Fact, Relation


def context(fact: Fact, relation: Relation, separator: str) -> str:
    return f"{fact.subject.label} {separator} {relation.name}:"


def options(relation: Relation) -> list[str]:
    return [e.label for e in relation.answer_space]
''',
    "belief_tasks/metrics/toy.py": '''
"""Toy metric: hit@1 = (1/N) sum_i 1[argmax_j s_ij = g_i]."""

import numpy as np


def hit_rate(scores, gold) -> float:
    """hit@1 = (1/N) sum_i 1[argmax_j s_ij = g_i] (ties go to the first option)."""
    return float(np.mean([int(np.argmax(s)) == g for s, g in zip(scores, gold)])) if len(gold) else float("nan")
''',
    "belief_tasks/scoring/toy.py": '''
"""Toy scoring: records -> (scores, gold) -> ``belief_tasks.metrics.toy``. Known fact: the gold option first."""

from typing import TypedDict

from belief_tasks.metrics import toy as toy_metrics
from belief_tasks.metrics.stats import binomial_stderr
from belief_tasks.scoring.common import Metric, once


class ToyRecord(TypedDict):
    fact_id: str
    relation: str
    template_id: str
    subject_form: str
    ll: list
    gold: int


def columns(records):
    return once(records, ("toy", "columns"), lambda: ([r["ll"] for r in records], [r["gold"] for r in records]))


def correct(record) -> bool:
    return toy_metrics.hit_rate([record["ll"]], [record["gold"]]) == 1.0


def known(records) -> dict:
    return {r["fact_id"]: correct(r) for r in records}


def agg_hit(records) -> float:
    return toy_metrics.hit_rate(*columns(records))


def hit_stderr(records) -> float:
    return binomial_stderr([correct(r) for r in records])


METRICS = {"hit": Metric(agg_hit, hit_stderr, True, None)}  # no budgeted statistic: the family takes no budget
''',
    "belief_tasks/tasks/toy.py": '''
"""Toy harness glue: one multiple-choice doc per fact of the bundled sample."""

from belief_tasks.data import load_facts
from belief_tasks.families import TOY, ToyOptions
from belief_tasks.prompts import toy as P
from belief_tasks.scoring.toy import METRICS
from belief_tasks.tasks.base import BeliefTask, as_split, probe, select_facts, unpack

OPTIONS = ToyOptions


class ToyTask(BeliefTask[ToyOptions]):
    FAMILY = TOY.name
    OPTIONS = OPTIONS


@probe("belief_toy", "sample")
def toy_dataset(opts: ToyOptions):
    fs = load_facts("bear", {**opts.metadata, "source": "sample"})
    docs = []
    for fact in select_facts(fs, opts):
        rel = fs.relations[fact.relation]
        options = P.options(rel)
        docs.append({"fact_id": fact.id, "relation": rel.id, "context": P.context(fact, rel, opts.toy_separator),
                     "options": options, "gold": options.index(fact.object.label)})
    return as_split(docs)


def doc_to_text(doc):
    return doc["context"]


def doc_to_choice(doc):
    return unpack(doc, "options")


def doc_to_target(doc):
    return int(doc["gold"])


def process_results(doc, results):
    record = {"fact_id": doc["fact_id"], "relation": doc["relation"], "template_id": "toy", "subject_form": "label",
              "ll": [float(r[0]) for r in results], "gold": int(doc["gold"])}
    return {name: record for name in METRICS}
''',
    "task_yamls/toy/belief_toy.yaml": """
task: belief_toy
class: !function utils.ToyTask
custom_dataset: !function utils.toy_dataset
test_split: test
output_type: multiple_choice
doc_to_text: !function utils.doc_to_text
doc_to_choice: !function utils.doc_to_choice
doc_to_target: !function utils.doc_to_target
target_delimiter: " "
process_results: !function utils.process_results
metadata:
  version: 1.0
""",
    "task_yamls/toy/utils.py": """
from belief_tasks.tasks.toy import (  # noqa: F401
    ToyTask, doc_to_choice, doc_to_target, doc_to_text, process_results, toy_dataset)
""",
    "belief_tasks/report/toy.py": '''
"""Toy section: hit@1 per task."""

from belief_tasks.families import Family
from belief_tasks.report.base import CardEntry, Context, Section, stderr, value
from belief_tasks.report.output import pm

TASK_RE = r"belief_toy\\w*"
PROBES = (TASK_RE,)


def build(ctx: Context, family: Family):
    found = ctx.tasks(TASK_RE)
    if not found:
        return None
    rows = {(run.name, task.name): ctx.numbers(run, task.name) for run, task in found}
    hit = {key: pm(value(n, "hit"), stderr(n, "hit")) for key, n in rows.items()}
    lines = [f"## {family.title}\\n"] + [f"- {m} {t}: hit@1 {text}" for (m, t), text in hit.items()]
    card = {m: [CardEntry("accuracy", family.title, "hit@1", text)] for (m, _), text in hit.items()}
    return Section(family.title, "\\n".join(lines) + "\\n", card=card)
''',
    "docs/toy.md": """
# Toy

Knobs (`belief_tasks.families.ToyOptions`): the common ones and

| knob | accepts | default | what |
| --- | --- | --- | --- |
| `toy_separator` | a string | '->' | what joins the subject and the relation's name |

| metric | definition |
| --- | --- |
| `hit` | hit@1 |
""",
}

TOY_REGISTRY = '''
@dataclass(frozen=True, kw_only=True)
class ToyOptions(Options):
    """The toy family's knobs (docs/toy.md)."""

    toy_separator: str = knob("str", "->", "what joins the subject and the relation's name")


# --- the registry'''


def test_add_a_family(tmp_path):
    co = checkout_copy(tmp_path)
    for rel, text in TOY_FILES.items():  # 1, 2, 4, 5, 6 (the section), 7: the new files
        (co / rel).parent.mkdir(parents=True, exist_ok=True)
        (co / rel).write_text(text.lstrip("\n"), encoding="utf-8")
    # 3: ToyOptions and a Family in FAMILIES, the one list of families
    families = co / "belief_tasks" / "families.py"
    edit(
        families,
        "from belief_tasks.scoring import bear, belief_icl, belief_mlm, iclke, monitor",
        "from belief_tasks.scoring import bear, belief_icl, belief_mlm, iclke, monitor, toy",
    )
    edit(families, "\n# --- the registry", TOY_REGISTRY)
    edit(
        families,
        "\n#: family name -> Family",
        '\nTOY = Family("toy", "Toy", "docs/toy.md", ToyOptions, toy.METRICS, toy.known, toy.ToyRecord, "hit")\n\n'
        "#: family name -> Family",
    )
    edit(
        families,
        "(BELIEF_ICL, BEAR, ICLKE, MONITOR, BELIEF_MLM)}",
        "(BELIEF_ICL, BEAR, ICLKE, MONITOR, BELIEF_MLM, TOY)}",
    )
    # 6: the section's entry in belief_tasks.report.family_sections
    sections = co / "belief_tasks" / "report" / "__init__.py"
    edit(
        sections,
        "from belief_tasks.report import bear, belief_icl, belief_mlm, iclke, monitor\n",
        "from belief_tasks.report import bear, belief_icl, belief_mlm, iclke, monitor, toy\n",
    )
    edit(sections, '"monitor": monitor}', '"monitor": monitor, "toy": toy}')
    assert problems(co) == no_problems(co)
    # run it: lm-eval with the dummy model, then belief-report (its check: every number recomputed and equal)
    results = lm_eval_dummy(co, "belief_toy", {"source": "sample", "max_facts_per_relation": 2, "toy_separator": "=>"})
    assert results["configs"]["belief_toy"]["metadata"]["family"] == "toy"
    samples = [json.loads(line) for line in next((co / "out").rglob("samples_belief_toy_*.jsonl")).open()]
    assert len(samples) == 24 and all(" => " in s["doc"]["context"] for s in samples)
    text = report(co)
    assert "## Toy" in text and re.search(r"Check:\*\* 1 of 1 recomputed numbers", text)
