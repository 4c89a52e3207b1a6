"""MONITOR section (Wang et al., 2024): Table 4 (MONITOR, avg/max/min accuracy, primary-anchor
probability, with r(MONITOR, avg acc) across models), Table 11 (MONITOR per relation x model),
Table 12 (the correlation per relation).

Tasks ``belief_monitor_<Pid>`` (FKTC, one task per relation; together the
``belief_monitor`` group) and ``belief_monitor_sample`` (every relation in one task).
Every number is the tasks' own aggregation (``belief_tasks.tasks.monitor.agg_*``,
found through the task YAML) applied to the records of a model, or of one relation;
the aggregations average per-relation values without weights, as Table 4 does.
"""

from __future__ import annotations

import re

import pandas as pd

from belief_tasks.metrics.comparison import correlation
from belief_tasks.report.base import CardEntry, Context, Section
from belief_tasks.report.output import fmt, heatmap, pm
from belief_tasks.report.recompute import aggregations, base_task, same, stderr_function

FAMILY = "MONITOR"
TASK_RE = r"belief_monitor_\w+"
TABLE4 = (("monitor", "MONITOR ↓"), ("acc_avg", "avg acc ↑"), ("acc_max", "max acc ↑"), ("acc_min", "min acc ↑"),
          ("primary_prob", "probs ↑"), ("pfd", "PFD ↓"), ("ird", "IRD ↓"))


def suite_of(task: str) -> str:
    """FKTC's per-relation tasks form one suite (the ``belief_monitor`` group); any other task is its own."""
    return "belief_monitor" if base_task(task).startswith("belief_monitor_P") else task


class Suite:
    """A model's MONITOR records of one suite, with the tasks' aggregations."""

    def __init__(self, run, name: str, tasks: list, ctx: Context | None = None):
        self.run, self.name, self.tasks, self.ctx = run, name, tasks, ctx
        self.aggs = aggregations(tasks[0].name)
        self.records = [r for t in tasks for r in t.records("monitor")]
        self._cache: dict = {}

    def number(self, metric: str, relation: str | None = None, with_stderr: bool = False):
        key = (metric, relation, with_stderr)
        if key not in self._cache:
            self._cache[key] = self._number(metric, relation, with_stderr)
        return self._cache[key]

    def _number(self, metric: str, relation: str | None, with_stderr: bool):
        if relation is None and len(self.tasks) == 1 and self.ctx is not None:  # the task's own recomputed numbers
            n = self.ctx.numbers(self.run, self.tasks[0].name).get(metric)
            if n is not None:
                return (n.value, n.stderr) if with_stderr else n.value
        agg = self.aggs.get(metric)
        recs = self.records if relation is None else [r for r in self.records if r["relation"] == relation]
        if agg is None or not recs:
            return (float("nan"), None) if with_stderr else float("nan")
        v = float(agg(recs))
        if not with_stderr:
            return v
        se_fn = stderr_function(agg)
        return v, (float(se_fn(recs)) if se_fn else None)

    def harness(self, metric: str):
        """The harness's value for the suite: the task's, or the group's for FKTC's per-relation tasks."""
        if len(self.tasks) == 1 and self.tasks[0].name == self.name:
            return self.tasks[0].value(metric)
        g = self.run.groups.get(self.name, {})
        for k, v in g.items():
            if k.split(",", 1)[0] == metric and isinstance(v, (int, float)):
                return float(v)
        return None

    @property
    def relations(self) -> list[str]:
        return sorted({r["relation"] for r in self.records}, key=_pid_order)


def _pid_order(rel: str):
    return (0, int(rel[1:])) if rel[1:].isdigit() else (1, rel)


def suites(ctx: Context) -> list[Suite]:
    out = []
    for run in ctx.runs:
        groups: dict[str, list] = {}
        for name in sorted(run.tasks):
            t = run.tasks[name]
            if re.fullmatch(TASK_RE, base_task(name)) and t.has_records:
                groups.setdefault(suite_of(name), []).append(t)
        out += [Suite(run, s, ts, ctx) for s, ts in groups.items()]
    return out


