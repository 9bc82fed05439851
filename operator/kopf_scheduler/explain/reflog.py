"""Scores from the reference kube-scheduler's ``-v=10`` log, to check ``explain`` against it.

At verbosity 10 ``prioritizeNodes`` logs, per scored pod, one line per (node, Score plugin) with the
plugin's weighted score, then one line per node with the total. In klog's text format (wrapped)::

    I1123 12:00:00.000000  42 schedule_one.go:983] "Plugin scored node for pod"
        pod="ns/p" plugin="X" node="n" score=52
    I1123 12:00:00.000000  42 schedule_one.go:1047] "Calculated node's final score for pod"
        pod="ns/p" node="n" score=449

Only these two messages are read; a pod scored again (a later attempt) keeps its latest cycle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["NodeScores", "parse_scores"]

PLUGIN_SCORED = "Plugin scored node for pod"
FINAL_SCORE = "Calculated node's final score for pod"

_MESSAGE = re.compile(r'\]\s+"((?:[^"\\]|\\.)*)"(.*)$')
_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


@dataclass(slots=True)
class NodeScores:
    plugins: dict[str, int] = field(default_factory=dict)  # plugin -> weighted score
    total: int | None = None


def _fields(rest: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in _PAIR.findall(rest):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out[key] = value
    return out


def parse_scores(lines: Iterable[str]) -> dict[str, dict[str, NodeScores]]:
    """pod (ns/name) -> node -> its per-plugin weighted scores and total, from the latest cycle."""
    out: dict[str, dict[str, NodeScores]] = {}
    finished: set[str] = set()  # pods whose last cycle's totals were seen: a new line starts afresh
    for line in lines:
        m = _MESSAGE.search(line)
        if m is None or m.group(1) not in (PLUGIN_SCORED, FINAL_SCORE):
            continue
        f = _fields(m.group(2))
        pod, node = f.get("pod", ""), f.get("node", "")
        try:
            score = int(f.get("score", ""))
        except ValueError:
            continue
        if m.group(1) == PLUGIN_SCORED:
            if pod in finished:
                finished.discard(pod)
                out[pod] = {}
            out.setdefault(pod, {}).setdefault(node, NodeScores()).plugins[f.get("plugin", "")] = score
        else:
            out.setdefault(pod, {}).setdefault(node, NodeScores()).total = score
            finished.add(pod)
    return out
