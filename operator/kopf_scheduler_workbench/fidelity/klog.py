"""Reading the reference's per-node final scores from its klog text output (``-v=10``).

kube-scheduler logs, for each scored pod and node, one structured line from ``prioritizeNodes``
(shown wrapped here; it is one line)::

    I1123 12:00:00.123456  4242 schedule_one.go:1047] "Calculated node's final score for pod"
    pod="ns/p" node="n1" score=312

Values are Go-quoted strings or bare tokens; a message or value may hold escaped quotes. Lines of
other kinds, continuation lines and partial lines (a log cut mid-write) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["FINAL_SCORE", "ScoreLog", "parse_line", "parse_scores"]

FINAL_SCORE = "Calculated node's final score for pod"
PLUGIN_SCORE = "Plugin scored node for pod"

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
    """``(message, {key: value})`` of one structured klog line, or None for anything else."""
    header = _HEADER.match(line.rstrip("\n"))
    if not header:
        return None
    body = _MESSAGE.match(header.group("rest"))
    if not body:
        return None
    pairs = {m.group("key"): _unquote(m.group("value")) for m in _PAIR.finditer(body.group("kv"))}
    return _unquote(body.group("msg")), pairs


@dataclass
class ScoreLog:
    """Final scores per pod (``ns/name``) and node, and per plugin when the plugin lines are there.

    A pod scheduled more than once (a retry) keeps only its last attempt's scores: a new attempt
    starts when a node already scored for that pod shows up again.
    """

    final: dict[str, dict[str, int]] = field(default_factory=dict)
    plugins: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    def add(self, message: str, pairs: dict[str, str]) -> None:
        pod, node, score = pairs.get("pod"), pairs.get("node"), pairs.get("score")
        if not pod or not node or score is None:
            return
        try:
            value = int(score)
        except ValueError:
            return
        if message == FINAL_SCORE:
            scores = self.final.setdefault(pod, {})
            if node in scores:  # a later attempt for the same pod
                scores.clear()
            scores[node] = value
        elif message == PLUGIN_SCORE and pairs.get("plugin"):
            by_node = self.plugins.setdefault(pod, {})
            plugin = pairs["plugin"]
            if plugin in by_node.get(node, {}):  # a later attempt
                by_node.clear()
            by_node.setdefault(node, {})[plugin] = value

    def best(self, pod: str) -> set[str]:
        """The nodes sharing the top final score: any of them is a legitimate choice."""
        scores = self.final.get(pod)
        if not scores:
            return set()
        top = max(scores.values())
        return {n for n, s in scores.items() if s == top}


def parse_scores(lines: Iterable[str]) -> ScoreLog:
    log = ScoreLog()
    for line in lines:
        if "score" not in line:
            continue
        parsed = parse_line(line)
        if parsed is not None:
            log.add(*parsed)
    return log
