"""Every loader rejects bad input with one error naming the file, the row and the field.

Table-driven: each case writes a small synthetic dataset (never real data), breaks
one thing, and checks the SchemaError's file, row and field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from belief_tasks.data.bear import load_bear_folder
from belief_tasks.data.bundled import load_folder
from belief_tasks.data.fktc import load_fktc_folder
from belief_tasks.data.myriadlama import rows_to_factset
from belief_tasks.data.sources import Source
from belief_tasks.data.trex_mc import load_trex_mc
from belief_tasks.facts.schema import SchemaError

# ---------------------------------------------------------------- good fixtures


def bear_folder(tmp: Path, *, templates=None, space=None, rows=None, raw_rows: str | None = None) -> Path:
    folder = tmp / "BEAR"
    folder.mkdir()
    meta = {
        "P36": {
            "templates": templates or ["The capital of [X] is [Y].", "[Y] is the capital of [X]."],
            "answer_space_labels": space if space is not None else ["Paris", "Rome"],
            "answer_space_ids": ["Q90", "Q220"][: len(space) if space is not None else 2],
        }
    }
    (folder / "metadata_relations.json").write_text(json.dumps(meta))
    rows = (
        rows
        if rows is not None
        else [
            {"sub_id": "Q142", "sub_label": "France", "sub_aliases": [], "obj_id": "Q90", "obj_label": "Paris"},
            {"sub_id": "Q38", "sub_label": "Italy", "sub_aliases": [], "obj_id": "Q220", "obj_label": "Rome"},
        ]
    )
    text = raw_rows if raw_rows is not None else "\n".join(json.dumps(r) for r in rows)
    (folder / "P36.jsonl").write_text(text)
    return folder


def fktc_folder(tmp: Path, lines: list | None = None, raw: bytes | None = None) -> Path:
    folder = tmp / "FKTC"
    folder.mkdir()
    lines = lines or [
        {"relations": ["What is the capital of [X]?", "Which city is the capital of [X]?"]},
        {"subject": "France", "object": "Paris", "taxonomy": ["Rome", "Berlin", "Madrid", "Vienna", "Lisbon"]},
    ]
    path = folder / "P36-subclass.json"
    path.write_bytes(raw if raw is not None else "\n".join(json.dumps(x) for x in lines).encode())
    return folder


def trex_folder(tmp: Path, test_rows: list[dict]) -> Path:
    good = {
        "Relation_ID": "P36",
        "Relation Name": "capital",
        "Subject": "France",
        "Object": "Paris",
        "Multiple Choices": "['Rome', 'Berlin']",
        "Title": "",
        "Text": "",
    }
    (tmp / "train.jsonl").write_text(json.dumps(good))
    # a value of ... drops the column
    rows = [{k: v for k, v in {**good, **r}.items() if v is not ...} for r in test_rows]
    (tmp / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return tmp


def sample_folder(tmp: Path, **changes) -> Path:
    rel = {
        "id": "P36",
        "name": "capital",
        "cardinality": "1:1",
        "templates": [{"id": "P36_t0", "text": "The capital of [X] is [Y].", "kind": "statement", "manual": True}],
        "frames": ["What is the capital of [X]?"],
        "answer_space": [{"label": "Paris"}, {"label": "Rome"}],
        "facts": [
            {"id": "P36_001", "subject": {"label": "France"}, "objects": [{"label": "Paris"}], "negatives": ["Rome"]}
        ],
    }
    for key, value in changes.items():
        if key == "fact":
            rel["facts"][0].update(value)
        else:
            rel[key] = value
    (tmp / "P36.json").write_text(json.dumps(rel))
    return tmp


def _no_col(row: dict, col: str) -> dict:
    return {k: v for k, v in row.items() if k != col}


GOOD_BEAR_ROW = {"sub_id": "Q142", "sub_label": "France", "sub_aliases": [], "obj_id": "Q90", "obj_label": "Paris"}


# ---------------------------------------------------------------- the table

CASES = {
    # name: (build(tmp) -> callable that loads, file name part, row, field)
    "bear missing column": (
        lambda t: lambda: load_bear_folder(bear_folder(t, rows=[_no_col(GOOD_BEAR_ROW, "obj_label")])),
        "P36.jsonl",
        1,
        "obj_label",
    ),
    "bear empty column": (
        lambda t: lambda: load_bear_folder(bear_folder(t, rows=[{**GOOD_BEAR_ROW, "obj_label": ""}])),
        "P36.jsonl",
        1,
        "obj_label",
    ),
    "trex missing column": (
        lambda t: lambda: load_trex_mc(Source("local", "trex_mc", str(trex_folder(t, [{"Object": ...}])))),
        "test.jsonl",
        1,
        "Object",
    ),
    "trex empty column": (
        lambda t: lambda: load_trex_mc(Source("local", "trex_mc", str(trex_folder(t, [{"Object": " "}])))),
        "test.jsonl",
        1,
        "Object",
    ),
    "template without [X]": (
        lambda t: lambda: load_bear_folder(bear_folder(t, templates=["The capital is [Y]."])),
        "metadata_relations.json",
        "P36",
        "templates[0]",
    ),
    "template without [Y]": (
        lambda t: lambda: load_bear_folder(bear_folder(t, templates=["[X] has a capital."])),
        "metadata_relations.json",
        "P36",
        "templates[0]",
    ),
    "template with two [X]": (
        lambda t: lambda: load_bear_folder(bear_folder(t, templates=["[X] and [X] share [Y]."])),
        "metadata_relations.json",
        "P36",
        "templates[0]",
    ),
    "sample template with two [Y]": (
        lambda t: lambda: load_folder(sample_folder(t, templates=[{"text": "[X]: [Y] or [Y]."}]), "s"),
        "P36.json",
        "templates[0]",
        "text",
    ),
    "empty answer space": (
        lambda t: lambda: load_bear_folder(bear_folder(t, space=[])),
        "metadata_relations.json",
        "P36",
        "answer_space_labels",
    ),
    "duplicated answer space": (
        lambda t: lambda: load_folder(sample_folder(t, answer_space=[{"label": "Paris"}, {"label": "Paris"}]), "s"),
        "P36.json",
        "P36",
        "answer_space",
    ),
    "gold missing from answer space": (
        lambda t: lambda: load_bear_folder(bear_folder(t, space=["Paris", "Madrid"])),
        "P36.jsonl",
        "2",
        "obj_label",
    ),
    "gold missing from choices": (lambda t: lambda: rows_or_choices_missing_gold(t), "P36.json", "P36_001", "choices"),
    "duplicated choices": (
        lambda t: (
            lambda: load_trex_mc(
                Source("local", "trex_mc", str(trex_folder(t, [{"Multiple Choices": "['Rome', 'Rome']"}])))
            )
        ),
        "test.jsonl",
        1,
        "Multiple Choices",
    ),
    "negative equals object": (
        lambda t: (
            lambda: load_fktc_folder(
                fktc_folder(
                    t,
                    [
                        {"relations": ["What is the capital of [X]?"]},
                        {
                            "subject": "France",
                            "object": "Paris",
                            "taxonomy": ["Rome", "paris", "Madrid", "Vienna", "Lisbon"],
                        },
                    ],
                )
            )
        ),
        "P36-subclass.json",
        2,
        "taxonomy",
    ),
    "non-UTF-8 file": (
        lambda t: (
            lambda: load_fktc_folder(
                fktc_folder(
                    t, raw=b'{"relations": ["What is [X]?"]}\n{"subject": "Z\xfcrich", "object": "x", "taxonomy": []}'
                )
            )
        ),
        "P36-subclass.json",
        2,
        None,
    ),
    "truncated JSON line": (
        lambda t: (
            lambda: load_bear_folder(bear_folder(t, raw_rows=json.dumps(GOOD_BEAR_ROW) + '\n{"sub_id": "Q38", "sub_la'))
        ),
        "P36.jsonl",
        2,
        None,
    ),
    "choice list that is not a list": (
        lambda t: (
            lambda: load_trex_mc(Source("local", "trex_mc", str(trex_folder(t, [{"Multiple Choices": "'Rome'"}]))))
        ),
        "test.jsonl",
        1,
        "Multiple Choices",
    ),
    "choice list that is code": (
        lambda t: (
            lambda: load_trex_mc(
                Source("local", "trex_mc", str(trex_folder(t, [{"Multiple Choices": "__import__('os').getcwd()"}])))
            )
        ),
        "test.jsonl",
        1,
        "Multiple Choices",
    ),
    "empty subject": (
        lambda t: lambda: load_bear_folder(bear_folder(t, rows=[{**GOOD_BEAR_ROW, "sub_label": ""}])),
        "P36.jsonl",
        1,
        "sub_label",
    ),
    "whitespace subject": (
        lambda t: (
            lambda: load_fktc_folder(
                fktc_folder(
                    t,
                    [
                        {"relations": ["What is the capital of [X]?"]},
                        {
                            "subject": "   ",
                            "object": "Paris",
                            "taxonomy": ["Rome", "Berlin", "Madrid", "Vienna", "Lisbon"],
                        },
                    ],
                )
            )
        ),
        "P36-subclass.json",
        2,
        "subject",
    ),
    # fail-fast issue: what used to pass silently
    "bear relation declared without its file": (
        lambda t: lambda: load_bear_folder(bear_without_file(t)),
        "metadata_relations.json",
        "P19",
        None,
    ),
    "bear answer_idx disagrees with obj_label": (
        lambda t: lambda: load_bear_folder(bear_folder(t, rows=[{**GOOD_BEAR_ROW, "answer_idx": 1}])),
        "P36.jsonl",
        1,
        "answer_idx",
    ),
    "bear obj_id disagrees with obj_label": (
        lambda t: lambda: load_bear_folder(bear_folder(t, rows=[{**GOOD_BEAR_ROW, "obj_id": "Q220"}])),
        "P36.jsonl",
        1,
        "obj_id",
    ),
    "bear duplicated answer-space label": (
        lambda t: lambda: load_bear_folder(bear_folder(t, space=["Paris", "Paris"])),
        "metadata_relations.json",
        "P36",
        "answer_space_labels",
    ),
    "fktc copy with another checksum": (lambda t: lambda: fktc_checksum_mismatch(t), "P36-subclass.json", None, None),
    "myriadlama whitespace subject": (
        lambda t: (
            lambda: rows_to_factset(
                [
                    {
                        "uuid": "u1",
                        "rel_uri": "P30",
                        "sub_ent": " ",
                        "obj_ents": ["Europe"],
                        "obj_aliases": [[]],
                        "obj_uris": ["Q46"],
                        "template": "[X] is in [Y].",
                        "is_manual": True,
                    }
                ],
                "ml.jsonl",
            )
        ),
        "ml.jsonl",
        1,
        "sub_ent",
    ),
}


def bear_without_file(tmp: Path) -> Path:
    folder = bear_folder(tmp)
    meta = json.loads((folder / "metadata_relations.json").read_text())
    meta["P19"] = {"templates": ["[X] was born in [Y]."], "answer_space_labels": ["Paris"]}
    (folder / "metadata_relations.json").write_text(json.dumps(meta))
    return folder


def fktc_checksum_mismatch(tmp: Path):
    from belief_tasks.data.fktc import check_sha256

    path = fktc_folder(tmp) / "P36-subclass.json"
    check_sha256(path, "0" * 64)


def rows_or_choices_missing_gold(tmp: Path):
    # A fact whose explicit choices lack its gold object.
    from belief_tasks.facts.schema import Entity, Fact, FactSet, Relation, validate_factset

    fs = FactSet(
        "s",
        {"P36": Relation("P36", "capital")},
        [Fact("P36_001", "P36", Entity("France"), (Entity("Paris"),), choices=("Rome", "Berlin"))],
    )
    return validate_factset(fs, file=str(tmp / "P36.json"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_named(name, tmp_path):
    build, file_part, row, field = CASES[name]
    load = build(tmp_path)
    with pytest.raises(SchemaError) as err:
        load()
    e = err.value
    assert e.file is not None and file_part in e.file, str(e)
    assert str(e.row) == str(row), str(e)
    assert e.field == field, str(e)
    # the message carries all three, for the user
    assert file_part in str(e) and (row is None or f"row {row}" in str(e))
    if field:
        assert repr(field) in str(e)


# ---------------------------------------------------------------- legitimate input that must load


def test_a_byte_order_mark_is_read(tmp_path):
    folder = bear_folder(tmp_path)
    meta = folder / "metadata_relations.json"
    meta.write_bytes(b"\xef\xbb\xbf" + meta.read_bytes())
    rows = folder / "P36.jsonl"
    rows.write_bytes(b"\xef\xbb\xbf" + rows.read_bytes().replace(b"\n", b"\r\n"))  # and CRLF line ends
    fs = load_bear_folder(folder)
    assert [f.subject.label for f in fs] == ["France", "Italy"]
    assert [e.label for e in fs.relations["P36"].answer_space] == ["Paris", "Rome"]


def test_consistent_answer_idx_and_obj_id_load(tmp_path):
    rows = [
        {**GOOD_BEAR_ROW, "answer_idx": 0},
        {
            "sub_id": "Q38",
            "sub_label": "Italy",
            "sub_aliases": [],
            "obj_id": "Q220",
            "obj_label": "Rome",
            "answer_idx": 1,
        },
    ]
    fs = load_bear_folder(bear_folder(tmp_path, rows=rows))
    assert [f.object.id for f in fs] == ["Q90", "Q220"]


# ---------------------------------------------------------------- knobs


@pytest.mark.parametrize(
    "metadata, knob, says",
    [
        ({"confidence_samples": 2.5}, "confidence_samples", "2.5 is not an integer >= 0"),
        ({"max_facts_per_relation": -1}, "max_facts_per_relation", "-1 is not an integer >= 1"),
        ({"max_facts_per_relation": "abc"}, "max_facts_per_relation", "'abc' is not an integer"),
        ({"seed": "x"}, "seed", "'x' is not an integer"),
        ({"mp_templates": "some"}, "mp_templates", "one of 'manual', 'all'"),
        ({"confidence_prompts": True}, "confidence_prompts", "True is not an integer"),
    ],
)
def test_a_bad_knob_value_names_the_knob_and_what_it_accepts(metadata, knob, says):
    from belief_tasks.options import KnobError
    from belief_tasks.tasks.base import check_metadata
    from belief_tasks.tasks.belief_icl import OPTIONS

    with pytest.raises(KnobError) as err:
        check_metadata(metadata, OPTIONS)
    assert err.value.knob == knob and says in str(err.value) and f"--metadata key {knob!r}" in str(err.value)


def test_a_misspelt_knob_is_refused_with_the_closest_name():
    from belief_tasks.options import KnobError
    from belief_tasks.tasks.base import check_metadata
    from belief_tasks.tasks.belief_icl import OPTIONS

    model_args = frozenset({"pretrained", "dtype"})  # the run's model-argument keys, as belief-eval hands them over
    with pytest.raises(KnobError, match="did you mean 'max_facts_per_relation'"):
        check_metadata(
            {"max_facts_per_relaton": 3, "pretrained": "m", "dtype": "float32"}, OPTIONS, model_args=model_args
        )
    assert (
        check_metadata(
            {"max_facts_per_relation": 3, "pretrained": "m", "dtype": "float32", "version": 1.0},
            OPTIONS,
            model_args=model_args,
        )
        is None
    )
    with pytest.raises(KnobError, match="'dtype': unknown key"):  # not declared: not a model argument of this run
        check_metadata({"dtype": "float32"}, OPTIONS, model_args=frozenset({"pretrained"}))
    # one --metadata serves every task of a command: another family's knob is not unknown here
    from belief_tasks.tasks import bear

    assert (
        check_metadata(
            {"confidence_samples": 2, "templates": "0", "pretrained": "m"}, bear.OPTIONS, model_args=model_args
        )
        is None
    )
    # a bare lm_eval cannot tell a model argument from a knob: the task gets the error back to warn of
    found = check_metadata({"max_facts_per_relaton": 3}, OPTIONS)
    assert isinstance(found, KnobError) and "did you mean 'max_facts_per_relation'" in str(found)
    assert check_metadata({"dtype": "float32"}, OPTIONS) is None  # a keyword of lm-eval's hf: a model argument


def test_conflicting_sources_are_refused():
    from belief_tasks.data.sources import resolve_source
    from belief_tasks.options import KnobError

    with pytest.raises(KnobError, match="bear_path would be ignored"):
        resolve_source("bear", {"source": "sample", "bear_path": "/data/BEAR"})


def test_hub_revision_is_part_of_the_source(monkeypatch):
    from belief_tasks.data.sources import resolve_source

    monkeypatch.delenv("BELIEF_SOURCE", raising=False)
    monkeypatch.delenv("BELIEF_MYRIADLAMA_PATH", raising=False)
    src = resolve_source("myriadlama", {"myriadlama_revision": "abc123"})
    assert (src.kind, src.location, src.revision) == ("public", "iszhaoxin/MyriadLAMA", "abc123")


def test_fktc_checksums_cover_the_twenty_files():
    from belief_tasks.data.fktc import RELATION_IDS, expected_sha256, file_name

    sums = expected_sha256()
    assert sorted(sums) == sorted(file_name(r) for r in RELATION_IDS)
    assert all(len(v) == 64 for v in sums.values())


def test_fktc_checksums_match_the_real_files(shared_data):
    from belief_tasks.data.fktc import check_sha256, expected_sha256

    for name, digest in expected_sha256().items():
        check_sha256(shared_data / "fktc" / "FKTC" / name, digest)


# ---------------------------------------------------------------- belief-eval: before the model, one paragraph


@pytest.mark.parametrize(
    "metadata, extra, says",
    [
        ({"source": "sample", "max_facts_per_relaton": 3}, [], "did you mean 'max_facts_per_relation'"),
        ({"source": "sample", "confidence_samples": 2.5}, [], "'confidence_samples': 2.5 is not an integer"),
        ({"bear_path": "/nonexistent/BEAR"}, [], "does not exist"),
        ({"source": "sample"}, ["--limit", "0"], "--limit 0 evaluates no document"),
    ],
)
def test_belief_eval_refuses_bad_input_before_loading_the_model(tmp_path, metadata, extra, says):
    from harness import run_cli

    # the model path does not exist: reaching the model load would fail differently
    task = "belief_bear" if "bear_path" in metadata else "belief_mp_zeroshot"
    out = run_cli(
        [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={tmp_path / 'no-model'}",
            "--tasks",
            task,
            "--metadata",
            json.dumps(metadata),
            "--output_path",
            str(tmp_path / "out"),
            *extra,
        ],
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1 and says in lines[0], out.stderr[-3000:]
    assert "stopped before loading the model" in lines[0]
    assert "Traceback" not in out.stderr and "no-model" not in lines[0]
