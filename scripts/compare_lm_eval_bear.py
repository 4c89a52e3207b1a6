"""lm-eval 0.4.13's own ``bear`` task beside our ``belief_bear``, on the same instances: measured and decomposed.

    python scripts/compare_lm_eval_bear.py                          # real BEAR, 1 instance per relation
    python scripts/compare_lm_eval_bear.py --per-relation 10 --dtypes float32,bfloat16 --lm-pub-quiz
    python scripts/compare_lm_eval_bear.py --sample --relations P37 --per-relation 2   # the bundled sample

lm-eval's ``bear`` reads the hub dataset ``lm-pub-quiz/BEAR`` (config ``BEAR``, split ``test``): one row per
(instance, template) with the statements already rendered (``text_options``) and one ``correct`` index; it is a
plain ``multiple_choice`` task with an empty ``doc_to_text`` and reports one ``acc`` pooled over the rows. This
machine cannot reach the hub, so the script builds a local copy in the hub's layout (``README.md`` with the
config, ``BEAR/test-00000-of-00001.parquet`` with the hub's columns) from lm-pub-quiz files, rendering the
statements with lm-pub-quiz 0.3.3's own ``Templater``, and runs lm-eval's task through a YAML that includes
lm-eval's ``bear.yaml`` and changes only ``dataset_path`` (and its ``datasets`` cache folder; everything in a
temporary folder, never committed).

Instances: a seeded stratified subset, the same for every tool: ``--per-relation`` instances of every relation
chosen by our ``max_facts_per_relation`` rule (``belief_tasks.tasks.base.select_facts``, seeded hashes), every
template. ``belief_bear`` selects them itself with the same knobs; the lm-pub-quiz folder the hub copy is built
from holds exactly those instances (for real BEAR their original jsonl rows; for ``--sample`` rows written from
the bundled sample, each fact's first object as ``obj_label``, since lm-pub-quiz rows hold one object).

Both tasks run in one ``simple_evaluate`` call on stock ``hf`` per ``--dtypes`` entry; ``--lm-pub-quiz`` also runs
lm-pub-quiz (float32) on the same folder. The headline gap, lm-eval's ``acc`` minus our ``bear``, telescopes:

    acc - bear = (acc - A1)      scores: lm-eval's log-likelihoods against ours, each row's first maximum, one gold
               + (A1 - p_at_1)   gold: lm-eval grades one ``correct`` index, we accept any of a fact's objects
               + (p_at_1 - bear) pooling: rows pooled against the mean over templates

where A1 is lm-eval's rule (first maximum, its one gold) applied to our log-likelihoods. It also counts rows whose
statements or answer options differ, rows whose best score is tied (and the range of ``acc`` that other tie rules
would give), and per-instance prediction agreement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_BEAR = ROOT.parent / "shared" / "data" / "bear" / "BEAR"
LOCAL_TASK = "bear_local"  # lm-eval's bear.yaml included, only dataset_path (and its cache) changed
HUB_COLUMNS = (
    "composite_id",
    "relation",
    "item",
    "template_index",
    "template",
    "subject",
    "answer_options",
    "correct",
    "text_options",
)


# --------------------------------------------------------------------------- the instances


def our_metadata(bear_path: Path | None, relations: list[str] | None, per_relation: int, seed: int) -> dict:
    """The ``--metadata`` that makes ``belief_bear`` select the subset."""
    meta = {"source": "sample"} if bear_path is None else {"bear_path": str(bear_path)}
    meta.update({"max_facts_per_relation": per_relation, "seed": seed})
    if relations:
        meta["relations"] = ",".join(relations)
    return meta


def selected_facts(metadata: dict):
    """(fact set, the facts ``belief_bear`` evaluates under ``metadata``, in its order)."""
    from belief_tasks.data import load_facts
    from belief_tasks.families import BEAR
    from belief_tasks.options import parse_options
    from belief_tasks.tasks.base import select_facts

    fs = load_facts("bear", metadata)
    return fs, list(select_facts(fs, parse_options(BEAR.options, metadata)))


def write_lm_pub_quiz_folder(fs, facts, out: Path, source_folder: Path | None) -> dict[tuple[str, int], str]:
    """An lm-pub-quiz folder holding ``facts`` (relation by relation, data order); returns {(relation, row): fact id},
    row = the fact's 0-based position in its relation file here. From ``source_folder`` the facts' original jsonl
    lines are copied; otherwise (the sample) rows are written from the facts, first object as ``obj_label``."""
    out.mkdir(parents=True, exist_ok=True)
    meta, rows, where, source_lines = {}, {}, {}, {}
    for fact in facts:
        rel = fs.relations[fact.relation]
        space = [e.label for e in rel.answer_space]
        meta.setdefault(
            rel.id,
            {
                "templates": [t.text for t in rel.templates_of("statement")],
                "answer_space_labels": space,
                "answer_space_ids": [e.id or f"{rel.id}:{i}" for i, e in enumerate(rel.answer_space)],
            },
        )
        if source_folder is not None:
            if rel.id not in source_lines:
                source_lines[rel.id] = (source_folder / f"{rel.id}.jsonl").read_text(encoding="utf-8").splitlines()
            line = source_lines[rel.id][int(fact.id.rsplit("_", 1)[1]) - 1]  # fact ids carry the 1-based line
        else:
            obj = fact.objects[0]
            line = json.dumps(
                {
                    "sub_id": fact.subject.id or fact.id,
                    "sub_label": fact.subject.label,
                    "sub_aliases": [],
                    "obj_id": meta[rel.id]["answer_space_ids"][space.index(obj.label)],
                    "obj_label": obj.label,
                    "answer_idx": space.index(obj.label),
                },
                ensure_ascii=False,
            )
        rows.setdefault(rel.id, []).append(line)
        where[(rel.id, len(rows[rel.id]) - 1)] = fact.id
    (out / "metadata_relations.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    for rid, lines in rows.items():
        (out / f"{rid}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where


# --------------------------------------------------------------------------- lm-eval's bear on a local hub copy


def hub_rows(lpq_folder: Path, fact_of: dict[tuple[str, int], str]) -> list[dict]:
    """The hub dataset's rows for an lm-pub-quiz folder: one per (instance, template), statements rendered by
    lm-pub-quiz's ``Templater`` (capitalised, one pass over the slots), ``correct`` = the row's ``answer_idx``.
    ``item`` is the fact's position in its relation file of this folder; ``composite_id`` relation_item_template."""
    from lm_pub_quiz import Dataset
    from lm_pub_quiz.evaluators.templating_util import Templater

    templater, out = Templater(), []
    for relation in Dataset.from_path(str(lpq_folder), lazy=False):
        options = [str(a) for a in relation.answer_space.tolist()]
        for item, row in relation.instance_table.reset_index(drop=True).iterrows():
            if (relation.relation_code, item) not in fact_of:
                raise RuntimeError(f"lm-pub-quiz read a row {relation.relation_code}:{item} the script did not write")
            for t, template in enumerate(relation.templates):
                texts = [
                    templater.replace_placeholders(template=template, subject=row["sub_label"], answer=a)[0]
                    for a in options
                ]
                out.append(
                    {
                        "composite_id": f"{relation.relation_code}_{item}_{t}",
                        "relation": relation.relation_code,
                        "item": int(item),
                        "template_index": t,
                        "template": template,
                        "subject": row["sub_label"],
                        "answer_options": options,
                        "correct": int(row["answer_idx"]),
                        "text_options": texts,
                    }
                )
    order = {key: i for i, key in enumerate(fact_of)}  # belief_bear's doc order, so that --limit cuts both alike
    return sorted(out, key=lambda r: (order[(r["relation"], r["item"])], r["template_index"]))


