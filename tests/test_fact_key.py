"""The cross-dataset fact key and the join on it: tiny files in each real layout (written here, with
facts that overlap and conflict on purpose), and the join counts on the real BEAR / BEAR-big / FKTC."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from belief_tasks.data.bear import load_bear_folder
from belief_tasks.data.fktc import load_fktc_folder
from belief_tasks.data.myriadlama import load_myriadlama
from belief_tasks.data.sources import Source
from belief_tasks.data.trex_mc import load_trex_mc
from belief_tasks.facts.join import BY_ID, BY_LABEL, join_keys, objects_agree, same_subject
from belief_tasks.facts.schema import Entity, Fact, FactKey, FactSet, Relation, fact_key, fold_label, sampling_key

# ---------------------------------------------------------------- tiny files in the real layouts

#: (subject id, label, aliases, object id, object label)
BEAR_P36 = [
    ("Q142", "France", ["French Republic"], "Q90", "Paris"),
    ("Q183", "Germany", [], "Q64", "Berlin"),
    ("Q408", "Australia", [], "Q3114", "Canberra"),
    ("Q230", "Georgia", [], "Q994", "Tbilisi"),
]
#: Georgia the US state (another id, same label); Australia -> Sydney disagrees with BEAR by id
BIG_P36 = [
    ("Q1428", "Georgia", [], "Q23556", "Atlanta"),
    ("Q142", "France", ["French Republic"], "Q90", "Paris"),
    ("Q183", "Germany", [], "Q64", "Berlin"),
    ("Q408", "Australia", [], "Q3130", "Sydney"),
    ("Q29", "Spain", [], "Q2807", "Madrid"),
]
#: FKTC: labels only; "French Republic" is BEAR's alias; Spain twice (a repeated pair, with other negatives
#: as FKTC's own repeats have: an exact repeat is refused)
FKTC_P36 = [
    ("French Republic", "Paris"),
    ("Germany", "Berlin"),
    ("Australia", "Sydney"),
    ("Spain", "Madrid"),
    ("Spain", "Madrid"),
    ("Georgia", "Tbilisi"),
]
NEGATIVES = ["Lima", "Oslo", "Quito", "Hanoi", "Doha"]


def write_bear(folder: Path, rows, answer_space: bool) -> Path:
    folder.mkdir(parents=True)
    meta = {"templates": ["The capital of [X] is [Y]."]}
    if answer_space:
        meta["answer_space_labels"] = [r[4] for r in rows]
        meta["answer_space_ids"] = [r[3] for r in rows]
    (folder / "metadata_relations.json").write_text(json.dumps({"P36": meta}))
    lines = [
        {"sub_id": s, "sub_label": lab, "sub_aliases": a, "obj_id": oi, "obj_label": o} for s, lab, a, oi, o in rows
    ]
    (folder / "P36.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def write_fktc(folder: Path) -> Path:
    folder.mkdir(parents=True)
    lines = [{"relations": ["What is the capital of [X]?"]}]
    lines += [
        {"subject": s, "object": o, "taxonomy": NEGATIVES if i != 4 else ["Riga", *NEGATIVES[1:]]}
        for i, (s, o) in enumerate(FKTC_P36)
    ]
    (folder / "P36-subclass.json").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def write_myriadlama(folder: Path) -> Path:
    """Two rows (templates) per pair; the second row's ``sub_ent`` is another subject expression."""
    folder.mkdir(parents=True)
    pairs = [
        ("u-fr", "Q142", ["France", "French Republic"], ["Q90"], ["Paris"]),
        ("u-de", None, ["Deutschland", "Germany"], ["Q64"], ["Berlin"]),  # no subject id: joins by label
        ("u-au", "Q408", ["Australia", "Commonwealth of Australia"], ["Q3114"], ["Canberra"]),
    ]
    rows = [
        {
            "uuid": u,
            "rel_uri": "P36",
            "sub_uri": sid,
            "sub_ent": form,
            "obj_uris": oids,
            "obj_ents": objs,
            "obj_aliases": [[]],
            "template": text,
            "is_manual": k == 0,
        }
        for u, sid, forms, oids, objs in pairs
        for k, (form, text) in enumerate(zip(forms, ["[X] has the capital [Y].", "What is the capital of [X]? [Y]"]))
    ]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return folder


