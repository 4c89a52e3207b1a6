"""Side by side: lm-pub-quiz 0.3.3 and our ``belief_bear`` task on the same model and instances.

    python scripts/parity_bear.py                       # both models, default subset
    python scripts/parity_bear.py --models clm --relations P30,P36 --max-instances 20

For each model it runs lm-pub-quiz (``Evaluator.from_model`` + ``evaluate_dataset``)
and our task through ``lm_eval.simple_evaluate`` (``hf`` for the causal model,
``hf-mlm`` for the masked one) on a subset of BEAR copied to a temporary folder (the
first ``--max-instances`` rows of each relation, so both read the same instances),
and prints, per (instance, template): prediction agreement, the two accuracies, the
largest per-option score difference, and the throughput ratio (statements per
second, model loading excluded, same process and thread count).

It also checks lm-pub-quiz 0.3.3's confidence metrics (``lm_pub_quiz/metrics/confidence.py``:
``avg_softmax``, ``margin_of_confidence``, ``confidence_score``, ``uncertainty_score``,
``brier_score``) against ours (``belief_tasks.metrics.bear``) on the same scores, lm-pub-quiz's:
per relation (its ``RelationResult.get_metric``) and per (instance, template) (its metric classes
on that row alone; the uncertainty on copies of the row carrying the relation's distinct answers,
since it divides by log2 of their number), all to 1e-9; and, for information, ours on our
harness's scores (they differ from lm-pub-quiz's by float32 noise).

Models: the bundled SmolLM2-135M (causal) and a tiny random BERT built here
(WordPiece vocabulary trained on the subset's statements, so words split into
several pieces and within-word masking matters; no hub access).

``--variants`` also compares the switches: ``mean`` (reduction) and ``conditional``
(lm-pub-quiz ``conditional_score=True`` against our ``scoring=answer_to_end``, causal
model only: for a masked LM lm-pub-quiz keeps the sentence after the answer visible,
which a (context, continuation) request cannot express).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_BEAR = ROOT.parent / "shared" / "data" / "bear" / "BEAR"
DEFAULT_RELATIONS = "P30,P105,P412,P36"


def make_subset(bear: Path, relations: list[str], max_instances: int, out: Path) -> Path:
    """Copy ``relations`` (first ``max_instances`` rows each) into an lm-pub-quiz folder at ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((bear / "metadata_relations.json").read_text())
    missing = [r for r in relations if r not in meta]
    if missing:
        raise SystemExit(f"unknown relations {missing}")
    (out / "metadata_relations.json").write_text(json.dumps({r: meta[r] for r in relations}, ensure_ascii=False))
    for r in relations:
        lines = (bear / f"{r}.jsonl").read_text().splitlines()
        (out / f"{r}.jsonl").write_text("\n".join(lines[:max_instances]) + "\n")
    for cand in (bear / "relation_info.json", bear.parent / "relation_info.json"):
        if cand.is_file():
            (out / "relation_info.json").write_text(cand.read_text())
            break
    return out


def statements_of(subset: Path) -> list[str]:
    from belief_tasks.data.bear import load_bear_folder
    from belief_tasks.prompts.bear import statement

    fs = load_bear_folder(subset)
    out = []
    for f in fs:
        rel = fs.relations[f.relation]
        for t in rel.templates:
            out += [statement(t.text, f.subject.label, a.label) for a in rel.answer_space]
    return out


