"""Judging one decision of ours (live or simulated) against the reference's, and tallying rates.

Categories (each counted only where it applies, so a rate is over decisions that exercise it):

- ``feasibility``: both bound, or both left the pod pending (every decision);
- ``message``: the exact FailedScheduling text, preemption part included (either side failed);
- ``placement``: our node is one of the reference's best-score nodes, ties being legitimate (both
  bound, fewer than 100 nodes: above that percentageOfNodesToScore makes the set a sample);
- ``nomination``: the same nominated node and the same victims (either side preempted);
- ``condition``: the PodScheduled condition's reason and message (live only; either side failed).

A gang's members are judged by the same rules, member by member (the same name on each side), but
for placement: the members are one template, so the members both sides bound are paired so that
the most land in the reference's best-score sets (``pair_gang_members``); which of two tied nodes
the first member got changes the next one's best set, and that is tie-breaking. Which members a
scheduler tries first is not: the reference's order (priority, attempts, arrival) is compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CATEGORIES",
    "Decision",
    "Outcome",
    "Tally",
    "judge",
    "match_interchangeable",
    "message_parts",
    "pair_gang_members",
    "reason_diffs",
    "signature",
]

CATEGORIES = ("feasibility", "message", "placement", "nomination", "condition")


@dataclass
class Outcome:
    """What one scheduler did with one pod."""

    node: str = ""  # bound to
    message: str = ""  # first FailedScheduling event's note
    reason: str = ""  # PodScheduled condition (status False): reason and message
    condition_message: str = ""
    nominated: str = ""  # status.nominatedNodeName
    victims: list[str] = field(default_factory=list)  # ns/name of the pods it deleted, sorted
    error: str = ""  # nothing observed in time, or the run failed for this pod
    scores: dict[str, dict[str, int]] = field(default_factory=dict)  # simulate only: node -> plugin -> score
    pod: str = ""  # a gang member's outcome: the copy it is (members are paired across sides)

    @property
    def failed(self) -> bool:
        return not self.node

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", [], None, {}) and k != "scores"}


@dataclass
class Decision:
    """One pending pod as the reference, ours live and ours through simulate decided it."""

    seed: int
    scenario: int
    pod: str  # ns/name of the reference's copy
    nodes: int
    reference: Outcome
    best: list[str]  # the reference's best-score nodes
    ours: Outcome | None = None
    simulated: Outcome | None = None
    verdicts: dict[str, dict[str, bool]] = field(default_factory=dict)  # mode -> category -> agreed
    scores: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> plugin (and "final") -> score
    gang: str = ""  # ns/name of the PodGroup when the pod is a member of a generated gang
    # modes whose outcome here is another member's: both bound, paired for placement
    repaired: list[str] = field(default_factory=list)


def judge(ref: Outcome, other: Outcome, best: Iterable[str], nodes: int, *, live: bool) -> dict[str, bool]:
    """Category -> agreed, for the categories this decision exercises."""
    out: dict[str, bool] = {}
    if ref.error:
        return out  # the reference gave nothing to compare with
    out["feasibility"] = not other.error and other.failed == ref.failed
    if ref.failed or other.failed:
        out["message"] = other.message == ref.message
        if live:
            out["condition"] = (other.reason, other.condition_message) == (ref.reason, ref.condition_message)
    if not ref.failed and not other.failed and nodes < 100:
        allowed = set(best) or {ref.node}
        out["placement"] = other.node in allowed
    if ref.nominated or ref.victims or other.nominated or other.victims:
        out["nomination"] = (other.nominated, sorted(other.victims)) == (ref.nominated, sorted(ref.victims))
    return out


def match_interchangeable(
    refs: Sequence[tuple[Outcome, Iterable[str]]], others: Sequence[Outcome], nodes: int, *, live: bool
) -> list[int]:
    """For interchangeable pods (a gang's members): ``order[i]`` is the index into ``others`` paired
    with ``refs[i]`` (outcome, best-score set), pairing as many as agree in every category (a
    maximum bipartite matching, each member with its own copy where that agrees); the rest are
    paired in their given order, and disagree."""
    best = [list(b) for _, b in refs]
    agrees = [
        [all(judge(ref, other, best[i], nodes, live=live).values()) for other in others]
        for i, (ref, _) in enumerate(refs)
    ]
    owner: dict[int, int] = {}  # index in others -> index in refs

    def augment(i: int, seen: set[int]) -> bool:
        for j, ok in enumerate(agrees[i]):
            if ok and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(min(len(refs), len(others))):  # a member and its own copy first
        if agrees[i][i]:
            owner[i] = i
    for i in range(len(refs)):
        if i not in owner.values():
            augment(i, set())
    order = [-1] * len(refs)
    for j, i in owner.items():
        order[i] = j
    spare = iter(j for j in range(len(others)) if j not in owner)
    return [j if j >= 0 else next(spare) for j in order]


def pair_gang_members(decisions: Sequence[Decision]) -> None:
    """Pair the members of each gang both sides bound so that the most placements agree, ours'
    (and simulate's) outcomes swapped among them; every other member keeps its own copy, so a
    member tried in another order shows as a feasibility or message disagreement."""
    gangs: dict[tuple[int, int, str], list[Decision]] = {}
    for d in decisions:
        if d.gang:
            gangs.setdefault((d.seed, d.scenario, d.gang), []).append(d)
    for members in gangs.values():
        for attr, mode in (("ours", "live"), ("simulated", "simulate")):
            both: list[Decision] = []
            for d in members:
                other = getattr(d, attr)
                if other is not None and not other.error and other.node and d.reference.node:
                    both.append(d)
            others = [getattr(d, attr) for d in both]
            refs = [(d.reference, d.best) for d in both]
            order = match_interchangeable(refs, others, both[0].nodes if both else 0, live=mode == "live")
            for i, (d, j) in enumerate(zip(both, order, strict=True)):
                setattr(d, attr, others[j])
                if i != j:
                    d.repaired.append(mode)


_COUNTED = re.compile(r"^\d+ ")
_DETAIL = re.compile(r"\{[^}]*\}")


def _reasons(parts: Iterable[str]) -> set[str]:
    """Reasons without their node counts, and without the taint a reason may name (``{k: v}``)."""
    return {_DETAIL.sub("{...}", _COUNTED.sub("", p)) for p in parts}


def message_parts(message: str) -> tuple[str, list[str], str]:
    """``0/N nodes are available: 2 A, 1 B. preemption: ...`` -> (head, reasons, preemption part)."""
    head, sep, rest = message.partition(": ")
    if not sep:
        return message, [], ""
    body, _, preemption = rest.partition(" preemption: ")
    body = body.removesuffix(".")
    return head, [p.strip() for p in body.split(", ") if p.strip()], preemption


def signature(category: str, ref: Outcome, other: Outcome) -> str:
    """A short key grouping disagreements of the same kind (reasons that differ, not counts)."""
    if category == "feasibility":
        if other.error:
            return f"feasibility: ours gave no outcome ({other.error.split(':')[0]})"
        return (
            "feasibility: ours bound, reference failed"
            if ref.failed
            else "feasibility: ours failed, reference bound"
        )
    if category in ("message", "condition"):
        a = ref.message if category == "message" else f"{ref.reason}|{ref.condition_message}"
        b = other.message if category == "message" else f"{other.reason}|{other.condition_message}"
        if not a or not b:
            return f"{category}: only {'ours' if b else 'reference'} failed"
        _, ra, pa = message_parts(a)
        _, rb, pb = message_parts(b)
        only_ref, only_ours = sorted(_reasons(ra) - _reasons(rb)), sorted(_reasons(rb) - _reasons(ra))
        if only_ref or only_ours:
            return f"{category}: reasons ref-only {only_ref} ours-only {only_ours}"
        if ra != rb:
            return f"{category}: same reasons, different counts or order"
        if pa != pb:
            return f"{category}: preemption part differs"
        return f"{category}: other text difference"
    if category == "placement":
        return "placement: ours outside the reference's best-score set"
    if ref.nominated != other.nominated:
        return (
            "nomination: different nominated node"
            if ref.nominated and other.nominated
            else (
                "nomination: only the reference preempted"
                if ref.nominated
                else "nomination: only ours preempted"
            )
        )
    return "nomination: same node, different victims"


def reason_diffs(ref: str, other: str) -> list[str]:
    """One key per reason only one side gave (counts dropped), and one for a differing preemption part.

    A message that differs in two reasons yields two keys, so each reason's fix is counted once
    per message it would repair, not hidden in a combination.
    """
    _, ra, pa = message_parts(ref)
    _, rb, pb = message_parts(other)
    keys = [f"reference only: {r}" for r in sorted(_reasons(ra) - _reasons(rb))]
    keys += [f"ours only: {r}" for r in sorted(_reasons(rb) - _reasons(ra))]
    if not keys and ra != rb:
        keys.append("same reasons, different counts or order")
    if pa != pb:
        shape = (re.sub(r"\bnode \S+,", "node N,", re.sub(r"\d+", "#", p)) or "(none)" for p in (pa, pb))
        keys.append("preemption part: reference {!r} / ours {!r}".format(*shape))
    return keys


@dataclass
class Tally:
    """Agreed / total per mode (live, simulate) and category."""

    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def add(self, mode: str, verdicts: Mapping[str, bool]) -> None:
        per = self.counts.setdefault(mode, {c: [0, 0] for c in CATEGORIES})
        for category, agreed in verdicts.items():
            per[category][0] += int(agreed)
            per[category][1] += 1

    def rates(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        return {
            mode: {c: {"agreed": a, "total": t, "rate": (a / t if t else None)} for c, (a, t) in per.items()}
            for mode, per in self.counts.items()
        }

    def table(self) -> str:
        rows = [["mode", *CATEGORIES]]
        for mode, per in self.counts.items():
            cells = []
            for c in CATEGORIES:
                a, t = per[c]
                cells.append(f"{100.0 * a / t:.1f}% ({a}/{t})" if t else "n/a")
            rows.append([mode, *cells])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
