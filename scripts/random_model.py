"""A model folder with random weights (fixed seed) from a model's config and tokenizer, for timing runs on a
machine the weights cannot reach (a lent GPU): throughput does not depend on the weights, accuracy does, so
nothing but speed and backend agreement may be read off such a model.

    python scripts/random_model.py --source MODEL_DIR --out /tmp/m135                      # the same shape
    python scripts/random_model.py --source MODEL_DIR --out /tmp/m1700 --shape 1.7b --dtype bfloat16

``--source`` needs config.json and the tokenizer files only (no weights). ``--shape 1.7b`` keeps the
tokenizer and vocabulary and takes SmolLM2-1.7B's body: width 2,048, 24 layers, 32 heads (32 key/value
heads), MLP 8,192 (about 1.7e9 parameters with tied embeddings). The weights are drawn on ``--device``
(cuda is much faster for the large shape) after ``torch.manual_seed(--seed)``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

#: SmolLM2-1.7B's shape (its config.json); vocabulary and tokenizer stay the source's
SHAPES = {
    "1.7b": {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 8192,
    },
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    },
}  # for trying a script end to end
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="folder with config.json and the tokenizer files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), help="replace the body's shape (default: the source's)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--initializer_range",
        type=float,
        help="std of the random weights (default: the config's); a wider one makes a tiny model's answers depend on "
        "its prompt, which tests that compare answers across runs need",
    )
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src, out = Path(args.source), Path(args.out)
    config = AutoConfig.from_pretrained(src)
    for key, value in SHAPES.get(args.shape, {}).items():
        setattr(config, key, value)
    if args.initializer_range is not None:
        config.initializer_range = args.initializer_range
    if hasattr(config, "head_dim") and args.shape:
        config.head_dim = config.hidden_size // config.num_attention_heads
    dtype = getattr(torch, args.dtype)
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    n = sum(p.numel() for p in model.parameters())
    print(
        f"{out}: {type(model).__name__}, {n / 1e6:.1f} M parameters, {args.dtype}, random weights (seed {args.seed}), "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )


if __name__ == "__main__":
    main()
