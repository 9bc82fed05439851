"""The ``kopf-scheduler`` command: one entry point, one module per subcommand.

Subcommand modules are imported only when chosen, so ``simulate`` never loads Kopf and ``run`` never
loads the workbench (bench, fidelity, the control plane: a second package, absent from the wheel).
Each module offers ``add_arguments(parser)`` and ``run(args) -> int``.

Installed as ``kopf-scheduler`` and as ``kubectl-kopf_scheduler``, which kubectl's plugin discovery
runs for ``kubectl kopf-scheduler ...`` (plugins/kopf-scheduler.yaml is its krew manifest).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from kopf_scheduler import __version__

__all__ = ["kubectl_plugin", "main"]

_COMMANDS = {
    "run": ("kopf_scheduler.cluster.run", "run the scheduler against a cluster (kubeconfig or in-cluster)"),
    "simulate": ("kopf_scheduler.simulatetool", "offline what-if scheduling of YAML/JSON objects"),
    "explain": ("kopf_scheduler.explaintool", "why a pod is (not) scheduled: per node and plugin, live"),
    "playground": ("kopf_scheduler_workbench.playground", "start a local control plane and schedule a demo"),
    "controlplane": (
        "kopf_scheduler_workbench.controlplane",
        "build, start or inspect the local control plane",
    ),
    "bench": (
        "kopf_scheduler_workbench.bench.runner",
        "side-by-side benchmarks with the reference kube-scheduler",
    ),
    "config": (
        "kopf_scheduler.configtool",
        "SchedulerProfiles from a KubeSchedulerConfiguration (import) and back (export)",
    ),
    "fidelity": (
        "kopf_scheduler_workbench.fidelity.runner",
        "differential run: random scenarios decided by the reference kube-scheduler and ours",
    ),
}


# The workbench (a second package, kopf_scheduler_workbench, beside this one in a checkout): these
# build the control plane from tests/controlplane and read the repository (crds/, tests/, git
# worktrees). ``pip install -e .`` makes it importable; the wheel and the image leave it out, and
# there these commands say so in one line instead of failing somewhere inside.
_WORKBENCH = "kopf_scheduler_workbench"


def _has_workbench() -> bool:
    return importlib.util.find_spec(_WORKBENCH) is not None


# Why: numpy's OpenBLAS starts a thread a core when numpy is imported, and those threads spin for
# work they never get (the engine does vector arithmetic, never BLAS): ~100 ms of CPU on the other
# core at every start, taken from the apiserver serializing the first listings (2 cores here).
# Set before any subcommand imports numpy; an operator's own setting is kept.
_SINGLE_THREADED_BLAS = ("OPENBLAS_NUM_THREADS", "1")


def main(argv: Sequence[str] | None = None, *, prog: str = "kopf-scheduler") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kopf-scheduler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault(*_SINGLE_THREADED_BLAS)
    chosen = argv[0] if argv and argv[0] in _COMMANDS else None
    if chosen and _COMMANDS[chosen][0].startswith(f"{_WORKBENCH}.") and not _has_workbench():
        print(
            f"{prog} {chosen}: works from a git checkout of kopf-scheduler only (pip install -e . "
            "there); this installation has run, simulate, explain and config",
            file=sys.stderr,
        )
        return 1
    for name, (module_name, help_text) in _COMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            sp.set_defaults(_module=module)
    args = parser.parse_args(argv)
    return int(args._module.run(args))


def kubectl_plugin() -> int:
    """``kubectl-kopf_scheduler``: kubectl runs it for ``kubectl kopf-scheduler ARGS``, passing ARGS
    (and its environment: ``$KUBECONFIG``, so the same cluster kubectl talks to)."""
    return main(prog="kubectl kopf-scheduler")


if __name__ == "__main__":
    sys.exit(main())