def write_hub_copy(rows: list[dict], out: Path, config: str = "BEAR") -> Path:
    """A folder in the hub dataset's layout: README.md declaring ``config`` (split ``test``) and its parquet file."""
    from datasets import Dataset as HFDataset

    (out / config).mkdir(parents=True, exist_ok=True)
    HFDataset.from_list([{c: r[c] for c in HUB_COLUMNS} for r in rows]).to_parquet(
        str(out / config / "test-00000-of-00001.parquet")
    )
    (out / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: test\n    path: {config}/test-*\n---\n",
        encoding="utf-8",
    )
    return out


def write_task_yaml(hub: Path, out: Path, config: str = "BEAR") -> Path:
    """``bear_local``: lm-eval's own ``bear.yaml`` included, ``dataset_path`` pointing at the local hub copy; its
    ``datasets`` cache in ``out`` too (``datasets`` names the cache of a local folder after the folder and the config,
    so a shared cache would hand a later run an earlier run's rows)."""
    import lm_eval.tasks

    lm_eval_bear = Path(lm_eval.tasks.__file__).parent / "bear" / "bear.yaml"
    if not lm_eval_bear.is_file():
        raise SystemExit(f"lm-eval has no bear task at {lm_eval_bear} (it ships with lm-eval 0.4.13)")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{LOCAL_TASK}.yaml").write_text(
        f"include: {lm_eval_bear}\ntask: {LOCAL_TASK}\ndataset_path: {hub}\n"
        f"dataset_name: {config}\ndataset_kwargs:\n  cache_dir: {out / 'cache'}\n",
        encoding="utf-8",
    )
    return out


