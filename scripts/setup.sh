#!/usr/bin/env bash
# One-command setup: a virtual environment with torch 2.13.0, this package, and the bundled
# default model converted once into the cache. Which package index pip uses is pip's own
# configuration (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf): this script names none.
#   bash scripts/setup.sh            # creates ./.venv
#   BELIEF_VENV=/path bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${BELIEF_VENV:-.venv}"
PY="${PYTHON:-python3}"

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# torch first, on its own: a local wheel if pip's find-links has one, else whatever pip's configured
# index serves. On a machine without a GPU, point pip at torch's CPU build first (README, Troubleshooting),
# or the default index brings CUDA libraries of several GB.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if "${PIP[@]}" install -q --no-index --no-deps torch==2.13.0 2>/dev/null; then
    echo "torch 2.13.0 from a local wheel"
  else
    if ! command -v nvidia-smi >/dev/null 2>&1 && [ -z "${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]; then
      echo "no GPU found: torch 2.13.0 comes from pip's configured index (its CPU build: README, Troubleshooting)"
    fi
    "${PIP[@]}" install -q torch==2.13.0
  fi
fi

# A regular (non-editable) install: the wheel places our task YAMLs under lm_eval/tasks/belief,
# which is how a bare `lm_eval --tasks belief_...` finds them.
rm -rf build  # setuptools' build folder would carry files deleted since the last install into the wheel
"${PIP[@]}" install -q ".[test,parity]"

"$VENV/bin/python" -m belief_tasks fetch-model
echo "setup done: $VENV (model: $("$VENV/bin/python" -m belief_tasks model-path))"
