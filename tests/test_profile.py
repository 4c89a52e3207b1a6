"""The profile: group ``belief_profile`` (BEAR, IC-LKE on BEAR-big, MONITOR on FKTC, BELIEF-ICL MP and QA on
MyriadLAMA at a budget), built on the bundled sample and on the real data, the facts its probes share, the
``train_split: key`` knob it sets, and ``python -m belief_tasks profile``'s command line."""

from __future__ import annotations

import importlib.util
import json

from belief_tasks.planning.cost import TaskCost, shared_facts, task_facts

from harness import ROOT

PROFILE = [
    "belief_profile_mp",
    "belief_profile_qa",
    "belief_profile_bear",
    "belief_profile_iclke",
    "belief_profile_monitor",
]
FAMILIES = {
    "belief_profile_mp": "belief_icl",
    "belief_profile_qa": "belief_icl",
    "belief_profile_bear": "bear",
    "belief_profile_iclke": "iclke",
    "belief_profile_monitor": "monitor",
}


def build(metadata: dict, model_path) -> dict:
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={**metadata, "pretrained": str(model_path)}
    )
    loaded = tm.load(["belief_profile"])
    return loaded["tasks"]


def costs_of(tasks: dict) -> list[TaskCost]:
    out = []
    for name, task in tasks.items():
        facts, keys = task_facts(list(task.eval_docs))
        out.append(TaskCost(name, task.FAMILY, facts, len(task.eval_docs), {}, keys, task.config.metadata["dataset"]))
    return out


def drawn(task) -> set[str]:
    return {d["fact_id"] for d in task.eval_docs}


def test_the_group_builds_on_the_sample_and_draws_the_same_facts_in_every_family(model_path):
    tasks = build({"source": "sample"}, model_path)
    assert sorted(tasks) == sorted(PROFILE)
    assert {n: t.FAMILY for n, t in tasks.items()} == FAMILIES
    for task in tasks.values():  # the group's default: 5 % of each relation, at least 2 facts
        design = task.config.metadata["budget_design"]
        assert design["budget"] == 0.05 and task.config.metadata["dataset"] == "sample"
    # 12 relations of about 56 facts: 3 or 4 facts each (ceil(0.05 N)), 38 in all, in every family on the sample
    facts = {n: drawn(t) for n, t in tasks.items()}
    assert {len(facts[n]) for n in PROFILE if n != "belief_profile_iclke"} == {38}
    assert (
        facts["belief_profile_mp"]
        == facts["belief_profile_qa"]
        == facts["belief_profile_bear"]
        == facts["belief_profile_monitor"]
    )
    # IC-LKE draws among its test facts (half of each relation trains): 2 per relation, and with
    # train_split: key its test facts are the facts the others drew first, so all 24 are among their 38
    assert len(facts["belief_profile_iclke"]) == 24 and facts["belief_profile_iclke"] <= facts["belief_profile_bear"]
    pairs = {(a, b): n for a, b, n in shared_facts(costs_of(tasks))}
    assert pairs[("belief_profile_bear", "belief_profile_monitor")] == 38
    assert pairs[("belief_profile_bear", "belief_profile_iclke")] == 24


def test_a_seeded_split_would_lose_shared_facts_to_training(model_path):
    """What ``train_split: key`` is for: with IC-LKE's seeded split, 6 of the 24 facts IC-LKE draws on the
    sample are not among the other probes' 38 (the key split keeps all 24: above)."""
    tasks = build({"source": "sample", "train_split": "seeded"}, model_path)
    assert len(drawn(tasks["belief_profile_iclke"]) & drawn(tasks["belief_profile_bear"])) == 18


def test_the_budget_is_a_knob_of_the_command(model_path):
    import math

    tasks = build({"source": "sample", "budget": 0.2}, model_path)
    design = tasks["belief_profile_bear"].draw.summary()
    # ceil(0.2 N_r) of each relation (at least 2): 140 of the 671 sample facts
    assert sum(max(2, math.ceil(0.2 * r["population"])) for r in design["relations"].values()) == 140
    assert len(drawn(tasks["belief_profile_bear"])) == design["facts_drawn"] == 140


