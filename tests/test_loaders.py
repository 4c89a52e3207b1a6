"""Loaders on the real files in ../shared/data and on fixtures in the hub column layout."""

from __future__ import annotations

import json

import pytest

from belief_tasks.data import load_facts
from belief_tasks.data.bundled import load_sample
from belief_tasks.data.myriadlama import rows_to_factset
from belief_tasks.data.sources import DataSourceError, Source, resolve_source
from belief_tasks.data.trex_mc import load_trex_mc
from belief_tasks.facts.schema import SchemaError

# ---------------------------------------------------------------- real data


def test_bear_real(shared_data):
    fs = load_facts("bear", {"bear_path": str(shared_data / "bear" / "BEAR")})
    assert len(fs.relations) == 60 and len(fs) == 7731
    rel = fs.relations["P36"]
    assert len(rel.templates) == 3 and all(t.kind == "statement" for t in rel.templates)
    assert "Geographic" in rel.domains
    # every gold object is in its relation's answer space
    assert all(f.object.label in {e.label for e in fs.relations[f.relation].answer_space} for f in fs)
    assert sum(r.cardinality == "1:1" for r in fs.relations.values()) == 14


def test_bear_big_real_skips_only_the_known_defects(shared_data):
    fs = load_facts("bear_big", {"bear_big_path": str(shared_data / "bear" / "BEAR-big")})
    assert len(fs.relations) == 78
    assert len(fs) == 40916 - 1
    # the empty sub_label of P291 row 41, and P414: declared in the metadata, no instance file upstream
    assert len(fs.skipped) == 2
    assert "P291.jsonl:41" in fs.skipped[0] and "metadata_relations.json:P414" in fs.skipped[1]
    # BEAR-big's answer space is the relation's distinct objects
    p36 = fs.relations["P36"]
    assert {e.label for e in p36.answer_space} == {f.object.label for f in fs.facts_of("P36")}


def test_fktc_real(shared_data):
    fs = load_facts("fktc", {"fktc_path": str(shared_data / "fktc")})
    assert len(fs.relations) == 20 and len(fs) == 16198
    frames = {rid: len(r.frames) for rid, r in fs.relations.items()}
    assert frames.pop("P264") == 6 and frames.pop("P276") == 6
    assert set(frames.values()) == {7}
    assert all(len(f.negatives) == 5 for f in fs)
    assert fs.relations["P276"].frames[0].question.endswith("?")


# ---------------------------------------------------------------- bundled sample


def test_sample_is_big_enough_for_every_family():
    fs = load_sample()
    assert len(fs.relations) >= 10 and len(fs) >= 300
    assert all(r.id.startswith("P") and r.id[1:].isdigit() for r in fs.relations.values())
    for rel in fs.relations.values():
        statements = rel.templates_of("statement")
        questions = rel.templates_of("question")
        assert len(statements) >= 4 and len(questions) >= 4
        assert rel.templates_of(manual_only=True), rel.id
        assert len(rel.frames) == 7
        space = {e.label for e in rel.answer_space}
        for f in fs.facts_of(rel.id):
            assert len(f.negatives) == 5
            assert all(o.label in space for o in f.objects), f.id
    assert sum(bool(f.subject.aliases) for f in fs) >= len(fs) // 3
    assert any(o.aliases for f in fs for o in f.objects)