# --------------------------------------------------------------------------- the runs


def run_both(
    model_path: Path,
    dtype: str,
    tasks_dir: Path,
    metadata: dict,
    *,
    batch_size: int,
    limit: int | None = None,
    device: str = "cpu",
) -> dict:
    """lm-eval's bear (local copy) and belief_bear in one ``simple_evaluate`` on stock ``hf``; samples and results."""
    import belief_tasks

    belief_tasks.install()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    meta = {**metadata, "pretrained": str(model_path)}
    tm = TaskManager(include_path=[str(task_yamls_dir()), str(tasks_dir)], metadata=meta)
    out = simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_path},dtype={dtype}",
        tasks=[LOCAL_TASK, "belief_bear"],
        task_manager=tm,
        metadata=meta,
        log_samples=True,
        batch_size=batch_size,
        device=device,
        limit=limit,
        bootstrap_iters=0,
        verbosity="WARNING",
    )
    return {"samples": out["samples"], "results": out["results"]}


def lm_eval_rows(samples: list[dict], fact_of: dict[tuple[str, int], str]) -> dict[tuple[str, int], dict]:
    """{(fact id, template index): row} of lm-eval's bear: its log-likelihoods, its gold, its options and statements."""
    rows = {}
    for s in samples:
        doc = s["doc"]
        rows[(fact_of[(doc["relation"], int(doc["item"]))], int(doc["template_index"]))] = {
            "ll": [float(r[0]) for r in s["filtered_resps"]],
            "gold": int(doc["correct"]),
            "acc": float(s["acc"]),
            "requests": [tuple(a) for a in s["arguments"]],
            "options": list(doc["answer_options"]),
            "texts": list(doc["text_options"]),
        }
    return rows


def our_rows(samples: list[dict], fs) -> dict[tuple[str, int], dict]:
    """{(fact id, template index): row} of belief_bear: its record, its options and statements."""
    from belief_tasks.prompts.bear import statement

    rows, facts = {}, {f.id: f for f in fs.facts}
    for s in samples:
        rec = s["bear"]
        fact = facts[rec["fact_id"]]
        rel = fs.relations[rec["relation"]]
        options = [e.label for e in rel.answer_space]
        template = rel.templates_of("statement")[rec["template_index"]].text
        rows[(rec["fact_id"], int(rec["template_index"]))] = {
            "record": rec,
            "options": options,
            "requests": [tuple(a) for a in s["arguments"]],
            "texts": [statement(template, fact.subject.label, a) for a in options],
        }
    return rows


# --------------------------------------------------------------------------- the decomposition


def _max_abs_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))))


def first_max(scores) -> int:
    """lm-eval's ``np.argmax`` and lm-pub-quiz's ``scores.index(max(scores))``: the first of tied maxima."""
    return int(np.argmax(np.asarray(scores, dtype=float)))


