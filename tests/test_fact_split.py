"""The held-out split of a checkpoint series: a seeded half per relation, keyed by the cross-dataset fact key,
so every family's records of one fact fall on the same side."""

import dataclasses
import json

import pytest

from belief_tasks.data.bundled import load_sample
from belief_tasks.facts.schema import FactSet, sampling_key
from belief_tasks.facts.split import HELD_OUT, TRAINED, FactSplit, facts_on, records_on, split_facts


def test_half_of_each_relation_seeded_and_disjoint():
    fs = load_sample()
    split = split_facts(fs, seed=1234)
    keys = {sampling_key(f, fs.relations[f.relation]) for f in fs.facts}
    assert split.trained | split.held_out == keys and not split.trained & split.held_out
    for rid in fs.relations:
        rel_keys = {sampling_key(f, fs.relations[rid]) for f in fs.facts if f.relation == rid}
        assert len(rel_keys & split.trained) == round(len(rel_keys) / 2)
    assert split_facts(fs, seed=1234) == split  # the same seed draws the same half
    other = split_facts(fs, seed=7)
    assert other.trained != split.trained and len(other.trained) == len(split.trained)
    assert len(facts_on(fs, split, TRAINED)) + len(facts_on(fs, split, HELD_OUT)) == len(fs.facts)


def test_split_depends_on_the_fact_key_not_on_ids_or_order():
    """The same facts as another dataset holds them (other ids, reversed order) are split alike."""
    fs = load_sample()
    renamed = FactSet(
        fs.source + "-copy",
        fs.relations,
        [dataclasses.replace(f, id=f"other-{i}") for i, f in enumerate(reversed(fs.facts))],
    )
    assert split_facts(renamed, seed=3) == split_facts(fs, seed=3)


@pytest.mark.parametrize(
    "module, function",
    [
        ("belief_tasks.tasks.bear", "bear_dataset"),
        ("belief_tasks.tasks.belief_icl", "mp_zeroshot"),
        ("belief_tasks.tasks.iclke", "iclke_bear"),
        ("belief_tasks.tasks.monitor", "sample_dataset"),
    ],
)
def test_every_family_puts_a_fact_on_the_same_side(module, function):
    """Each family's documents of the bundled sample carry the fact's cross-dataset key; the split places
    them by it, and every fact of the sample is found on exactly the side the split drew for it."""
    import importlib

    fs = load_sample()
    split = split_facts(fs, seed=1234)
    expected = {
        sampling_key(f, fs.relations[f.relation]): split.side(sampling_key(f, fs.relations[f.relation]))
        for f in fs.facts
    }
    from belief_tasks.commands.default_model import default_model_path, is_ready

    if function == "sample_dataset" and not is_ready():
        pytest.skip("MONITOR's documents need the bundled model's tokenizer (scripts/setup.sh)")
    from belief_tasks.options import parse_options

    glue = importlib.import_module(module)
    opts = parse_options(
        glue.OPTIONS, {"source": "sample", "relations": "P36,P19", "pretrained": str(default_model_path())}
    )
    docs = getattr(glue, function)(opts)["test"]
    records = [{"fact_key": json.loads(d["fact_key"])} for d in docs]
    sides = {r["fact_key"]["key"]: split.of_record(r) for r in records}
    assert None not in sides.values()
    assert sides == {k: expected[k] for k in sides}
    assert len(records_on(records, split, TRAINED)) + len(records_on(records, split, HELD_OUT)) == len(records)


def test_split_file_round_trip(tmp_path):
    split = split_facts(load_sample(), seed=5)
    path = split.save(tmp_path / "facts_split.json")
    assert FactSplit.load(path) == split
    (tmp_path / "bad.json").write_text('{"trained": []}')
    with pytest.raises(ValueError, match="not a fact split"):
        FactSplit.load(tmp_path / "bad.json")