def build(ctx: Context) -> Section | None:
    found = suites(ctx)
    if not found:
        if ctx.tasks(TASK_RE):
            return Section(FAMILY, f"## {FAMILY}\n\n*MONITOR results need the per-sample files (`--log_samples`).*\n")
        return None
    w = ctx.writer
    md = [f"## {FAMILY}\n",
          "Factual reliability (Wang et al., 2024): how far the gold object's subword probabilities move under other "
          "prompt frames (PFD) and under misleading contexts (IRD), per unit of probability under the positive context. "
          "Lower MONITOR is better. Accuracy: greedy answers under the prompt frames; avg/max/min over frames, each "
          "averaged over relations; probs: mean primary-anchor probability.\n"]
    checks = []
    for suite_name in sorted({s.name for s in found}):
        group = [s for s in found if s.name == suite_name]
        md.append(f"### `{suite_name}`\n")

        # ---- Table 4
        shown, raw = [], []
        for s in group:
            for t in s.tasks:  # every task's own numbers, checked against its results (Context does it)
                ctx.numbers(s.run, t.name)
            row, raw_row = {"Model": s.run.name}, {"model": s.run.name, "suite": suite_name}
            for m, head in TABLE4:
                v, se = s.number(m, with_stderr=True)
                row[head] = pm(v, se)
                raw_row[m], raw_row[f"{m}_stderr"] = v, se
                h = s.harness(m) if len(s.tasks) > 1 else None  # a suite of several tasks: the group's row
                if h is not None:
                    checks.append((f"{s.run.name}:{suite_name} (group)/{m}", same(v, h)))
            row["Facts"] = raw_row["facts"] = len(s.records)
            row["Relations"] = raw_row["relations"] = len(s.relations)
            shown.append(row)
            raw.append(raw_row)
        md.append("#### Summary (cf. Table 4)\n")
        md.append(w.table(pd.DataFrame(shown), f"monitor_table4_{suite_name}", "± = bootstrap standard error over facts.",
                          csv=pd.DataFrame(raw)))
        if len(group) >= 3:
            r, p, n = correlation([x["monitor"] for x in raw], [x["acc_avg"] for x in raw])
            md.append(f"Pearson r(MONITOR, avg acc) = **{fmt(r, 3)}** (p = {fmt(p, 3)}, n = {n} models).\n")
        elif len(group) == 2:
            md.append("*r(MONITOR, avg acc) across models needs at least three models.*\n")

        # ---- Table 11: MONITOR per relation x model (+ accuracy)
        relations = sorted({rel for s in group for rel in s.relations}, key=_pid_order)
        mon = pd.DataFrame({s.run.name: {rel: s.number("monitor", rel) for rel in relations} for s in group}).loc[relations]
        acc = pd.DataFrame({s.run.name: {rel: s.number("acc_avg", rel) for rel in relations} for s in group}).loc[relations]
        mon.index.name = acc.index.name = "relation"
        md.append("#### MONITOR per relation (cf. Table 11)\n")
        vmax = max(1.0, float(pd.to_numeric(mon.stack(), errors="coerce").max() if mon.size else 1.0))
        fig = heatmap(mon, f"MONITOR per relation ({suite_name}); lower is better", "model", "relation", "MONITOR", vmin=0.0, vmax=vmax)
        md.append(w.figure(fig, f"monitor_relations_{suite_name}", "MONITOR per relation"))
        both = mon.add_suffix(" MONITOR").join(acc.add_suffix(" avg acc"))
        md.append(w.table(both.reset_index(), f"monitor_table11_{suite_name}", "MONITOR and average accuracy per relation."))

        if len(group) >= 3:  # Table 12: the correlation per relation
            rows = []
            for rel in relations:
                r, p, n = correlation(mon.loc[rel].to_numpy(), acc.loc[rel].to_numpy())
                rows.append({"relation": rel, "Pearson r": r, "p-value": p, "models": n})
            md.append("#### r(MONITOR, avg acc) per relation (cf. Table 12)\n")
            md.append(w.table(pd.DataFrame(rows), f"monitor_table12_{suite_name}"))

    return Section(FAMILY, "\n".join(md), _summary(found), _card(found), checks)


def _card(found: list[Suite]) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for s in found:
        tag = "" if len({x.name for x in found if x.run is s.run}) == 1 else f" [{s.name}]"
        card.setdefault(s.run.name, []).extend([
            CardEntry("accuracy", FAMILY, f"avg accuracy over frames{tag}", fmt(s.number("acc_avg"), 3)),
            CardEntry("robustness", FAMILY, f"PFD / IRD{tag}", f"{fmt(s.number('pfd'), 3)} / {fmt(s.number('ird'), 3)}", "lower"),
            CardEntry("reliability", FAMILY, f"MONITOR{tag}", fmt(s.number("monitor"), 3), "lower"),
        ])
    return card


def _summary(found: list[Suite]) -> list[str]:
    return [f"{s.run.name:<28} {s.name:<22} MONITOR {fmt(s.number('monitor'))}  avg acc {fmt(s.number('acc_avg'))}  "
            f"probs {fmt(s.number('primary_prob'))}" for s in found]