def decompose(theirs: dict, ours: dict, our_results: dict) -> dict:
    """lm-eval's ``acc`` against our ``bear``, term by term (module docstring), with per-row checks."""
    from belief_tasks.scoring.bear import record_scores

    if set(theirs) != set(ours):
        raise SystemExit(f"the two tasks scored different rows: {sorted(set(theirs) ^ set(ours))[:5]}")
    keys = sorted(theirs)
    n = len(keys)
    acc = sum(theirs[k]["acc"] for k in keys) / n
    a1 = sum(first_max(record_scores(ours[k]["record"])) == theirs[k]["gold"] for k in keys) / n
    p_at_1 = our_results["p_at_1,none"]
    bear = our_results["bear,none"]
    agree = sum(first_max(theirs[k]["ll"]) == ours[k]["record"]["pred"] for k in keys)
    tied = [k for k in keys if int(np.sum(np.asarray(theirs[k]["ll"]) == max(theirs[k]["ll"]))) > 1]
    gold_in_tie = sum(theirs[k]["ll"][theirs[k]["gold"]] == max(theirs[k]["ll"]) for k in tied)
    won_ties = sum(bool(theirs[k]["acc"]) for k in tied)  # the gold is the first of the tied maxima
    lost_ties = gold_in_tie - won_ties  # the gold is tied for the best score, but not first
    return {
        "rows": n,
        "acc_lm_eval": acc,
        "acc_lm_eval_reported": None,
        "bear": bear,
        "p_at_1": p_at_1,
        "a1": a1,
        "gap": acc - bear,
        "d_scores": acc - a1,
        "d_gold": a1 - p_at_1,
        "d_pooling": p_at_1 - bear,
        "agreement": agree / n,
        "disagreeing_rows": n - agree,
        "max_abs_ll_diff": max(_max_abs_diff(theirs[k]["ll"], ours[k]["record"]["ll"]) for k in keys),
        "rows_with_other_options": sum(theirs[k]["options"] != ours[k]["options"] for k in keys),
        "rows_with_other_statements": sum(theirs[k]["texts"] != ours[k]["texts"] for k in keys),
        # the (context, continuation) pairs each task sent: ("", statement) in both
        "rows_with_other_requests": sum(theirs[k]["requests"] != ours[k]["requests"] for k in keys),
        "rows_with_empty_context": sum(all(c == "" for c, _ in theirs[k]["requests"]) for k in keys),
        "rows_with_several_golds": sum(len(ours[k]["record"]["gold"]) > 1 for k in keys),
        "tied_rows": len(tied),
        "tied_rows_with_gold": gold_in_tie,
        # acc if every tie went against the gold / to the gold (other tie rules lie in between)
        "acc_ties_lost": acc - won_ties / n,
        "acc_ties_won": acc + lost_ties / n,
    }


def per_template_counts(ours: dict) -> dict[int, int]:
    counts: dict[int, int] = {}
    for rec in (r["record"] for r in ours.values()):
        counts[int(rec["template_index"])] = counts.get(int(rec["template_index"]), 0) + 1
    return dict(sorted(counts.items()))


