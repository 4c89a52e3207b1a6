"""The task families, one registry: each family's knobs and its scoring, by the name its tasks stamp.

A ``BeliefTask`` stamps its family's ``name`` into the results JSON (``metadata.family``); from that
name the harness glue finds the family's knob table, and ``belief-report`` its metric table and
known-fact rule, without reading a YAML or importing lm-eval. The knob tables live here: every task
of a command shares one ``--metadata``, so every family's knob names must be known to each task.

Pure: no lm-eval, no torch (the report imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from belief_tasks.metrics import bear as bear_metrics
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.metrics import monitor as monitor_metrics
from belief_tasks.options import Knob, Options, knob, knob_rows
from belief_tasks.prompts import iclke as iclke_prompts
from belief_tasks.prompts import monitor as monitor_prompts
from belief_tasks.prompts.bear import SCORING_MODES
from belief_tasks.prompts.belief_mlm import TEMPLATE_SETS as MLM_TEMPLATE_SETS
from belief_tasks.requests import SUBWORD_ROUTES
from belief_tasks.scoring import bear, belief_icl, belief_mlm, iclke, monitor, wiring
from belief_tasks.scoring.budgeted import Estimators
from belief_tasks.scoring.common import Metric
from belief_tasks.scoring.wiring import Aggregation


@dataclass(frozen=True)
class Family:
    """What the rest of the package asks of a family."""

    name: str  # what its tasks stamp into the results JSON
    title: str  # its name in the papers
    doc: str  # the page that documents its knobs and metrics
    options: type[Options]  # its knobs: ``options.Options`` and its own typed fields (``knobs``: as a table)
    metrics: Mapping[str, Metric]  # metric name -> its declaration (``scoring.<family>.METRICS``)
    known: Callable[[list], dict[str, bool]]  # records -> {fact id: known}, the family's known-fact rule
    record: type  # the TypedDict of one logged record
    headline: str  # the metric the report's training curves plot
    budgeted: Estimators | None = None  # a budgeted run's estimators (``Estimators.of`` its METRICS); None: no budget

    @property
    def knobs(self) -> tuple[Knob, ...]:
        """Its ``--metadata`` table: ``options.COMMON`` and its own rows (``options.knob_rows``)."""
        return knob_rows(self.options)


# --- knob tables: each family's frozen dataclass (options.Options and the family's own fields) ---------------

_TEMPLATE_SETS = ("manual", "all")


@dataclass(frozen=True, kw_only=True)
class BeliefICLOptions(Options):
    """BELIEF-ICL's knobs (docs/belief.md)."""

    mp_templates: str = knob(
        "str", "manual", "MP templates: the manual ones (the paper's choice for cost) or all", choices=_TEMPLATE_SETS
    )
    qa_templates: str = knob(
        "str", "all", "QA templates: every question-style template, or the manual ones only", choices=_TEMPLATE_SETS
    )
    confidence_samples: int = knob("int", 100, "K sampled answers per sampled prompt, for Ovconf (0: none)", minimum=0)
    confidence_prompts: int = knob("int", 10_000, "pairs that get one sampled prompt each", minimum=0)
    accuracy_draws: int = knob(
        "int", belief_metrics.DEFAULT_DRAWS, "N draws of one prompt per pair for Acc@1 and its fluctuation", minimum=1
    )
    calibration_bins: int = knob("int", belief_metrics.DEFAULT_BINS, "M equal-size bins of Ovconf", minimum=1)


@dataclass(frozen=True, kw_only=True)
class BeliefMLMOptions(Options):
    """BELIEF for encoders' knobs (docs/mlm.md)."""

    accuracy_draws: int = knob(
        "int", belief_metrics.DEFAULT_DRAWS, "N draws of one prompt per pair for Acc@K and its fluctuation", minimum=1
    )
    mlm_templates: str = knob(
        "str",
        "all",
        "templates: every one, question-style ones with the mask after the "
        "question (v1's MyriadLAMA prompts), or statements only",
        choices=MLM_TEMPLATE_SETS,
    )


