"""A real checkpoint series, made offline: continue training the bundled model on half the sample's facts.

The bundled sample's facts are split per relation by a seeded hash of their cross-dataset key
(``belief_tasks.facts.split``): the statements of the trained half (every template of the relation, filled
with the fact's subject and gold object labels) are the training text, the other half is held out. The
Hugging Face ``Trainer`` runs for ``--steps`` optimiser steps and saves a checkpoint every
``--steps / --checkpoints`` steps (weights only, no optimiser state), plus the split (``facts_split.json``)
and the timing (``series.json``) beside them, and the starting model as ``checkpoint-0``. Only the top
``--train-layers`` decoder layers train (cheaper steps on a CPU). ``--max-minutes`` stops the run early (a
checkpoint is saved at the stop) once that many minutes on ``--threads`` cores are spent (CPU time /
threads, so a machine shared with other work does not shorten the run).

Checkpoints go outside the repository (default: the package cache, ``.../checkpoints/series``); then

    belief-eval sweep --checkpoints <out> --model hf-shared --tasks belief_bear,belief_mp_zeroshot ...

evaluates them (docs/training.md has the exact command and the measured figures).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from belief_tasks.commands.default_model import default_model_path
from belief_tasks.data.bundled import load_sample
from belief_tasks.facts.split import TRAINED, facts_on, split_facts
from belief_tasks.paths import cache_dir


def statements(fs, facts, templates: str = "manual") -> list[str]:
    """Each fact's relation's templates (``manual``: the hand-written ones, ``all``), with [X] the subject label
    and [Y] the gold object label."""
    out = []
    for f in facts:
        for t in fs.relations[f.relation].templates:
            if templates == "manual" and not t.manual:
                continue
            out.append(t.text.replace("[X]", f.subject.label).replace("[Y]", f.object.label))
    return out


class StopAfter(TrainerCallback):
    """Ends training (with a save) once ``minutes`` on ``threads`` cores are spent: the process's CPU time over
    ``threads`` (on a machine shared with other work, wall-clock time would measure the others' load)."""

    def __init__(self, minutes: float, threads: int):
        self.budget, self.threads = 60 * minutes, threads
        self.start = time.process_time()
        self.stopped_at = None

    def spent(self) -> float:
        """Seconds of the budget spent: CPU seconds / threads."""
        return (time.process_time() - self.start) / self.threads

    def on_step_end(self, args, state, control, **kwargs):
        if self.spent() > self.budget:
            control.should_training_stop = True
            control.should_save = True
            self.stopped_at = state.global_step
        return control


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=cache_dir() / "checkpoints" / "series")
    ap.add_argument("--model", type=Path, default=default_model_path())
    ap.add_argument("--seed", type=int, default=1234, help="the split's seed and the Trainer's")
    ap.add_argument("--steps", type=int, default=160)
    ap.add_argument("--templates", choices=("manual", "all"), default="manual")
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=15.0,
        help="stop (with a checkpoint) after this many minutes on --threads cores (CPU time / threads)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--train-layers",
        type=int,
        default=6,
        help="train only the top N decoder layers and the final norm (the rest frozen: cheaper steps)",
    )
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    fs = load_sample()
    split = split_facts(fs, a.seed)
    trained = facts_on(fs, split, TRAINED)
    texts = statements(fs, trained, a.templates)
    a.out.mkdir(parents=True, exist_ok=True)
    split.save(a.out / "facts_split.json")
    print(
        f"{len(trained)} trained facts ({len(split.trained)} keys), {len(split.held_out)} held out; "
        f"{len(texts)} statements",
        flush=True,
    )

    tok = AutoTokenizer.from_pretrained(a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    layers = model.model.layers
    for p in model.parameters():
        p.requires_grad_(False)
    for p in [*layers[len(layers) - a.train_layers :].parameters(), *model.model.norm.parameters()]:
        p.requires_grad_(True)
    data = [tok(t + tok.eos_token) for t in texts]
    every = max(1, a.steps // a.checkpoints)
    args = TrainingArguments(
        output_dir=str(a.out),
        max_steps=a.steps,
        per_device_train_batch_size=a.batch_size,
        learning_rate=a.lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=min(10, a.steps // 10),
        weight_decay=0.0,
        save_strategy="steps",
        save_steps=every,
        save_only_model=True,
        save_total_limit=None,
        logging_steps=max(1, every // 4),
        report_to=[],
        seed=a.seed,
        data_seed=a.seed,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    stop = StopAfter(a.max_minutes, a.threads)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tok, mlm=False),
        callbacks=[stop],
    )
    start = time.time()
    trainer.train()
    wall = time.time() - start
    steps = trainer.state.global_step
    tokens = sum(len(d["input_ids"]) for d in data)
    info = {
        "model": str(a.model.name),
        "seed": a.seed,
        "steps": steps,
        "planned_steps": a.steps,
        "stopped_early_at": stop.stopped_at,
        "batch_size": a.batch_size,
        "lr": a.lr,
        "save_every": every,
        "statements": len(texts),
        "templates": a.templates,
        "trained_facts": len(trained),
        "tokens_per_epoch": tokens,
        "epochs": round(steps * a.batch_size / len(texts), 2),
        "wall_seconds": round(wall, 1),
        "cpu_seconds_per_thread": round(stop.spent(), 1),
        "threads": a.threads,
        "train_layers": a.train_layers,
        "loss": [h for h in trainer.state.log_history if "loss" in h],
    }
    (a.out / "series.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    tok.save_pretrained(a.out / "checkpoint-0")
    model0 = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)  # the starting point
    model0.save_pretrained(a.out / "checkpoint-0")
    for ck in a.out.glob("checkpoint-*"):
        tok.save_pretrained(ck)
    print(
        f"{steps} steps in {wall / 60:.1f} min ({info['epochs']} epochs of {len(texts)} statements) -> {a.out}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
