"""``belief-eval``: the full ``lm_eval`` command line, with our backends registered.

Our tasks are found without flags when the wheel installed them under
``lm_eval/tasks/belief``; from a source checkout ``belief-eval`` adds
``--include_path`` to our task folder itself. Added to lm-eval's command line: a section in
``--help`` (``commands.help``), ``ls belief`` and ``ls knobs``, and checks of the command before
the model loads (``commands.checks``, ``check_limit``), each refused in one paragraph, exit 2.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

#: The main job: one command that runs every family on the bundled sample.
DEMO_TASKS = "belief_demo"
#: A model's knowledge profile: the four probes on datasets that share facts, at a budget (docs/profile.md).
PROFILE_TASKS = "belief_profile"


def _tasks_installed() -> bool:
    from belief_tasks.hooks.lm_eval_api import tasks_folder

    # a folder without YAMLs is what ``pip uninstall`` leaves behind (going from the wheel to an editable
    # install): our tasks are not there, so ``--include_path`` must still be added
    return any((tasks_folder() / "belief").rglob("*.yaml"))


def main(argv: list[str] | None = None, report: bool = False) -> None:
    """``belief-eval ARGS``; ``report``: the caller builds a report after the run (the main job, the profile), so
    the run's progress stays open for that phase (``finish_run``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["ls"], ["list"]) and args[1:2] in (["belief"], ["knobs"]):
        return print_ours(args[1])  # fast: no lm-eval import
    if args[:1] == ["sweep"]:  # the installed `belief-eval` dispatches it (belief_tasks.__main__.belief_eval)
        refuse(ValueError("'sweep' is a command of the installed `belief-eval` and of `python -m belief_tasks sweep`"))
    args, flags = checked_args(args)
    if flags["shards"] is not None and not flags["estimate"]:
        return sharded(args, flags["shards"])
    import belief_tasks
    from belief_tasks.commands import checks

    belief_tasks.install()  # our backends and hooks
    from belief_tasks.hooks.lm_eval_api import cli_evaluate
    from belief_tasks.paths import task_yamls_dir

    if "--include_path" not in args and not _tasks_installed() and (not args or args[0] != "validate"):
        args += ["--include_path", str(task_yamls_dir())]
    check_limit(args)
    estimate_only(args, flags, report)  # --estimate: the cost, then exit
    from belief_tasks.hooks.harness import install_tasks_before_model
    from belief_tasks.planning import progress

    if not listing_or_help(args):  # 20-90 s of data, prompts and requests come before the model's first line
        print("Building the tasks (data, prompts, requests) before the model loads ...", file=sys.stderr, flush=True)
        start_run(args, report)
    install_tasks_before_model(refuse, checks, progress)
    sys.argv = ["belief-eval", *args]
    listing = args[:1] in (["ls"], ["list"]) and (len(args) < 2 or args[1] in ("tasks", "groups"))
    from belief_tasks.backends.vllm_cpu import VLLMStartupError
    from belief_tasks.hooks.preflight import PreflightError, failure_during_run, server_failures
    from belief_tasks.hooks.truncation import ServerContextError, TruncationError

    try:
        cli_evaluate()
    except VLLMStartupError as e:  # vllm-shared's own check, just before its engine starts
        refuse(e)
    except (TruncationError, ServerContextError, PreflightError) as e:  # once the requests are built, before scoring
        refuse(e, stage="scoring")
    except server_failures() as e:  # a server that failed after the probes: one paragraph, what was kept
        cached = "--use_cache" in args or any(a.startswith("--use_cache=") for a in args)
        stop_quietly()
        say_paragraph(failure_during_run(e, cached))
        raise SystemExit(1) from None
    except BaseException:
        stop_quietly()
        raise
    finally:
        if listing:  # lm-eval's table has no description column: add ours
            print_ours("tasks")
        elif wants_help(args):
            from belief_tasks.commands.help import section

            print(section())
    if not report:
        finish_run()


