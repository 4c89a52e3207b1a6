"""Seeds every engine accepts: each sampled request's ``seed`` fits a signed 64-bit integer (vLLM's
server refuses larger ones), reduced at its source so that ``hf`` and ``hf-shared`` draw what they drew
before (they always seeded torch with ``seed % 2**63``)."""

from __future__ import annotations

import pytest

from belief_tasks.facts import seeding
from belief_tasks.tasks import belief_icl as B

INT64_MAX = 2**63 - 1


def test_request_seed_is_the_derived_seed_reduced_as_the_hf_paths_did():
    keys = [
        (1234, "belief_icl", "sample", f"P36/Q{n}", "P36_t0", "label", "mp", i) for n in range(50) for i in range(4)
    ]
    raw = [seeding.derive_seed(*k) for k in keys]
    reduced = [seeding.request_seed(*k) for k in keys]
    assert any(r > INT64_MAX for r in raw)  # about half of the unsigned seeds did not fit
    assert reduced == [r % 2**63 for r in raw] and all(0 <= s <= INT64_MAX for s in reduced)
    # the hf paths still apply ``% 2**63`` (to a user's own seed): a reduced seed passes unchanged
    assert [s % 2**63 for s in reduced] == reduced


def _instances(name: str, metadata: dict):
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={"source": "sample", **metadata}
    )
    task = next(iter(tm.load([name])["tasks"].values()))
    task.build_all_requests(rank=0, world_size=1)
    return task.instances


@pytest.mark.parametrize(
    "task, metadata",
    [
        ("belief_demo_mp_4template", {}),
        ("belief_demo_qa_4template", {}),
        ("belief_mp_4random", {"max_facts_per_relation": 6, "confidence_samples": 10, "seed": 2**40 + 7}),
    ],
)
def test_every_sampled_request_seed_fits_int64(task, metadata):
    sampled = [inst for inst in _instances(task, metadata) if inst.args[1].get("do_sample")]
    seeds = [inst.args[1]["seed"] for inst in sampled]
    assert len(seeds) >= 100 and len(set(seeds)) == len(seeds)
    assert all(isinstance(s, int) and 0 <= s <= INT64_MAX for s in seeds)
    assert any(s >= 2**62 for s in seeds)  # spread over the whole signed range, not a narrower one
    # hf and hf-shared seed torch with ``seed % 2**63``: the same number as from the unreduced seed the
    # requests carried before, so their texts (and the demo's numbers) do not change
    unreduced = [
        seeding.derive_seed(int(inst.doc["seed"]), "belief_icl", "sample", *_prompt_ids(inst), i)
        for inst, i in zip(sampled, _sample_indices(sampled))
    ]
    assert any(u > INT64_MAX for u in unreduced)
    assert [u % 2**63 for u in unreduced] == [s % 2**63 for s in seeds]


def _prompt_ids(inst) -> tuple:
    ids = B.prompt_ids(inst.doc, inst.doc["sampled"])
    return ids["fact_id"], ids["template_id"], ids["subject_form"], ids["style"]


def _sample_indices(sampled) -> list[int]:
    """Sample i of its prompt: the K samples follow their prompt's greedy request in ``idx`` order."""
    first = {}
    for inst in sampled:
        first.setdefault(inst.doc_id, inst.idx)
    return [inst.idx - first[inst.doc_id] for inst in sampled]