def build_tiny_bert(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """A random 2-layer BERT and a WordPiece tokenizer trained on ``texts``, saved to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=600, special_tokens=specials, min_frequency=2))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
        pad_token_id=0,
        initializer_range=0.2,
    )
    BertForMaskedLM(config).eval().save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- runs


def run_lm_pub_quiz(
    kind: str, model_path: Path, subset: Path, *, batch_size: int, reduction: str, conditional: bool
) -> tuple[dict, float, int, object]:
    """{(relation, row, template): scores}, seconds, statements, lm-pub-quiz's results."""
    from lm_pub_quiz import Dataset, Evaluator

    dataset = Dataset.from_path(str(subset), lazy=False)
    evaluator = Evaluator.from_model(
        str(model_path), model_type=kind.upper(), device="cpu", conditional_score=conditional
    )
    start = time.perf_counter()
    results = evaluator.evaluate_dataset(dataset, batch_size=batch_size, reduction=reduction)
    seconds = time.perf_counter() - start
    scores, n = {}, 0
    for rel in results:
        for _, row in rel.instance_table.iterrows():
            scores[(rel.relation_code, int(row["instance_index"]), int(row["template_index"]))] = (
                list(row["pll_scores"]),
                int(row["answer_idx"]),
            )
            n += len(row["pll_scores"])
    return scores, seconds, n, results


# --------------------------------------------------------------------------- confidence metrics

CONFIDENCE = ("avg_softmax", "margin_of_confidence", "confidence_score", "uncertainty_score", "brier_score")


def _diff(a, b) -> float:
    """Largest absolute difference of two values (scalars, vectors, or None for an empty subset)."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not np.isfinite(a).any() and not np.isfinite(b).any():
        return 0.0  # undefined in both (an uncertainty over one distinct answer: log2 1 = 0)
    return float(np.max(np.abs(a - b)))


def _by_relation(scores: dict) -> dict[str, tuple[list, list]]:
    """{relation: (option scores, gold)} in (row, template) order."""
    out: dict[str, tuple[list, list]] = {}
    for (rel, _, _), (s, gold) in sorted(scores.items()):
        out.setdefault(rel, ([], []))[0].append(s)
        out[rel][1].append(gold)
    return out


def lpq_instance_terms(scores: list, gold: int, answers: list[int]) -> dict[str, object]:
    """lm-pub-quiz's metric classes on one (instance, template) row: its softmax, confidence, margin and
    Brier alone; its uncertainty on one copy of the row per distinct answer of the relation (``answers``),
    since the class divides the entropy by log2 of their number (every copy has the row's entropy)."""
    import warnings

    import pandas as pd
    from lm_pub_quiz.metrics.confidence import (
        BrierScore,
        ConfidenceMargin,
        ConfidenceScore,
        SoftmaxBase,
        UncertaintyScore,
    )

    def run(cls, rows: list[tuple[list, int]]) -> dict:
        metric = cls()
        metric.add_instances_from_table(
            pd.DataFrame({"pll_scores": [r[0] for r in rows], "answer_idx": [r[1] for r in rows]})
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # BrierScore's parent divides by log2(1) on one row
            return metric.compute()

    one = [(scores, gold)]
    return {
        "probs": run(SoftmaxBase, one)["avg_softmax"]["all"],
        "confidence": run(ConfidenceScore, one)["confidence_score"]["all"],
        "margin": run(ConfidenceMargin, one)["margin_of_confidence"]["all"],
        "brier": run(BrierScore, one)["brier_score"],
        "uncertainty": run(UncertaintyScore, [(scores, a) for a in answers])["uncertainty_score"]["all"],
    }


def compare_confidence(lpq_results, ref: dict, ours: dict) -> dict:
    """Max |ours - lm-pub-quiz| of each confidence metric: per relation and per instance on lm-pub-quiz's
    scores, and per relation on our harness's scores."""
    import warnings

    from belief_tasks.metrics.bear import instance_confidences, relation_confidence

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # its uncertainty divides by log2 1 = 0 on a one-answer relation
        theirs = {rel.relation_code: {m: rel.get_metric(m) for m in CONFIDENCE} for rel in lpq_results}
    per_relation, per_instance, on_our_scores, rows = {}, {}, {}, 0
    for source, target in ((ref, per_relation), (ours, on_our_scores)):
        for rel, (scores, golds) in _by_relation(source).items():
            mine = relation_confidence(scores, golds)
            for m in CONFIDENCE:
                pairs = (
                    [(mine[m], theirs[rel][m])]
                    if m == "brier_score"
                    else [(mine[m][k], theirs[rel][m][k]) for k in theirs[rel][m]]
                )
                target[m] = max([target.get(m, 0.0), *(_diff(a, b) for a, b in pairs)])
    for _rel, (scores, golds) in _by_relation(ref).items():
        mine, answers = instance_confidences(scores, golds), sorted(set(golds))
        for i, (s, g) in enumerate(zip(scores, golds)):
            lpq = lpq_instance_terms(s, g, answers)
            for term, value in lpq.items():
                per_instance[term] = max(per_instance.get(term, 0.0), _diff(mine[term][i], value))
            rows += 1
    return {
        "confidence_per_relation": per_relation,
        "confidence_per_instance": per_instance,
        "confidence_instances": rows,
        "confidence_on_our_scores": on_our_scores,
    }


def print_confidence(row: dict) -> None:
    print(f"  confidence metrics, ours vs lm-pub-quiz on lm-pub-quiz's scores ({row['confidence_instances']} rows):")
    print("    per relation  " + "  ".join(f"{m} {v:.1e}" for m, v in row["confidence_per_relation"].items()))
    print("    per instance  " + "  ".join(f"{m} {v:.1e}" for m, v in row["confidence_per_instance"].items()))
    print(
        "  on our harness's scores (float32 noise), per relation  "
        + "  ".join(f"{m} {v:.1e}" for m, v in row["confidence_on_our_scores"].items())
    )


def run_ours(
    kind: str, model_path: Path, subset: Path, *, batch_size: int, reduction: str, scoring: str, clm_backend: str = "hf"
) -> tuple[dict, float, dict]:
    """{(relation, row, template): (scores, gold)}, seconds, the harness's metrics."""
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir
    from belief_tasks.scoring.bear import record_scores

    if kind == "clm":
        from lm_eval.models.huggingface import HFLM

        if clm_backend == "hf-shared":
            from belief_tasks.backends.shared import HFSharedPrefixLM as HFLM  # noqa: N814
        # A non-empty context gets no BOS on lm-eval's hf unless the tokenizer adds one; lm-pub-quiz always
        # conditions on BOS, so the answer-only modes need add_bos_token=True (statement mode does not care).
        lm = HFLM(
            pretrained=str(model_path),
            dtype="float32",
            device="cpu",
            batch_size=batch_size,
            add_bos_token=scoring != "statement" or None,
        )
    else:
        from belief_tasks.backends.mlm import HFMaskedLM

        lm = HFMaskedLM(pretrained=str(model_path), dtype="float32", device="cpu", batch_size=batch_size)
    meta = {"bear_path": str(subset), "reduction": reduction, "scoring": scoring, "pretrained": str(model_path)}
    tm = TaskManager(include_path=str(task_yamls_dir()), metadata=meta)
    start = time.perf_counter()
    out = simple_evaluate(
        model=lm,
        tasks=["belief_bear"],
        task_manager=tm,
        metadata=meta,
        log_samples=True,
        batch_size=batch_size,
        bootstrap_iters=1000,
        verbosity="WARNING",
    )
    seconds = time.perf_counter() - start
    scores = {}
    for s in out["samples"]["belief_bear"]:
        rec = s["bear"]
        row = int(rec["fact_id"].rsplit("_", 1)[1]) - 1  # fact ids carry the 1-based jsonl line
        scores[(rec["relation"], row, rec["template_index"])] = (record_scores(rec).tolist(), rec["gold"][0])
    return scores, seconds, out["results"]["belief_bear"]


def compare(ref: dict, ours: dict) -> dict:
    """Agreement and score differences per (instance, template)."""
    from belief_tasks.metrics.bear import ranking

    if set(ref) != set(ours):
        raise SystemExit(f"different instances: {len(set(ref) ^ set(ours))} keys differ")
    agree, diffs, ref_ok, our_ok, disagreements = 0, [], 0, 0, []
    for key in sorted(ref):
        (a, gold_a), (b, gold_b) = ref[key], ours[key]
        assert gold_a == gold_b, (key, gold_a, gold_b)
        pa = a.index(max(a))  # lm-pub-quiz's Accuracy
        pb = int(ranking(b)[0])
        agree += pa == pb
        ref_ok += pa == gold_a
        our_ok += pb == gold_b
        diffs.append(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))))
        if pa != pb:
            disagreements.append({"key": key, "ref": pa, "ours": pb, "max_diff": diffs[-1]})
    n = len(ref)
    return {
        "pairs": n,
        "agreement": agree / n,
        "acc_lm_pub_quiz": ref_ok / n,
        "acc_ours": our_ok / n,
        "max_abs_score_diff": max(diffs),
        "disagreements": disagreements[:10],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bear-path", type=Path, default=DEFAULT_BEAR)
    ap.add_argument("--relations", default=DEFAULT_RELATIONS)
    ap.add_argument("--max-instances", type=int, default=20)
    ap.add_argument("--models", default="clm,mlm", help="clm (bundled SmolLM2), mlm (tiny BERT), or both")
    ap.add_argument("--clm-path", type=Path, default=None, help="causal model folder (default: the bundled one)")
    ap.add_argument("--clm-backend", default="hf", choices=["hf", "hf-shared"], help="our backend for the causal model")
    ap.add_argument("--variants", default="sum", help="comma list of sum, mean, conditional")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from belief_tasks.commands.default_model import default_model_path

    work = Path(tempfile.mkdtemp(prefix="parity_bear_"))
    subset = make_subset(
        args.bear_path, [r.strip() for r in args.relations.split(",")], args.max_instances, work / "BEAR"
    )
    models = {}
    for kind in args.models.split(","):
        if kind == "clm":
            models["clm"] = args.clm_path or default_model_path()
        elif kind == "mlm":
            models["mlm"] = build_tiny_bert(work / "tiny-bert", statements_of(subset))
        else:
            raise SystemExit(f"unknown model kind {kind!r}")

    report = []
    print(
        f"subset: {args.relations} (first {args.max_instances} instances each), torch threads {torch.get_num_threads()}"
    )
    for kind, path in models.items():
        for variant in args.variants.split(","):
            if variant == "conditional" and kind == "mlm":
                continue
            reduction = "mean" if variant == "mean" else "sum"
            conditional = variant == "conditional"
            ref, t_ref, n_statements, lpq_results = run_lm_pub_quiz(
                kind, path, subset, batch_size=args.batch_size, reduction=reduction, conditional=conditional
            )
            ours, t_ours, metrics = run_ours(
                kind,
                path,
                subset,
                batch_size=args.batch_size,
                reduction=reduction,
                scoring="answer_to_end" if conditional else "statement",
                clm_backend=args.clm_backend,
            )
            row = {
                "model": kind,
                "backend": args.clm_backend if kind == "clm" else "hf-mlm",
                "variant": variant,
                **compare(ref, ours),
                "statements": n_statements,
                "seconds_lm_pub_quiz": t_ref,
                "seconds_ours": t_ours,
                "throughput_ratio_ours_over_ref": (t_ref / t_ours) if t_ours else float("nan"),
                "bear": metrics.get("bear,none"),
                "bear_stderr": metrics.get("bear_stderr,none"),
                **compare_confidence(lpq_results, ref, ours),
            }
            report.append(row)
            print(f"\n== {kind} ({path.name}) on {row['backend']}, {variant}")
            print(f"  (instance, template) pairs      {row['pairs']}  ({n_statements} statements)")
            print(f"  prediction agreement            {row['agreement']:.4f}")
            print(f"  accuracy lm-pub-quiz / ours     {row['acc_lm_pub_quiz']:.4f} / {row['acc_ours']:.4f}")
            print(f"  max |score difference|          {row['max_abs_score_diff']:.2e}")
            print(
                f"  seconds lm-pub-quiz / ours      {t_ref:.1f} / {t_ours:.1f}  "
                f"(throughput ours / lm-pub-quiz: {row['throughput_ratio_ours_over_ref']:.2f}x)"
            )
            print_confidence(row)
            for d in row["disagreements"]:
                print(f"  disagreement {d}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    ok = all(r["max_abs_score_diff"] <= 1e-4 and r["agreement"] == 1.0 for r in report)
    ok = ok and all(
        max([*r["confidence_per_relation"].values(), *r["confidence_per_instance"].values()]) <= 1e-9 for r in report
    )
    print("\nPARITY", "OK" if ok else "DIFFERS (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
