"""The workbench around kopf-scheduler: what proves and measures the scheduler, not the scheduler.

The local control plane and the playground, the side-by-side benchmarks (``bench``), the
differential run against the reference kube-scheduler (``fidelity``), the invariant checker and the
test kit (``testing``). It reads the repository (``tests/controlplane``, ``crds/``, git worktrees),
so it works from a git checkout only: ``pip install -e .`` makes it importable there (setuptools
puts ``operator/`` on the path), while the wheel and the image carry ``kopf_scheduler`` alone.
It may import anything of the product; the product never imports it (``lint-imports``).
"""
