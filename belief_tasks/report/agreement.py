"""Agreement between probes: do the four method families agree on which facts a model knows?

No paper can ask this: each probes its own dataset. Our tasks share one fact schema, so each fact is known
or not under each probe's own rule (``belief_tasks.families``: each family's ``known``), and the probes can
be compared fact by fact wherever they probed the same facts.

Facts are joined never by position: two probes of one dataset by fact id; probes of different datasets
(BEAR and BEAR-big, FKTC, MyriadLAMA, T-REx-MC) by the cross-dataset key each record carries
(``fact_key``; ``belief_tasks.facts.join``: Wikidata ids, else subject label or alias with agreeing
objects). Facts whose objects disagree between the datasets are conflicts, listed and not compared.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from belief_tasks.facts.join import BY_FACT_ID, BY_ID, BY_LABEL, Join, join_keys, join_same_dataset
from belief_tasks.facts.schema import FactKey
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
    keys: dict[str, FactKey] = field(default_factory=dict)  # fact id -> cross-dataset key, where logged

    def key_text(self, fact: str) -> str:
        return self.keys[fact].text if fact in self.keys else ""


def probes_of(run) -> list[Probe]:
    out = []
    for name, task in sorted(run.tasks.items()):
        family = FAMILIES.get(task.family)
        if family is None or not task.has_records:
            continue
        records = [r for r in task.records() if isinstance(r, dict) and r.get("fact_id") is not None]
        if records:
            keys = {r["fact_id"]: FactKey.from_record(r["fact_key"]) for r in records if r.get("fact_key")}
            out.append(
                Probe(name, task.dataset, family.known(records), {r["fact_id"]: r["relation"] for r in records}, keys)
            )
    return out


def join(a: Probe, b: Probe) -> Join | None:
    """The facts two probes share: by fact id on one dataset, by key across datasets (None: records of
    a dataset without keys, which cannot be joined to another dataset)."""
    if a.dataset == b.dataset:
        return join_same_dataset(a.known, b.known)
    if not a.keys or not b.keys:
        return None
    return join_keys(
        {f: k for f, k in a.keys.items() if f in a.known}, {f: k for f, k in b.keys.items() if f in b.known}
    )


def _rules(j: Join) -> str:
    counts = j.counts()
    return ", ".join(f"{rule} {counts[rule]}" for rule in (BY_FACT_ID, BY_ID, BY_LABEL) if counts[rule]) or "–"


def compare(a: Probe, b: Probe, j: Join, seed: int = 0) -> dict:
    """κ with its bootstrap interval, raw agreement, each probe's share of known facts (κ's margins) and the
    both / one / neither shares on the joined facts, and how they were joined."""
    x, y = [a.known[m.a] for m in j.joined], [b.known[m.b] for m in j.joined]
    lo, hi = kappa_interval(x, y, iters=BOOTSTRAP_ITERS, seed=seed)
    datasets = a.dataset if a.dataset == b.dataset else f"{a.dataset} / {b.dataset}"
    table = agreement_table(x, y)
    return {
        "probe_a": a.task,
        "probe_b": b.task,
        "datasets": datasets,
        "kappa": cohen_kappa(x, y),
        "kappa_lo": lo,
        "kappa_hi": hi,
        "known_a": table["both"] + table["only_a"],
        "known_b": table["both"] + table["only_b"],
        **table,
        "joined_by": _rules(j),
        **j.counts(),
    }


def per_relation(a: Probe, b: Probe, j: Join) -> list[dict]:
    rows = []
    rel = {m: a.keys[m.a].relation if m.a in a.keys else a.relation[m.a] for m in j.joined}
    for r in sorted(set(rel.values())):
        matches = [m for m in j.joined if rel[m] == r]
        x, y = [a.known[m.a] for m in matches], [b.known[m.b] for m in matches]
        rows.append(
            {"probe_a": a.task, "probe_b": b.task, "relation": r, "kappa": cohen_kappa(x, y), **agreement_table(x, y)}
        )
    return rows


def _components(probes: list[Probe], joins: dict[tuple[int, int], Join]) -> list[list[tuple[int, str]]]:
    """Facts of every probe, (probe index, fact id), grouped by the joins (one group = one fact)."""
    parent: dict[tuple[int, str], tuple[int, str]] = {(i, f): (i, f) for i, p in enumerate(probes) for f in p.known}

    def root(n):
        while parent[n] != n:
            parent[n] = n = parent[parent[n]]
        return n

    for (i, k), j in joins.items():
        for m in j.joined:
            parent[root((i, m.a))] = root((k, m.b))
    groups: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for n in parent:
        groups.setdefault(root(n), []).append(n)
    return [sorted(g) for g in groups.values()]


def fact_table(probes: list[Probe], joins: dict[tuple[int, int], Join]) -> pd.DataFrame:
    """One row per fact (joined across probes), with its key and relation; per probe: known / not
    known / not probed, and the probe's own fact id."""
    rows = []
    for group in _components(probes, joins):
        i, f = group[0]
        row = {"fact_key": probes[i].key_text(f), "relation": probes[i].relation[f]}
        for k, p in enumerate(probes):
            mine = [fact for n, fact in group if n == k]
            row[p.task] = "; ".join(KNOWN if p.known[x] else NOT_KNOWN for x in mine) or NOT_PROBED
            row[f"{p.task} fact_id"] = "; ".join(mine)
        rows.append(row)
    return pd.DataFrame(rows).sort_values(
        ["relation", "fact_key"] + [f"{p.task} fact_id" for p in probes], kind="stable", ignore_index=True
    )


