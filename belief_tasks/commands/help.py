"""What ``belief-eval`` adds to lm-eval's help, and its two fast listings of ours.

``belief-eval --help``: lm-eval's help, then ``section()``: our backends, our tasks, the knobs of
every family (names generated from the knob tables of ``belief_tasks.families``), ``belief-report`` and the docs.
``belief-eval ls belief``: our tasks and groups, one line each, from the YAMLs alone (no lm-eval
import). ``belief-eval ls knobs``: every knob with what it accepts, its default and its meaning.
"""

from __future__ import annotations

import textwrap

from belief_tasks.backend_registry import ours


def knob_groups() -> list[tuple[str, list[str], str]]:
    """(who reads them, knob names, where they are documented), from the knob tables themselves."""
    from belief_tasks.data.sources import SOURCE_KNOBS
    from belief_tasks.families import FAMILIES
    from belief_tasks.options import COMMON

    common = [k.name for k in COMMON]
    groups = [("every task", common, "docs/data.md"), ("data source", [k.name for k in SOURCE_KNOBS], "docs/data.md")]
    for family in FAMILIES.values():
        groups.append((family.title, [k.name for k in family.knobs if k.name not in common], family.doc))
    return groups


def _wrapped(label: str, text: str, width: int = 100, indent: int = 22) -> str:
    return textwrap.fill(
        text,
        width=width,
        initial_indent=f"  {label:<{indent - 2}}",
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
    )


def _our_tasks_lines() -> list[str]:
    """The help's "our tasks" paragraph: the listing, the main job and the profile."""
    return [
        "",
        "our tasks:",
        _wrapped("list", "belief-eval ls belief: our tasks and groups, one line each"),
        _wrapped(
            "main job",
            "python -m belief_tasks demo: every family on the bundled sample, then its report (results/demo/)",
        ),
        _wrapped(
            "profile",
            "python -m belief_tasks profile [ARGS]: a model's knowledge profile (group "
            "belief_profile: the four probes on datasets that share facts, at a 5% budget), "
            "then its report (docs/profile.md)",
        ),
    ]


def _cost_lines() -> list[str]:
    """The help's "cost and progress" paragraph: ``--estimate`` and the run's progress lines."""
    return [
        "",
        "cost and progress:",
        _wrapped(
            "--estimate",
            "the command's cost, then exit, before any model loads: per task the facts, "
            "requests by kind, tokens with and without prefix sharing, and each phase's "
            "time from rates measured on this model and backend (--calibrate: time a few "
            "seconds of its requests first; --estimate_json FILE: also as JSON)",
        ),
        _wrapped(
            "progress",
            "a run prints each phase with its estimate and the run's ETA, and a line when a "
            "phase runs far past its estimate (docs/profile.md)",
        ),
    ]


def _answers_lines() -> list[str]:
    """The help's "answers" and "whole datasets" paragraphs: the answer cache and ``--shard_by_relation``."""
    return [
        "",
        "answers:",
        _wrapped(
            "kept",
            "every answer goes to OUTPUT_PATH/cache/ as it is computed, so the "
            "same command run again after a crash resumes (docs/scale.md)",
        ),
        _wrapped("--no_answer_cache", "keep nothing; --use_cache PATH: keep them in a file of your choice"),
        "",
        "whole datasets:",
        _wrapped(
            "--shard_by_relation",
            "N: run the command as N shards, one after another, each in its own process on about 1/N of every "
            "task's relations (the shard knob), then pool them into the results JSON and samples of one run in "
            "OUTPUT_PATH: the same numbers in about 1/N of the memory lm-eval keeps (it holds every request and "
            "sample until a command ends). Needs --output_path and --log_samples; the same command again skips "
            "finished shards and resumes the one that stopped (docs/scale.md)",
        ),
    ]


def section() -> str:
    """The part of ``belief-eval --help`` that lm-eval's help does not have."""
    fill = lambda text: textwrap.fill(text, width=100, break_on_hyphens=False)  # noqa: E731
    lines = [
        "",
        fill(
            "belief-tasks: belief-eval is the lm-eval command line above (shown as 'lm-eval'), with "
            "our backends registered and every input checked before the model loads."
        ),
        "",
        "backends (--model):",
    ]
    lines += [_wrapped(b.name, b.line) for b in ours()]
    lines += _our_tasks_lines()
    lines += _cost_lines()
    lines += _answers_lines()
    lines += [
        "",
        fill(
            'knobs: --metadata \'{"source": "sample", "max_facts_per_relation": 5}\'; '
            "`belief-eval ls knobs` shows what each accepts, its default and its meaning:"
        ),
    ]
    lines += [_wrapped(who, f"{', '.join(names)} ({page})") for who, names, page in knob_groups()]
    lines += [
        "",
        "report:",
        _wrapped(
            "belief-report",
            "OUTPUT_DIR --out REPORT_DIR: the papers' tables, figures "
            "and a knowledge card per model from runs made with --output_path and "
            "--log_samples (belief-report --help; how to read it: docs/report.md)",
        ),
    ]
    lines += [
        "",
        fill(
            "docs: the pages of docs/ ship with the package: `python -m belief_tasks docs PAGE` prints one "
            "(data: data, sources, every input check; scale: large runs; benchmarks: timings); without "
            "PAGE, the list."
        ),
    ]
    return "\n".join(lines)


def knobs_listing() -> str:
    """``belief-eval ls knobs``: every knob of every family, from the knob tables."""
    from belief_tasks.data.sources import SOURCE_KNOBS
    from belief_tasks.families import FAMILIES
    from belief_tasks.options import COMMON

    tables = [("every task", COMMON), ("data source (environment variables as named)", SOURCE_KNOBS)]
    tables += [(family.title, tuple(k for k in family.knobs if k not in COMMON)) for family in FAMILIES.values()]
    out = []
    for title, knobs in tables:
        out.append(f"{title}:")
        out += [_wrapped(k.name, f"{k.doc}. Accepts {k.accepts()}; default {k.default!r}.", indent=26) for k in knobs]
        out.append("")
    from belief_tasks.commands.checks import shipped_pages

    return shipped_pages("\n".join(out).rstrip())
