"""``kopf-scheduler run``'s flags and ``--config`` file combined as kube-scheduler combines them.

kube-scheduler's precedence (``cmd/kube-scheduler/app/options``): without ``--config`` its defaults
plus the (deprecated) connection flags ``--kubeconfig``, ``--kube-api-qps``, ``--kube-api-burst``,
``--kube-api-content-type``; with ``--config`` the file alone, those flags ignored, and only the
``--leader-elect*`` flags given on the command line override the file's ``leaderElection``.
``--feature-gates`` is a flag only. The result is validated as the reference validates it, and its
messages are the reference's (:mod:`kopf_scheduler.config.kubescheduler`).

What maps onto what here:

- ``leaderElection``: ``leaderElect: false`` runs standalone; ``leaseDuration``/``renewDeadline``/
  ``retryPeriod`` are the peering lifetime, renew deadline and retry period (cluster/leader.py);
  ``resourceName``, when given, names the peering object (else ``--peering``, ``kopf-scheduler``:
  the default ``kube-scheduler`` would name the reference's own lock); ``resourceNamespace`` is
  accepted, the peering object being cluster-scoped; ``resourceLock`` must be ``leases``;
- ``clientConnection``: ``kubeconfig`` is the kubeconfig, ``qps``/``burst`` client-go's token bucket
  (cluster/ratelimit.py); ``contentType`` is accepted but requests are JSON (said when protobuf is
  asked for explicitly); ``acceptContentTypes`` is accepted;
- ``profiles``, ``percentageOfNodesToScore``, the backoffs: the engine's profiles;
  SchedulerProfile resources stay the live layer on top (cluster/profiles.py);
- ``parallelism``: accepted and validated; the engine filters and scores in one thread, so it
  changes nothing (binding concurrency is ``--parallel-binds``);
- ``delayCacheUntilActive``: the informers start only once this replica leads;
- ``enableProfiling``/``enableContentionProfiling``: accepted; there is no pprof here;
- ``extenders``: HTTP extenders (cluster/extender.py), asked by every profile as in the reference;
  their ``ignoredByScheduler`` resources replace NodeResourcesFit's ``ignoredResources``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopf_scheduler.config import features, kubescheduler
from kopf_scheduler.config.gotext import format_duration
from kopf_scheduler.config.kubescheduler import ConfigError, KubeSchedulerConfiguration
from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME, SchedulerProfileSpec
from kopf_scheduler.framework.profiles import profiles_from_config

if TYPE_CHECKING:  # imported only when the file configures extenders: aiohttp is not on the way otherwise
    from kopf_scheduler.cluster.extender import HTTPExtender

__all__ = ["RunConfig", "RunConfigError", "resolve"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_CONNECTION_FLAGS = (
    ("kubeconfig", "--kubeconfig"),
    ("kube_api_qps", "--kube-api-qps"),
    ("kube_api_burst", "--kube-api-burst"),
    ("kube_api_content_type", "--kube-api-content-type"),
)


class RunConfigError(ValueError):
    """The command line or the file cannot run; the message is the reference's where it has one."""


@dataclass
class RunConfig:
    """What ``run`` starts with: operator.Options fields, the credentials' source, the gates."""

    config: KubeSchedulerConfiguration
    gates: features.FeatureGates
    kubeconfig: str | None
    options: dict[str, Any]
    profiles: list[SchedulerProfileSpec] | None  # None: the built-in kopf-scheduler default
    warnings: list[str] = field(default_factory=list)


def _leader_election_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The --leader-elect* flags given, as v1 leaderElection fields (ApplyLeaderElectionTo)."""
    out: dict[str, Any] = {}
    flags = vars(args)  # run's parser gives every flag a default (None: not given)
    if args.leader_elect is not None:
        out["leaderElect"] = bool(args.leader_elect)
    for dest, key in (
        ("peering_lifetime", "leaseDuration"),
        ("renew_deadline", "renewDeadline"),
        ("retry_period", "retryPeriod"),
    ):
        value = flags[dest]
        if value is not None:
            out[key] = format_duration(round(value * 1e9))
    for dest, key in (
        ("leader_elect_resource_name", "resourceName"),
        ("leader_elect_resource_namespace", "resourceNamespace"),
        ("leader_elect_resource_lock", "resourceLock"),
    ):
        value = flags[dest]
        if value:
            out[key] = value
    return out


def _extenders(config: KubeSchedulerConfiguration) -> list[HTTPExtender]:
    """``buildExtenders``: the HTTP extenders, or the reference's error. Resources they mark
    ``ignoredByScheduler`` need NodeResourcesFit's args in every profile of the file (its
    ``can't find NodeResourcesFitArgs in plugin config`` otherwise)."""
    try:
        configs = config.extender_configs()
    except ConfigError as exc:
        raise RunConfigError(str(exc)) from None
    if not configs:
        return []
    from kopf_scheduler.cluster.extender import ExtenderBuildError, build_extenders

    try:
        extenders = build_extenders(configs)
    except (ConfigError, ExtenderBuildError) as exc:
        raise RunConfigError(str(exc)) from None
    if config.extender_ignored_resources():
        for profile in config.document["profiles"]:
            if not any(pc.get("name") == "NodeResourcesFit" for pc in profile.get("pluginConfig") or ()):
                msg = "couldn't build extenders: can't find NodeResourcesFitArgs in plugin config"
                raise RunConfigError(msg)
    return extenders


