"""Joining the facts of two datasets on their cross-dataset keys (``belief_tasks.facts.schema.FactKey``).

A fact of one dataset joins a fact of another when

1. their relations are equal (Wikidata property ids),
2. their subjects are the same: equal Wikidata ids where both facts have one (rule ``"id"``), else a
   folded subject expression (label or alias) in common (rule ``"label + object"``); two facts whose
   subject ids differ are different subjects even when their labels are equal (namesakes), and
3. their gold objects agree: equal Wikidata ids where both have them, else any object expression
   of one agrees with one of the other under the answer matching rules
   (``belief_tasks.facts.matching.outputs_agree``: "Netherlands" / "the Netherlands", "Apple" / "Apple Inc.").

Where 1 and 2 hold and 3 does not, the datasets disagree on the fact: a *conflict*, reported and
never joined, unless both facts joined other facts (a subject with several objects: FKTC's "Sweden,
official language, Finnish" beside its "... Swedish", which joined BEAR-big's "Swedish").

Each fact joins at most one fact of the other dataset, greedily: facts in id order; partners by the
id rule first, then with an equal label, then through an alias, each in id order. A further partner
that would also agree is counted as a *duplicate* (a subject label that is another fact's alias).

Pure: no harness, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from belief_tasks.facts.matching import outputs_agree
from belief_tasks.facts.schema import FactKey

BY_ID = "id"
BY_LABEL = "label + object"
#: the rule for two probes of one dataset: the same fact id is the same fact
BY_FACT_ID = "fact id"
RULES = (BY_FACT_ID, BY_ID, BY_LABEL)


@dataclass(frozen=True)
class Match:
    """Fact ``a`` of the first dataset, fact ``b`` of the second, and the rule that matched them."""

    a: str
    b: str
    rule: str


@dataclass
class Join:
    joined: list[Match] = field(default_factory=list)
    #: same relation and subject, objects disagree (``rule``: how the subjects matched)
    conflicts: list[Match] = field(default_factory=list)
    #: would have joined, but one of the two facts had already joined another
    duplicates: list[Match] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Joined facts per rule (every rule named, zero included), conflicts and duplicates."""
        out = {rule: sum(m.rule == rule for m in self.joined) for rule in RULES}
        return {**out, "joined": len(self.joined), "conflicts": len(self.conflicts), "duplicates": len(self.duplicates)}


def same_subject(a: FactKey, b: FactKey) -> str | None:
    """``BY_ID`` or ``BY_LABEL`` when ``a`` and ``b`` are facts of one relation about one subject, else None."""
    if a.relation != b.relation:
        return None
    if a.subject_id and b.subject_id:
        return BY_ID if a.subject_id == b.subject_id else None
    return BY_LABEL if set(a.subjects) & set(b.subjects) else None


def objects_agree(a: FactKey, b: FactKey) -> bool:
    """The gold objects agree: by Wikidata id where both keys have ids, else by the matching rules."""
    if a.object_ids and b.object_ids:
        return bool(set(a.object_ids) & set(b.object_ids))
    return any(outputs_agree(x, y) for x in a.objects for y in b.objects)


def _index(keys: Mapping[str, FactKey]) -> dict[tuple, list[str]]:
    """Facts by (relation, subject id) and by (relation, folded subject expression)."""
    index: dict[tuple, list[str]] = {}
    for fid in sorted(keys):
        k = keys[fid]
        if k.subject_id:
            index.setdefault((k.relation, "id", k.subject_id), []).append(fid)
        for s in k.subjects:
            index.setdefault((k.relation, "label", s), []).append(fid)
    return index


def _candidates(key: FactKey, index: dict[tuple, list[str]], other: Mapping[str, FactKey]) -> list[tuple[str, str]]:
    """(fact id, subject rule) of the other dataset's facts about ``key``'s subject: id rule first, then
    equal labels, then a label equal to an alias."""
    found = set(index.get((key.relation, "id", key.subject_id), ())) if key.subject_id else set()
    for s in key.subjects:
        found.update(index.get((key.relation, "label", s), ()))
    ruled = [(fid, rule) for fid in found if (rule := same_subject(key, other[fid]))]
    return sorted(ruled, key=lambda x: (x[1] != BY_ID, other[x[0]].subject != key.subject, x[0]))


def join_keys(a: Mapping[str, FactKey], b: Mapping[str, FactKey]) -> Join:
    """Join the facts of two datasets (fact id -> key each); see the module docstring for the rules."""
    index = _index(b)
    out, taken_a, taken_b, disagree = Join(), set(), set(), []
    for fa in sorted(a):
        for fb, rule in _candidates(a[fa], index, b):
            if not objects_agree(a[fa], b[fb]):
                disagree.append(Match(fa, fb, BY_ID if rule == BY_ID else "label"))
            elif fa in taken_a or fb in taken_b:
                out.duplicates.append(Match(fa, fb, rule))
            else:
                out.joined.append(Match(fa, fb, rule))
                taken_a.add(fa)
                taken_b.add(fb)
    # two facts that each joined another are two objects of one subject (Sweden's official languages),
    # not a disagreement; a disagreeing fact left without a partner is a conflict
    out.conflicts = [m for m in disagree if m.a not in taken_a or m.b not in taken_b]
    return out


def join_same_dataset(a: Mapping[str, object], b: Mapping[str, object]) -> Join:
    """Two probes of one dataset: the same fact id is the same fact."""
    return Join(joined=[Match(f, f, BY_FACT_ID) for f in sorted(set(a) & set(b))])
