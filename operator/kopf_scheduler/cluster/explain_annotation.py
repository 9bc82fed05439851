"""The edge of ``run --explain-annotation``: write a failed attempt's summary on the pod.

Best effort, like events: a failed write is logged, never retried and never affects scheduling. An
unchanged summary (the pod failed the same way again) is not written again. Needs ``patch`` on
``pods``, which the least-privilege ClusterRole in manifests/ does not grant (docs/explain.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.diagnosis import FitError
from kopf_scheduler.framework.fit_summary import ANNOTATION, fit_summary

__all__ = ["annotator"]

logger = logging.getLogger(__name__)

Annotator = Callable[[str, Pod, FitError], Coroutine[Any, Any, None]]


def annotator(api: ApiClient) -> Annotator:
    async def annotate(profile: str, pod: Pod, fit: FitError) -> None:
        value = fit_summary(fit, profile)
        if pod.annotations.get(ANNOTATION) == value:
            return
        meta: dict[str, Any] = {"annotations": {ANNOTATION: value}}
        if pod.uid and "/" not in pod.uid:
            meta["uid"] = pod.uid  # a precondition: never annotate a pod recreated under the same name
        path = f"/api/v1/namespaces/{quote(pod.namespace)}/pods/{quote(pod.name)}"
        try:
            await api.request(
                "PATCH", path, body={"metadata": meta}, content_type="application/merge-patch+json"
            )
        except ApiError as exc:
            logger.warning("could not annotate pod %s with its scheduling result: %s", pod.key, exc)

    return annotate
