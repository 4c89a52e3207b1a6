"""The coverage study behind the budgeted intervals (``scripts/budget_coverage.py``, docs/budget.md).

A research study, not part of the runtime package: ``belief_tasks`` never imports it (``research/``).

A *population* is every fact of a full run as per-fact columns (``metrics.intervals.Units``) with the
family's statistics (each metric's ``budgeted`` in ``scoring.<family>.METRICS``); its full-data values are the
statistics on every fact. ``simulate`` draws budgeted samples of it again and again with the project's own sampler
(``belief_tasks.facts.budget``: seed s ranks each relation's facts by their seeded hash, a budget keeps each
relation's ``allocation`` first ones, so the budgets of one seed are nested as in real runs) and the
project's own intervals, and reports per budget and metric how often the 95 % interval covers the
full-data value, its mean half-width, the bias and the spread of the estimates.

Populations come from the logged records of a full run (``belief_tasks.scoring.<family>.budget_units``)
or from the synthetic generators below, in the MyriadLAMA and BEAR layouts with heterogeneous
relations (sizes, difficulty), templates and subject aliases. The per-fact columns are computed once;
each draw only indexes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from belief_tasks.facts import budget
from belief_tasks.metrics.intervals import Design, StatisticFn, Totals, Units, intervals, t_quantile, totals
from belief_tasks.scoring.common import Metric, budget_statistics, not_estimable

BUDGETS = (0.01, 0.05, 0.2)


@dataclass
class Population:
    """Every fact of a full run: per-fact columns, the family's statistics, what is not estimable."""

    name: str
    family: str
    units: Units
    statistics: Mapping[str, StatisticFn]
    not_estimable: tuple = ()
    note: str = ""
    _truth: dict = field(default_factory=dict)

    @property
    def truth(self) -> dict[str, float]:
        """The full-data value of every statistic (every fact drawn)."""
        if not self._truth:
            design, _ = Design.of(self.units.relations, self.sizes())
            T = Totals(totals(design, self.units.values), self.units.columns)
            self._truth.update({m: float(g(T)) for m, g in self.statistics.items()})
        return self._truth

    @classmethod
    def of(cls, name: str, family: str, units: Units, metrics: Mapping[str, Metric], note: str = "") -> "Population":
        """A population whose statistics are those a family's ``METRICS`` declare."""
        return cls(name, family, units, budget_statistics(metrics), not_estimable(metrics), note)

    def sizes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.units.relations:
            out[r] = out.get(r, 0) + 1
        return out


def draws(pop: Population, budgets, seed: int):
    """(budget, rows of the drawn units) for each budget, by the project's sampler with ``seed``."""
    by_relation = budget.group_by_relation(range(len(pop.units.ids)), lambda i: pop.units.relations[i])
    ranked = {
        r: [rows[j] for j in budget.ranked([pop.units.ids[i] for i in rows], seed)] for r, rows in by_relation.items()
    }
    for b in budgets:
        yield b, np.array(sorted(i for rows in ranked.values() for i in rows[: budget.allocation(b, len(rows))]))


def simulate(
    pop: Population,
    budgets=BUDGETS,
    n_draws: int = 1000,
    method: str = "jackknife",
    first_seed: int = 0,
    reps: int = 200,
) -> list[dict]:
    """One row per (draw, budget, metric): estimate, standard error, interval, facts drawn."""
    sizes = pop.sizes()
    names = list(sizes)
    index = {r: h for h, r in enumerate(names)}
    strata = np.array([index[r] for r in pop.units.relations])
    population = np.array([sizes[r] for r in names], dtype=float)
    rows = []
    for seed in range(first_seed, first_seed + n_draws):
        for b, drawn in draws(pop, budgets, seed):
            design = Design(strata[drawn], population)
            sample = Units(pop.units.ids, pop.units.relations, pop.units.values[drawn], pop.units.columns)
            t = t_quantile(design.df)
            for m, iv in intervals(design, sample, pop.statistics, method, reps=reps, seed=seed).items():
                rows.append(
                    {
                        "seed": seed,
                        "budget": b,
                        "metric": m,
                        "estimate": iv.estimate,
                        "se": iv.se,
                        "low": iv.low,
                        "high": iv.high,
                        "facts": len(drawn),
                        "t_low": iv.estimate - t * iv.se,
                        "t_high": iv.estimate + t * iv.se,
                    }
                )
    return rows


