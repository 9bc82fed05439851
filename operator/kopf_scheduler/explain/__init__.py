"""``explain`` and what-if: why a pod is (not) scheduled, per plugin and per node.

The engine (:mod:`.engine`, :mod:`.obstacles`, :mod:`.whatif`, :mod:`.render`, :mod:`.reflog`) is pure:
it runs the very ``Scheduler``/``Framework`` code paths that schedule, on a snapshot given as
:class:`kopf_scheduler.simulate.Inputs`. Listing a live cluster is the edge's job
(:mod:`kopf_scheduler.cluster.listing`); the commands above both (:mod:`kopf_scheduler.explaintool`,
:mod:`kopf_scheduler.simulatetool`) list it and hand the snapshot in, so nothing here imports the edge.
"""