def run_lm_pub_quiz(model_path: Path, lpq_folder: Path, fact_of: dict, batch_size: int) -> dict:
    """lm-pub-quiz 0.3.3 (float32) on the same folder: {(fact id, template index): (scores, gold)}."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("parity_bear", ROOT / "scripts" / "parity_bear.py")
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    scores, seconds, _, _ = parity.run_lm_pub_quiz(
        "clm", model_path, lpq_folder, batch_size=batch_size, reduction="sum", conditional=False
    )
    return {(fact_of[(rel, row)], t): v for (rel, row, t), v in scores.items()}


def compare_lm_pub_quiz(lpq: dict, theirs: dict, ours: dict) -> dict:
    keys = sorted(theirs)
    preds = {k: first_max(lpq[k][0]) for k in keys}
    return {
        "acc_lm_pub_quiz": sum(preds[k] == lpq[k][1] for k in keys) / len(keys),
        "agree_with_ours": sum(preds[k] == ours[k]["record"]["pred"] for k in keys) / len(keys),
        "agree_with_lm_eval": sum(preds[k] == first_max(theirs[k]["ll"]) for k in keys) / len(keys),
        "max_abs_score_diff_ours": max(_max_abs_diff(lpq[k][0], ours[k]["record"]["ll"]) for k in keys),
    }


# --------------------------------------------------------------------------- main


def prepare(args, work: Path) -> tuple:
    """(fact set, our metadata, fact_of, lm-pub-quiz folder, lm-eval task folder)."""
    relations = [r.strip() for r in args.relations.split(",")] if args.relations else None
    meta = our_metadata(None if args.sample else args.bear_path, relations, args.per_relation, args.seed)
    fs, facts = selected_facts(meta)
    lpq = work / "BEAR"
    fact_of = write_lm_pub_quiz_folder(fs, facts, lpq, None if args.sample else args.bear_path)
    hub = write_hub_copy(hub_rows(lpq, fact_of), work / "hub")
    return fs, meta, fact_of, lpq, write_task_yaml(hub, work / "tasks")


def compare(
    fs,
    meta: dict,
    fact_of: dict,
    tasks_dir: Path,
    model_path: Path,
    dtype: str,
    batch_size: int,
    limit: int | None = None,
    device: str = "cpu",
) -> dict:
    """One dtype: both tasks, their rows and the decomposition."""
    out = run_both(model_path, dtype, tasks_dir, meta, batch_size=batch_size, limit=limit, device=device)
    theirs = lm_eval_rows(out["samples"][LOCAL_TASK], fact_of)
    ours = our_rows(out["samples"]["belief_bear"], fs)
    row = decompose(theirs, ours, out["results"]["belief_bear"])
    row.update(
        dtype=dtype,
        acc_lm_eval_reported=out["results"][LOCAL_TASK]["acc,none"],
        rows_per_template=per_template_counts(ours),
    )
    return {"row": row, "theirs": theirs, "ours": ours}


def print_row(row: dict) -> None:
    print(
        f"\n== dtype {row['dtype']}: {row['rows']} (instance, template) rows, per template {row['rows_per_template']}"
    )
    print(
        f"  lm-eval bear acc {row['acc_lm_eval_reported']:.4f}   belief_bear bear {row['bear']:.4f}   "
        f"p_at_1 {row['p_at_1']:.4f}   gap {row['gap']:+.4f}"
    )
    print(f"  = scores {row['d_scores']:+.4f} + gold {row['d_gold']:+.4f} + pooling {row['d_pooling']:+.4f}")
    print(
        f"  per-row predictions equal: {row['agreement']:.4f} ({row['disagreeing_rows']} differ); "
        f"max |ll difference| {row['max_abs_ll_diff']:.2e}"
    )
    print(
        f"  rows with other statements {row['rows_with_other_statements']}, "
        f"other options {row['rows_with_other_options']}, other requests {row['rows_with_other_requests']} "
        f"(empty context in lm-eval's: {row['rows_with_empty_context']}), "
        f"several golds {row['rows_with_several_golds']}"
    )
    print(
        f"  tied best scores: {row['tied_rows']} rows ({row['tied_rows_with_gold']} with the gold among them); "
        f"acc under other tie rules in [{row['acc_ties_lost']:.4f}, {row['acc_ties_won']:.4f}]"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bear-path", type=Path, default=DEFAULT_BEAR, help="an lm-pub-quiz BEAR folder")
    ap.add_argument("--sample", action="store_true", help="the bundled sample instead of --bear-path")
    ap.add_argument("--relations", default=None, help="comma-separated relation ids (default: all)")
    ap.add_argument("--per-relation", type=int, default=1, help="instances per relation (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default="float32", help="comma list of model dtypes for stock hf (float32, bfloat16)")
    ap.add_argument(
        "--lm-pub-quiz", action="store_true", help="also run lm-pub-quiz 0.3.3 (float32) on the same folder"
    )
    ap.add_argument("--model", type=Path, default=None, help="causal model folder (default: the bundled one)")
    ap.add_argument("--limit", type=int, default=None, help="lm-eval's --limit for both tasks (first N rows each)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="cpu", help="torch device of both tasks' model (lm-pub-quiz runs on the CPU)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from belief_tasks.commands.default_model import default_model_path

    model_path = args.model or default_model_path()
    with tempfile.TemporaryDirectory(prefix="bear_lm_eval_") as tmp:
        fs, meta, fact_of, lpq, tasks_dir = prepare(args, Path(tmp))
        print(
            f"instances: {len(fact_of)} ({args.per_relation} per relation, seed {args.seed}); model {model_path.name}"
        )
        report, first = [], None
        for dtype in args.dtypes.split(","):
            res = compare(fs, meta, fact_of, tasks_dir, model_path, dtype, args.batch_size, args.limit, args.device)
            print_row(res["row"])
            if first is not None:
                changed = sum(
                    first_max(res["theirs"][k]["ll"]) != first_max(first["theirs"][k]["ll"]) for k in res["theirs"]
                )
                res["row"]["lm_eval_predictions_changed_vs_first_dtype"] = changed
                print(f"  lm-eval predictions that differ from {first['row']['dtype']}: {changed}")
            first = first or res
            report.append(res["row"])
        if args.lm_pub_quiz:
            lpq_scores = run_lm_pub_quiz(model_path, lpq, fact_of, args.batch_size)
            if first["row"]["dtype"] != "float32":
                raise SystemExit("--lm-pub-quiz compares against the float32 run: list float32 first in --dtypes")
            lpq_row = compare_lm_pub_quiz(lpq_scores, first["theirs"], first["ours"])
            print(
                f"\n== lm-pub-quiz 0.3.3 (float32): acc {lpq_row['acc_lm_pub_quiz']:.4f}; predictions equal to ours "
                f"{lpq_row['agree_with_ours']:.4f}, to lm-eval's {lpq_row['agree_with_lm_eval']:.4f}; "
                f"max |score difference| to ours {lpq_row['max_abs_score_diff_ours']:.2e}"
            )
            report.append({"lm_pub_quiz": lpq_row})
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