def write_trex_mc(folder: Path) -> Path:
    """Hub columns; the hub numbers relations, so relation 7 is named and becomes P36 by its name."""
    import pandas as pd

    folder.mkdir(parents=True)
    choices = str(["Paris", "Bonn", "Rome", "Lima"])
    test = [("France", "Paris"), ("Germany", "Bonn"), ("Italy", "Rome")]
    for split, facts in (("train", [("Peru", "Lima")]), ("test", test)):
        pd.DataFrame(
            [
                {
                    "Relation_ID": 7,
                    "Relation Name": "capital",
                    "Subject": s,
                    "Object": o,
                    "Multiple Choices": choices,
                    "Title": "",
                    "Text": "",
                }
                for s, o in facts
            ]
        ).to_parquet(folder / f"{split}-00000.parquet")
    return folder


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, dict[str, FactKey]]:
    """fact id -> key, per dataset, each read by its own loader from files in its layout."""
    root = tmp_path_factory.mktemp("layouts")
    sets = {
        "bear": load_bear_folder(write_bear(root / "BEAR", BEAR_P36, True), "bear"),
        "bear_big": load_bear_folder(write_bear(root / "BEAR-big", BIG_P36, False), "bear_big"),
        "fktc": load_fktc_folder(write_fktc(root / "FKTC")),
        "myriadlama": load_myriadlama(Source("local", "myriadlama", str(write_myriadlama(root / "ml")))),
        "trex_mc": load_trex_mc(Source("local", "trex_mc", str(write_trex_mc(root / "trex")))),
    }
    return {name: {f.id: fact_key(f, fs.relations[f.relation]) for f in fs} for name, fs in sets.items()}


def _by_subject(keys: dict[str, FactKey], join, side: str) -> list[tuple[str, str]]:
    return sorted((keys[getattr(m, side)].subject, m.rule) for m in join)


# ---------------------------------------------------------------- the key of each layout


def test_each_layout_gives_its_key(keys):
    bear = keys["bear"]["P36_1"]
    assert bear == FactKey("P36", "france", "Q142", ("france", "french republic"), ("Paris",), ("Q90",))
    assert bear.text == "P36|france" and FactKey.from_record(bear.as_record()) == bear
    fktc = keys["fktc"]["P36_2"]  # line 1 is the prompt line
    assert fktc == FactKey("P36", "french republic", None, ("french republic",), ("Paris",), ())
    ml = keys["myriadlama"]
    assert ml["u-fr"] == FactKey("P36", "france", "Q142", ("france", "french republic"), ("Paris",), ("Q90",))
    assert ml["u-de"].subject_id is None and ml["u-de"].subjects == ("deutschland", "germany")
    trex = keys["trex_mc"]["test_1"]
    assert trex == FactKey("P36", "france", None, ("france",), ("Paris",), ())  # relation 7 "capital" -> P36


def test_trex_mc_relation_ids():
    from belief_tasks.data.trex_mc import property_id

    assert property_id("7", "capital") == "P36" and property_id("P103", "whatever") == "P103"
    assert property_id("12", "Original Language of  Film or TV show") == "P364"  # case and spaces folded
    assert property_id("9", "is a tributary of") is None  # not a Wikidata property label: joins nothing


def test_fold_label_and_urls():
    assert fold_label("  Côte  d'Ivoire\u00a0") == "côte d'ivoire"  # NFKC, case, spaces; accents kept
    f = Fact(
        "x",
        "P36",
        Entity("France", (), "http://www.wikidata.org/entity/Q142"),
        (Entity("Paris", ("City of Light",), "Q90"), Entity("Lutetia")),
    )
    k = fact_key(f)
    assert k.subject_id == "Q142" and k.objects == ("Paris", "City of Light", "Lutetia")
    assert k.object_ids == ()  # not every object has an id: objects are compared by label


