"""The ``kopf-scheduler`` command: one entry point, one module per subcommand.

Subcommand modules are imported only when chosen, so ``simulate`` never loads Kopf and ``run`` never
loads the benchmark code. Each module offers ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

_COMMANDS = {
    "run": ("kopf_scheduler.cluster.run", "run the scheduler against a cluster (kubeconfig or in-cluster)"),
    "simulate": ("kopf_scheduler.simulate", "offline what-if scheduling of YAML/JSON objects"),
    "explain": ("kopf_scheduler.explain.command", "why a pod is (not) scheduled: per node and plugin, live"),
    "playground": ("kopf_scheduler.cluster.playground", "start a local control plane and schedule a demo"),
    "controlplane": (
        "kopf_scheduler.cluster.controlplane",
        "build, start or inspect the local control plane",
    ),
    "bench": ("kopf_scheduler.bench.runner", "side-by-side benchmarks with the reference kube-scheduler"),
    "config": (
        "kopf_scheduler.configtool",
        "SchedulerProfiles from a KubeSchedulerConfiguration (import) and back (export)",
    ),
    "fidelity": (
        "kopf_scheduler.fidelity.runner",
        "differential run: random scenarios decided by the reference kube-scheduler and ours",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf-scheduler", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = argv[0] if argv and argv[0] in _COMMANDS else None
    for name, (module_name, help_text) in _COMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            sp.set_defaults(_module=module)
    args = parser.parse_args(argv)
    return int(args._module.run(args))


if __name__ == "__main__":
    sys.exit(main())
