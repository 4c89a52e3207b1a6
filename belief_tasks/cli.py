"""``belief-eval``: the full ``lm_eval`` command line, with our backends registered.

Our tasks are found without flags when the wheel installed them under
``lm_eval/tasks/belief``; from a source checkout ``belief-eval`` adds
``--include_path`` to our task folder itself. Added to lm-eval's command line: a section in
``--help`` (``command_help``), ``ls belief`` and ``ls knobs``, and checks of the command before
the model loads (``command_checks``, ``check_limit``), each refused in one paragraph, exit 2.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

#: The main job: one command that runs every family on the bundled sample.
DEMO_TASKS = "belief_demo"


def _tasks_installed() -> bool:
    import lm_eval.tasks

    # a folder without YAMLs is what ``pip uninstall`` leaves behind (going from the wheel to an editable
    # install): our tasks are not there, so ``--include_path`` must still be added
    return any((Path(lm_eval.tasks.__file__).parent / "belief").rglob("*.yaml"))


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["ls"], ["list"]) and args[1:2] in (["belief"], ["knobs"]):
        return print_ours(args[1])  # fast: no lm-eval import
    if args[:1] == ["sweep"]:  # one command over many checkpoints (belief_tasks.sweep)
        from belief_tasks.sweep import main as sweep

        raise SystemExit(sweep(args[1:]))
    from belief_tasks import command_checks

    try:
        command_checks.check_json_arguments(args)
        command_checks.check_cache_identity(args)
    except command_checks.CommandError as e:
        refuse(e)
    from belief_tasks.cache_identity import with_answer_cache

    args = with_answer_cache(args)  # every answer kept in the output path: the same command again resumes
    import belief_tasks
    belief_tasks.install()  # our backends and hooks
    from lm_eval.__main__ import cli_evaluate

    from belief_tasks.paths import task_yamls_dir

    if "--include_path" not in args and not _tasks_installed() and (not args or args[0] != "validate"):
        args += ["--include_path", str(task_yamls_dir())]
    check_limit(args)
    if not listing_or_help(args):  # 20-90 s of data, prompts and requests come before the model's first line
        print("Building the tasks (data, prompts, requests) before the model loads ...",
              file=sys.stderr, flush=True)
    from belief_tasks.harness import install_tasks_before_model

    install_tasks_before_model(refuse, command_checks)
    sys.argv = ["belief-eval", *args]
    listing = args[:1] in (["ls"], ["list"]) and (len(args) < 2 or args[1] in ("tasks", "groups"))
    from belief_tasks.preflight import PreflightError, failure_during_run, server_failures
    from belief_tasks.truncation import ServerContextError, TruncationError

    try:
        cli_evaluate()
    except (TruncationError, ServerContextError, PreflightError) as e:  # once the requests are built, before scoring
        if isinstance(e, PreflightError):
            print(file=sys.stderr)  # ends the line of lm-eval's progress bar, which the probe drew
        refuse(e, stage="scoring")
    except server_failures() as e:  # a server that failed after the probes: one paragraph, what was kept
        cached = "--use_cache" in args or any(a.startswith("--use_cache=") for a in args)
        print(f"\nbelief-eval: {failure_during_run(e, cached)}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if listing:  # lm-eval's table has no description column: add ours
            print_ours("tasks")
        elif wants_help(args):
            from belief_tasks.command_help import section

            print(section())


def listing_or_help(args: list[str]) -> bool:
    """``ls`` / ``validate`` / help: nothing is built."""
    return wants_help(args) or args[:1] in (["ls"], ["list"], ["validate"])


def wants_help(args: list[str]) -> bool:
    """lm-eval prints its main help or its ``run`` help here (no arguments, or -h / --help)."""
    return not args or (args[0] not in ("ls", "list", "validate") and bool({"-h", "--help"} & set(args)))


def print_ours(what: str) -> None:
    """``belief-eval ls belief`` (our tasks and groups) or ``belief-eval ls knobs`` (every knob)."""
    if what == "knobs":
        from belief_tasks.command_help import knobs_listing

        print(knobs_listing())
        return
    from belief_tasks.catalog import table

    print(table())
    print("\nEvery knob: belief-eval ls knobs. The main job: python -m belief_tasks demo.")


def refuse(error: BaseException, task: str = "", stage: str = "loading the model") -> None:
    """Bad input: one paragraph (what, where, how to fix), no traceback, exit code 2."""
    from belief_tasks.command_checks import shipped_pages

    where = f"task {task}: " if task else ""
    text = shipped_pages(str(error).rstrip())
    text += "" if text.endswith(".") else "."
    # one write, newline included (print writes the newline apart): the processes of one launch share stderr,
    # and each one's paragraph must stay whole on its own line
    sys.stderr.write(f"belief-eval: stopped before {stage}. {where}{text} "
                     "Nothing was computed; fix the command and run it again (`python -m belief_tasks docs data` "
                     "lists every check).\n")
    sys.stderr.flush()
    raise SystemExit(2)


def _limit_value(args: list[str]) -> str | None:
    value = None
    for i, arg in enumerate(args):
        if arg in ("--limit", "-L") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--limit="):
            value = arg.split("=", 1)[1]
    return value


def check_limit(args: list[str]) -> None:
    """``--limit 0`` evaluates nothing (lm-eval ends in "did not find any docs"). Under ``accelerate
    launch`` an integer ``--limit`` below the number of processes leaves a rank with no document, and
    lm-eval 0.4.13 then fails after the model time is spent (it reads ``task.instances[0]`` of an
    empty list, or pads with a request that does not exist)."""
    from belief_tasks.harness import launch_world_size

    value = _limit_value(args)
    try:
        limit = float(value) if value is not None else None
    except ValueError:
        return  # lm-eval's own parser reports it
    if limit is not None and limit <= 0:
        refuse(ValueError(f"--limit {value} evaluates no document: give a positive count (or a fraction in (0, 1])."))
    world = launch_world_size()
    if world > 1 and limit is not None and limit >= 1 and int(limit) < world:
        refuse(ValueError(f"--limit {value} is below the {world} processes of this launch, so a process would get no "
                          f"document: use --limit {world} or more, or fewer processes (docs/scale.md)."))


def demo_command(extra: list[str] | None = None) -> list[str]:
    from belief_tasks.model import default_model_path

    # hf-shared: the numbers of lm-eval's hf (within 1e-4 nats; Ovconf from its own seeded sampler)
    # in 4 minutes instead of 11 on a 2-core CPU (docs/benchmarks.md); `demo --model hf` for stock
    return [
        "--model", "hf-shared",
        "--model_args", f"pretrained={default_model_path()},dtype=float32",
        "--tasks", DEMO_TASKS,
        "--metadata", '{"source": "sample"}',
        "--batch_size", "8",
        "--output_path", os.environ.get("BELIEF_DEMO_OUTPUT", "results/demo"),
        "--log_samples",
        *(extra or []),
    ]


def demo(extra: list[str]) -> int:
    """The main job: every family on the bundled sample, then the knowledge report built from its outputs."""
    from belief_tasks.model import fetch_default_model

    fetch_default_model()
    args = demo_command(extra)
    print("belief-eval " + shlex.join(args), flush=True)
    print("Raw prompts, no chat template, as the papers evaluate (`python -m belief_tasks docs belief`).", flush=True)
    logging.getLogger("lm_eval.evaluator").addFilter(_RawPromptsChosen())
    main(args)
    output = Path(args[len(args) - 1 - args[::-1].index("--output_path") + 1])
    print_report(build_demo_report(output), output)
    return 0


class _RawPromptsChosen(logging.Filter):
    """The demo's model is an instruct model run on raw prompts on purpose (the papers' setting):
    lm-eval's advice to apply its chat template does not apply here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "appears to be an" not in record.getMessage()


def build_demo_report(output: Path):
    """``belief-report <output> --out <output>/report``, as a user would run it after the job."""
    from belief_tasks.report import build_report

    return build_report([output], output / "report", title="Knowledge report: the bundled demo")


def print_report(report, output: Path) -> None:
    cards = sorted((output / "report" / "cards").glob("*.md"))
    for card in cards:
        print("\n" + card.read_text(encoding="utf-8").strip())
    agreement = [line for s in report.sections if s.title == "Agreement between probes" for line in s.summary]
    print("\n" + ("\n".join(agreement) if agreement else "agreement: fewer than two probes share facts"))
    print(f"check: {report.checked - len(report.mismatched)}/{report.checked} recomputed numbers equal the results JSON")
    print(f"report: {report.path}")


if __name__ == "__main__":
    main()
