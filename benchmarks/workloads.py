"""What the benchmarks run, in one place: the model, the data, each probe's requests as our tasks send them, and the
sizes of the workloads that several benchmarks share.

Two benchmarks that name the same workload time the same requests: ``shared``, ``engines`` and ``served`` build
IC-LKE, BEAR and BELIEF-ICL from the builders below, MONITOR and the demo's IC-LKE from the tasks themselves
(``task_requests``). Nothing here loads a model or times anything (``measure.py`` does); this module imports
neither torch nor lm-eval at its top, so a parent process can build and save workloads on a machine without them.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ the model and the data


def model_path() -> str:
    """The bundled model's folder (SmolLM2-135M-Instruct, float32), the default of every benchmark."""
    from belief_tasks.commands.default_model import default_model_path

    return str(default_model_path())


def sample_facts(dataset: str = "bear"):
    """The bundled sample's facts as ``dataset`` reads them (no file outside the package)."""
    from belief_tasks.data import load_facts

    return load_facts(dataset, {"source": "sample"})


#: the real datasets below a DATA_DIR (the layouts of docs/data.md), and the variables that point the tasks at them
REAL_DATA = {"BELIEF_BEAR_PATH": "bear/BEAR", "BELIEF_BEAR_BIG_PATH": "bear/BEAR-big", "BELIEF_FKTC_PATH": "fktc/FKTC"}


def real_data_env(data_dir: Path) -> dict[str, str]:
    """``REAL_DATA``'s variables for the copies below ``data_dir``; a missing folder stops the benchmark."""
    env = {var: str((Path(data_dir) / sub).resolve()) for var, sub in REAL_DATA.items()}
    missing = [p for p in env.values() if not Path(p).is_dir()]
    if missing:
        raise SystemExit(
            f"{data_dir}: no folder {', '.join(missing)} (DATA_DIR holds bear/BEAR, bear/BEAR-big, fktc/FKTC)"
        )
    return env


# ------------------------------------------------------------------ sizes


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How large the shared workloads are: IC-LKE facts and options per fact, BEAR instances, BELIEF-ICL prompts
    and seeded samples per prompt, MONITOR documents (``belief_demo_monitor --limit``; None: a benchmark without
    the MONITOR workload)."""

    facts: int
    instances: int
    prompts: int
    samples: int
    monitor_limit: int | None = None
    options: int = 100


def add_size_arguments(ap: argparse.ArgumentParser, default: Sizes, quick: Sizes) -> None:
    """``--facts``, ``--options``, ``--instances``, ``--prompts``, ``--samples`` and ``--monitor_limit`` (those
    ``default`` sets; their defaults: ``default``'s) and ``--quick`` (``quick``'s sizes); read back by ``sizes_of``."""
    ap.add_argument("--quick", action="store_true", help=f"minutes: {describe(quick)}")
    for field in dataclasses.fields(Sizes):
        if getattr(default, field.name) is not None:
            ap.add_argument(f"--{field.name}", type=int, default=getattr(default, field.name))
    ap.set_defaults(sizes=(default, quick))


def sizes_of(args: argparse.Namespace) -> Sizes:
    """The sizes the command line asked for (``--quick`` sets them all, and writes them back into ``args``)."""
    default, quick = args.sizes
    names = [f.name for f in dataclasses.fields(Sizes) if getattr(default, f.name) is not None]
    if args.quick:
        for name in names:
            setattr(args, name, getattr(quick, name))
    return dataclasses.replace(default, **{name: getattr(args, name) for name in names})


def describe(s: Sizes) -> str:
    monitor = "" if s.monitor_limit is None else f", MONITOR {s.monitor_limit} documents"
    return (
        f"IC-LKE {s.facts} facts x {s.options} options, BEAR {s.instances} instances, "
        f"BELIEF-ICL {s.prompts} prompts x (1 + {s.samples}){monitor}"
    )


# ------------------------------------------------------------------ requests built from the bundled sample


def _by_relation(factset):
    rels: dict[str, list] = {}
    for f in factset.facts:
        rels.setdefault(f.relation, []).append(f)
    return rels


def iclke_requests(factset, n_facts: int, n_choices: int = 100, n_examples: int = 50, seed: int = 0):
    """Per fact: 50 "subject object" lines of its relation, then the subject; 100 object choices
    (a list of requests per fact: its prediction is the likeliest)."""
    from belief_tasks.facts import seeding

    rels = _by_relation(factset)
    everyone = sorted({e.label for r in factset.relations.values() for e in r.answer_space})
    out = []
    facts = [f for fs in rels.values() for f in fs[:3]][:n_facts]
    for fact in facts:
        others = [f for f in rels[fact.relation] if f.id != fact.id]
        demos = [others[i % len(others)] for i in range(n_examples)]
        demos = seeding.sample(demos, len(demos), seed, "iclke", fact.id)
        context = "\n".join(f"{d.subject.label} {d.object.label}" for d in demos) + f"\n{fact.subject.label}"
        space = [e.label for e in factset.relations[fact.relation].answer_space if e.label != fact.object.label]
        pad = [x for x in everyone if x not in space and x != fact.object.label]
        choices = [fact.object.label] + (space + seeding.sample(pad, n_choices, seed, "pad", fact.id))[: n_choices - 1]
        out.append([(context, f" {c}") for c in choices])
    return out


def belief_prompts(factset, n_prompts: int, seed: int = 0):
    """BELIEF-ICL style: four demonstrations (one per statement template), then the query's template cut before [Y]."""
    from belief_tasks.facts import seeding

    rels = _by_relation(factset)
    prompts = []
    facts = [f for fs in rels.values() for f in fs[:2]][:n_prompts]
    for fact in facts:
        rel = factset.relations[fact.relation]
        templates = (rel.templates_of("statement", False) * 4)[:4]
        others = seeding.sample([f for f in rels[fact.relation] if f.id != fact.id], 4, seed, "belief", fact.id)
        demos = [t.fill(o.subject.label, o.object.label) for t, o in zip(templates, others)]
        query = templates[0].text.replace("[X]", fact.subject.label).split("[Y]")[0].rstrip()
        prompts.append("\n".join(demos + [query]))
    return prompts