def checked_args(args: list[str]) -> tuple[list[str], dict]:
    """The command checked before lm-eval sees it (refused in one paragraph, exit 2), without the estimate's own
    flags and with the answer cache added; and those flags."""
    args, flags = estimate_flags(args)
    from belief_tasks.commands import checks

    try:
        checks.check_json_arguments(args)
        checks.check_cache_identity(args)
        if not flags["estimate"] and not listing_or_help(args):
            checks.check_engine_settings(args)  # vLLM's CPU engine: settings it would refuse, before the tasks
    except checks.CommandError as e:
        refuse(e)
    from belief_tasks.hooks.answer_cache import with_answer_cache

    args = with_answer_cache(args)  # every answer kept in the output path: the same command again resumes
    return args, flags


def sharded(args: list[str], n: str) -> None:
    """``--shard_by_relation N``: the command as N relation shards, one after another, pooled into one run's results
    (``commands.shard_run``); refused in one paragraph when it cannot be."""
    from belief_tasks.commands import shard_run

    try:
        count = int(n)
    except ValueError:
        count = -1
    try:
        out = shard_run.check(args, count)
    except shard_run.ShardRunError as e:
        refuse(e)
    shard_run.run_shards(args, count, out)


def estimate_only(args: list[str], flags: dict, report: bool) -> None:
    """``--estimate``: the command's cost, before any model loads, then exit (its own flags without it: refused)."""
    if flags["estimate"]:
        from belief_tasks.commands import checks
        from belief_tasks.hooks.harness import install_tasks_before_model
        from belief_tasks.planning import progress
        from belief_tasks.planning.estimate import run_estimate

        install_tasks_before_model(refuse, checks, progress)
        raise SystemExit(run_estimate(args, flags, report=report))
    if flags["calibrate"] or flags["json"]:
        refuse(
            ValueError(
                "--calibrate and --estimate_json belong to --estimate (belief-eval --estimate --calibrate "
                "ARGS: the cost of the run ARGS, with rates timed on its model)"
            )
        )


def stop_quietly() -> None:
    from belief_tasks.planning import progress

    progress.stop_quietly()


def estimate_flags(args: list[str]) -> tuple[list[str], dict]:
    """``belief-eval``'s arguments without our own flags (the estimate's: ``--estimate``, ``--calibrate``,
    ``--estimate_json FILE``; ``--shard_by_relation N``), and those flags."""
    rest: list[str] = []
    flags: dict[str, Any] = {"estimate": False, "calibrate": False, "json": None, "shards": None}
    valued = {"--estimate_json": "json", "--shard_by_relation": "shards"}
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if a in ("--estimate", "--calibrate"):
            flags[a[2:]] = True
        elif a in valued and i + 1 < len(args):
            flags[valued[a]] = args[i + 1]
            i += 1
        elif name in valued and "=" in a:
            flags[valued[name]] = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest, flags


def start_run(args: list[str], report: bool) -> None:
    """Open the run's progress (``belief_tasks.planning.progress``): phases with estimates and an ETA, planned once the
    requests are built (``run_plan.begin_run``)."""
    from belief_tasks.planning import run_plan

    run_plan.begin_run(args, report)


def finish_run() -> None:
    """Close the run's progress and keep its measured rates for the next estimate (``run_plan.record_run``);
    ``BELIEF_PROGRESS_JSON=FILE``: also write what each phase took and was estimated to take there (for
    ``python -m benchmarks profile``)."""
    from belief_tasks.planning import progress, run_plan

    run = progress.current()
    measured = progress.stop()
    if run is None or not measured:
        return
    run_plan.record_run(measured)
    if os.environ.get("BELIEF_PROGRESS_JSON"):
        import json

        record = {"measured": measured, "cpu": run.cpu, "plan": run.plan, "planned": run_plan.planned()}
        Path(os.environ["BELIEF_PROGRESS_JSON"]).write_text(json.dumps(record, indent=1))


