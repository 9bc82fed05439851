"""The reference's -v=10 score log (as kube-scheduler v1.37.2 writes it), read per pod, node and plugin."""

from __future__ import annotations

import pytest

from kopf_scheduler.explain.reflog import FINAL_SCORE, parse_line, parse_scores

HEAD = "I1123 12:48:52.193284   24637 schedule_one.go:"


def attempt_line(pod: str = "ns-1/web") -> str:
    return f'{HEAD}117] "Attempting to schedule pod" pod="{pod}"'


def plugin_line(plugin: str, node: str, score: int, pod: str = "ns-1/web") -> str:
    pairs = f'pod="{pod}" plugin="{plugin}" node="{node}" score={score}'
    return f'{HEAD}984] "Plugin scored node for pod" {pairs}'


def total_line(node: str, score: int, pod: str = "ns-1/web") -> str:
    return f'{HEAD}1047] "Calculated node\'s final score for pod" pod="{pod}" node="{node}" score={score}'


LINES = [
    attempt_line(),
    plugin_line("TaintToleration", "a", 300),
    plugin_line("NodeResourcesFit", "a", 71),
    plugin_line("TaintToleration", "b", 0),
    total_line("a", 371),
    total_line("b", 0),
    "garbage line",
]


def test_parse_line_reads_message_and_pairs() -> None:
    assert parse_line(total_line("n1", 312, pod="ns/p")) == (
        FINAL_SCORE,
        {"pod": "ns/p", "node": "n1", "score": "312"},
    )


def test_parse_line_unescapes_quoted_values_and_keeps_bare_ones() -> None:
    line = r'E0101 00:00:00.000001       7 x.go:1] "a \"quoted\" msg" err="bad \"x\"\nnext" n=3 ok=true'
    assert parse_line(line) == ('a "quoted" msg', {"err": 'bad "x"\nnext', "n": "3", "ok": "true"})


@pytest.mark.parametrize(
    "line",
    [
        "",
        "some unstructured output",
        f"{HEAD}1047] unquoted message",
        f"{HEAD}1047",  # cut mid-write
        '  "continuation" of="a multi-line value"',
        'I1 0 x.go:1] "Plugin scored node for pod" pod="a/b" plugin="P" node="n" score=5',  # no klog header
    ],
)
def test_parse_line_ignores_anything_else(line: str) -> None:
    assert parse_line(line) is None


def test_scores_per_pod_node_and_plugin() -> None:
    scores = parse_scores(LINES).pods["ns-1/web"]
    assert scores["a"].plugins == {"TaintToleration": 300, "NodeResourcesFit": 71}
    assert scores["a"].total == 371
    assert (scores["b"].plugins, scores["b"].total) == ({"TaintToleration": 0}, 0)


def test_best_set_holds_every_node_sharing_the_top_score() -> None:
    lines = [
        "W1123 noise",
        total_line("n1", 300, pod="ns/a"),
        total_line("n2", 312, pod="ns/a"),
        total_line("n3", 312, pod="ns/a"),
        total_line("n1", 5, pod="ns/b"),
    ]
    scores = parse_scores(lines)
    assert scores.best("ns/a") == {"n2", "n3"}
    assert scores.best("ns/b") == {"n1"}
    assert scores.best("ns/unknown") == set()


def test_pods_interleaved_keep_their_own_scores() -> None:
    lines = [
        plugin_line("P", "n1", 1, pod="ns/a"),
        plugin_line("P", "n1", 2, pod="ns/b"),
        total_line("n1", 1, pod="ns/a"),
        total_line("n1", 2, pod="ns/b"),
    ]
    scores = parse_scores(lines)
    assert scores.totals("ns/a") == {"n1": 1}
    assert scores.pods["ns/b"]["n1"].plugins == {"P": 2}


def test_an_attempt_line_starts_the_pod_afresh() -> None:
    """The latest attempt decides, even one that scored nothing (a single feasible node, or none)."""
    again = [attempt_line(), plugin_line("TaintToleration", "c", 300), total_line("c", 300)]
    scores = parse_scores([*LINES, *again])
    assert set(scores.pods["ns-1/web"]) == {"c"}
    assert scores.best("ns-1/web") == {"c"}
    assert parse_scores([*LINES, attempt_line()]).best("ns-1/web") == set()
    assert parse_scores([*LINES, attempt_line("ns-1/other")]).best("ns-1/web") == {"a"}


def test_a_later_attempt_without_its_attempt_line_replaces_the_earlier_one() -> None:
    """A pod group's cycle logs no per-pod attempt line: a plugin line after the totals starts anew."""
    again = [plugin_line("TaintToleration", "c", 300), total_line("c", 300)]
    scores = parse_scores([*LINES, *again]).pods["ns-1/web"]
    assert set(scores) == {"c"}  # a, b were the earlier attempt's, though c was never scored before
    assert (scores["c"].plugins, scores["c"].total) == ({"TaintToleration": 300}, 300)


def test_a_total_repeated_for_a_node_starts_anew_when_no_plugin_scores() -> None:
    lines = [
        total_line("n1", 100, pod="ns/a"),
        total_line("n2", 90, pod="ns/a"),
        total_line("n2", 50, pod="ns/a"),  # n2 again: a new attempt
        total_line("n3", 40, pod="ns/a"),
    ]
    scores = parse_scores(lines)
    assert scores.totals("ns/a") == {"n2": 50, "n3": 40}
    assert scores.best("ns/a") == {"n2"}


def test_quoted_values_with_escapes() -> None:
    line = f'{HEAD}984] "Plugin scored node for pod" pod="a/b" plugin="P" node="n \\"q\\"" score=5'
    assert parse_scores([line]).pods["a/b"]['n "q"'].plugins == {"P": 5}


def test_lines_cut_or_scoreless_are_skipped() -> None:
    lines = [
        f'{HEAD}984] "Plugin scored node for pod" pod="a/b" plugin="P" node="n" score=',
        f'{HEAD}984] "Plugin scored node for pod" pod="a/b" plugin="P" node="n" score=x1',
        f'{HEAD}1047] "Calculated node\'s final score for pod" pod="a/b" node="n"',
    ]
    assert parse_scores(lines).pods == {}


def test_the_reference_log_format_as_written() -> None:
    """Lines as v1.37.2 wrote them in a fidelity run, read from a file object (the runner's way)."""
    text = "\n".join(
        [
            'I1126 02:05:13.447176   20670 schedule_one.go:117] "Attempting to schedule pod" '
            'pod="s1-k0-a/p8"',
            'I1126 02:05:13.447176   20670 schedule_one.go:984] "Plugin scored node for pod" '
            'pod="s1-k0-a/p8" plugin="TaintToleration" node="s1-k0-n3" score=300',
            'I1126 02:05:13.447201   20670 schedule_one.go:1047] "Calculated node\'s final score for pod" '
            'pod="s1-k0-a/p8" node="s1-k0-n3" score=383',
            "I1126 02:05:13.447300   20670 round_trippers.go:1] unrelated",
        ]
    )
    scores = parse_scores(text.splitlines(keepends=True))
    assert scores.pods["s1-k0-a/p8"]["s1-k0-n3"].plugins == {"TaintToleration": 300}
    assert scores.totals("s1-k0-a/p8") == {"s1-k0-n3": 383}