# ---------------------------------------------------------------- joins between the layouts


def test_bear_and_bear_big_join_by_id(keys):
    j = join_keys(keys["bear"], keys["bear_big"])
    assert _by_subject(keys["bear"], j.joined, "a") == [("france", BY_ID), ("germany", BY_ID)]
    # Australia: same id, objects Q3114 vs Q3130; Georgia: two ids (country, US state), not the same subject
    assert _by_subject(keys["bear"], j.conflicts, "a") == [("australia", BY_ID)]
    assert j.counts() == {"fact id": 0, "id": 2, "label + object": 0, "joined": 2, "conflicts": 1, "duplicates": 0}


def test_fktc_joins_bear_by_label_and_alias(keys):
    j = join_keys(keys["fktc"], keys["bear"])
    # "French Republic" is BEAR's alias of France; Georgia -> Tbilisi: FKTC has no id to tell namesakes apart
    assert _by_subject(keys["fktc"], j.joined, "a") == [
        ("french republic", BY_LABEL),
        ("georgia", BY_LABEL),
        ("germany", BY_LABEL),
    ]
    assert _by_subject(keys["fktc"], j.conflicts, "a") == [("australia", "label")]  # Sydney vs Canberra


def test_fktc_and_bear_big_conflicts_and_repeated_rows(keys):
    j = join_keys(keys["fktc"], keys["bear_big"])
    assert _by_subject(keys["fktc"], j.joined, "a") == [
        ("australia", BY_LABEL),
        ("french republic", BY_LABEL),
        ("germany", BY_LABEL),
        ("spain", BY_LABEL),
    ]
    assert _by_subject(keys["fktc"], j.conflicts, "a") == [("georgia", "label")]  # Tbilisi vs Atlanta
    assert [keys["fktc"][m.a].subject for m in j.duplicates] == ["spain"]  # FKTC's repeated row joins once


def test_myriadlama_joins_by_id_and_by_subject_expression(keys):
    j = join_keys(keys["myriadlama"], keys["bear"])
    assert _by_subject(keys["myriadlama"], j.joined, "a") == [
        ("australia", BY_ID),
        ("deutschland", BY_LABEL),
        ("france", BY_ID),
    ]
    j = join_keys(keys["myriadlama"], keys["bear_big"])
    assert _by_subject(keys["myriadlama"], j.conflicts, "a") == [("australia", BY_ID)]


def test_trex_mc_joins_through_its_relation_name(keys):
    j = join_keys(keys["trex_mc"], keys["bear"])
    assert _by_subject(keys["trex_mc"], j.joined, "a") == [("france", BY_LABEL)]
    assert _by_subject(keys["trex_mc"], j.conflicts, "a") == [("germany", "label")]  # Bonn vs Berlin
    j = join_keys(keys["trex_mc"], keys["fktc"])
    assert j.counts()["joined"] == 0 and len(j.conflicts) == 1  # France only by BEAR's alias; Germany: Bonn


def test_objects_agree_by_id_first_then_by_matching_rules():
    k = lambda objs, ids=(): FactKey("P1", "s", None, ("s",), objs, ids)  # noqa: E731
    assert objects_agree(k(("the Netherlands",)), k(("Netherlands",)))  # the matching rules: containment
    assert objects_agree(k(("Apple Inc.",)), k(("Apple",)))
    assert not objects_agree(k(("England",)), k(("the United Kingdom",)))
    # ids decide where both sides have them, whatever the labels say
    assert not objects_agree(k(("Paris",), ("Q90",)), k(("Paris",), ("Q167646",)))
    assert objects_agree(k(("Paris",), ("Q90",)), k(("Paris, France",)))  # one side without ids: labels
    assert same_subject(FactKey("P1", "a", "Q1", ("a",), (), ()), FactKey("P2", "a", "Q1", ("a",), (), ())) is None


