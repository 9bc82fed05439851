"""The FailedScheduling message, built like the reference's FitError.Error()."""

from __future__ import annotations

from kopf_scheduler.framework.diagnosis import Diagnosis, FitError, NodeToStatus, truncate_message
from kopf_scheduler.framework.interface import Code, Status


def _diag(statuses: dict[str, Status]) -> Diagnosis:
    d = Diagnosis()
    for name, st in statuses.items():
        d.node_to_status.set(name, st)
        d.add_plugin_status(st)
    return d


def test_histogram_counts_and_sorts_as_strings() -> None:
    d = _diag(
        {
            "a": Status(Code.UNSCHEDULABLE, "Insufficient cpu", plugin="NodeResourcesFit"),
            "b": Status(
                Code.UNSCHEDULABLE, "Insufficient cpu", "Insufficient memory", plugin="NodeResourcesFit"
            ),
            "c": Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                "node(s) had untolerated taint(s)",
                plugin="TaintToleration",
            ),
        }
    )
    assert str(FitError(None, 3, d)) == (
        "0/3 nodes are available: 1 Insufficient memory, "
        "1 node(s) had untolerated taint(s), 2 Insufficient cpu."
    )
    assert d.unschedulable_plugins == {"NodeResourcesFit", "TaintToleration"}


def test_string_sort_puts_10_before_9() -> None:
    d = Diagnosis()
    for i in range(10):
        d.node_to_status.set(f"a{i}", Status(Code.UNSCHEDULABLE, "Insufficient cpu"))
    for i in range(9):
        d.node_to_status.set(f"b{i}", Status(Code.UNSCHEDULABLE, "Insufficient memory"))
    assert (
        str(FitError(None, 19, d)) == "0/19 nodes are available: 10 Insufficient cpu, 9 Insufficient memory."
    )


def test_prefilter_message_replaces_histogram_and_postfilter_is_appended() -> None:
    d = Diagnosis()
    d.pre_filter_msg = "node(s) didn't match pod anti-affinity rules"
    d.node_to_status.set("x", Status(Code.UNSCHEDULABLE, "ignored"))
    d.post_filter_msg = "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    assert str(FitError(None, 2, d)) == (
        "0/2 nodes are available: node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_absent_nodes_status_counts_for_missing_nodes() -> None:
    d = Diagnosis()
    d.node_to_status.set_absent_nodes_status(
        Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) didn't satisfy plugin(s) [NodeAffinity]")
    )
    d.node_to_status.set("n1", Status(Code.UNSCHEDULABLE, "Insufficient cpu"))
    assert str(FitError(None, 4, d)) == (
        "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_lazy_statuses_materialize_on_read() -> None:
    nts = NodeToStatus()
    calls: list[int] = []

    def fill() -> None:
        calls.append(1)
        nts.set("late", Status(Code.UNSCHEDULABLE, "late reason"))

    nts.defer(fill)
    assert not calls
    assert len(nts) == 1 and nts["late"].reasons == ["late reason"]
    assert nts.status_for("other").code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert calls == [1]


def test_pending_plugins_and_empty_plugin_ignored() -> None:
    d = Diagnosis()
    d.add_plugin_status(Status(Code.PENDING, "wait", plugin="P"))
    d.add_plugin_status(Status(Code.UNSCHEDULABLE, "no plugin"))
    assert d.pending_plugins == {"P"} and d.unschedulable_plugins == {"P"}


def test_truncate_message() -> None:
    assert truncate_message("short") == "short"
    long = "x" * 2000
    out = truncate_message(long)
    assert len(out) == 1024 and out.endswith(" ...")


def test_shared_statuses_count_per_node_and_the_message_follows_postfilter() -> None:
    shared = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient cpu")
    diag = Diagnosis()
    for i in range(4):
        diag.node_to_status.set(f"n{i}", shared)
    fit = FitError(None, 5, diag)
    assert str(fit) == "0/5 nodes are available: 4 Insufficient cpu."
    diag.post_filter_msg = "preemption: not helpful"  # set after the first message, as PostFilter does
    assert str(fit) == "0/5 nodes are available: 4 Insufficient cpu. preemption: not helpful"


def test_infos_with_code_answers_without_a_walk_when_no_status_has_it() -> None:
    from kopf_scheduler.framework.types import NodeInfo
    from kopf_scheduler_workbench.testing.builders import make_node

    infos = []
    for i in range(3):
        info = NodeInfo()
        info.set_node(make_node(f"n{i}"))
        infos.append(info)
    statuses = NodeToStatus()
    statuses.set("n0", Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "x"))
    statuses.set("n1", Status(Code.UNSCHEDULABLE, "y"))
    assert [i.name for i in statuses.infos_with_code(Code.UNSCHEDULABLE, infos)] == ["n1"]
    statuses.set("n1", Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "y"))
    assert statuses.infos_with_code(Code.UNSCHEDULABLE, infos) == []
    # n2 is absent: it counts with the absent status's code.
    statuses.set_absent_nodes_status(Status(Code.UNSCHEDULABLE, "z"))
    assert [i.name for i in statuses.infos_with_code(Code.UNSCHEDULABLE, infos)] == ["n2"]
