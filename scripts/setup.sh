#!/usr/bin/env bash
# One-command setup: a virtual environment with CPU torch 2.13.0 (CUDA only where a GPU
# is present), this package, and the bundled default model converted once into the cache.
#   bash scripts/setup.sh            # creates ./.venv
#   BELIEF_VENV=/path bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${BELIEF_VENV:-.venv}"
PY="${PYTHON:-python3}"

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# torch first, so that nothing later pulls a multi-GB CUDA build on a CPU machine:
# a local wheel if pip's find-links has one, else the CPU index (or PyPI's CUDA build with a GPU).
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if "${PIP[@]}" install -q --no-index --no-deps torch==2.13.0 2>/dev/null; then
    echo "torch 2.13.0 from a local wheel"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    "${PIP[@]}" install -q torch==2.13.0
  else
    "${PIP[@]}" install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
  fi
fi

# A regular (non-editable) install: the wheel places our task YAMLs under lm_eval/tasks/belief,
# which is how a bare `lm_eval --tasks belief_...` finds them.
rm -rf build  # setuptools' build folder would carry files deleted since the last install into the wheel
"${PIP[@]}" install -q ".[test,parity]"

"$VENV/bin/python" -m belief_tasks fetch-model
echo "setup done: $VENV (model: $("$VENV/bin/python" -m belief_tasks model-path))"