def test_sampling_key_is_shared_where_the_label_is(keys):
    """The draw's key is (relation, folded subject label): equal across datasets for a shared label,
    ids or not; a fact shared only through an alias hashes differently (documented cost)."""
    g = Fact("x", "P36", Entity("Germany", (), "Q183"), (Entity("Berlin", (), "Q64"),))
    assert sampling_key(g) == "P36|germany" == keys["fktc"]["P36_3"].text == keys["bear"]["P36_2"].text
    assert keys["fktc"]["P36_2"].text != keys["bear"]["P36_1"].text  # French Republic / France
    numbered = Relation("7", "capital", property_id="P36")
    assert sampling_key(Fact("y", "7", Entity("GERMANY "), (Entity("Bonn"),)), numbered) == "P36|germany"


# ---------------------------------------------------------------- the real files


@pytest.fixture(scope="module")
def real_keys(shared_data) -> dict[str, dict[str, FactKey]]:
    sets = {
        "bear": load_bear_folder(shared_data / "bear" / "BEAR", "bear"),
        "bear_big": load_bear_folder(shared_data / "bear" / "BEAR-big", "bear_big"),
        "fktc": load_fktc_folder(shared_data / "fktc"),
    }
    return {n: {f.id: fact_key(f, fs.relations[f.relation]) for f in fs} for n, fs in sets.items()}


def _label_overlap(a: dict[str, FactKey], b: dict[str, FactKey]) -> set[tuple[str, str]]:
    """(relation, case-folded subject label) of ``a`` also in ``b``: how the overlap was first measured."""
    return {(k.relation, k.subject) for k in a.values()} & {(k.relation, k.subject) for k in b.values()}


def test_real_overlap_as_first_measured(real_keys):
    bear, big, fktc = real_keys["bear"], real_keys["bear_big"], real_keys["fktc"]
    assert len(_label_overlap(bear, big)) == len({(k.relation, k.subject) for k in bear.values()})
    assert len({(k.relation, k.subject) for k in fktc.values()}) == 15861  # FKTC's 16,198 rows, distinct subjects
    in_big = _label_overlap(fktc, big)
    assert len(in_big) == 362 and len({r for r, _ in in_big}) == 15
    assert len({k.relation for k in fktc.values()} & {k.relation for k in big.values()}) == 16  # P19: no subject shared
    assert len(_label_overlap(fktc, bear)) == 144


def test_real_joins(real_keys):
    """What the join rules give on the real files (docs/data.md explains each difference)."""
    bear, big, fktc = real_keys["bear"], real_keys["bear_big"], real_keys["fktc"]
    j = join_keys(bear, big)
    assert j.counts() == {
        "fact id": 0,
        "id": 7731,
        "label + object": 0,
        "joined": 7731,
        "conflicts": 0,
        "duplicates": 0,
    }
    j = join_keys(fktc, big)
    assert j.counts() == {"fact id": 0, "id": 0, "label + object": 362, "joined": 362, "conflicts": 21, "duplicates": 2}
    assert sum(fktc[m.a].subject != big[m.b].subject for m in j.joined) == 9  # through a BEAR-big alias
    assert len({fktc[m.a].relation for m in j.joined}) == 15
    j = join_keys(fktc, bear)
    assert j.counts() == {"fact id": 0, "id": 0, "label + object": 144, "joined": 144, "conflicts": 8, "duplicates": 1}
    assert sum(fktc[m.a].subject != bear[m.b].subject for m in j.joined) == 3


# ---------------------------------------------------------------- drawing facts by the key


def _facts(subjects, rid="P36"):
    return [Fact(f"{rid}_{s}", rid, Entity(s), (Entity(f"capital of {s}"),)) for s in subjects]


