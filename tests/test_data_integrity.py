"""Repeated instances and out-of-shape fields are refused, naming the file, both rows and the field;
the published copies' own repeats (FKTC's subject-object pairs with other negatives) still load.

Hostile inputs are small synthetic files in each dataset's documented layout; the real BEAR, BEAR-big
and FKTC files are read where ../shared is present (skipped elsewhere).
"""

from __future__ import annotations

import json
import time

import pytest

from belief_tasks.data import load_facts
from belief_tasks.data.bear import load_bear_folder
from belief_tasks.data.fktc import load_fktc_folder
from belief_tasks.data.myriadlama import rows_to_factset
from belief_tasks.data.sources import Source
from belief_tasks.data.trex_mc import load_trex_mc
from belief_tasks.facts.schema import SchemaError

NEGS = ["Rome", "Berlin", "Madrid", "Vienna", "Lisbon"]


def _bear(tmp, rows, space=("Africa", "Antarctica", "Europe")):
    folder = tmp / "BEAR"
    folder.mkdir()
    meta = {"P30": {"templates": ["[X] is located in [Y]."], "answer_space_labels": list(space)}}
    (folder / "metadata_relations.json").write_text(json.dumps(meta))
    (folder / "P30.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return folder


def _fktc(tmp, rows, prompts=("What is the capital of [X]?",)):
    folder = tmp / "FKTC"
    folder.mkdir()
    lines = [{"relations": list(prompts)}, *rows]
    (folder / "P36-subclass.json").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def _refused(load) -> SchemaError:
    with pytest.raises(SchemaError) as err:
        load()
    return err.value


# ---------------------------------------------------------------- BEAR: one instance per sub_id


def test_bear_repeated_sub_id_with_another_gold_object_is_refused(tmp_path):
    rows = [
        {"sub_id": "Q3392", "sub_label": "Nile", "obj_label": "Africa"},
        {"sub_id": "Q46", "sub_label": "France", "obj_label": "Europe"},
        {"sub_id": "Q3392", "sub_label": "Nile", "obj_label": "Antarctica"},
    ]
    e = _refused(lambda: load_bear_folder(_bear(tmp_path, rows)))
    assert (e.row, e.field) == (3, "sub_id") and e.file.endswith("P30.jsonl")
    assert "repeats row 1 (the same sub_id 'Q3392')" in str(e) and "scored twice" in str(e)


def test_bear_without_ids_repeated_subject_label_is_refused(tmp_path):
    rows = [{"sub_label": "Nile", "obj_label": "Africa"}, {"sub_label": "Nile", "obj_label": "Africa"}]
    e = _refused(lambda: load_bear_folder(_bear(tmp_path, rows)))
    assert (e.row, e.field) == (2, "sub_label") and "repeats row 1" in str(e)


def test_bear_real_files_have_no_repeated_sub_id(shared_data):
    """The rule holds on the published copies: they load whole (counts as in test_loaders)."""
    assert len(load_bear_folder(shared_data / "bear" / "BEAR")) == 7731
    assert len(load_bear_folder(shared_data / "bear" / "BEAR-big", "bear_big")) == 40916 - 1


# ---------------------------------------------------------------- FKTC: repeats and sizes


def test_fktc_exact_repeated_row_is_refused(tmp_path):
    row = {"subject": "France", "object": "Paris", "taxonomy": NEGS}
    e = _refused(
        lambda: load_fktc_folder(
            _fktc(tmp_path, [row, {**row, "subject": "Italy", "object": "Rome", "taxonomy": ["Paris", *NEGS[1:]]}, row])
        )
    )
    assert (e.row, e.field) == (4, "taxonomy") and "repeats row 2" in str(e) and "'France' -> 'Paris'" in str(e)


def test_fktc_same_negatives_in_another_order_is_a_repeat(tmp_path):
    row = {"subject": "France", "object": "Paris", "taxonomy": NEGS}
    e = _refused(lambda: load_fktc_folder(_fktc(tmp_path, [row, {**row, "taxonomy": NEGS[::-1]}])))
    assert (e.row, e.field) == (3, "taxonomy")


def test_fktc_subject_object_repeat_with_other_negatives_loads(tmp_path):
    """The published copy's kind of repeat: each row its own fact, with its own negative contexts."""
    rows = [
        {"subject": "France", "object": "Paris", "taxonomy": NEGS},
        {"subject": "France", "object": "Paris", "taxonomy": ["Oslo", *NEGS[1:]]},
    ]
    fs = load_fktc_folder(_fktc(tmp_path, rows))
    assert [f.id for f in fs] == ["P36_2", "P36_3"]
    assert [f.negatives[0].label for f in fs] == ["Rome", "Oslo"]


@pytest.mark.parametrize("n", [4, 6, 200_005])
def test_fktc_negatives_out_of_shape_are_refused_at_once(tmp_path, n):
    row = {"subject": "France", "object": "Paris", "taxonomy": [f"City{i}" for i in range(n)]}
    start = time.perf_counter()
    e = _refused(lambda: load_fktc_folder(_fktc(tmp_path, [row])))
    assert time.perf_counter() - start < 10  # used to hang after "Building contexts" for over 10 minutes
    assert (e.row, e.field) == (2, "taxonomy")
    assert f"{n:,} negatives, but the dataset's documented shape has exactly 5" in str(e)


def test_fktc_repeated_negative_is_refused(tmp_path):
    row = {"subject": "France", "object": "Paris", "taxonomy": ["Rome", "rome", "Madrid", "Vienna", "Lisbon"]}
    e = _refused(lambda: load_fktc_folder(_fktc(tmp_path, [row])))
    assert (e.row, e.field) == (2, "taxonomy") and "appears twice" in str(e)


def test_fktc_too_many_prompts_are_refused(tmp_path):
    prompts = [f"Question {i} about [X]?" for i in range(8)]
    e = _refused(
        lambda: load_fktc_folder(_fktc(tmp_path, [{"subject": "France", "object": "Paris", "taxonomy": NEGS}], prompts))
    )
    assert (e.row, e.field) == (1, "relations") and "8 prompts" in str(e)


def test_fktc_real_repeats_are_the_documented_ones(shared_data):
    """12 subject-object repeats in 4 files, each with other negatives; no exact repeat (docs/data.md)."""
    fs = load_facts("fktc", {"fktc_path": str(shared_data / "fktc")})
    assert len(fs) == 16198
    pairs: dict = {}
    for f in fs:
        pairs.setdefault((f.relation, f.subject.label, f.object.label), []).append(
            frozenset(n.label for n in f.negatives)
        )
    repeated = {k: v for k, v in pairs.items() if len(v) > 1}
    assert sum(len(v) - 1 for v in repeated.values()) == 12
    assert {k[0] for k in repeated} == {"P1376", "P176", "P178", "P276"}
    assert all(len(set(v)) == len(v) for v in repeated.values())  # never the same negatives twice


# ---------------------------------------------------------------- MyriadLAMA: one row per uuid and template


def _ml(uuid="u1", rel="P30", sub="France", obj="Europe", template="[X] is in [Y]."):
    return {
        "uuid": uuid,
        "rel_uri": rel,
        "sub_ent": sub,
        "obj_ents": [obj],
        "obj_aliases": [[]],
        "obj_uris": ["Q46"],
        "template": template,
        "is_manual": True,
    }


def test_myriadlama_repeated_uuid_and_template_is_refused():
    rows = [_ml(), _ml(template="[X] lies in [Y]."), _ml(sub="French Republic")]
    e = _refused(lambda: rows_to_factset(rows, "ml.jsonl"))
    assert (e.file, e.row, e.field) == ("ml.jsonl", 3, "template")
    assert "repeats row 1 (the same uuid and template 'u1' with '[X] is in [Y].')" in str(e)


def test_myriadlama_uuid_in_two_relations_is_refused():
    e = _refused(lambda: rows_to_factset([_ml(), _ml(rel="P17", template="[X] lies in [Y].")], "ml.jsonl"))
    assert (e.row, e.field) == (2, "rel_uri") and "relation 'P30' in row 1" in str(e)


def test_myriadlama_documented_layout_loads():
    rows = [
        _ml(),
        _ml(sub="French Republic", template="[X] lies in [Y]."),
        _ml(uuid="u2", sub="Peru", obj="South America"),
    ]
    fs = rows_to_factset(rows, "ml.jsonl")
    assert len(fs) == 2 and fs.facts[0].subject.expressions == ("France", "French Republic")


# ---------------------------------------------------------------- T-REx-MC: one row per fact and split


def _trex(tmp, test_rows):
    base = {"Relation_ID": "P36", "Relation Name": "capital", "Title": "", "Text": ""}
    (tmp / "train.jsonl").write_text(
        json.dumps({**base, "Subject": "Peru", "Object": "Lima", "Multiple Choices": "['Quito']"})
    )
    (tmp / "test.jsonl").write_text("\n".join(json.dumps({**base, **r}) for r in test_rows))
    return Source("local", "trex_mc", str(tmp))


def test_trex_repeated_test_row_is_refused(tmp_path):
    rows = [
        {"Subject": "France", "Object": "Paris", "Multiple Choices": "['Rome']"},
        {"Subject": "Italy", "Object": "Rome", "Multiple Choices": "['Paris']"},
        {"Subject": "France", "Object": "Paris", "Multiple Choices": "['Oslo']"},
    ]
    e = _refused(lambda: load_trex_mc(_trex(tmp_path, rows)))
    assert e.file.endswith("test.jsonl") and (e.row, e.field) == (3, "Object")
    assert "repeats row 1 (the same Relation_ID, Subject and Object P36 'France' -> 'Paris')" in str(e)


def test_trex_same_subject_and_object_in_train_and_test_loads(tmp_path):
    fs = load_trex_mc(_trex(tmp_path, [{"Subject": "Peru", "Object": "Lima", "Multiple Choices": "['Quito']"}]))
    assert len(fs.facts_of("P36", "train")) == 1 and len(fs.facts_of("P36", "test")) == 1


def test_trex_more_than_100_choices_are_refused(tmp_path):
    choices = str([f"City{i}" for i in range(101)])
    e = _refused(
        lambda: load_trex_mc(_trex(tmp_path, [{"Subject": "France", "Object": "Paris", "Multiple Choices": choices}]))
    )
    assert (e.row, e.field) == (1, "Multiple Choices") and "101 choices" in str(e) and "at most 100" in str(e)
