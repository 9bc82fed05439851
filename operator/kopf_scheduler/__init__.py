"""kopf-scheduler: kube-scheduler's behaviour on the Kopf operator framework.

The engine (``api``, ``framework``, ``queue``, ``cache``, ``plugins``, ``scheduler``) is pure
Python with no Kubernetes I/O; ``cluster`` is the Kopf and API-client edge.
"""

__version__ = "0.1.0"
