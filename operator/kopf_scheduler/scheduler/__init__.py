"""The scheduler (the reference's ``pkg/scheduler``): a pod's cycle in :mod:`.schedule_one`, a pod
group's in :mod:`.schedule_one_podgroup`, the profiles it serves in :mod:`.profiles`; the
``Scheduler`` of ``schedule_one`` is the one front door (``engine.new_engine`` builds it)."""
