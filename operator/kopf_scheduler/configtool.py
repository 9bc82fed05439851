"""``kopf-scheduler config``: move between a KubeSchedulerConfiguration file and SchedulerProfiles.

``config import FILE`` turns a kube-scheduler configuration's profiles into SchedulerProfile
resources (YAML on stdout, or one file per profile in ``--output-dir``), so a user who runs
``run --config FILE`` can move its profiles to live resources. The file is read, defaulted and
validated as ``run --config`` reads it (the reference's messages, exit 1); the global
``percentageOfNodesToScore`` and backoffs go into every profile, as the engine applies them.
What a SchedulerProfile cannot hold (leaderElection, clientConnection, parallelism, extenders,
delayCacheUntilActive) is named on stderr: those stay ``run`` flags or the file.

``config export [FILE...]`` goes back: SchedulerProfiles from files, or from the cluster with
``--from-cluster``, become one KubeSchedulerConfiguration (validated as the reference would validate
it) that ``run --config`` or kube-scheduler itself can take. The backoffs, global in the file, must
then agree between profiles; the built-in ``kopf-scheduler`` profile is added when no resource
replaces it, so ``run --config`` serves the same names as before.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kopf_scheduler.config import features
from kopf_scheduler.config import kubescheduler as ks
from kopf_scheduler.config.profile import DEFAULT_SCHEDULER_NAME, ProfileError
from kopf_scheduler.framework.profiles import load_profile, profiles_from_config

__all__ = ["add_arguments", "export_config", "import_profiles", "run"]

API_VERSION = "kopfscheduler.io/v1alpha1"
PROFILES_PATH = "/apis/kopfscheduler.io/v1alpha1/schedulerprofiles"
# What a KubeSchedulerConfiguration holds that a SchedulerProfile does not (and what to use instead).
NOT_IN_A_PROFILE = {
    "leaderElection": "run's --leader-elect* flags take it",
    "clientConnection": "run's --kubeconfig, --kube-api-qps and --kube-api-burst take it",
    "parallelism": "it changes nothing here (the engine filters and scores in one thread)",
    "extenders": "they serve every profile: only run --config takes them",
    "delayCacheUntilActive": "only run --config takes it",
    "enableProfiling": "there is no pprof here",
    "enableContentionProfiling": "there is no pprof here",
}


class ConfigToolError(ValueError):
    pass


def _resource_name(scheduler_name: str, taken: set[str]) -> str:
    """A DNS-1123 subdomain for the resource, from the profile's schedulerName."""
    name = re.sub(r"[^a-z0-9.-]+", "-", scheduler_name.lower()).strip("-.")[:253] or "profile"
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _configuration_text(text: str) -> str:
    """The one KubeSchedulerConfiguration of a file that may hold other documents too."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigToolError(f"yaml: {exc}") from None
    if len(docs) <= 1:
        return text
    configs = [d for d in docs if isinstance(d, Mapping) and d.get("kind") == ks.KIND]
    if len(configs) != 1:
        raise ConfigToolError(f"expected one {ks.KIND} document, found {len(configs)}")
    return yaml.safe_dump(configs[0], sort_keys=False)


def import_profiles(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """SchedulerProfile resources for a KubeSchedulerConfiguration's text, and notes for stderr."""
    text = _configuration_text(text)
    try:
        config = ks.load(text)
        profiles_from_config(config)  # everything run --config would refuse, refused here
    except ks.ConfigError as exc:
        raise ConfigToolError(str(exc)) from None
    data = ks.read_yaml(text) or {}
    notes = [
        f"{key} is not part of a SchedulerProfile: {instead}"
        for key, instead in NOT_IN_A_PROFILE.items()
        if isinstance(data, Mapping) and data.get(key) not in (None, [], {})
    ]
    taken: set[str] = set()
    out = []
    for spec in config.profile_specs():
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "SchedulerProfile",
                "metadata": {"name": _resource_name(spec["schedulerName"], taken)},
                "spec": spec,
            }
        )
    return out, notes


def _whole_seconds(value: Any, field: str, name: str, notes: list[str]) -> int:
    seconds = float(value)
    if seconds != int(seconds):
        notes.append(f"{name}: {field} {seconds:g}s rounded up to whole seconds (the file's unit)")
    return math.ceil(seconds)


