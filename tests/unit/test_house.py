"""The house drawn from the imports (kopf_scheduler_workbench/house.py): no circle, no arrow back up,
and docs/design.md shows the house the code has."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from kopf_scheduler_workbench import house

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("type_checking", [False, True], ids=["runtime", "with-type-checking"])
def test_no_circle_and_no_arrow_back_up(type_checking: bool) -> None:
    surveyed = house.survey(type_checking=type_checking)
    assert not surveyed.circles, house.draw(surveyed)
    assert not surveyed.back_up, house.draw(surveyed)
    # The offline rooms import neither the edge nor the workbench, with no exception.
    outside = ("kopf_scheduler.cluster", "kopf_scheduler_workbench")
    for offline in ("kopf_scheduler.simulate", "kopf_scheduler.explain", "kopf_scheduler.simulatetool"):
        assert not [r for r in surveyed.arrows[offline] if r.startswith(outside)], offline


def test_design_doc_draws_this_house() -> None:
    doc = (ROOT / "docs" / "design.md").read_text()
    begin, end = "<!-- house: python -m kopf_scheduler_workbench.house -->\n```\n", "```\n<!-- /house -->"
    assert begin in doc and end in doc
    drawn = doc.split(begin, 1)[1].split(end, 1)[0].strip()
    assert drawn == house.draw(house.survey()).strip()


def test_a_planted_circle_and_arrow_back_up_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The survey can fail: a tiny tree with a circle (a <-> b) and an import against its layers."""
    pkg = tmp_path / "planted"
    for name, body in {
        "__init__.py": "",
        "a.py": "import planted.b\n",
        "b.py": "import planted.a\n",
        "low.py": "import planted.top\n",
        "top.py": "",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(body)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(textwrap.dedent("""
        [[tool.importlinter.contracts]]
        name = "The house: planted"
        type = "layers"
        layers = ["planted.top", "planted.low"]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("planted", None)
    surveyed = house.survey(pyproject=pyproject, packages=["planted"])
    assert surveyed.circles == (("planted.a", "planted.b"),)
    assert surveyed.back_up == (("planted.low", "planted.top"),)
    drawn = house.draw(surveyed)
    assert "1 running back up, 1 circles" in drawn and "circle (*): planted.a <-> planted.b" in drawn
