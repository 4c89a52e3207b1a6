"""hf-shared uses transformers' current cache API: no deprecation warning on our path, same numbers as stock hf.

transformers renamed the KV cache from ``past_key_values`` to ``cache`` (the old name warns "deprecated" and
is to be removed); ``HFSharedPrefixLM`` uses the name the model's forward declares. Run on the
transformers of this environment; the lowest version in pyproject.toml was checked once in a throwaway
environment (docs/backends.md, "transformers versions").
"""

from __future__ import annotations

import logging
import warnings

import pytest
from test_shared_backend import GEN, LL_REQUESTS, PROMPTS, assert_same_ll, instances, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_no_deprecated_cache_api_on_the_hf_shared_path(model_path, kind):
    import transformers
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer
    from transformers.utils import logging as tf_logging

    from belief_tasks.backends.shared import HFSharedPrefixLM

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = tiny_model(kind, tokenizer)
    shared = HFSharedPrefixLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=4)
    assert shared.shared_unsupported is None
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, root = Keep(level=logging.WARNING), logging.getLogger("transformers")
    root.addHandler(handler)
    tf_logging.warning_once.cache_clear()  # a warning already given in this process would not show again
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ll = shared.loglikelihood(instances("loglikelihood", LL_REQUESTS), disable_tqdm=True)
            gen = shared.generate_until(
                instances("generate_until", [(p, GEN) for p in PROMPTS], repeats=2), disable_tqdm=True
            )
    finally:
        root.removeHandler(handler)
    said = records + [str(w.message) for w in caught]
    deprecated = [m for m in said if "past_key_values" in m or "deprecated" in m.lower()]
    assert not deprecated, (transformers.__version__, deprecated)
    stock = HFLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=4)
    assert_same_ll(ll, stock.loglikelihood(instances("loglikelihood", LL_REQUESTS), disable_tqdm=True))
    assert gen == stock.generate_until(
        instances("generate_until", [(p, GEN) for p in PROMPTS], repeats=2), disable_tqdm=True
    )