def export_config(resources: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """One KubeSchedulerConfiguration from SchedulerProfile resources, and notes for stderr."""
    notes: list[str] = []
    profiles: list[dict[str, Any]] = []
    backoffs: dict[tuple[int, int], list[str]] = {}
    seen: set[str] = set()
    for res in sorted(resources, key=lambda r: str((r.get("metadata") or {}).get("creationTimestamp") or "")):
        name = str((res.get("metadata") or {}).get("name") or "")
        spec = dict(res.get("spec") or {})
        try:
            parsed = load_profile(spec)  # the same checks the controller makes
        except ProfileError as exc:
            raise ConfigToolError(f"SchedulerProfile {name}: spec.{exc}") from None
        if parsed.scheduler_name in seen:  # the older resource serves it (cluster/profiles.py)
            notes.append(
                f"SchedulerProfile {name}: {parsed.scheduler_name!r} is served by an older one; left out"
            )
            continue
        seen.add(parsed.scheduler_name)
        key = (
            _whole_seconds(parsed.pod_initial_backoff_seconds, "podInitialBackoffSeconds", name, notes),
            _whole_seconds(parsed.pod_max_backoff_seconds, "podMaxBackoffSeconds", name, notes),
        )
        backoffs.setdefault(key, []).append(name)
        profile: dict[str, Any] = {"schedulerName": parsed.scheduler_name}
        if spec.get("percentageOfNodesToScore") is not None:
            profile["percentageOfNodesToScore"] = spec["percentageOfNodesToScore"]
        if spec.get("plugins"):
            profile["plugins"] = spec["plugins"]
        if spec.get("pluginConfig"):
            profile["pluginConfig"] = spec["pluginConfig"]
        profiles.append(profile)
    if DEFAULT_SCHEDULER_NAME not in seen:
        profiles.insert(0, {"schedulerName": DEFAULT_SCHEDULER_NAME})
        notes.append(f"added the built-in {DEFAULT_SCHEDULER_NAME!r} profile (no resource replaces it)")
    if len(backoffs) > 1:
        detail = "; ".join(f"{a}s/{b}s: {', '.join(names)}" for (a, b), names in backoffs.items())
        raise ConfigToolError(
            f"the profiles' backoffs differ, and a KubeSchedulerConfiguration has one pair for all: {detail}"
        )
    initial, maximum = next(iter(backoffs)) if backoffs else (1, 10)
    doc: dict[str, Any] = {"apiVersion": ks.API_VERSION, "kind": ks.KIND}
    if (initial, maximum) != (1, 10):
        doc["podInitialBackoffSeconds"], doc["podMaxBackoffSeconds"] = initial, maximum
    doc["profiles"] = profiles
    try:
        profiles_from_config(ks.load_document(doc))
    except ks.ConfigError as exc:  # e.g. queue sort plugins that differ between profiles
        raise ConfigToolError(f"the exported configuration is not valid: {exc}") from None
    return doc, notes


def _resources_from_files(paths: Sequence[str]) -> list[Mapping[str, Any]]:
    out = []
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        for doc in yaml.safe_load_all(text):
            if not isinstance(doc, Mapping):
                continue
            items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
            for item in items or ():
                if isinstance(item, Mapping) and item.get("kind") == "SchedulerProfile":
                    out.append(item)
    return out


async def _resources_from_cluster(kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    from kopf_scheduler.cluster.apiclient import ApiClient
    from kopf_scheduler.cluster.connection import load_credentials

    async with ApiClient(load_credentials(kubeconfig, context)) as api:
        items, _ = await api.list_all(PROFILES_PATH)
    return items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    imp = sub.add_parser("import", help="SchedulerProfiles from a KubeSchedulerConfiguration file")
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--output-dir", "-d", default=None, help="write <name>.yaml files here, not to stdout")
    exp = sub.add_parser("export", help="a KubeSchedulerConfiguration from SchedulerProfiles")
    exp.add_argument("files", nargs="*", metavar="FILE", help="SchedulerProfile YAML ('-' for stdin)")
    exp.add_argument("--from-cluster", action="store_true", help="read the cluster's SchedulerProfiles")
    exp.add_argument("--kubeconfig", default=None)
    exp.add_argument("--context", default=None)
    for p in (imp, exp):
        p.add_argument("--feature-gates", action="append", default=[], help="as run takes them")


def run(args: argparse.Namespace) -> int:
    try:
        gates = features.FeatureGates.parse(args.feature_gates)
    except features.FeatureGateError as exc:
        print(f"kopf-scheduler: {exc}", file=sys.stderr)
        return 1
    with features.using(gates):  # defaulting and validation read them, as in run
        try:
            return _import(args) if args.action == "import" else _export(args)
        except ConfigToolError as exc:
            print(f"kopf-scheduler: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"kopf-scheduler: {exc}", file=sys.stderr)
            return 1


def _import(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    resources, notes = import_profiles(text)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for res in resources:
            path = out / f"{res['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(res, sort_keys=False))
            print(f"wrote {path}", file=sys.stderr)
    else:
        sys.stdout.write(yaml.safe_dump_all(resources, sort_keys=False))
    return 0


def _export(args: argparse.Namespace) -> int:
    if args.from_cluster:
        try:
            resources = [
                *asyncio.run(_resources_from_cluster(args.kubeconfig, args.context)),
                *_resources_from_files(args.files),
            ]
        except ConfigToolError:
            raise
        except Exception as exc:  # credentials, connection, API: one line
            raise ConfigToolError(f"listing SchedulerProfiles failed: {type(exc).__name__}: {exc}") from None
    elif args.files:
        resources = _resources_from_files(args.files)
    else:
        raise ConfigToolError("FILE required (or --from-cluster)")
    doc, notes = export_config(resources)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
    return 0
