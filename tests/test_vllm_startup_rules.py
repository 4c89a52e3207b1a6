"""The arithmetic behind the KV cache check of ``backends/vllm_cpu.py``, by hand, without vLLM (the engine tests,
``tests/engines/test_vllm_startup.py``, check each failure against the real engine)."""

from __future__ import annotations

from belief_tasks.backends.vllm_cpu import context_length, kv_bytes_per_token


def test_kv_bytes_per_token_of_the_bundled_model(model_path):
    """SmolLM2-135M: 30 layers, 3 key-value heads of 64: keys and values are 2 x 30 x 3 x 64 = 11,520 values a
    token, 4 bytes each in float32; ``auto`` counts 2 (vLLM may run a float32 checkpoint at 16 bits: a lower bound,
    so that a refusal is one vLLM makes too)."""
    args = {"pretrained": str(model_path)}
    assert kv_bytes_per_token({**args, "dtype": "float32"}) == 46_080
    assert kv_bytes_per_token({**args, "dtype": "bfloat16"}) == kv_bytes_per_token(args) == 23_040
    assert kv_bytes_per_token({**args, "kv_cache_dtype": "fp8"}) is None  # sized otherwise: left to vLLM
    assert kv_bytes_per_token({**args, "tensor_parallel_size": 2}) is None
    assert context_length(args) == 8192  # max_position_embeddings, as vLLM derives it
    assert context_length({**args, "max_model_len": "2048"}) == context_length({**args, "max_length": 2048}) == 2048


def test_models_vllm_sizes_otherwise_are_left_to_it(tmp_path):
    """A sliding window or per-layer attention types change what vLLM keeps: no count here; an unreadable config
    neither."""
    from transformers import MistralConfig, Qwen2Config

    MistralConfig(sliding_window=4096).save_pretrained(tmp_path / "mistral")
    layers = ["full_attention", "sliding_attention"]
    Qwen2Config(layer_types=layers, num_hidden_layers=2).save_pretrained(tmp_path / "q")
    MistralConfig(sliding_window=None, max_position_embeddings=4096).save_pretrained(tmp_path / "plain")
    assert kv_bytes_per_token({"pretrained": str(tmp_path / "mistral")}) is None
    assert kv_bytes_per_token({"pretrained": str(tmp_path / "q")}) is None
    assert kv_bytes_per_token({"pretrained": str(tmp_path / "nothing")}) is None
    # Mistral's defaults: 32 layers, 8 key-value heads of 4096 / 32 = 128
    assert kv_bytes_per_token({"pretrained": str(tmp_path / "plain")}) == 2 * 32 * 8 * 128 * 2
    assert context_length({"pretrained": str(tmp_path / "plain")}) == 4096


def test_a_kv_cache_too_small_for_the_context_by_hand(model_path):
    """vLLM needs the context's whole blocks and one block more (its pool keeps one back): 8,192 tokens of the
    bundled model in float32 at vLLM's CPU block of 128 are (64 + 1) x 128 x 46,080 bytes = 0.357 GiB; 100 MB
    hold 16 blocks, so 15 x 128 = 1,920 tokens fit, the length vLLM's own message estimates for the same settings
    ("the estimated maximum model length is 1920", tests/engines/test_vllm_startup.py). Enough cache: no paragraph."""
    from belief_tasks.backends.vllm_cpu import _kv_too_small

    args = {"pretrained": str(model_path), "dtype": "float32"}
    said = _kv_too_small(args, 100_000_000, "kv_cache_memory_bytes=100000000")
    assert "max_model_len=8192 tokens, which needs at least 0.36 GiB (46080 bytes a token)" in said
    assert "VLLM_CPU_KVCACHE_SPACE=1 or more" in said and "max_model_len=1920 or less" in said
    assert "max_model_len=2112 or less" in _kv_too_small({**args, "block_size": 32}, 100_000_000, "")
    assert _kv_too_small({**args, "max_model_len": 1920}, 100_000_000, "") is None  # (15 + 1) blocks fit
    assert _kv_too_small({**args, "max_model_len": 1921}, 100_000_000, "") is not None
    assert "holds no token" in _kv_too_small({"pretrained": "/nonexistent"}, 0, "VLLM_CPU_KVCACHE_SPACE=0")
