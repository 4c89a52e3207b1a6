"""Agreement between probes: do the four method families agree on which facts a model knows?

No paper can ask this: each probes its own dataset. Our tasks share one fact schema, so where two
probes of one model run read the same dataset (the bundled sample for every family; BEAR for
``belief_bear`` and ``belief_mlm_bear``), each fact is known or not under each probe's own rule
(``belief_tasks.families``: each family's ``known``), and the probes can be compared fact by fact.

Facts are joined by (dataset, fact id), never by position. Probes on different datasets are never
joined, even when the datasets overlap (BEAR and BEAR-big number their instances differently).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from belief_tasks.families import FAMILIES
from belief_tasks.metrics.agreement import agreement_table, cohen_kappa, kappa_interval
from belief_tasks.report.base import CardEntry, Context, Section
from belief_tasks.report.output import fmt, heatmap, slug

TITLE = "Agreement between probes"
FAMILY = "across probes"
KNOWN, NOT_KNOWN, NOT_PROBED = "known", "not known", "not probed"
BOOTSTRAP_ITERS = 1000


@dataclass
class Probe:
    """One task of one run, reduced to: which facts of which dataset it says the model knows."""

    task: str
    dataset: str
    known: dict[str, bool]  # fact id -> known
    relation: dict[str, str]  # fact id -> relation


def probes_of(run) -> list[Probe]:
    out = []
    for name, task in sorted(run.tasks.items()):
        family = FAMILIES.get(task.family)
        if family is None or not task.has_records:
            continue
        records = [r for r in task.records() if isinstance(r, dict) and r.get("fact_id") is not None]
        if records:
            out.append(Probe(name, task.dataset, family.known(records), {r["fact_id"]: r["relation"] for r in records}))
    return out


def compare(a: Probe, b: Probe, seed: int = 0) -> dict | None:
    """κ with its bootstrap interval, raw agreement and the both / one / neither shares on shared facts."""
    if a.dataset != b.dataset:
        return None
    shared = sorted(set(a.known) & set(b.known))
    if not shared:
        return None
    x, y = [a.known[f] for f in shared], [b.known[f] for f in shared]
    lo, hi = kappa_interval(x, y, iters=BOOTSTRAP_ITERS, seed=seed)
    return {"probe_a": a.task, "probe_b": b.task, "dataset": a.dataset, "kappa": cohen_kappa(x, y),
            "kappa_lo": lo, "kappa_hi": hi, **agreement_table(x, y)}


def per_relation(a: Probe, b: Probe) -> list[dict]:
    rows = []
    shared = set(a.known) & set(b.known) if a.dataset == b.dataset else set()
    for rel in sorted({a.relation[f] for f in shared}):
        facts = sorted(f for f in shared if a.relation[f] == rel)
        x, y = [a.known[f] for f in facts], [b.known[f] for f in facts]
        rows.append({"probe_a": a.task, "probe_b": b.task, "relation": rel, "kappa": cohen_kappa(x, y),
                     **agreement_table(x, y)})
    return rows


def fact_table(probes: list[Probe]) -> pd.DataFrame:
    """One row per (dataset, fact), one column per probe: known / not known / not probed."""
    keys = sorted({(p.dataset, f, p.relation[f]) for p in probes for f in p.known})
    rows = []
    for dataset, fact, rel in keys:
        row = {"dataset": dataset, "fact_id": fact, "relation": rel}
        for p in probes:
            row[p.task] = NOT_PROBED if p.dataset != dataset or fact not in p.known else KNOWN if p.known[fact] else NOT_KNOWN
        rows.append(row)
    return pd.DataFrame(rows)


def summary_line(pairs: list[dict]) -> str | None:
    """"probes agree on 71% of shared facts (mean κ 0.42)": agreement pooled over pairs, κ averaged."""
    if not pairs:
        return None
    n = sum(p["n"] for p in pairs)
    pooled = sum(p["agreement"] * p["n"] for p in pairs) / n
    kappas = [p["kappa"] for p in pairs if not np.isnan(p["kappa"])]
    kappa = f"mean κ {np.mean(kappas):.2f}" if kappas else "κ undefined"
    return f"probes agree on {pooled:.0%} of shared facts ({kappa}, {len(pairs)} probe pair{'s' * (len(pairs) != 1)})"


def _kappa_matrix(probes: list[Probe], pairs: list[dict]) -> pd.DataFrame:
    names = [p.task for p in probes]
    mat = pd.DataFrame(np.nan, index=names, columns=names)
    for p in pairs:
        mat.loc[p["probe_a"], p["probe_b"]] = mat.loc[p["probe_b"], p["probe_a"]] = p["kappa"]
    for name in names:
        mat.loc[name, name] = 1.0
    return mat


def _unjoined(probes: list[Probe]) -> list[str]:
    datasets = sorted({p.dataset for p in probes})
    if len(datasets) < 2:
        return []
    return [f"`{d}`: " + ", ".join(p.task for p in probes if p.dataset == d) for d in datasets]


def _run_section(ctx: Context, run, probes: list[Probe]) -> tuple[list[str], list[dict], list[dict]]:
    w = ctx.writer
    pairs = [c for a, b in itertools.combinations(probes, 2) if (c := compare(a, b)) is not None]
    rels = [row for a, b in itertools.combinations(probes, 2) for row in per_relation(a, b)]
    md = [f"### {run.name}\n"]
    facts = fact_table(probes)
    facts.to_csv(w.out / "tables" / f"agreement_facts_{slug(run.name)}.csv", index=False)
    md.append(f"Per fact: `tables/agreement_facts_{slug(run.name)}.csv` ({len(facts)} facts x {len(probes)} probes).\n")
    if not pairs:
        md.append("*No two probes of this run share facts.*\n")
        return md, pairs, rels
    shown = pd.DataFrame([{"Probe A": p["probe_a"], "Probe B": p["probe_b"], "Facts": p["n"],
                           "κ [95% CI]": f"{fmt(p['kappa'], 2)} [{fmt(p['kappa_lo'], 2)}, {fmt(p['kappa_hi'], 2)}]",
                           "Agreement": fmt(p["agreement"], 3), "Both": fmt(p["both"], 3), "A only": fmt(p["only_a"], 3),
                           "B only": fmt(p["only_b"], 3), "Neither": fmt(p["neither"], 3)} for p in pairs])
    md.append(w.table(shown, f"agreement_pairs_{slug(run.name)}", "Every pair of probes on their shared facts.",
                      csv=pd.DataFrame(pairs)))
    md.append(w.table(pd.DataFrame(rels), f"agreement_relations_{slug(run.name)}", "Per relation.", digits=3))
    if len(probes) > 2 or len(pairs) > 1:
        fig = heatmap(_kappa_matrix(probes, pairs), f"Cohen's κ between probes: {run.name}", "probe", "probe", "κ",
                      vmin=-1.0, vmax=1.0)
        md.append(w.figure(fig, f"agreement_kappa_{slug(run.name)}", "Cohen's κ between probes"))
    return md, pairs, rels


def build(ctx: Context) -> Section | None:
    md = [f"## {TITLE}\n",
          "Whether the probes agree on *which* facts a model knows, fact by fact, where two probes read the same "
          "dataset. Known, per family: BELIEF-ICL and encoder BELIEF, right (any subject expression) under most of "
          "the fact's templates (v3 section 6.4's covered facts); BEAR, the gold option first under most templates; "
          "IC-LKE, φ(θ, F); MONITOR, the primary anchor's answer right. κ is Cohen's, with a 95% bootstrap interval "
          f"over facts ({BOOTSTRAP_ITERS} resamples). The probes differ in data, difficulty and in what \"known\" "
          "means, so agreement measures how far they pick out the same facts, not which probe is right.\n"]
    card, summary, found = {}, [], False
    for run in ctx.runs:
        probes = probes_of(run)
        if len(probes) < 2:
            continue
        found = True
        part, pairs, _ = _run_section(ctx, run, probes)
        md += part
        for line in _unjoined(probes):
            md.append(f"- not joined across datasets: {line}\n")
        line = summary_line(pairs)
        if line:
            card[run.name] = [CardEntry("agreement", FAMILY, "probes", line)]
            summary.append(f"{run.name}: {line}")
    if not found:
        return None
    return Section(TITLE, "\n".join(md), summary=summary, card=card)
