"""``python -m belief_tasks <command>``.

  path          print the task folder for ``lm_eval --include_path``
  model-path    print the default model's folder (``fetch-model`` creates it)
  fetch-model   download and convert the bundled default model (once)
  demo          run the main job: every task family on the bundled sample with the default model
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else "help"
    if cmd == "path":
        from belief_tasks.paths import task_yamls_dir

        print(task_yamls_dir())
    elif cmd == "model-path":
        from belief_tasks.model import default_model_path

        print(default_model_path())
    elif cmd == "fetch-model":
        from belief_tasks.model import fetch_default_model

        print(fetch_default_model(force="--force" in argv))
    elif cmd == "demo":
        from belief_tasks.cli import demo

        return demo(argv[1:])
    else:
        print(__doc__.strip())
        return 0 if cmd in ("help", "-h", "--help") else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
