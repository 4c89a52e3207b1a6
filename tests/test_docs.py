"""The README and docs/ are what a user reads first: no development paths, no internal work-item numbers,
no names that do not exist, one home for timings, and no package-index host anywhere in scripts or config."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from belief_tasks.hooks import truncation

ROOT = Path(__file__).resolve().parent.parent
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: absolute paths a user doc may show: placeholders and examples, never a machine's own folders
EXAMPLE_ROOTS = {
    "data": "example locations of local datasets (/data/MyriadLAMA)",
    "path": "placeholders (/path/to/copy)",
    "x": "a placeholder value in an error message",
    "N": "a fraction written as x/N",
    "M": "a fraction written as x/M",
    "v1": "the OpenAI-style server endpoint /v1/completions",
    "inference": "vllm serve's token endpoint /inference/v1/generate",
    "metrics": "a server's /metrics",
    "reset_prefix_cache": "vllm serve's development endpoint /reset_prefix_cache",
    "results_": "lm-eval's file name pattern <model>/results_<date>.json",
}
ABSOLUTE = re.compile(r"(?<![\w.~$)}\]/:-])/([A-Za-z_][\w.-]*)(?:/[\w.*-]*)*")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_absolute_or_development_paths(doc):
    found = [m.group(0) for m in ABSOLUTE.finditer(text(doc)) if m.group(1) not in EXAMPLE_ROOTS]
    assert not found, f"{doc.name}: absolute paths {found}"
    assert "../shared" not in text(doc), f"{doc.name}: names ../shared, which users do not have"
    assert not re.search(r"(?i)\bissues?\s*#?\d+", text(doc)), f"{doc.name}: names an internal work item"


def test_the_path_check_catches_development_paths():
    for bad in ("see /work/main/docs", "pretrained=/root/.cache/m", "`/home/me/x`", "(/tmp/run)"):
        assert [m for m in ABSOLUTE.finditer(bad) if m.group(1) not in EXAMPLE_ROOTS], bad
    for fine in ("docs/report.md", "https://github.com/EleutherAI/x", "1/N", "`/data/MyriadLAMA`", "~/.cache/x"):
        assert not [m for m in ABSOLUTE.finditer(fine) if m.group(1) not in EXAMPLE_ROOTS], fine


# --- every task name and knob the docs name exists ------------------------------------------------

#: names that look like ours but are not tasks, with the reason
NOT_TASKS = {"belief_tasks": "the Python package", "belief_demo_baer": "docs/data.md's example of a misspelt task"}
#: ``"key":`` / ``key: value`` spellings in the docs that are not our knobs, with the reason
NOT_KNOBS = {
    "logprobs": "mask_topk response field",
    "targets": "mask_topk response field",
    "token_ids": "mask_topk response field",
    "tokens": "mask_topk response field",
    "vocab_size": "mask_topk response field",
    "echo": "an OpenAI payload field",
    "do_sample": "lm-eval generation kwarg",
    "max_gen_toks": "lm-eval generation kwarg",
    "temperature": "lm-eval generation kwarg",
    "top_k": "lm-eval generation kwarg",
    "until": "lm-eval generation kwarg",
    "doc_to_text": "lm-eval task YAML key",
    "target_delimiter": "lm-eval task YAML key",
    "example_seperator": "the IC-LKE reference code's key",
    "truncation": "results JSON metadata entry (docs/data.md)",
}
# the fields of that entry, as the code writes them (allow_truncation is also a knob)
NOT_KNOBS.update(dict.fromkeys(truncation.Truncation(0, 0, 0, 0, 0, 0).record(False, False), "a truncation field"))
NOT_KNOBS.update(
    dict.fromkeys(
        truncation.unknown_record(truncation.Context(None, None, "x", "unknown", "y"), 0),
        "a truncation field (a context that cannot be known)",
    )
)
TASK_NAME = re.compile(r"(?<![\w./-])belief_[a-z0-9_]+\*?(?![\w/.(])")
JSON_KEY = re.compile(r'"([A-Za-z_]+)"\s*:')
YAML_SETTING = re.compile(r"`([a-z_]+): [^`]+`")
KNOB_ROW = re.compile(r"^\| `([a-z_]+)` \|", re.M)


def known_names() -> set[str]:
    from belief_tasks.commands.catalog import entries

    return {e.name for e in entries()}


def knob_names() -> set[str]:
    from belief_tasks.commands.checks import _our_knob_names
    from belief_tasks.options import MODEL_ARGS

    return _our_knob_names() | {k.name for k in MODEL_ARGS}


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_task_name_in_the_docs_exists(doc):
    names = known_names()
    unknown = []
    for m in TASK_NAME.finditer(text(doc)):
        word = m.group(0)
        if word in NOT_TASKS or word in names:
            continue
        prefix = word.rstrip("*")  # a pattern (belief_mp_*) or a stem before braces (belief_{mp,qa}_)
        if (word.endswith("*") or word.endswith("_")) and any(n.startswith(prefix) for n in names):
            continue
        unknown.append(word)
    assert not unknown, f"{doc.name}: no such task or group: {sorted(set(unknown))}"


def _knob_mentions(doc: Path) -> set[str]:
    body = text(doc)
    keys = set(JSON_KEY.findall(body)) | set(YAML_SETTING.findall(body))
    tables = [part for part in body.split("\n\n") if re.match(r"\| (knob|switch|argument) \|", part.strip())]
    keys |= {k for t in tables for k in KNOB_ROW.findall(t)}
    return keys


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_knob_in_the_docs_exists(doc):
    from belief_tasks.backends.shared import HFSharedPrefixLM  # noqa: F401  (its model args are documented too)

    hf_shared_args = {"sample_seed", "max_batch_tokens", "min_shared_tokens", "max_cached_tokens", "max_decode_rows"}
    unknown = _knob_mentions(doc) - knob_names() - set(NOT_KNOBS) - hf_shared_args
    assert not unknown, f"{doc.name}: not a knob of ours: {sorted(unknown)}"


def test_hf_shared_arguments_in_the_docs_are_its_arguments():
    import inspect

    from belief_tasks.backends.shared import HFSharedPrefixLM

    params = set(inspect.signature(HFSharedPrefixLM.__init__).parameters)
    rows = set(KNOB_ROW.findall(text(ROOT / "docs" / "backends.md")))
    assert {"sample_seed", "max_batch_tokens", "min_shared_tokens", "max_cached_tokens", "max_decode_rows"} <= rows
    assert rows - {"hf", "hf-shared", "hf-mlm"} <= params | knob_names(), rows - params


def test_the_name_checks_catch_a_misspelling():
    assert "belief_demo_baer" not in known_names() and "mp_templatse" not in knob_names()
    assert TASK_NAME.findall("run `belief_demo_baer` and `belief_mp_*`") == ["belief_demo_baer", "belief_mp_*"]
    assert JSON_KEY.findall('--metadata \'{"mp_templatse": "all"}\'') == ["mp_templatse"]


# --- one home for timings -----------------------------------------------------------------------------


def current_timings() -> str:
    body = text(ROOT / "docs" / "benchmarks.md")
    start = body.index("## Current timings")
    return body[start : body.index("\n## ", start + 1)]


def test_speed_ups_quoted_in_the_readme_are_the_current_table_s():
    table = current_timings()
    quoted = set(re.findall(r"\b(\d+(?:\.\d+)?)x\b", text(ROOT / "README.md")))
    assert quoted, "the README quotes no speed-up"
    assert all(f"{q}x" in table for q in quoted), sorted(q for q in quoted if f"{q}x" not in table)


def test_pages_link_to_the_current_timings_instead_of_old_figures():
    for page in ("bear.md", "belief.md", "iclke.md", "scale.md", "backends_support.md"):
        assert "benchmarks.md#current-timings" in text(ROOT / "docs" / page), page
    assert "7.4 statements/s" not in text(ROOT / "docs" / "bear.md")
    assert "not measured here" not in text(ROOT / "docs" / "bear.md")
    assert "prefix sharing does not help" not in text(ROOT / "docs" / "scale.md")


# --- citations -----------------------------------------------------------------------------------------

ARXIV = {"2406.12277", "2404.04113", "2404.12957", "2310.09820"}


def test_citation_file_and_bibtex_name_the_four_papers():
    cff = yaml.safe_load(text(ROOT / "CITATION.cff"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "Apache-2.0"
    from belief_tasks import __version__

    assert str(cff["version"]) == __version__
    ids = {i["value"].removeprefix("arXiv:") for ref in cff["references"] for i in ref["identifiers"]}
    assert ids == ARXIV
    readme = text(ROOT / "README.md")
    bib = readme[readme.index("```bibtex") :]
    assert set(re.findall(r"eprint\s*=\s*\{([\d.]+)\}", bib)) == ARXIV


# --- no package-index hosts in scripts or configuration ----------------------------------------------

SKIP_DIRS = {".git", ".venv", ".venv-vllm", "build", "results", "__pycache__", ".pytest_cache", "example_report"}
INDEX_HOST = re.compile(
    r"--(?:extra-)?index-url|index-url\s*=|download\.pytorch\.org|pypi\.org/simple|/simple/?['\"\s]"
)


def repo_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            if path.suffix not in (".md", ".png", ".pyc") and path != Path(__file__).resolve():
                yield path


def test_no_script_or_config_names_a_package_index():
    """Where pip downloads from is pip's own configuration (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf);
    the README may advise a setting, no script or config may hard-code one."""
    files = list(repo_files())
    assert ROOT / "scripts" / "setup.sh" in files and ROOT / "pyproject.toml" in files
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)!r}"
        for p in files
        for m in [INDEX_HOST.search(p.read_text(encoding="utf-8", errors="ignore"))]
        if m
    ]
    assert not hits, hits
    assert INDEX_HOST.search("pip install torch --index-url https://download.pytorch.org/whl/cpu")
