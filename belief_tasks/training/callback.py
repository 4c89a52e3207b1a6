"""Knowledge during training: a ``transformers.TrainerCallback`` that runs our tasks on the model in memory.

    from belief_tasks.training.callback import KnowledgeCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    KnowledgeCallback(["belief_bear"], metadata={"source": "sample", "budget": 0.1},
                      output_path="runs/knowledge", every_n_steps=500).attach(trainer)
    trainer.train()

Every ``every_n_steps`` steps (or at each save, the default) the callback scores the model being trained,
in the training process, with no second copy of its weights (lm-eval's ``HFLM(pretrained=<the model>)``),
and then:

* logs each task's headline metric (``knowledge/<task>/<metric>``, with ``_stderr`` and, for budgeted runs,
  ``_low`` / ``_high``: the 95 % interval) through ``Trainer.log``, so TensorBoard, W&B and every other
  integration the Trainer reports to receive them, and ``state.log_history`` keeps them;
* writes lm-eval's results JSON and samples files under ``output_path/checkpoint-<step>/`` (the model
  arguments it records name that checkpoint), so ``belief-report output_path`` draws the curves.

It changes nothing of the training: the tasks are built once (``checkpoint_eval.build_tasks``), the model's
train/eval mode is put back, and every random generator that lm-eval seeds or draws from (Python's
``random``, numpy's global one, torch's CPU one and every CUDA device's) is saved before and restored after,
so the losses with the callback equal those without it, step by step (``tests/test_training_callback.py``).

Cost: ``max_overhead`` (default 0.1) caps evaluation at that share of the training time: a due evaluation is
skipped (and counted in ``skipped``) while the time trained since the last one is less than the last one's
cost divided by ``max_overhead``. Size one evaluation with the ``budget`` knob (docs/budget.md) or
``max_facts_per_relation`` / ``relations`` so that it runs as often as wanted (docs/training.md).
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from transformers import TrainerCallback

from belief_tasks.training import checkpoint_eval

log = logging.getLogger(__name__)

PREFIX = "knowledge"


@contextmanager
def untouched(model):
    """Run the body with every global random generator and the model's train/eval mode restored after."""
    states = (
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    )
    training = model.training
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])
        model.train(training)


class KnowledgeCallback(TrainerCallback):
    """Runs ``tasks`` on the model being trained (see the module docstring)."""

    def __init__(
        self,
        tasks: Sequence[str],
        *,
        metadata: Mapping[str, Any] | None = None,
        output_path: str | Path | None = None,
        every_n_steps: int | None = None,
        on_save: bool | None = None,
        at_start: bool = False,
        max_overhead: float | None = 0.1,
        backend: str = "hf",
        batch_size: int = 8,
        tokenizer=None,
        bootstrap_iters: int = 1000,
        cache: bool = True,
        seed: int = 0,
    ):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be at least 1, got {every_n_steps}")
        if max_overhead is not None and max_overhead <= 0:
            raise ValueError(f"max_overhead must be positive (or None: no cap), got {max_overhead}")
        self.tasks, self.metadata = list(tasks), dict(metadata or {})
        self.output_path = None if output_path is None else Path(output_path)
        self.every_n_steps = every_n_steps
        self.on_save_too = (every_n_steps is None) if on_save is None else on_save
        self.at_start, self.max_overhead = at_start, max_overhead
        self.backend, self.batch_size, self.tokenizer = backend, batch_size, tokenizer
        self.bootstrap_iters, self.cache, self.seed = bootstrap_iters, cache, seed
        self.trainer = None
        self._built: tuple[Any, list] | None = None  # (task manager, built tasks): ``checkpoint_eval.build_tasks``
        self._last_end: float | None = None  # when the last evaluation ended (monotonic)
        self._last_cost = 0.0
        self._trained = 0.0  # training seconds since the last evaluation
        self._done: set[int] = set()
        self.skipped: list[int] = []  # steps whose evaluation the overhead cap skipped
        self.history: list[dict] = []  # one dict per evaluation: step, seconds, the logged metrics

    def attach(self, trainer) -> "KnowledgeCallback":
        """Add the callback to ``trainer`` and log through it (``Trainer.log``)."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    # --- the Trainer's events -------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self._built is None:
            # tasks that count the model's tokens (MONITOR, truncation) read its tokenizer from the model args
            tokenizer = self.tokenizer or kwargs.get("processing_class") or kwargs.get("tokenizer")
            name = getattr(tokenizer, "name_or_path", None)
            known = {"tokenizer": name} if name and "tokenizer" not in self.metadata else {}
            self._built = checkpoint_eval.build_tasks(self.tasks, {**known, **self.metadata}, known)
        self._last_end = time.monotonic()
        if self.at_start:
            self._evaluate(args, state, model, kwargs, forced=True)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_n_steps and state.global_step % self.every_n_steps == 0:
            self._evaluate(args, state, model, kwargs)

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.on_save_too:
            self._evaluate(args, state, model, kwargs)

    # --- one evaluation ---------------------------------------------------------------------------------

    def _evaluate(self, args, state, model, kwargs, forced: bool = False) -> None:
        step = state.global_step
        if model is None or step in self._done:
            return
        if self._built is None:
            raise RuntimeError("KnowledgeCallback: its tasks are built when training begins (on_train_begin)")
        now = time.monotonic()
        trained = now - (self._last_end or now)
        if not forced and self.max_overhead and self._last_cost > self.max_overhead * (self._trained + trained):
            self._trained += trained
            self._last_end = now
            self.skipped.append(step)
            return
        self._done.add(step)
        name = f"{args.output_dir}/checkpoint-{step}"
        model_args = {"pretrained": name}
        tokenizer = self.tokenizer or kwargs.get("processing_class") or kwargs.get("tokenizer")
        if tokenizer is None:
            raise ValueError(
                "KnowledgeCallback needs the model's tokenizer: give tokenizer=... or the Trainer's processing_class"
            )
        start = time.monotonic()
        with untouched(model):
            lm = self._lm(model, tokenizer)
            cache = None
            if self.cache and self.output_path is not None:
                cache = self.output_path / "cache" / f"checkpoint-{step}"
            manager, built = self._built
            results = checkpoint_eval.evaluate(
                lm,
                manager,
                built,
                model_args=model_args,
                cache=cache,
                bootstrap_iters=self.bootstrap_iters,
                seed=self.seed,
            )
            if self.output_path is not None:
                checkpoint_eval.write(results, self.output_path / f"checkpoint-{step}", model_args)
            del lm
        cost = time.monotonic() - start
        self._last_cost, self._trained, self._last_end = cost, 0.0, time.monotonic()
        metrics = {f"{PREFIX}/{k}": v for k, v in checkpoint_eval.headline(results).items()}
        metrics[f"{PREFIX}/seconds"] = round(cost, 3)
        self.history.append({"step": step, **metrics})
        if self.trainer is not None:
            # Trainer.log ends in the on_log event, which clears control.should_log: the loss the Trainer
            # was about to log for this step would be folded into the next one, so its flag is put back
            pending = self.trainer.control.should_log
            self.trainer.log(dict(metrics))
            self.trainer.control.should_log = pending
        else:
            state.log_history.append({**metrics, "step": step})

    def _lm(self, model, tokenizer):
        from lm_eval.api.registry import get_model

        return get_model(self.backend)(pretrained=model, tokenizer=tokenizer, batch_size=self.batch_size)