def conflict_table(probes: list[Probe], joins: dict[tuple[int, int], Join]) -> pd.DataFrame:
    """Facts that two datasets give different objects: same relation and subject, objects disagree."""
    rows = [
        {
            "probe_a": probes[i].task,
            "fact_a": m.a,
            "probe_b": probes[k].task,
            "fact_b": m.b,
            "subject_by": m.rule,
            "key_a": probes[i].key_text(m.a),
            "key_b": probes[k].key_text(m.b),
            "objects_a": " | ".join(probes[i].keys[m.a].objects),
            "objects_b": " | ".join(probes[k].keys[m.b].objects),
        }
        for (i, k), j in joins.items()
        for m in j.conflicts
    ]
    return pd.DataFrame(
        rows,
        columns=["probe_a", "fact_a", "probe_b", "fact_b", "subject_by", "key_a", "key_b", "objects_a", "objects_b"],
    )


def summary_line(pairs: list[dict]) -> str | None:
    """ "probes agree on 71% of shared facts (mean κ 0.42)": agreement pooled over pairs, κ averaged."""
    pairs = [p for p in pairs if p["n"]]
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


def _unjoined(probes: list[Probe], joins: dict[tuple[int, int], Join]) -> list[str]:
    """Pairs of probes on different datasets that cannot be joined: a probe's records carry no fact keys."""
    return [
        f"{a.task} (`{a.dataset}`) and {b.task} (`{b.dataset}`): "
        f"{', '.join(p.task for p in (a, b) if not p.keys)} logged no fact keys"
        for (i, a), (k, b) in itertools.combinations(enumerate(probes), 2)
        if (i, k) not in joins
    ]


def _joins(probes: list[Probe]) -> dict[tuple[int, int], Join]:
    return {
        (i, k): j for (i, a), (k, b) in itertools.combinations(enumerate(probes), 2) if (j := join(a, b)) is not None
    }


def _pair_table(pairs: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "Probe A": p["probe_a"],
                "Probe B": p["probe_b"],
                "Datasets": p["datasets"],
                "Facts": p["n"],
                "Joined by": p["joined_by"],
                "Conflicts": p["conflicts"],
                "κ [95% CI]": f"{fmt(p['kappa'], 2)} [{fmt(p['kappa_lo'], 2)}, {fmt(p['kappa_hi'], 2)}]",
                "A knows": fmt(p["known_a"], 3),
                "B knows": fmt(p["known_b"], 3),
                "Agreement": fmt(p["agreement"], 3),
                "Both": fmt(p["both"], 3),
                "A only": fmt(p["only_a"], 3),
                "B only": fmt(p["only_b"], 3),
                "Neither": fmt(p["neither"], 3),
            }
            for p in pairs
        ]
    )