def bear_requests(factset, n_instances: int):
    """BEAR: every answer-space entity in the fact's first statement template, after an empty context
    (a list of requests per instance: its prediction is the likeliest)."""
    out = []
    rels = _by_relation(factset)
    facts = [f for fs in zip(*rels.values()) for f in fs][:n_instances]  # round-robin over relations
    for fact in facts:
        rel = factset.relations[fact.relation]
        template = rel.templates_of("statement", False)[0]
        out.append([("", template.fill(fact.subject.label, e.label)) for e in rel.answer_space])
    return out


#: BELIEF-ICL's greedy request (16 new tokens, stop at a newline or a full stop)
GREEDY = {"until": ["\n", "."], "max_gen_toks": 16, "do_sample": False}


def belief_requests(prompts: list[str], samples: int) -> list[tuple[str, tuple]]:
    """As the BELIEF task sends them: per prompt the greedy request, then K distinct sampling requests (sample i
    carries a tagged stop string and its own seed, ``seeding.request_seed`` as the task derives it)."""
    from belief_tasks.facts import seeding
    from belief_tasks.tasks.belief_icl import sampling_kwargs

    out = [("generate_until", (p, dict(GREEDY))) for p in prompts]
    out += [
        ("generate_until", (p, sampling_kwargs(GREEDY, i, seeding.request_seed(1234, p, i))))
        for p in prompts
        for i in range(samples)
    ]
    return out


# ------------------------------------------------------------------ requests built by our tasks


def build_task(name: str, metadata: dict, limit: int | None = None):
    """Task ``name`` with ``metadata`` (its knobs; ``pretrained``: the model whose tokenizer it reads), its requests
    built for its first ``limit`` documents (all: None), as lm-eval builds them (no model)."""
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    manager = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=metadata)
    task = manager.load([name])["tasks"][name]
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    return task


def task_requests(name: str, limit: int | None, knobs: dict | None = None) -> list[tuple[str, tuple]]:
    """The requests task ``name`` builds (with ``knobs``) for its first ``limit`` documents (all: None), in order."""
    task = build_task(name, {"pretrained": model_path(), **(knobs or {})}, limit)
    return [(inst.request_type, tuple(inst.args)) for inst in task.instances]


#: the task the benchmarks' own requests belong to. They are our tasks' requests, built here without the task
#: objects, so they are tagged as a task of ours: our hooks serve them as in a run (the seeded samples on stock
#: ``hf`` go only to our sampler, ``harness.OUR_TASKS``; stock ``generate`` refuses their ``seed``)
BENCH_TASK = "belief_bench"


def bench_instance(kind: str, args, index: int, repeats: int = 1):
    """One request of a workload, as a task of ours would send it."""
    from lm_eval.api.instance import Instance

    from belief_tasks.hooks import harness

    harness.OUR_TASKS.add(BENCH_TASK)  # as BeliefTask adds its name when it is built
    return Instance(kind, {}, args, index, metadata=(BENCH_TASK, index, repeats))


def make_instances(kind: str, args_list, repeats: int = 1):
    return [bench_instance(kind, a, i, repeats) for i, a in enumerate(args_list)]
