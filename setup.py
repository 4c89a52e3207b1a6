"""Package layout (pyproject.toml holds the metadata).

``belief_tasks/`` is the one package, the same folder in the checkout and in the wheel
(``belief_tasks/metrics`` included; the top-level ``metrics`` entry is a link to it).
``task_yamls/`` installs twice: as ``belief_tasks/task_yamls`` (for ``--include_path``) and
as ``lm_eval/tasks/belief`` so that a bare ``lm_eval --tasks belief_...`` finds our tasks
(lm-eval 0.4.13 has no plugin discovery and does not follow symlinked folders). The pages of
``docs/`` install as ``belief_tasks/docs`` (``python -m belief_tasks docs PAGE`` prints one), so
that an error's pointer to a page works for a pip user too.
"""

from setuptools import find_namespace_packages, setup


def tree(root: str, name: str) -> tuple[list[str], dict[str, str]]:
    subs = [p for p in find_namespace_packages(root) if "__pycache__" not in p]
    packages = [name] + [f"{name}.{p}" for p in subs]
    return packages, {pkg: root + pkg[len(name) :].replace(".", "/") for pkg in packages}


packages, package_dir = [], {}
for root, name in (
    ("belief_tasks", "belief_tasks"),
    ("task_yamls", "belief_tasks.task_yamls"),
    ("task_yamls", "lm_eval.tasks.belief"),
):
    p, d = tree(root, name)
    packages += p
    package_dir.update(d)
packages.append("belief_tasks.docs")  # the top-level pages only (example_report's figures stay in the checkout)
package_dir["belief_tasks.docs"] = "docs"

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.yaml", "*_yaml", "*.json", "*.md"]},
    include_package_data=False,
)
