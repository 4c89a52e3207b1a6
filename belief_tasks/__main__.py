"""``python -m belief_tasks <command>``: the main job and the paths a user needs (``USAGE``)."""

from __future__ import annotations

import sys

USAGE = """\
usage: python -m belief_tasks COMMAND

commands:
  demo [ARGS]     the main job: every probe family on the bundled sample with the bundled model, then
                  its knowledge report (results/demo/); ARGS go to belief-eval (e.g. --model hf,
                  --device cuda, --output_path DIR)
  profile [ARGS]  a model's knowledge profile: BEAR, IC-LKE on BEAR-big, MONITOR on FKTC, BELIEF-ICL MP
                  and QA on MyriadLAMA at a 5% budget (group belief_profile), then its report
                  (results/profile/); ARGS go to belief-eval (--model_args pretrained=MODEL, --metadata
                  '{"budget": 0.2}', --estimate for its cost before the model loads)
  path            print our task folder (for lm_eval --include_path)
  model-path      print the bundled model's folder
  fetch-model     download and convert the bundled model once (--force: again)
  sweep ARGS      belief-eval sweep: one command over many checkpoints, then one report (docs training)
  docs [PAGE]     print a documentation page that ships with the package (e.g. docs data: every
                  check of the input); without PAGE, the list of pages

Evaluating any model: belief-eval --help. Reports from your runs: belief-report --help."""

COMMANDS = ("demo", "profile", "path", "model-path", "fetch-model", "sweep", "docs")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else "--help"
    if cmd == "path":
        from belief_tasks.paths import task_yamls_dir

        print(task_yamls_dir())
    elif cmd == "model-path":
        from belief_tasks.commands.default_model import default_model_path

        print(default_model_path())
    elif cmd == "fetch-model":
        from belief_tasks.commands.default_model import fetch_default_model

        print(fetch_default_model(force="--force" in argv))
    elif cmd == "docs":
        return show_doc(argv[1] if len(argv) > 1 else None)
    elif cmd == "sweep":
        from belief_tasks.training.sweep import main as sweep

        return sweep(argv[1:])
    elif cmd == "demo":
        from belief_tasks.commands.belief_eval import demo

        return demo(argv[1:])
    elif cmd == "profile":
        from belief_tasks.commands.belief_eval import profile

        return profile(argv[1:])
    elif cmd in ("help", "-h", "--help"):
        print(USAGE)
    else:
        from belief_tasks.commands.checks import did_you_mean

        print(
            f"python -m belief_tasks: no command {cmd!r}; {did_you_mean(cmd, COMMANDS)}the commands are "
            f"{', '.join(COMMANDS)} (python -m belief_tasks --help)",
            file=sys.stderr,
        )
        return 2
    return 0


def belief_eval(argv: list[str] | None = None) -> None:
    """The ``belief-eval`` command: ``belief-eval sweep ARGS`` over checkpoints (``training.sweep``, which runs
    ``commands`` per checkpoint, so it is dispatched from here, above both), any other line a run
    (``commands.belief_eval``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["sweep"]:
        raise SystemExit(main(args))
    from belief_tasks.commands.belief_eval import main as run

    run(args)


def show_doc(page: str | None) -> int:
    """``python -m belief_tasks docs [PAGE]``: one page of docs/ (shipped in the wheel), or their list."""
    from belief_tasks.commands.checks import did_you_mean
    from belief_tasks.paths import docs_dir

    pages = sorted(p.stem for p in docs_dir().glob("*.md"))
    if page is None:
        print("documentation pages (python -m belief_tasks docs PAGE): " + ", ".join(pages))
        return 0
    name = page.removeprefix("docs/").removesuffix(".md")
    if name not in pages:
        print(
            f"python -m belief_tasks docs: no page {page!r}; {did_you_mean(name, pages)}the pages are "
            f"{', '.join(pages)}",
            file=sys.stderr,
        )
        return 2
    try:
        print((docs_dir() / f"{name}.md").read_text(encoding="utf-8"), flush=True)
    except BrokenPipeError:  # `... docs data | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
