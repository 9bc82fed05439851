"""Differential fidelity runs: the reference kube-scheduler and ours decide the same pods.

``generator`` makes seeded random scenarios as plain API dicts, ``compare`` judges one decision and
tallies the rates, ``runner`` drives one real control plane with both schedulers (``kopf-scheduler
fidelity``) and reads the reference's per-node scores from its ``-v=10`` log with the product's one
reader of it (``kopf_scheduler.explain.reflog``).
"""