def test_the_group_builds_on_the_real_data(shared_data, model_path, tmp_path, monkeypatch):
    """BEAR, BEAR-big and FKTC from ../shared/data, MyriadLAMA as a local copy in its layout (the sample written
    by scripts/sample_as_myriadlama.py): every task reads its own dataset and the probes share facts."""
    spec = importlib.util.spec_from_file_location("sample_as_myriadlama", ROOT / "scripts" / "sample_as_myriadlama.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write(tmp_path / "myriadlama")
    for var, sub in (
        ("BELIEF_BEAR_PATH", "bear/BEAR"),
        ("BELIEF_BEAR_BIG_PATH", "bear/BEAR-big"),
        ("BELIEF_FKTC_PATH", "fktc/FKTC"),
    ):
        monkeypatch.setenv(var, str(shared_data / sub))
    monkeypatch.setenv("BELIEF_MYRIADLAMA_PATH", str(tmp_path / "myriadlama"))
    tasks = build({"budget": 0.01}, model_path)
    datasets = {n: t.config.metadata["dataset"] for n, t in tasks.items()}
    assert datasets == {
        "belief_profile_mp": "myriadlama",
        "belief_profile_qa": "myriadlama",
        "belief_profile_bear": "bear",
        "belief_profile_iclke": "bear_big",
        "belief_profile_monitor": "fktc",
    }
    design = {n: t.config.metadata["budget_design"] for n, t in tasks.items()}
    assert design["belief_profile_bear"]["facts_in_population"] == 7731  # every BEAR instance
    assert design["belief_profile_monitor"]["facts_in_population"] == 16198  # every FKTC fact
    drawn_facts = {n: d["facts_drawn"] for n, d in design.items()}
    assert drawn_facts == {
        "belief_profile_mp": 24,
        "belief_profile_qa": 24,
        "belief_profile_bear": 120,
        "belief_profile_iclke": 364,
        "belief_profile_monitor": 170,
    }
    pairs = {(a, b): n for a, b, n in shared_facts(costs_of(tasks))}
    # docs/profile.md's table, 1 % row: BEAR is inside BEAR-big, yet a fixed-size draw shares about half of BEAR's
    # 120 (its small relations draw 2 facts, a larger share than IC-LKE's of them); FKTC shares none at 1 %
    assert pairs[("belief_profile_bear", "belief_profile_iclke")] == 64
    assert pairs[("belief_profile_bear", "belief_profile_monitor")] == 0
    assert pairs[("belief_profile_mp", "belief_profile_qa")] == 24


def test_profile_command_fills_in_what_the_user_left_out(monkeypatch):
    from belief_tasks.commands.belief_eval import profile_command

    monkeypatch.delenv("BELIEF_PROFILE_OUTPUT", raising=False)
    default = profile_command([])
    assert default[:2] == ["--model", "hf-shared"] and "--log_samples" in default
    assert default[default.index("--tasks") + 1] == "belief_profile"
    assert default[default.index("--output_path") + 1] == "results/profile"
    mine = profile_command(
        ["--model", "vllm", "--model_args", "pretrained=org/model,dtype=bfloat16", "--metadata", '{"budget": 0.2}']
    )
    assert mine.count("--model") == 1 and mine.count("--model_args") == 1  # the user's, not ours
    assert mine[-6:] == [
        "--model",
        "vllm",
        "--model_args",
        "pretrained=org/model,dtype=bfloat16",
        "--metadata",
        '{"budget": 0.2}',
    ]


def test_profile_estimate_runs_before_any_model(model_path, tmp_path):
    from harness import run_cli

    out = run_cli(
        [
            "profile",
            "--estimate",
            "--metadata",
            json.dumps({"source": "sample"}),
            "--output_path",
            str(tmp_path / "out"),
            "--estimate_json",
            str(tmp_path / "e.json"),
        ],
        program="belief_tasks",
        BELIEF_RATES=str(tmp_path / "rates.json"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    e = json.loads((tmp_path / "e.json").read_text())
    assert [t["task"] for t in e["tasks"]] == PROFILE
    assert "the report" in e["phases"]  # the profile ends in its report: that phase is estimated too
    shared = {(p["a"], p["b"]): p["facts"] for p in e["shared_facts"]}
    assert shared[("belief_profile_bear", "belief_profile_iclke")] == 24
    assert not (tmp_path / "out").exists()  # an estimate writes no results


def test_train_split_key_trains_on_the_facts_a_budget_draws_last():
    from belief_tasks.facts.schema import Entity, Fact
    from belief_tasks.prompts.iclke import split_relation

    facts = [Fact(f"f{i}", "P1", Entity(f"s{i}"), (Entity("o"),)) for i in range(10)]
    order = [3, 1, 4, 0, 5, 9, 2, 6, 8, 7]  # the budget draws f3 first, f7 last
    train, test = split_relation(facts, 0, 3, lambda fs: order)
    assert [f.id for f in train] == ["f6", "f7", "f8"]  # the last three drawn, in data order
    assert [f.id for f in test] == ["f0", "f1", "f2", "f3", "f4", "f5", "f9"]
    train, _ = split_relation(facts, 0, 100, lambda fs: order)  # at most half of the relation trains
    assert [f.id for f in train] == ["f2", "f6", "f7", "f8", "f9"]
    given = [
        Fact(f.id, f.relation, f.subject, f.objects, split="train" if i < 2 else "test") for i, f in enumerate(facts)
    ]
    train, _ = split_relation(given, 0, 3, lambda fs: order)  # a dataset's own split is kept
    assert [f.id for f in train] == ["f0", "f1"]