@dataclass(frozen=True, kw_only=True)
class BearOptions(Options):
    """BEAR's knobs (docs/bear.md)."""

    reduction: str = knob(
        "str",
        "sum",
        "statement score: summed log-likelihood (eq. 1) or its mean per scored token",
        choices=bear_metrics.REDUCTIONS,
    )
    scoring: str = knob(
        "str",
        "statement",
        "what is scored: the whole statement, only the answer, or the answer "
        "to the end of the sentence (lm-pub-quiz's conditional_score)",
        choices=SCORING_MODES,
    )
    templates: tuple[int, ...] | None = knob(
        "ints", None, "template indices to use, comma-separated (default: all)", minimum=0, unset=(None, "", "all")
    )


@dataclass(frozen=True, kw_only=True)
class IclkeOptions(Options):
    """IC-LKE's and EIC-LKE's knobs (docs/iclke.md)."""

    n_examples: int = knob("int", 50, "n in-context examples per test fact (eq. 1, appendix C.1)", minimum=0)
    max_options: int = knob(
        "int", 100, "options per test fact: the gold object + up to max_options - 1 alternatives", minimum=1
    )
    train_size: int = knob("int", 100, "training facts per relation, for datasets without a train split", minimum=1)
    train_split: str = knob(
        "str",
        "seeded",
        "which facts train, for datasets without a train split: a seeded draw, "
        "or key: those a budget draws last (by the sampling key), so a budget's test facts are "
        "the ones it draws in other datasets",
        choices=("seeded", "key"),
    )
    format: str | None = knob(
        "str",
        None,
        "how pairs are joined (default: the method's own, 'space' for IC-LKE, "
        "section 2.2, 'space_comma' for EIC-LKE, appendix C.2; 'colon_comma': the reference code's "
        "separator, without its quirks)",
        choices=tuple(iclke_prompts.FORMATS),
    )
    demos: str = knob(
        "str",
        "relation",
        "examples: one seeded order per relation, or drawn per test fact",
        choices=iclke_prompts.DEMOS,
    )
    eic_lead: int = knob("int", 50, "EIC-LKE: training facts before the first test fact (appendix C.2)", minimum=1)
    eic_every: int = knob("int", 5, "EIC-LKE: training facts between two test facts", minimum=1)
    reference: bool = knob(
        "bool",
        False,
        "IC-LKE as the authors' code runs it (ZeroPrompt_LKE, T-REx-MC only): its "
        "string, its pandas draw of n_examples, its first test rows, Multiple Choices then the "
        "gold, first maximum",
    )
    reference_seed: int = knob(
        "int",
        iclke_prompts.REFERENCE_RANDOM_STATE,
        "reference: random_state of its pandas draw of examples (its config's random_seed)",
        minimum=0,
    )
    reference_rows: int = knob(
        "int",
        iclke_prompts.REFERENCE_TEST_ROWS,
        "reference: the first N test rows of each "
        "relation (its config's test_index_end; 0: every row, as the paper's tables)",
        minimum=0,
    )


