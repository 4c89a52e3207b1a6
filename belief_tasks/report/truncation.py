"""Requests the model's context cut, as the run recorded them (``belief_tasks.hooks.truncation``): one line per task."""

from __future__ import annotations

HEADING = (
    "**Requests cut to the model's context.** These tasks sent requests longer than the model's "
    "`max_length`, which the backend cut from the left (it scored what remained), or ran where the "
    "context length could not be known:\n"
)


def notes(runs) -> list[str]:
    """A line per task whose results JSON records a ``truncation`` entry, runs in order, tasks by name."""
    lines = []
    for run in runs:
        for name, task in sorted(run.tasks.items()):
            cut = (task.config.get("metadata") or {}).get("truncation")
            if not isinstance(cut, dict):
                continue
            if cut.get("context_length") == "unknown":  # the backend's requests could not be measured
                lines.append(f"{run.name} / {name}: {cut['requests']} requests not measured: {cut['reason']}")
                continue
            line = (
                f"{run.name} / {name}: {cut['truncated_requests']} of {cut['requests']} requests longer than "
                f"max_length {cut['max_length']} (longest {cut['longest_request_tokens']} tokens); up to "
                f"{cut['max_tokens_cut']} tokens cut from one request, {cut['total_tokens_cut']} in all"
            )
            if cut.get("needs_whole_context") and cut["truncated_requests"]:
                line += "; this probe needs its whole context and ran only because allow_truncation was set"
            if cut.get("server_max_model_len") == "unknown":
                line += "; the server reports no context length of its own, so it may refuse or cut more"
            lines.append(line)
    return lines


def markdown(runs) -> str:
    """The report's note under its runs table ("" when no request was cut)."""
    lines = notes(runs)
    return HEADING + "\n" + "\n".join(f"- {line}" for line in lines) + "\n" if lines else ""
