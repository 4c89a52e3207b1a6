"""The places where we plug into lm-eval itself, all at ``import belief_tasks``.

1. Model backends are registered lazily after ``lm_eval.models`` (``__init__``).
2. Standard errors for corpus-level aggregations: lm-eval 0.4.13 asks
   ``stderr_for_metric(agg_fn)`` and knows only its own functions, so our
   aggregations (consistency, fluctuation, MONITOR, ...) would always print "N/A".
   An aggregation that carries a ``stderr`` attribute (``tasks.common.with_stderr``)
   gets that function instead. ``--bootstrap_iters 0`` still turns all stderrs off.
3. ``--use_cache`` for our own request types: lm-eval's ``CachingLM`` reads its
   cache only for ``loglikelihood``, ``loglikelihood_rolling`` and ``generate_until``
   and passes every other method through, so a resumed run would recompute every
   ``per_token_loglikelihood`` / ``mask_topk`` request although our backends already
   write them (``cache_hook.add_partial``). ``install_cache_hook`` reads them too, and
   reads back sampled generations that carry their own ``seed`` (5.), which lm-eval
   writes but never reads.
4. Data parallelism on CPU: ``HFLM`` shards documents over ``accelerate launch``
   processes only when it counts more than one CUDA device, so on CPU every process
   ran the whole task. Under a multi-process launch (``WORLD_SIZE`` > 1)
   ``install_cpu_data_parallel_hook`` gives HFLM the launcher's rank and world size
   (docs/scale.md). On GPUs lm-eval's own sharding is left untouched.
5. Per-request sampling seeds on ``hf``: BELIEF's sampled requests carry a ``seed`` in
   their generation kwargs (vLLM's ``SamplingParams`` and OpenAI-style servers take it
   as is). HF's ``generate`` rejects unknown kwargs, so ``install_generation_seed_hook``
   pops it and draws that request from a torch generator state seeded with it. lm-eval
   batches generation by kwargs, so a seeded request is generated alone and its text
   depends on its seed only: not on the batch size, the request order or the number
   of processes.
"""

from __future__ import annotations

import logging
import os


def install_stderr_hook() -> None:
    try:
        import lm_eval.evaluator_utils as eu
    except ImportError:
        return
    original = eu.stderr_for_metric
    if getattr(original, "_belief_tasks", False):
        return

    def stderr_for_metric(metric, bootstrap_iters):
        own = getattr(metric, "stderr", None)
        if own is not None:
            return own if bootstrap_iters > 0 else None
        return original(metric=metric, bootstrap_iters=bootstrap_iters)

    stderr_for_metric._belief_tasks = True
    eu.stderr_for_metric = stderr_for_metric


#: request types of our tasks that are methods of our backends (not lm-eval's three)
CUSTOM_REQUEST_TYPES = frozenset({"per_token_loglikelihood", "mask_topk", "loglikelihood_span"})


def install_cache_hook() -> None:
    try:
        from lm_eval.api.model import CachingLM, hash_args
    except ImportError:
        return
    original = CachingLM.__getattr__
    if getattr(original, "_belief_tasks", False):
        return

    def __getattr__(self, attr: str):
        if attr == "generate_until":
            return _seeded_samples_first(self, original(self, attr))
        if attr not in CUSTOM_REQUEST_TYPES:
            return original(self, attr)
        method = getattr(self.lm, attr)

        def cached(requests, **kwargs):
            keys = [hash_args(attr, req.args) for req in requests]
            results = [self.dbdict.get(k) for k in keys]
            todo = [i for i, k in enumerate(keys) if k not in self.dbdict]
            logging.getLogger("lm_eval.api.model").info(
                "Cached requests: %d, Requests remaining: %d (%s)", len(keys) - len(todo), len(todo), attr
            )
            fresh = method([requests[i] for i in todo], **kwargs) if todo else []
            for i, value in zip(todo, fresh, strict=True):
                results[i] = value
                self.dbdict[keys[i]] = value
            self.dbdict.commit()
            return results

        return cached

    __getattr__._belief_tasks = True
    CachingLM.__getattr__ = __getattr__


def _is_seeded_sample(args) -> bool:
    kwargs = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
    return bool(kwargs.get("do_sample")) and kwargs.get("seed") is not None


def _seeded_samples_first(caching_lm, generate):
    """lm-eval never reads sampled generations back from the cache (unseeded samples would all
    come out the same), though it writes them. A sample that carries its own ``seed`` is
    deterministic, so a resumed run reads it back like a greedy answer."""
    from lm_eval.api.model import hash_args

    def cached(requests, **kwargs):
        db = caching_lm.dbdict
        keys = [hash_args("generate_until", req.args) if _is_seeded_sample(req.args) else None for req in requests]
        hits = {i: db[k] for i, k in enumerate(keys) if k is not None and k in db}
        if hits:
            logging.getLogger("lm_eval.api.model").info("Cached seeded samples: %d", len(hits))
        rest = [req for i, req in enumerate(requests) if i not in hits]
        fresh = iter(generate(rest, **kwargs) if rest else [])
        return [hits[i] if i in hits else next(fresh) for i in range(len(requests))]

    return cached


def launch_world_size() -> int:
    """Processes of this launch: ``WORLD_SIZE`` as set by ``accelerate launch`` / torchrun, else 1."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def install_cpu_data_parallel_hook() -> None:
    if launch_world_size() <= 1:
        return  # not under accelerate launch / torchrun: nothing to shard, nothing to import
    try:
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        return
    if getattr(HFLM.rank.fget, "_belief_tasks", False):
        return

    def _cpu_launch(self):
        acc = self.__dict__.get("accelerator")
        if acc is None or self._world_size != 1 or acc.num_processes <= 1 or acc.device.type != "cpu":
            return None
        return acc

    def rank(self) -> int:
        acc = _cpu_launch(self)
        return acc.process_index if acc is not None else self._rank

    def world_size(self) -> int:
        acc = _cpu_launch(self)
        return acc.num_processes if acc is not None else self._world_size

    rank._belief_tasks = True
    HFLM.rank = property(rank)
    HFLM.world_size = property(world_size)


def install_generation_seed_hook() -> None:
    try:
        import torch
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        return
    original = HFLM._model_generate
    if getattr(original, "_belief_tasks", False):
        return

    def _model_generate(self, context, max_length, stop, **generation_kwargs):
        seed = generation_kwargs.pop("seed", None)
        if seed is None:
            return original(self, context, max_length, stop, **generation_kwargs)
        # fork: the seeded draw leaves the run's global RNG stream as it was
        devices = [context.device] if context.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed) % 2**63)
            return original(self, context, max_length, stop, **generation_kwargs)

    _model_generate._belief_tasks = True
    HFLM._model_generate = _model_generate

