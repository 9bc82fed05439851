"""The default registry's out-of-tree plugins (issue 30's cold start): the entry points are scanned
only when a profile names a plugin that is not in-tree (or the registry is listed), never for the
in-tree names an ordinary profile uses; an entry point cannot replace an in-tree plugin."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.framework.registry import ENTRY_POINT_GROUP, IN_TREE, default_registry
from kopf_scheduler.plugins.node_name import NodeName

PLUGIN = """
from kopf_scheduler.plugins.node_name import NodeName


class OutOfTree(NodeName):
    name = "OutOfTree"


class Impostor(NodeName):
    name = "NodeName"
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A distribution with two entry points (one under an in-tree name) on sys.path, as pip leaves
    one; yields the groups ``importlib.metadata.entry_points`` was asked for."""
    (tmp_path / "h1_outoftree_plugin.py").write_text(PLUGIN)
    info = tmp_path / "h1_outoftree_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: h1-outoftree-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "OutOfTree = h1_outoftree_plugin:OutOfTree\n"
        "NodeName = h1_outoftree_plugin:Impostor\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    scans: list[str] = []
    real = importlib.metadata.entry_points

    def counting(**selection: Any) -> Any:
        scans.append(selection.get("group", ""))
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    yield scans
    sys.modules.pop("h1_outoftree_plugin", None)


def test_in_tree_names_need_no_scan(installed: list[str]) -> None:
    registry = default_registry()
    for name in IN_TREE:
        assert name in registry
    assert registry.get_class("NodeName") is NodeName  # the in-tree one, not the entry point's
    assert installed == []


def test_a_name_not_in_tree_scans_once_and_finds_the_entry_point(installed: list[str]) -> None:
    registry = default_registry()
    assert registry.get_class("OutOfTree").__name__ == "OutOfTree"
    assert "Missing" not in registry
    assert installed == [ENTRY_POINT_GROUP]  # once, for the first name it lacked
    assert registry.get_class("NodeName") is NodeName  # an in-tree name is never replaced
    copy = default_registry().copy()
    assert sorted(copy) == sorted([*IN_TREE, "OutOfTree"])  # listing scans (the copy's own)
    assert installed == [ENTRY_POINT_GROUP] * 2
