"""The reference kube-scheduler's score log: per pod, node and Score plugin, what it decided.

The one reader of that log: ``explain`` is checked against it (tests/integration/test_explain_cluster.py)
and the workbench's fidelity run takes its best-score sets from it.

At verbosity 10 ``prioritizeNodes`` (schedule_one.go) logs, per scored pod, one line per (node, Score
plugin) with the plugin's weighted score, then one line per node with the total. In klog's text format
(each one line, wrapped here)::

    I1123 12:00:00.000000  42 schedule_one.go:984] "Plugin scored node for pod"
        pod="ns/p" plugin="X" node="n" score=52
    I1123 12:00:00.000000  42 schedule_one.go:1047] "Calculated node's final score for pod"
        pod="ns/p" node="n" score=449

Text, not ``--logging-format=json``: the reference logs these at V(10), and only the text format takes
``--vmodule=schedule_one=10`` (component-base forbids vmodule with any other format), so JSON would need
``--v=10`` for the whole process (every request client-go makes), and the control plane's multi-call
binary does not register the JSON format anyway (kube-scheduler's own main does).

A pod's attempt begins afresh at its ``"Attempting to schedule pod"`` line (V(3), schedule_one.go), or,
where that line is missing (a pod group's cycle), at a plugin line after its totals or a total for a node
already totalled. Values are Go-quoted strings or bare tokens; lines of other kinds, continuation lines
and lines cut mid-write are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["ATTEMPT", "FINAL_SCORE", "PLUGIN_SCORED", "NodeScores", "ScoreLog", "parse_line", "parse_scores"]

ATTEMPT = "Attempting to schedule pod"
PLUGIN_SCORED = "Plugin scored node for pod"
FINAL_SCORE = "Calculated node's final score for pod"

_HEADER = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[^\]]+\]\s+(?P<rest>.*)$")
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_MESSAGE = re.compile(rf"^(?P<msg>{_QUOTED})\s*(?P<kv>.*)$")
_PAIR = re.compile(rf'(?P<key>[A-Za-z_][\w.\-]*)=(?P<value>{_QUOTED}|[^\s"]+)')
_ESCAPE = re.compile(r'\\(["\\nt])')
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return _ESCAPE.sub(lambda m: _ESCAPES[m.group(1)], text[1:-1])
    return text


def parse_line(line: str) -> tuple[str, dict[str, str]] | None:
    """``(message, {key: value})`` of one structured klog text line, or None for anything else."""
    header = _HEADER.match(line.rstrip("\n"))
    if not header:
        return None
    body = _MESSAGE.match(header.group("rest"))
    if not body:
        return None
    pairs = {m.group("key"): _unquote(m.group("value")) for m in _PAIR.finditer(body.group("kv"))}
    return _unquote(body.group("msg")), pairs


@dataclass(slots=True)
class NodeScores:
    """One node's scores in a pod's latest attempt: each Score plugin's weighted score, and the total."""

    plugins: dict[str, int] = field(default_factory=dict)
    total: int | None = None


@dataclass
class ScoreLog:
    """pod (``ns/name``) -> node -> :class:`NodeScores`, of each pod's latest scored attempt."""

    pods: dict[str, dict[str, NodeScores]] = field(default_factory=dict)
    _totalled: set[str] = field(default_factory=set, repr=False)  # pods whose totals have begun

    def add(self, message: str, pairs: dict[str, str]) -> None:
        pod = pairs.get("pod")
        if not pod:
            return
        if message == ATTEMPT:
            self._restart(pod)
            return
        if message not in (PLUGIN_SCORED, FINAL_SCORE):
            return
        node, plugin = pairs.get("node"), pairs.get("plugin")
        try:
            score = int(pairs.get("score", ""))
        except ValueError:
            return
        if not node:
            return
        nodes = self.pods.get(pod, {})
        if message == PLUGIN_SCORED:
            if not plugin:
                return
            if pod in self._totalled or plugin in (nodes[node].plugins if node in nodes else {}):
                nodes = self._restart(pod)  # a later attempt without its attempt line
            nodes.setdefault(node, NodeScores()).plugins[plugin] = score
            self.pods[pod] = nodes
        else:
            if node in nodes and nodes[node].total is not None:
                nodes = self._restart(pod)
            nodes.setdefault(node, NodeScores()).total = score
            self.pods[pod] = nodes
            self._totalled.add(pod)

    def _restart(self, pod: str) -> dict[str, NodeScores]:
        self._totalled.discard(pod)
        self.pods.pop(pod, None)
        return {}

    def totals(self, pod: str) -> dict[str, int]:
        """node -> final score, for the nodes the pod's latest attempt totalled."""
        return {n: s.total for n, s in self.pods.get(pod, {}).items() if s.total is not None}

    def best(self, pod: str) -> set[str]:
        """The nodes sharing the top final score: any of them is a legitimate choice."""
        totals = self.totals(pod)
        if not totals:
            return set()
        top = max(totals.values())
        return {n for n, s in totals.items() if s == top}


def parse_scores(lines: Iterable[str]) -> ScoreLog:
    """The score log of ``lines`` (a file, or its text split into lines)."""
    log = ScoreLog()
    for line in lines:
        if 'pod="' not in line:  # cheap: most of a -v=10 log is about other things
            continue
        parsed = parse_line(line)
        if parsed is not None:
            log.add(*parsed)
    return log