def test_capped_draw_keeps_shared_facts_alike():
    """max_facts_per_relation keeps the facts with the smallest seeded hash of their sampling key: a
    fact's fate depends on its key, not on what else the dataset holds or on its id there."""
    from belief_tasks.options import Options, parse_options
    from belief_tasks.tasks.base import select_facts

    small = _facts([f"S{i}" for i in range(40)])
    big = [Fact("other_" + f.id, f.relation, Entity(f.subject.label.lower()), f.objects) for f in small]
    big += _facts([f"T{i}" for i in range(160)])  # BEAR-big-like: every fact of the small set, and more
    opts = lambda k: parse_options(Options, {"max_facts_per_relation": k})  # noqa: E731
    rel = {"P36": Relation("P36", "capital")}
    kept_small = {sampling_key(f) for f in select_facts(FactSet("a", rel, small), opts(10))}
    kept_big = {sampling_key(f) for f in select_facts(FactSet("b", rel, big), opts(10))}
    shared_in_big = kept_big & {sampling_key(f) for f in small}
    assert shared_in_big <= kept_small  # what the bigger set keeps of the shared facts, the smaller keeps too
    # the same share of each relation (10 of 40, 40 of 200): the shared facts kept are nearly the same
    kept_big = {sampling_key(f) for f in select_facts(FactSet("b", rel, big), opts(50))}
    assert len(kept_small & kept_big) == 9  # of 10; drawn independently (the earlier draw): 3 (2.5 expected)
    assert [f.id for f in select_facts(FactSet("a", rel, small), opts(10))] == [
        f.id for f in small if sampling_key(f) in kept_small
    ]  # order of the data kept


def test_smallest_hashes_by_hand():
    from belief_tasks.facts import seeding

    items = ["a", "b", "c", "d", "e"]
    hashes = {x: seeding.derive_seed(7, "t", x) for x in items}
    want = sorted(items, key=hashes.get)[:2]
    assert seeding.smallest_hashes(items, 2, 7, str, "t") == [x for x in items if x in want]
    assert seeding.smallest_hashes(items, 9, 7, str, "t") == items
    assert 0 <= seeding.hash_unit(7, "t", "a") == hashes["a"] / 2**64 < 1


# ---------------------------------------------------------------- the key in every doc and record


def test_every_family_puts_the_key_in_its_docs_and_records():
    """Docs carry ``fact_key`` (as ``as_split`` stores it: a JSON string) and records copy it back
    (MONITOR's and the encoder family's records too: their runs are in tests/test_report_e2e.py and
    tests/test_mlm_tasks.py)."""
    from belief_tasks.data import load_facts
    from belief_tasks.options import parse_options
    from belief_tasks.tasks import bear, belief_icl, iclke, monitor
    from belief_tasks.tasks.base import as_split

    fs = load_facts("bear", {"source": "sample"})
    want = {f.id: fact_key(f, fs.relations[f.relation]).as_record() for f in fs}
    md = {"source": "sample", "relations": "P36", "max_facts_per_relation": 2}
    built = {
        "bear": bear.build_docs(fs, parse_options(bear.OPTIONS, md)),
        "iclke": iclke.iclke_docs(fs, parse_options(iclke.OPTIONS, {**md, "n_examples": 2, "max_options": 3})),
        "monitor": monitor.build_docs(fs, parse_options(monitor.OPTIONS, md)),
        "belief_icl": belief_icl.build_docs("mp", "zeroshot", parse_options(belief_icl.OPTIONS, md)),
    }
    for family, docs in built.items():
        assert docs and all(d["fact_key"] == want[d["fact_id"]] for d in docs), family
    doc = as_split(built["bear"])["test"][0]
    record = bear.process_results(doc, [(-1.0, False)] * len(json.loads(doc["options"])))["bear"]
    fact = next(f for f in fs if f.id == doc["fact_id"])
    assert record["fact_key"] == want[fact.id] and FactKey.from_record(record["fact_key"]) == fact_key(fact)
    doc = as_split(built["iclke"])["test"][0]
    record = iclke.process_results(doc, [(-1.0, False)] * len(json.loads(doc["options"])))["acc"]
    assert record["fact_key"] == want[doc["fact_id"]]
    doc = as_split(built["belief_icl"])["test"][0]
    n = len(json.loads(doc["templates"])) * len(json.loads(doc["subjects"]))
    record = belief_icl.make_record(doc, ["Paris"] * n, [])
    assert record["fact_key"] == want[doc["fact_id"]]