def test_sample_capitals_are_right():
    # A few spot checks of gold answers (a wrong gold answer is a bug).
    fs = load_sample()
    gold = {f.subject.label: f.object.label for f in fs.facts_of("P36")}
    for country, capital in {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Germany": "Berlin"}.items():
        if country in gold:
            assert gold[country] == capital


# ---------------------------------------------------------------- hub layouts (fixtures)


def _myriadlama_rows():
    rows = []
    templates = [("[X] is located in [Y].", True), ("Where is [X] located? [Y].", False)]
    pairs = [
        ("u1", "P30", ["France", "French Republic"], ["Q46"], ["Europe"], [["European continent"]]),
        ("u2", "P30", ["Japan"], ["Q48"], ["Asia"], [[]]),
    ]
    for uuid, rel, subs, uris, objs, aliases in pairs:
        for text, manual in templates:  # one row per pair and template; its subject expressions in one list
            rows.append(
                {
                    "uuid": uuid,
                    "rel_uri": rel,
                    "sub_ent": subs,
                    "obj_uris": uris,
                    "obj_ents": objs,
                    "obj_aliases": aliases,
                    "template": text,
                    "is_manual": manual,
                }
            )
    return rows


def test_myriadlama_rows_to_schema():
    fs = rows_to_factset(_myriadlama_rows(), "fixture.jsonl")
    assert len(fs) == 2
    rel = fs.relations["P30"]
    assert [t.kind for t in rel.templates] == ["statement", "question"]
    assert [t.manual for t in rel.templates] == [True, False]
    fr = next(f for f in fs if f.id == "u1")
    assert fr.subject.expressions == ("France", "French Republic")
    assert fr.object_expressions == ("Europe", "European continent")


def test_myriadlama_local_jsonl(tmp_path):
    path = tmp_path / "myriadlama" / "train.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(r) for r in _myriadlama_rows()))
    fs = load_facts("myriadlama", {"myriadlama_path": str(path.parent)})
    assert len(fs) == 2 and fs.source == "myriadlama"


def _trex_rows(split, n):
    return [
        {
            "Relation_ID": "P36",
            "Relation Name": "capital",
            "Subject": f"Country{split}{i}",
            "Object": f"City{i}",
            "Multiple Choices": str([f"City{j}" for j in range(5) if j != i]),
            "Title": "",
            "Text": "",
        }
        for i in range(n)
    ]


def test_trex_mc_local_parquet(tmp_path):
    import pandas as pd

    for split, n in (("train", 3), ("test", 4)):
        pd.DataFrame(_trex_rows(split, n)).to_parquet(tmp_path / f"{split}-00000.parquet")
    fs = load_trex_mc(Source("local", "trex_mc", str(tmp_path)))
    assert len(fs.facts_of("P36", "train")) == 3 and len(fs.facts_of("P36", "test")) == 4
    f = fs.facts_of("P36", "test")[0]
    assert f.object.label in f.choices and len(f.choices) == 5  # 4 alternatives + the gold
    assert fs.relations["P36"].name == "capital"


# ---------------------------------------------------------------- choosing the source


def test_source_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv("BELIEF_SOURCE", raising=False)
    monkeypatch.delenv("BELIEF_BEAR_PATH", raising=False)
    assert resolve_source("bear").kind == "public"
    monkeypatch.setenv("BELIEF_BEAR_PATH", str(tmp_path))
    assert resolve_source("bear") == Source("local", "bear", str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    assert resolve_source("bear", {"bear_path": str(other)}).location == str(other)  # --metadata wins
    assert resolve_source("bear", {"source": "sample"}).kind == "sample"
    with pytest.raises(SchemaError, match="bear_path would be ignored"):  # never one source silently over another
        resolve_source("bear", {"source": "sample", "bear_path": str(other)})
    with pytest.raises(DataSourceError, match="does not exist"):
        resolve_source("bear", {"bear_path": str(tmp_path / "missing")})


@pytest.mark.parametrize(
    "dataset,key", [("bear", "bear_path"), ("trex_mc", "trex_mc_path"), ("myriadlama", "myriadlama_path")]
)
def test_offline_public_source_says_how_to_use_a_local_copy(dataset, key, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("BELIEF_SOURCE", raising=False)
    monkeypatch.delenv(f"BELIEF_{dataset.upper()}_PATH", raising=False)
    from belief_tasks.data import _load

    _load.cache_clear()
    with pytest.raises(DataSourceError) as err:
        load_facts(dataset, {})
    assert key in str(err.value) and f"BELIEF_{dataset.upper()}_PATH" in str(err.value)