def listing_or_help(args: list[str]) -> bool:
    """``ls`` / ``validate`` / help: nothing is built."""
    return wants_help(args) or args[:1] in (["ls"], ["list"], ["validate"])


def wants_help(args: list[str]) -> bool:
    """lm-eval prints its main help or its ``run`` help here (no arguments, or -h / --help)."""
    return not args or (args[0] not in ("ls", "list", "validate") and bool({"-h", "--help"} & set(args)))


def print_ours(what: str) -> None:
    """``belief-eval ls belief`` (our tasks and groups) or ``belief-eval ls knobs`` (every knob)."""
    if what == "knobs":
        from belief_tasks.commands.help import knobs_listing

        print(knobs_listing())
        return
    from belief_tasks.commands.catalog import table

    print(table())
    print("\nEvery knob: belief-eval ls knobs. The main job: python -m belief_tasks demo.")


def refuse(error: BaseException, task: str = "", stage: str = "loading the model") -> None:
    """Bad input: one paragraph (what, where, how to fix), no traceback, exit code 2."""
    from belief_tasks.commands.checks import shipped_pages

    stop_quietly()  # the run's watchdog says nothing after the refusal
    where = f"task {task}: " if task else ""
    text = shipped_pages(str(error).rstrip())
    text += "" if text.endswith(".") else "."
    say_paragraph(
        f"stopped before {stage}. {where}{text} Nothing was computed; fix the command and run it again "
        "(`python -m belief_tasks docs data` lists every check)."
    )
    if getattr(error, "EVERY_PROCESS", False):
        wait_for_the_other_processes()
    raise SystemExit(2)


def wait_for_the_other_processes() -> None:
    """In a launch of several processes that all refuse alike, each waits until all have said their paragraph:
    the launcher stops the others as soon as one exits with an error, and a process stopped mid-way says nothing
    (stop 54's CI: one paragraph of two). A process that cannot wait (the group is gone) exits as it would have."""
    torch = sys.modules.get("torch")  # loaded with the model; a refusal before it has no process group
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    try:
        dist.barrier()
    except Exception:  # noqa: BLE001 - the other processes are gone: nothing left to wait for
        pass


def say_paragraph(text: str) -> None:
    """``belief-eval: TEXT`` on a line of its own in standard error.

    lm-eval's request bar may still be open (the probe or the run that failed drew it, ending with ``\r`` and
    no newline), and the run's watchdog thread redraws it after each of its lines (``tqdm.write``): so the open
    bars are closed first, under tqdm's lock, which the watchdog's lines take too. One write, newline included
    (print writes the newline apart): the processes of one launch share stderr, and each one's paragraph must
    stay whole on its own line."""
    from tqdm import tqdm

    with tqdm.get_lock():
        for bar in list(getattr(tqdm, "_instances", ())):
            bar.close()  # ends the bar's line (or clears it, for leave=False)
        sys.stderr.write(f"belief-eval: {text}\n")
        sys.stderr.flush()


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
    from belief_tasks.hooks.harness import launch_world_size

    value = _limit_value(args)
    try:
        limit = float(value) if value is not None else None
    except ValueError:
        return  # lm-eval's own parser reports it
    if limit is not None and limit <= 0:
        refuse(ValueError(f"--limit {value} evaluates no document: give a positive count (or a fraction in (0, 1])."))
    world = launch_world_size()
    if world > 1 and limit is not None and limit >= 1 and int(limit) < world:
        refuse(
            ValueError(
                f"--limit {value} is below the {world} processes of this launch, so a process would get no "
                f"document: use --limit {world} or more, or fewer processes (docs/scale.md)."
            )
        )


def demo_command(extra: list[str] | None = None) -> list[str]:
    from belief_tasks.commands.default_model import default_model_path

    # hf-shared: the numbers of lm-eval's hf (within 1e-4 nats; Ovconf from its own seeded sampler)
    # in 4 minutes instead of 11 on a 2-core CPU (docs/benchmarks.md); `demo --model hf` for stock
    return [
        "--model",
        "hf-shared",
        "--model_args",
        f"pretrained={default_model_path()},dtype=float32",
        "--tasks",
        DEMO_TASKS,
        "--metadata",
        '{"source": "sample"}',
        "--batch_size",
        "8",
        "--output_path",
        os.environ.get("BELIEF_DEMO_OUTPUT", "results/demo"),
        "--log_samples",
        *(extra or []),
    ]