@dataclass(frozen=True, kw_only=True)
class MonitorOptions(Options):
    """MONITOR's knobs (docs/monitor.md)."""

    monitor_route: str = knob(
        "str",
        "prefix",
        "how anchors are scored: loglikelihood on growing prefixes, or per_token_loglikelihood (hf-shared)",
        choices=SUBWORD_ROUTES,
    )
    answer_format: str = knob(
        "str",
        monitor_prompts.DEFAULT_ANSWER_FORMAT,
        'qa ("Question: {prompt}\\nAnswer:"), bare (the question alone, as Table 1) or a string holding {prompt}',
    )
    monitor_alpha: tuple[float, ...] = knob(
        "floats", monitor_metrics.DEFAULT_ALPHA, "a1,a2,a3 of eq. 3", minimum=0, length=3
    )
    only_correct_primary: bool = knob(
        "bool",
        False,
        "score MONITOR, PFD, IRD and the probabilities only on facts "
        "whose positive-context greedy answer is correct (the reference code's filter)",
    )
    monitor_accuracy: str = knob(
        "str",
        "frames",
        "greedy answers besides the anchors: frames (under the positive "
        "context and each frame, R + 1 per fact), paper (those and the R x M frame x "
        "negative-interference answers of section 4.3's average accuracy) or none (anchors "
        "only, MONITOR's own cost)",
        choices=monitor.ACCURACY_MODES,
    )
    monitor_match: str = knob(
        "str",
        "contains",
        "when a greedy answer is right: contains (the object or an alias, "
        "as BELIEF) or exact (the reference eval.py's test: punctuation deleted, equal to the "
        "object)",
        choices=monitor.MATCH_RULES,
    )


# --- the registry -------------------------------------------------------------------------------------

BELIEF_ICL = Family(
    "belief_icl",
    "BELIEF-ICL",
    "docs/belief.md",
    BeliefICLOptions,
    belief_icl.METRICS,
    belief_icl.known,
    belief_icl.BeliefICLRecord,
    "acc",
    Estimators.of(belief_icl.budget_units, belief_icl.METRICS),
)
BEAR = Family(
    "bear",
    "BEAR",
    "docs/bear.md",
    BearOptions,
    bear.METRICS,
    bear.known,
    bear.BearRecord,
    "bear",
    Estimators.of(bear.budget_units, bear.METRICS),
)
ICLKE = Family(
    "iclke",
    "IC-LKE / EIC-LKE",
    "docs/iclke.md",
    IclkeOptions,
    iclke.METRICS,
    iclke.known,
    iclke.IclkeRecord,
    "acc",
    Estimators.of(iclke.budget_units, iclke.METRICS),
)
MONITOR = Family(
    "monitor",
    "MONITOR",
    "docs/monitor.md",
    MonitorOptions,
    monitor.METRICS,
    monitor.known,
    monitor.MonitorRecord,
    "monitor",
    Estimators.of(monitor.budget_units, monitor.METRICS),
)
BELIEF_MLM = Family(
    "belief_mlm",
    "BELIEF (masked LMs)",
    "docs/mlm.md",
    BeliefMLMOptions,
    belief_mlm.METRICS,
    belief_mlm.known,
    belief_mlm.MlmPromptRecord,
    "acc@1",
)

#: family name -> Family (in the order ``belief-eval --help`` lists them)
FAMILIES: dict[str, Family] = {f.name: f for f in (BELIEF_ICL, BEAR, ICLKE, MONITOR, BELIEF_MLM)}


def budget_estimators(name: str) -> Estimators | None:
    """The estimators of a budgeted run of family ``name`` (None: the family takes no budget, or is not ours)."""
    family = FAMILIES.get(name)
    return family.budgeted if family else None


def aggregations(name: str) -> dict[str, Aggregation]:
    """metric -> its ``scoring.wiring.Aggregation`` for family ``name`` (what lm-eval aggregated; {} for a family we
    do not have, e.g. another harness task)."""
    family = FAMILIES.get(name)
    return wiring.aggregations(name, family.metrics, family.budgeted) if family else {}


def metric_table(name: str) -> dict[str, Metric]:
    """The metric table of family ``name`` ({} for a family we do not have, e.g. another harness task)."""
    family = FAMILIES.get(name)
    return dict(family.metrics) if family else {}


def knob_names() -> set[str]:
    """Every family's knob names: one ``--metadata`` serves every task of a command (``--tasks
    belief_bear,belief_mp_zeroshot``), so a knob of one family is not an unknown key for another."""
    return {k.name for family in FAMILIES.values() for k in family.knobs}