def summarise(pop: Population, rows: list[dict]):
    """Per budget and metric: coverage of the full-data value, mean half-width, bias, the estimates'
    SD against the mean standard error, and the share of draws whose interval is undefined."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["metric"].map(lambda m: np.isfinite(pop.truth[m]))]  # undefined on the full data (no 1:1 relation)
    truth = df["metric"].map(pop.truth)
    df["covered"] = (df["low"] <= truth) & (truth <= df["high"])
    # a share's t interval that left [0, 1] was replaced by the score interval (metrics.intervals.wilson)
    df["score_interval"] = (df["t_low"] - df["low"]).abs().gt(1e-12) | (df["t_high"] - df["high"]).abs().gt(1e-12)
    df["covered_t"] = (df["t_low"] <= truth) & (truth <= df["t_high"])
    df["half_width"] = (df["high"] - df["low"]) / 2
    df["error"] = df["estimate"] - truth
    df["undefined"] = ~np.isfinite(df["se"])
    out = (
        df.groupby(["budget", "metric"], sort=False)
        .agg(
            draws=("seed", "size"),
            facts=("facts", "mean"),
            coverage=("covered", "mean"),
            half_width=("half_width", "mean"),
            bias=("error", "mean"),
            sd=("estimate", "std"),
            mean_se=("se", "mean"),
            undefined=("undefined", "mean"),
            score_interval=("score_interval", "mean"),
            coverage_t=("covered_t", "mean"),
        )
        .reset_index()
    )
    out.insert(2, "full_value", out["metric"].map(pop.truth))
    return out


# --------------------------------------------------------------------------- synthetic populations


def _relation_sizes(rng: np.random.Generator, relations: int, total: int, least: int) -> np.ndarray:
    """Heterogeneous relation sizes (log-normal shares) summing to ``total``, each at least ``least``."""
    share = rng.lognormal(0.0, 0.7, relations)
    sizes = least + np.floor(share / share.sum() * (total - least * relations)).astype(int)
    sizes[: total - sizes.sum()] += 1
    return sizes


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def synthetic_myriadlama(
    scale: float = 1.0,
    seed: int = 0,
    templates: int = 5,
    confidence_prompts: int = 10_000,
    samples: int = 100,
    model: int = 0,
    shift: float = 0.0,
) -> Population:
    """A MyriadLAMA-sized BELIEF-ICL run (41 relations, 24,643 pairs at scale 1; 5 manual MP templates,
    1-6 subject expressions per pair as MyriadLAMA's 2.6 on average) answered by a synthetic model.

    P(prompt correct) = sigmoid(z_pair + t_template + a_alias): pair knowledge z ~ N(relation mean, 1.8),
    relation means ~ N(-0.8, 1.2), template effects ~ N(0, 0.8) per relation, aliases below the label.
    Wrong answers come from three per-pair candidates (so wrong prompts partly agree), some with two
    words, 3 % empty. ``confidence_prompts`` pairs get a sampled prompt whose confidence is the share of
    ``samples`` draws matching it, slightly above its chance of being right (overconfidence).

    The facts, relations, templates and knowledge come from ``seed``; the answers from (``seed``,
    ``model``). Another ``model`` answers the same facts: its knowledge is z + ``shift`` + N(0, 0.5) per
    pair, so two models of one seed are a paired comparison on the same facts."""
    from belief_tasks.metrics.budgeted import belief as budgeted
    from belief_tasks.scoring import belief_icl

    rng, out = np.random.default_rng(seed), np.random.default_rng([seed, model])
    sizes = _relation_sizes(rng, 41, max(41 * 4, round(24_643 * scale)), 4 if scale < 0.2 else 40)
    cols: dict[str, list] = {k: [] for k in ("fact", "relation", "template", "correct", "answer")}
    prob_of: dict[str, np.ndarray] = {}
    for r, n in enumerate(sizes):
        rel = f"P{100 + 7 * r}"
        for i, p in enumerate(_myriadlama_relation(rng, out, n, templates, model, shift)):
            fid = f"{rel}_{i:05d}"
            ok = out.random(p.shape) < p
            wrong = [f"wrong{r}x{out.integers(0, 400)}" + (" Sal" if out.random() < 0.15 else "") for _ in range(3)]
            pick = out.choice(3, p.shape, p=out.dirichlet(np.ones(3) * 0.7))
            empty = out.random(p.shape) < 0.03
            answers = np.where(ok, f"gold{r}x{i % 97}", np.where(empty, "", np.array(wrong)[pick]))
            prob_of[fid] = p.ravel()
            cols["fact"] += [fid] * p.size
            cols["relation"] += [rel] * p.size
            cols["template"] += [f"{rel}_t{t}" for t in range(templates) for _ in range(p.shape[1])]
            cols["correct"] += ok.ravel().tolist()
            cols["answer"] += answers.ravel().tolist()
    sampled = _confidences(rng, out, cols, prob_of, confidence_prompts, samples)
    units = budgeted.units(cols["fact"], cols["relation"], cols["template"], cols["correct"], cols["answer"], sampled)
    name = f"synthetic MyriadLAMA (scale {scale:g}, seed {seed}" + (f", model {model})" if model else ")")
    return Population.of(
        name,
        "belief_icl",
        units,
        belief_icl.METRICS,
        f"{len(units.ids):,} pairs, {len(sizes)} relations, {len(cols['fact']):,} prompts",
    )


def _myriadlama_relation(rng, out, n: int, templates: int, model: int, shift: float):
    """Each pair's (templates x subject expressions) chances of a right prompt; the relation's structure
    from ``rng``, a second model's own knowledge from ``out``."""
    mu, tau = rng.normal(-0.8, 1.2), rng.normal(0, 0.8, templates)
    z = rng.normal(mu, 1.8, n)
    forms = rng.choice(np.arange(1, 7), n, p=np.array((0.275, 0.26, 0.2, 0.13, 0.09, 0.045)))
    aliases = [np.concatenate([[0.0], rng.normal(-0.5, 0.3, k - 1)]) for k in forms]
    if model:
        z = z + shift + out.normal(0, 0.5, n)
    return [_sigmoid(z[i] + tau[:, None] + aliases[i][None, :]) for i in range(n)]


def paired_population(a: Population, b: Population) -> Population:
    """Two runs on the same facts as one population whose statistics are the differences A - B (the
    paired intervals of ``belief-report``)."""
    from belief_tasks.metrics.intervals import difference, paired

    return Population(
        f"{a.name} minus {b.name}",
        a.family,
        paired(a.units, b.units),
        {m: difference(g, b.statistics[m]) for m, g in a.statistics.items()},
        a.not_estimable,
        f"{a.note}; paired",
    )


def _confidences(rng, out, cols, prob_of, k: int, samples: int) -> dict[str, tuple[float, bool]]:
    """pair -> (confidence, correct) of one sampled prompt, for ``k`` pairs: which pairs and prompts from
    ``rng`` (the run's, not the model's), the confidences from ``out``."""
    facts = list(prob_of)
    first = {}
    for j, f in enumerate(cols["fact"]):
        first.setdefault(f, j)
    out_ = {}
    for f in rng.choice(facts, min(k, len(facts)), replace=False):
        j = rng.integers(0, len(prob_of[f]))
        q = np.clip(prob_of[f][j] + 0.08 + out.normal(0, 0.1), 0.01, 0.99)
        out_[str(f)] = (out.binomial(samples, q) / samples, bool(cols["correct"][first[f] + j]))
    return out_


def synthetic_bear(scale: float = 1.0, seed: int = 0, templates: int = 3) -> Population:
    """A BEAR-sized run (60 relations, 7,731 instances at scale 1, 3 templates, answer spaces of 5-100
    options, 12 % of relations 1:1). P(gold first) = sigmoid(z + t_template); otherwise its rank is
    skewed towards the top of the answer space. Each doc's softmax terms (lm-pub-quiz's confidence,
    margin, Brier) follow the same skill, higher when the top option is right."""
    from belief_tasks.metrics.budgeted import bear as budgeted
    from belief_tasks.scoring import bear

    rng = np.random.default_rng(seed)
    sizes = _relation_sizes(rng, 60, max(60 * 4, round(7_731 * scale)), 4 if scale < 0.2 else 20)
    facts, relations, tpl, ranks, one = [], [], [], [], []
    confidences: dict[str, list] = {"correct": [], **{t: [] for t in budgeted.CONFIDENCE_TERMS}}
    terms = np.random.default_rng([seed, 1])  # its own stream: the ranks are those of the study without them
    for r, n in enumerate(sizes):
        rel, options = f"P{200 + 3 * r}", int(rng.integers(5, 101))
        mu, tau = rng.normal(-0.6, 1.0), rng.normal(0, 0.6, templates)
        z = rng.normal(mu, 1.5, n)
        is_1to1 = rng.random() < 0.12
        for i in range(n):
            first = rng.random(templates) < _sigmoid(z[i] + tau)
            rank = np.where(first, 0, 1 + np.floor(rng.random(templates) ** 2 * (options - 1))).astype(int)
            facts += [f"{rel}_{i:05d}"] * templates
            relations += [rel] * templates
            tpl += list(range(templates))
            ranks += rank.tolist()
            one += [is_1to1] * templates
            _bear_confidences(terms, confidences, first, z[i] + tau, options)
    units = budgeted.units(facts, relations, tpl, ranks, one, confidences)
    return Population.of(
        f"synthetic BEAR (scale {scale:g}, seed {seed})",
        "bear",
        units,
        bear.METRICS,
        f"{len(units.ids):,} instances, {len(sizes)} relations, {len(facts):,} (instance, template) docs",
    )


def _bear_confidences(rng, out: dict, first: np.ndarray, skill: np.ndarray, options: int) -> None:
    """Each doc's softmax terms: the top option's probability rises with the fact's skill, more when it is
    right; the runner-up takes part of the rest; Brier from the gold option's probability."""
    top = _sigmoid(skill + np.where(first, 1.0, -0.5) + rng.normal(0, 0.8, len(first)))
    second = (1 - top) * rng.uniform(0.2, 0.9, len(first))
    gold = np.where(first, top, second * rng.uniform(0, 1, len(first)))
    out["correct"] += first.astype(float).tolist()
    out["confidence"] += top.tolist()
    out["margin"] += (top - np.minimum(second, top)).tolist()
    out["brier"] += (((1 - gold) ** 2 + top**2 * (1 - first) + second**2) / options).tolist()


def _monitor_paper_columns(
    rng, k: float, effect: np.ndarray, interference: np.ndarray, units: int
) -> tuple[list, dict]:
    """A fact's R x M frame-interference answers (right with sigmoid(k + frame effect + negative effect)) and
    its request / token counts (anchors scored per_token, answers of 1-16 tokens)."""
    grid = (
        rng.random((len(effect), len(interference))) < _sigmoid(k + effect[:, None] + interference[None, :])
    ).astype(int)
    prompt = rng.integers(10, 21, 1 + len(effect) + len(interference))
    answered = 1 + len(effect)
    cost = {
        "cost_anchor_requests": len(prompt),
        "cost_anchor_tokens": int(prompt.sum()) + units * len(prompt),
        "cost_answer_requests": answered,
        "cost_answer_tokens": int(prompt[:answered].sum() + rng.integers(1, 17, answered).sum()),
        "cost_paper_requests": grid.size,
        "cost_paper_tokens": int(
            (prompt[answered:].sum() + 3 * len(effect)) * len(effect) + rng.integers(1, 17, grid.size).sum()
        ),
    }
    return grid.tolist(), cost


def synthetic_monitor(scale: float = 1.0, seed: int = 0) -> Population:
    """An FKTC-sized MONITOR run (20 relations, 16,198 facts at scale 1; 7 frames, 6 for two relations; 5
    negative contexts; objects of 1-3 subwords). A fact's knowledge k ~ N(relation mean, 1.2) sets its
    per-subword probabilities: sigmoid(k + 1.5) under the positive context, sigmoid(k + frame effect)
    under each frame, sigmoid(k - 1) under each negative, each with noise; greedy answers are right with
    the frames' and the positive context's probabilities, and behind each negative context (the R x M
    answers of ``monitor_accuracy: paper``) with sigmoid(k + frame effect + negative effect), the negative
    effects N(-1, 0.5) per relation; per-fact request and token counts as the task counts them."""
    from belief_tasks.metrics import monitor as monitor_metrics
    from belief_tasks.metrics.budgeted import monitor as budgeted
    from belief_tasks.scoring import monitor

    rng = np.random.default_rng(seed)
    sizes = _relation_sizes(rng, 20, max(20 * 4, round(16_198 * scale)), 4 if scale < 0.2 else 200)
    ids, relations, quantities, correct, positive, grids = [], [], [], [], [], []
    costs: dict[str, list] = {name: [] for name in budgeted.COSTS}
    paper = np.random.default_rng([seed, 1])  # its own stream: the anchors are those of the study without it
    for r, n in enumerate(sizes):
        mu, frames = rng.normal(-0.5, 1.0), 6 if r in (7, 13) else 7
        effect = rng.normal(0, 0.7, frames)
        interference = paper.normal(-1.0, 0.5, 5)
        for i in range(n):
            k, units = rng.normal(mu, 1.2), int(rng.integers(1, 4))

            def noisy(shift, k=k, units=units):
                return _sigmoid(k + shift + rng.normal(0, 0.4, units))

            quantities.append(
                monitor_metrics.fact_quantities(noisy(1.5), [noisy(e) for e in effect], [noisy(-1.0) for _ in range(5)])
            )
            correct.append((rng.random(frames) < _sigmoid(k + effect)).astype(int).tolist())
            positive.append(int(rng.random() < _sigmoid(k + 1.5)))
            ids.append(f"F{r}_{i:05d}"), relations.append(f"P{300 + r}")
            grid, cost = _monitor_paper_columns(paper, k, effect, interference, units)
            grids.append(grid)
            for name, value in cost.items():
                costs[name].append(value)
    units = budgeted.units(
        ids, relations, quantities, correct, positive, [True] * len(ids), monitor_metrics.DEFAULT_ALPHA, 7, grids, costs
    )
    return Population.of(
        f"synthetic FKTC (scale {scale:g}, seed {seed})",
        "monitor",
        units,
        monitor.METRICS,
        f"{len(ids):,} facts, {len(sizes)} relations",
    )


def synthetic_iclke(scale: float = 1.0, seed: int = 0, options: int = 100) -> Population:
    """A T-REx-MC-sized IC-LKE run (50 relations, 20,000 test facts at scale 1, 100 options). The gold
    option's log-probability is k + N(0, 1) with k ~ N(relation mean, 1.5), the others N(0, 1.5)."""
    from belief_tasks.metrics.budgeted import iclke as budgeted
    from belief_tasks.scoring import iclke

    rng = np.random.default_rng(seed)
    sizes = _relation_sizes(rng, 50, max(50 * 4, round(20_000 * scale)), 4 if scale < 0.2 else 100)
    ids, relations, logprobs, gold = [], [], [], []
    for r, n in enumerate(sizes):
        mu = rng.normal(1.5, 1.5)
        for i in range(n):
            lp = rng.normal(0, 1.5, options)
            g = int(rng.integers(0, options))
            lp[g] = rng.normal(mu, 1.5) + rng.normal(0, 1.0)
            ids.append(f"T{r}_{i:05d}"), relations.append(f"P{500 + r}"), logprobs.append(lp.tolist()), gold.append(g)
    units = budgeted.units(ids, logprobs, gold, relations)
    return Population.of(
        f"synthetic T-REx-MC (scale {scale:g}, seed {seed})",
        "iclke",
        units,
        iclke.METRICS,
        f"{len(ids):,} test facts, {len(sizes)} relations, {options} options",
    )


def synthetic_paired(scale: float = 1.0, seed: int = 0) -> Population:
    """Two synthetic models on the same MyriadLAMA facts (the second slightly better), their differences."""
    return paired_population(synthetic_myriadlama(scale, seed), synthetic_myriadlama(scale, seed, model=1, shift=0.3))


def synthetic_extreme_shares(scale: float = 1.0, seed: int = 0) -> Population:
    """Where a share's t interval leaves [0, 1]: BEAR 1:1 in size (8 small relations, 10-60 facts each at
    scale 1, so a budget draws 2 of most of them), facts right with a relation probability
    sigmoid(logit(p) + N(0, 1)) for overall shares p = 0.95 (``acc_high``) and 0.05 (``acc_low``),
    pooled and as a mean over relations (``macro_high``, ``macro_low``); each a ``share``."""
    from belief_tasks.metrics.budgeted import pooled, relation_mean
    from belief_tasks.metrics.intervals import share

    rng = np.random.default_rng(seed)
    sizes = np.maximum(4, np.round(rng.integers(10, 61, 8) * scale)).astype(int)
    cols: dict[str, list] = {"high": [], "low": [], "one": []}
    ids, relations = [], []
    for r, n in enumerate(sizes):
        for level, p in (("high", 0.95), ("low", 0.05)):
            pr = _sigmoid(np.log(p / (1 - p)) + rng.normal(0, 1))
            cols[level] += (rng.random(n) < pr).astype(float).tolist()
        cols["one"] += [1.0] * n
        ids += [f"S{r}_{i}" for i in range(n)]
        relations += [f"P{700 + r}"] * n
    stats = {
        "acc_high": share(pooled("high", "one")),
        "acc_low": share(pooled("low", "one")),
        "macro_high": share(relation_mean("high", "one")),
        "macro_low": share(relation_mean("low", "one")),
    }
    return Population(
        f"synthetic extreme shares (scale {scale:g}, seed {seed})",
        "shares",
        Units.of(ids, relations, cols),
        stats,
        (),
        f"{len(ids):,} facts, {len(sizes)} relations",
    )


SYNTHETIC = {
    "myriadlama": synthetic_myriadlama,
    "bear": synthetic_bear,
    "myriadlama_paired": synthetic_paired,
    "fktc": synthetic_monitor,
    "trex_mc": synthetic_iclke,
    "extreme_shares": synthetic_extreme_shares,
}