def _per_fact_files(ctx: Context, run, probes: list[Probe], joins: dict[tuple[int, int], Join]) -> list[str]:
    """The per-fact CSV and, where datasets disagree, the conflicts CSV; Markdown lines naming them."""
    out, name = ctx.writer.out / "tables", slug(run.name)
    facts = fact_table(probes, joins)
    facts.to_csv(out / f"agreement_facts_{name}.csv", index=False)
    md = [
        f"Per fact: `tables/agreement_facts_{name}.csv` ({len(facts)} facts x {len(probes)} probes: each probe's "
        "known / not known / not probed and its own fact id, with the fact's cross-dataset key).\n"
    ]
    conflicts = conflict_table(probes, joins)
    if len(conflicts):
        conflicts.to_csv(out / f"agreement_conflicts_{name}.csv", index=False)
        md.append(
            f"Conflicts (same relation and subject, objects disagree; not compared): "
            f"`tables/agreement_conflicts_{name}.csv` ({len(conflicts)}).\n"
        )
    return md


def _run_section(ctx: Context, run, probes: list[Probe]) -> tuple[list[str], list[dict], list[dict]]:
    w, joins = ctx.writer, _joins(probes)
    pairs = [compare(probes[i], probes[k], j) for (i, k), j in joins.items()]
    rels = [row for (i, k), j in joins.items() for row in per_relation(probes[i], probes[k], j)]
    md = [f"### {run.name}\n", *_per_fact_files(ctx, run, probes, joins)]
    md += [f"- not joined: {line}\n" for line in _unjoined(probes, joins)]
    if not any(p["n"] for p in pairs):
        md.append("*No two probes of this run share facts.*\n")
        return md, pairs, rels
    md.append(
        w.table(
            _pair_table(pairs),
            f"agreement_pairs_{slug(run.name)}",
            "Every pair of probes on their joined facts (Joined by: the rule that joined them).",
            csv=pd.DataFrame(pairs),
        )
    )
    md.append(w.table(pd.DataFrame(rels), f"agreement_relations_{slug(run.name)}", "Per relation.", digits=3))
    if len(probes) > 2 or len(pairs) > 1:
        fig = heatmap(
            _kappa_matrix(probes, pairs),
            f"Cohen's κ between probes: {run.name}",
            "probe",
            "probe",
            "κ",
            vmin=-1.0,
            vmax=1.0,
        )
        md.append(w.figure(fig, f"agreement_kappa_{slug(run.name)}", "Cohen's κ between probes"))
    return md, pairs, rels


def build(ctx: Context) -> Section | None:
    md = [
        f"## {TITLE}\n",
        "Whether the probes agree on *which* facts a model knows, fact by fact, where two probes probed the same "
        "facts. Known, per family: BELIEF-ICL and encoder BELIEF, right (any subject expression) under most of "
        "the fact's templates (v3 section 6.4's covered facts); BEAR, the gold option first under most templates; "
        "IC-LKE, φ(θ, F); MONITOR, the primary anchor's answer right. Two probes of one dataset are joined by "
        f"fact id (rule *{BY_FACT_ID}*); probes of different datasets by the fact key their records carry: the "
        f"same relation, the same subject by Wikidata id (rule *{BY_ID}*) or else by label or alias, with gold "
        f"objects that agree (rule *{BY_LABEL}*). Where the datasets give one subject different objects, the "
        "fact is a conflict, counted and not compared. κ is Cohen's, with a percentile bootstrap interval over "
        f"the joined facts ({BOOTSTRAP_ITERS} resamples) at a nominal 95%: measured by simulation, it holds the "
        "true κ in 93-95% of samples of 24 to 156 facts that each probe knows 32-71% of, but in about 85% with 40 "
        "facts that each probe knows 15% of (docs/report.md). A knows, B knows: each probe's share of the joined "
        'facts it knows (κ\'s margins). The probes differ in data, difficulty and in what "known" '
        "means, so agreement measures how far they pick out the same facts, not which probe is right.\n",
    ]
    card, summary, found = {}, [], False
    for run in ctx.runs:
        probes = probes_of(run)
        if len(probes) < 2:
            continue
        found = True
        part, pairs, _ = _run_section(ctx, run, probes)
        md += part
        line = summary_line(pairs)
        if line:
            card[run.name] = [CardEntry("agreement", FAMILY, "probes", line)]
            summary.append(f"{run.name}: {line}")
    if not found:
        return None
    return Section(TITLE, "\n".join(md), summary=summary, card=card)
