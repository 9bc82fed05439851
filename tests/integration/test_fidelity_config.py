"""The fidelity runner's --config mode: the reference and ours started with the same non-default
KubeSchedulerConfiguration (tests/examples/kubescheduler-config.yaml) decide the same pods.

Each profile of the file in turn (the reference serving it as default-scheduler, ours as
kopf-scheduler, both from their copy of the file): RequestedToCapacityRatio with a shape, changed
weights and scorers off; MostAllocated with the filters re-ordered (the first filter to reject a node
names it in the message) and a scorer off; a percentageOfNodesToScore of 10. The rates asserted are
the default profile's (test_fidelity.py): 100 % but placements >= 99.5 %.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.fidelity.runner import FidelityRun, run_fidelity

from .test_fidelity import REQUIRED, _explain

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "kubescheduler-config.yaml"


@pytest.mark.parametrize("profile", ["packer", "reordered"])
def test_both_schedulers_with_the_same_file_agree_pod_by_pod(profile: str, tmp_path: Path) -> None:
    opts = FidelityRun(
        seeds=[1],
        scenarios=8,
        out=tmp_path / "report.json",
        logs=tmp_path / "logs",
        config=CONFIG,
        config_profile=profile,
    )
    result: dict[str, Any] = run_fidelity(opts)
    assert result["config"] == str(CONFIG)
    assert result["decisions"] >= 20 and result["errors"] == [], result["errors"]
    assert "profiles kopf-scheduler" in (tmp_path / "logs" / "ours.log").read_text()  # ours ran --config
    for mode in ("live", "simulate"):
        rates = result["rates"][mode]
        short = {
            c: rates[c]["rate"]
            for c, floor in REQUIRED.items()
            if rates[c]["total"] and rates[c]["rate"] < floor
        }
        assert not short, f"{profile} {mode} below target: {short}\n{_explain(result)}"
        assert rates["placement"]["total"] > 0
