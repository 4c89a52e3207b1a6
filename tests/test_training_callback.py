"""The Trainer callback in a tiny training loop: what it logs, what it writes, and that training is unchanged.

A tiny GPT-2 (dropout on, so any change of the global random state would change the losses) with the bundled
model's tokenizer trains for a few steps with and without the callback; the losses must be equal step by step.
"""

import json
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from belief_tasks.commands.default_model import default_model_path, is_ready  # noqa: E402

pytestmark = pytest.mark.skipif(
    not is_ready(), reason="the bundled model's tokenizer is not converted (scripts/setup.sh)"
)

TASK = "belief_bear"
METADATA = {"source": "sample", "relations": "P1303", "max_facts_per_relation": 2, "templates": "0"}
STEPS = 4


def tiny_trainer(tmp_path, tokenizer, callbacks=()):
    from transformers import DataCollatorForLanguageModeling, GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=16,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    texts = [f"The capital of country {i} is city {i * 7 % 13}." for i in range(24)]
    data = [tokenizer(t) for t in texts]
    args = TrainingArguments(
        output_dir=str(tmp_path / "train"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=7,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    for cb in callbacks:
        cb.attach(trainer)
    return trainer


def losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_callback_logs_writes_and_leaves_training_unchanged(tmp_path):
    from transformers import AutoTokenizer

    from belief_tasks.report import build_report
    from belief_tasks.training.callback import KnowledgeCallback

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token

    plain = tiny_trainer(tmp_path / "a", tokenizer)
    plain.train()
    without = losses(plain)

    cb = KnowledgeCallback(
        [TASK], metadata=METADATA, output_path=tmp_path / "knowledge", every_n_steps=2, max_overhead=None, batch_size=4
    )
    observed = tiny_trainer(tmp_path / "b", tokenizer, [cb])
    observed.train()
    with_cb = losses(observed)

    assert len(without) == STEPS and with_cb == without  # exactly, step by step
    assert observed.model.training  # put back in train mode
    assert [h["step"] for h in cb.history] == [2, 4]

    key = f"knowledge/{TASK}/bear"
    logged = [h for h in observed.state.log_history if key in h]
    assert [h["step"] for h in logged] == [2, 4]
    for entry, step in zip(logged, (2, 4)):
        assert 0.0 <= entry[key] <= 1.0
        assert entry["knowledge/seconds"] > 0
        # one relation: BEAR's standard error over relations is undefined ("N/A"), so it is not logged
        assert set(entry) == {key, "knowledge/seconds", "step", "epoch"}
        # the logged value is the one in the results JSON written for that step
        (results,) = (tmp_path / "knowledge" / f"checkpoint-{step}").glob("*/results_*.json")
        data = json.loads(results.read_text())
        assert math.isclose(data["results"][TASK]["bear,none"], entry[key], rel_tol=0, abs_tol=0)
        assert data["config"]["model_args"]["pretrained"].endswith(f"checkpoint-{step}")
        assert list(results.parent.glob(f"samples_{TASK}_*.jsonl"))

    # belief-report reads the per-step outputs as one training run of two checkpoints
    report = build_report([tmp_path / "knowledge"], tmp_path / "report")
    assert not report.mismatched
    assert any(s.title == "Knowledge over training" for s in report.sections)


def test_overhead_cap_skips_evaluations_that_would_cost_too_much(tmp_path):
    """With max_overhead tiny, an evaluation costs far more than that share of the few seconds trained since the
    last: every due evaluation after the first is skipped, and the losses still equal a plain run's."""
    from transformers import AutoTokenizer

    from belief_tasks.training.callback import KnowledgeCallback

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    cb = KnowledgeCallback([TASK], metadata=METADATA, every_n_steps=1, max_overhead=1e-6, batch_size=4)
    trainer = tiny_trainer(tmp_path, tokenizer, [cb])
    trainer.train()
    assert [h["step"] for h in cb.history] == [1]
    assert cb.skipped == [2, 3, 4]


def test_callback_refuses_bad_settings():
    from belief_tasks.training.callback import KnowledgeCallback

    with pytest.raises(ValueError, match="every_n_steps"):
        KnowledgeCallback([TASK], every_n_steps=0)
    with pytest.raises(ValueError, match="max_overhead"):
        KnowledgeCallback([TASK], max_overhead=0)