def demo(extra: list[str]) -> int:
    """The main job: every family on the bundled sample, then the knowledge report built from its outputs."""
    from belief_tasks.commands.default_model import fetch_default_model

    fetch_default_model()
    args = demo_command(extra)
    print("belief-eval " + shlex.join(args), flush=True)
    print("Raw prompts, no chat template, as the papers evaluate (`python -m belief_tasks docs belief`).", flush=True)
    logging.getLogger("lm_eval.evaluator").addFilter(_RawPromptsChosen())
    main(args, report=True)
    output = Path(args[len(args) - 1 - args[::-1].index("--output_path") + 1])
    from belief_tasks.planning import progress

    progress.phase(progress.REPORT)
    print_report(build_demo_report(output), output)
    finish_run()
    return 0


def profile_command(extra: list[str] | None = None) -> list[str]:
    """``belief-eval`` arguments of the profile: ours for each option the user did not give (the bundled model on
    ``hf-shared`` unless ``--model_args`` names another), then the user's."""
    from belief_tasks.commands.default_model import default_model_path

    extra = list(extra or [])
    given = {a.split("=", 1)[0] for a in extra if a.startswith("-")}
    defaults = [
        ("--model", "hf-shared"),
        ("--model_args", f"pretrained={default_model_path()},dtype=float32"),
        ("--tasks", PROFILE_TASKS),
        ("--batch_size", "auto"),
        ("--output_path", os.environ.get("BELIEF_PROFILE_OUTPUT", "results/profile")),
    ]
    out = [x for option, value in defaults if option not in given for x in (option, value)]
    return out + ([] if "--log_samples" in given else ["--log_samples"]) + extra


def profile(extra: list[str]) -> int:
    """A model's knowledge profile: the ``belief_profile`` group (BEAR, IC-LKE on BEAR-big, MONITOR on FKTC,
    BELIEF-ICL MP and QA on MyriadLAMA, at a budget that draws the facts they share alike), then its report, as
    the main job ends in it; with ``--estimate``, only its cost."""
    if "--model_args" not in {a.split("=", 1)[0] for a in extra}:
        from belief_tasks.commands.default_model import fetch_default_model

        fetch_default_model()
    args = profile_command(extra)
    print("belief-eval " + shlex.join(args), flush=True)
    main(args, report=True)
    output = Path(args[len(args) - 1 - args[::-1].index("--output_path") + 1])
    from belief_tasks.planning import progress
    from belief_tasks.report import build_report

    progress.phase(progress.REPORT)
    report = build_report([output], output / "report", title="Knowledge profile")
    print_report(report, output)
    print_shared_facts(output / "report")
    finish_run()
    return 0


def print_shared_facts(report_dir: Path) -> None:
    """The facts each pair of probes shares (what its agreement rests on), from the report's pair tables."""
    import csv

    for table in sorted((report_dir / "tables").glob("agreement_pairs_*.csv")):
        with table.open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        print(f"shared facts per pair of probes ({table.stem.removeprefix('agreement_pairs_')}):")
        for r in rows:
            kappa = (
                f"κ {float(r['kappa']):.2f} [{float(r['kappa_lo']):.2f}, {float(r['kappa_hi']):.2f}]"
                if r.get("kappa") not in (None, "", "nan")
                else "κ undefined"
            )
            print(f"  {r['probe_a']} / {r['probe_b']}: {r['n']} facts, {kappa}")


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
    print(
        f"check: {report.checked - len(report.mismatched)}/{report.checked} recomputed numbers equal the results JSON"
    )
    print(f"report: {report.path}")


if __name__ == "__main__":
    main()
