"""The reference's -v=10 score lines (as kube-scheduler v1.37.2 writes them), parsed per pod, node, plugin."""

from __future__ import annotations

from kopf_scheduler.explain.reflog import parse_scores

HEAD = "I1123 12:48:52.193284   24637 schedule_one.go:"
POD = 'pod="ns-1/web"'


def plugin_line(plugin: str, node: str, score: int) -> str:
    return f'{HEAD}983] "Plugin scored node for pod" {POD} plugin="{plugin}" node="{node}" score={score}'


def total_line(node: str, score: int) -> str:
    return f'{HEAD}1052] "Calculated node\'s final score for pod" {POD} node="{node}" score={score}'


LINES = [
    f'{HEAD}117] "Attempting to schedule pod" {POD}',
    plugin_line("TaintToleration", "a", 300),
    plugin_line("NodeResourcesFit", "a", 71),
    plugin_line("TaintToleration", "b", 0),
    total_line("a", 371),
    total_line("b", 0),
    "garbage line",
]


def test_scores_per_pod_node_and_plugin() -> None:
    scores = parse_scores(LINES)["ns-1/web"]
    assert scores["a"].plugins == {"TaintToleration": 300, "NodeResourcesFit": 71}
    assert scores["a"].total == 371
    assert (scores["b"].plugins, scores["b"].total) == ({"TaintToleration": 0}, 0)


def test_a_later_cycle_replaces_the_earlier_one() -> None:
    again = [plugin_line("TaintToleration", "b", 300), total_line("b", 300)]
    scores = parse_scores([*LINES, *again])["ns-1/web"]
    assert set(scores) == {"b"}
    assert (scores["b"].plugins, scores["b"].total) == ({"TaintToleration": 300}, 300)


def test_quoted_values_with_escapes() -> None:
    line = r'I1 0 x.go:1] "Plugin scored node for pod" pod="a/b" plugin="P" node="n \"q\"" score=5'
    assert parse_scores([line])["a/b"]['n "q"'].plugins == {"P": 5}