def resolve(args: argparse.Namespace) -> RunConfig:
    """Flags and file into what ``run`` needs; RunConfigError with the reference's message if invalid."""
    # ``args`` from run's parser (cluster/run.py), which gives every flag a default.
    texts = list(args.feature_gates)
    if args.opportunistic_batching is False:
        texts.insert(0, "OpportunisticBatching=false")  # the older flag, an alias
    try:
        gates = features.FeatureGates.parse(texts)
    except features.FeatureGateError as exc:
        raise RunConfigError(str(exc)) from None
    warnings = gates.warnings()
    le_flags = _leader_election_flags(args)
    given = {dest: vars(args)[dest] for dest, _ in _CONNECTION_FLAGS}
    with features.using(gates):  # defaulting and validation read the gates, as the reference's do
        if args.config:
            path = Path(args.config)
            try:
                text = path.read_text()
            except FileNotFoundError:
                raise RunConfigError(f"open {args.config}: no such file or directory") from None
            except OSError as exc:
                raise RunConfigError(f"open {args.config}: {exc.strerror or exc}") from None
            try:
                data = kubescheduler.read_yaml(text)
                config = kubescheduler.load_document(data, text=text, leader_election=le_flags)
                profiles: list[SchedulerProfileSpec] | None = profiles_from_config(config)
            except ConfigError as exc:
                raise RunConfigError(str(exc)) from None
            for dest, flag in _CONNECTION_FLAGS:
                if given[dest] is not None:
                    warnings.append(f"{flag} is ignored: --config gives a file (as in kube-scheduler)")
            written_le = (data.get("leaderElection") or {}) if isinstance(data, dict) else {}
            written_cc = (data.get("clientConnection") or {}) if isinstance(data, dict) else {}
            cc = config.client_connection
            kubeconfig = cc.kubeconfig or os.environ.get("KOPF_SCHEDULER_KUBECONFIG") or None
            qps: float | None = cc.qps
            burst: int | None = cc.burst
            content_type = str(written_cc.get("contentType") or "")
            resource_name_given = bool(written_le.get("resourceName") or le_flags.get("resourceName"))
        else:
            connection: dict[str, Any] = {}
            throttled = given["kube_api_qps"] is not None or given["kube_api_burst"] is not None
            if throttled:
                connection["qps"] = given["kube_api_qps"] or 50.0
                connection["burst"] = given["kube_api_burst"] or 100
            doc = {
                "apiVersion": kubescheduler.API_VERSION,
                "kind": kubescheduler.KIND,
                "profiles": [{"schedulerName": DEFAULT_SCHEDULER_NAME}],
                "clientConnection": connection,
            }
            try:
                config = kubescheduler.load_document(doc, leader_election=le_flags)
            except ConfigError as exc:
                raise RunConfigError(str(exc)) from None
            profiles = None
            kubeconfig = given["kubeconfig"] or os.environ.get("KOPF_SCHEDULER_KUBECONFIG") or None
            qps = config.client_connection.qps if throttled else None
            burst = config.client_connection.burst if throttled else None
            content_type = str(given["kube_api_content_type"] or "")
            resource_name_given = bool(le_flags.get("resourceName"))
    extenders = _extenders(config)
    if content_type and content_type != "application/json":
        warnings.append(f"contentType {content_type} is accepted, but kopf-scheduler talks JSON only")
    le = config.leader_election
    if le_flags.get("resourceNamespace") or (args.config and le.resource_namespace != "kube-system"):
        warnings.append(
            f"leaderElection.resourceNamespace {le.resource_namespace} is accepted, but the peering "
            "object kopf-scheduler elects on is cluster-scoped"
        )
    options: dict[str, Any] = {
        "standalone": bool(args.standalone) or not le.leader_elect,
        "peering": le.resource_name if resource_name_given else args.peering,
        "peering_lifetime": le.lease_duration,
        "renew_deadline": le.renew_deadline,
        "retry_period": le.retry_period,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "opportunistic_batching": gates.enabled("OpportunisticBatching"),
        "delay_cache_until_active": config.delay_cache_until_active,
        "feature_gates": gates.to_flag(),
        "profiles": tuple(profiles) if profiles is not None else None,
        "extenders": tuple(extenders),
    }
    return RunConfig(config, gates, kubeconfig, options, profiles, warnings)
