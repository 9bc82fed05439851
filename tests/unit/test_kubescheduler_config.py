"""KubeSchedulerConfiguration decoding, defaulting and validation against kube-scheduler v1.37.2.

The tables are the reference's own (apis/config/v1/defaults_test.go, default_plugins_test.go,
apis/config/validation/validation_test.go) ported as data, and data/kubescheduler_config_cases.yaml:
whole files with the message the reference binary printed for each (re-asked of the binary in
tests/integration/test_config_reference.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler.config import features
from kopf_scheduler.config import kubescheduler as ks
from kopf_scheduler.config.gotext import format_duration, parse_duration
from kopf_scheduler.config.profile import ProfileError, parse_profile
from kopf_scheduler.framework.profiles import profiles_from_config

CASES = yaml.safe_load((Path(__file__).parent / "data" / "kubescheduler_config_cases.yaml").read_text())
HEAD = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "clientConnection:\n  kubeconfig: /tmp/fake.kubeconfig\n"
)


def check(text: str) -> str | None:
    """Everything kube-scheduler checks before it runs: decode, default, validate, build frameworks."""
    try:
        profiles_from_config(ks.load(text))
    except ks.ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_files_get_the_references_message(case: dict[str, Any]) -> None:
    assert check(HEAD + case["config"]) == case["message"]


# --- defaults_test.go: TestSchedulerDefaults ------------------------------------------------------

DEFAULT_MULTI_POINT = [
    {"name": "SchedulingGates"},
    {"name": "PrioritySort"},
    {"name": "NodeName"},
    {"name": "NodeUnschedulable"},
    {"name": "TaintToleration", "weight": 3},
    {"name": "NodeAffinity", "weight": 2},
    {"name": "NodePorts"},
    {"name": "NodeResourcesFit", "weight": 1},
    {"name": "VolumeRestrictions"},
    {"name": "NodeVolumeLimits"},
    {"name": "VolumeBinding"},
    {"name": "VolumeZone"},
    {"name": "PodTopologySpread", "weight": 2},
    {"name": "InterPodAffinity", "weight": 2},
    {"name": "DynamicResources", "weight": 2},
    {"name": "DefaultPreemption"},
    {"name": "NodeResourcesBalancedAllocation", "weight": 1},
    {"name": "ImageLocality", "weight": 1},
    {"name": "DefaultBinder"},
    {"name": "NodeDeclaredFeatures"},
]

# pluginConfigs of defaults_test.go: every default plugin with args, by name.
DEFAULT_PLUGIN_CONFIGS = [
    {
        "name": "DefaultPreemption",
        "args": {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100},
    },
    {"name": "DynamicResources", "args": {"filterTimeout": "10s", "bindingTimeout": "10m0s"}},
    {
        "name": "InterPodAffinity",
        "args": {"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": False},
    },
    {"name": "NodeAffinity", "args": {}},
    {
        "name": "NodeResourcesBalancedAllocation",
        "args": {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
    },
    {
        "name": "NodeResourcesFit",
        "args": {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
            }
        },
    },
    {"name": "PodTopologySpread", "args": {"defaultingType": "System"}},
    {
        "name": "VolumeBinding",
        "args": {
            "bindTimeoutSeconds": 600,
            "shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}],
        },
    },
]


def defaulted(body: dict[str, Any]) -> dict[str, Any]:
    return ks.defaulted(ks.decode({"apiVersion": ks.API_VERSION, "kind": ks.KIND, **body}))


def test_empty_config() -> None:
    doc = defaulted({})
    assert doc["parallelism"] == 16
    assert doc["enableProfiling"] is True and doc["enableContentionProfiling"] is True
    assert doc["leaderElection"] == {
        "leaderElect": True,
        "leaseDuration": "15s",
        "renewDeadline": "10s",
        "retryPeriod": "2s",
        "resourceLock": "leases",
        "resourceNamespace": "kube-system",
        "resourceName": "kube-scheduler",
    }
    cc = doc["clientConnection"]
    assert (cc["qps"], cc["burst"], cc["contentType"]) == (50.0, 100, "application/vnd.kubernetes.protobuf")
    assert doc["percentageOfNodesToScore"] == 0
    assert (doc["podInitialBackoffSeconds"], doc["podMaxBackoffSeconds"]) == (1, 10)
    [profile] = doc["profiles"]
    assert profile["schedulerName"] == "default-scheduler"
    assert profile["plugins"] == {"multiPoint": {"enabled": DEFAULT_MULTI_POINT}}
    assert sorted(profile["pluginConfig"], key=lambda c: c["name"]) == DEFAULT_PLUGIN_CONFIGS


def test_no_scheduler_name_and_two_profiles() -> None:
    assert defaulted({"profiles": [{}]})["profiles"][0]["schedulerName"] == "default-scheduler"
    doc = defaulted(
        {
            "parallelism": 16,
            "profiles": [
                {"pluginConfig": [{"name": "FooPlugin"}]},
                {
                    "schedulerName": "custom-scheduler",
                    "plugins": {
                        "bind": {"enabled": [{"name": "BarPlugin"}], "disabled": [{"name": "DefaultBinder"}]}
                    },
                },
            ],
        }
    )
    first, second = doc["profiles"]
    # Only a single profile gets the default name; validation then asks for one.
    assert first.get("schedulerName") is None
    assert first["pluginConfig"][0] == {"name": "FooPlugin"}  # unknown plugin config kept as is
    assert [c["name"] for c in first["pluginConfig"][1:]] == [c["name"] for c in DEFAULT_PLUGIN_CONFIGS]
    assert second["plugins"]["bind"] == {
        "enabled": [{"name": "BarPlugin"}],
        "disabled": [{"name": "DefaultBinder"}],
    }
    assert second["plugins"]["multiPoint"] == {"enabled": DEFAULT_MULTI_POINT}
    assert "BarPlugin" not in {c["name"] for c in second["pluginConfig"]}  # no registered args kind


def test_non_default_values_are_kept() -> None:
    doc = defaulted(
        {
            "parallelism": 8,
            "delayCacheUntilActive": True,
            "percentageOfNodesToScore": 50,
            "profiles": [{"percentageOfNodesToScore": 60}],
        }
    )
    assert (doc["parallelism"], doc["delayCacheUntilActive"], doc["percentageOfNodesToScore"]) == (
        8,
        True,
        50,
    )
    assert doc["profiles"][0]["percentageOfNodesToScore"] == 60
    config = ks.load_document({"apiVersion": ks.API_VERSION, "kind": ks.KIND, "percentageOfNodesToScore": 50})
    # The engine's profile takes the global value where the profile sets none.
    assert config.profile_specs()[0]["percentageOfNodesToScore"] == 50


# --- defaults_test.go: TestPluginArgsDefaults ----------------------------------------------------

ARGS_DEFAULTS = [
    ("DefaultPreemption", {}, {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}),
    (
        "DefaultPreemption",
        {"minCandidateNodesPercentage": 50},
        {"minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 100},
    ),
    ("InterPodAffinity", {}, {"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": False}),
    (
        "InterPodAffinity",
        {"hardPodAffinityWeight": 0},
        {"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": False},
    ),
    (
        "NodeResourcesBalancedAllocation",
        {},
        {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
    ),
    (
        "NodeResourcesBalancedAllocation",
        {
            "resources": [
                {"name": "cpu"},
                {"name": "scalar.io/scalar0"},
                {"name": "scalar.io/scalar1", "weight": 1},
            ]
        },
        {
            "resources": [
                {"name": "cpu", "weight": 1},
                {"name": "scalar.io/scalar0", "weight": 1},
                {"name": "scalar.io/scalar1", "weight": 1},
            ]
        },
    ),
    ("PodTopologySpread", {}, {"defaultingType": "System"}),
    (
        "NodeResourcesFit",
        {},
        {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
            }
        },
    ),
    (
        "NodeResourcesFit",
        {"scoringStrategy": {"type": "MostAllocated"}},
        {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
            }
        },
    ),
    (
        "VolumeBinding",
        {},
        {
            "bindTimeoutSeconds": 600,
            "shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}],
        },
    ),
    ("DynamicResources", {}, {"filterTimeout": "10s", "bindingTimeout": "10m0s"}),
]


@pytest.mark.parametrize(("name", "given", "want"), ARGS_DEFAULTS)
def test_plugin_args_defaults(name: str, given: dict[str, Any], want: dict[str, Any]) -> None:
    assert ks.default_args(name, given) == want


# --- default_plugins_test.go: TestApplyFeatureGates and TestMergePlugins -------------------------


def test_generic_workload_appends_gang_scheduling_to_the_default_plugins() -> None:
    off = [p["name"] for p in ks.default_plugins(features.FeatureGates())["multiPoint"]["enabled"]]
    on = [
        p["name"]
        for p in ks.default_plugins(features.FeatureGates({"GenericWorkload": True}))["multiPoint"]["enabled"]
    ]
    assert on == [*off, "GangScheduling"]
    assert off.index("DynamicResources") == off.index("DefaultPreemption") - 1
    assert off[-1] == "NodeDeclaredFeatures"


def merged(custom: dict[str, Any]) -> dict[str, Any]:
    return ks.merge_plugins(custom, features.FeatureGates())


def names(pset: dict[str, Any]) -> list[str]:
    return [p["name"] for p in pset.get("enabled") or []]


def test_merge_append_insert_and_reorder() -> None:
    # AppendCustomPlugin: a custom plugin goes after the defaults of its point.
    assert names(merged({"filter": {"enabled": [{"name": "Custom"}]}})["filter"]) == ["Custom"]
    # InsertBeforeAllPlugins / ReorderDefaultPlugins: "*" disables the defaults, the custom order holds.
    out = merged(
        {
            "multiPoint": {
                "enabled": [{"name": "ImageLocality"}, {"name": "Custom"}],
                "disabled": [{"name": "*"}],
            }
        }
    )
    assert names(out["multiPoint"]) == ["ImageLocality", "Custom"]
    # CustomPluginOverrideDefaultPlugin / OrderPreserveAfterOverride: replaced in place.
    out = merged({"multiPoint": {"enabled": [{"name": "Custom"}, {"name": "TaintToleration", "weight": 7}]}})
    mp = out["multiPoint"]["enabled"]
    assert mp[4] == {"name": "TaintToleration", "weight": 7} and mp[-1] == {"name": "Custom"}
    # RepeatedCustomPlugin: duplicates are kept for the framework to refuse.
    out = merged({"filter": {"enabled": [{"name": "Custom"}, {"name": "Custom"}]}})
    assert names(out["filter"]) == ["Custom", "Custom"]
    # disabled MultiPoint plugin in default set.
    out = merged({"multiPoint": {"disabled": [{"name": "DefaultBinder"}]}})
    assert "DefaultBinder" not in names(out["multiPoint"])
    assert out["multiPoint"]["disabled"] == [{"name": "DefaultBinder"}]


# --- validation_test.go: TestValidateKubeSchedulerConfigurationV1 --------------------------------

VALID = {
    "apiVersion": ks.API_VERSION,
    "kind": ks.KIND,
    "parallelism": 8,
    "clientConnection": {
        "acceptContentTypes": "application/json",
        "contentType": "application/json",
        "qps": 10,
        "burst": 10,
    },
    "leaderElection": {
        "resourceLock": "leases",
        "leaderElect": True,
        "leaseDuration": "30s",
        "renewDeadline": "15s",
        "retryPeriod": "5s",
        "resourceNamespace": "name",
        "resourceName": "name",
    },
    "podInitialBackoffSeconds": 1,
    "podMaxBackoffSeconds": 1,
    "profiles": [
        {
            "schedulerName": "me",
            "percentageOfNodesToScore": 35,
            "plugins": {
                "queueSort": {"enabled": [{"name": "CustomSort"}]},
                "score": {"disabled": [{"name": "*"}]},
            },
            "pluginConfig": [
                {
                    "name": "DefaultPreemption",
                    "args": {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100},
                }
            ],
        },
        {
            "schedulerName": "other",
            "percentageOfNodesToScore": 35,
            "plugins": {
                "queueSort": {"enabled": [{"name": "CustomSort"}]},
                "bind": {"enabled": [{"name": "CustomBind"}]},
            },
        },
    ],
    "extenders": [{"prioritizeVerb": "prioritize", "weight": 1}],
}


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        doc = doc[int(key)] if key.isdigit() else doc[key]  # type: ignore[index]
    last = keys[-1]
    if value is ...:
        del doc[last]
    else:
        doc[int(last) if last.isdigit() else last] = value  # type: ignore[index]


# (scenario, mutations of the defaulted valid config, wanted (kind, field) of each error)
SCENARIOS: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("good", {}, []),
    ("bad-parallelism-invalid-value", {"parallelism": 0}, [("Invalid", "parallelism")]),
    (
        "bad-resource-name-not-set",
        {"leaderElection.resourceName": ""},
        [("Required", "leaderElection.resourceName")],
    ),
    (
        "bad-resource-namespace-not-set",
        {"leaderElection.resourceNamespace": ""},
        [("Required", "leaderElection.resourceNamespace")],
    ),
    (
        "bad-resource-lock-not-leases",
        {"leaderElection.resourceLock": "configmap"},
        [("Invalid", "leaderElection.resourceLock")],
    ),
    (
        "bad-percentage-of-nodes-to-score",
        {"percentageOfNodesToScore": 101},
        [("Invalid", "percentageOfNodesToScore")],
    ),
    (
        "negative-percentage-of-nodes-to-score",
        {"percentageOfNodesToScore": -1},
        [("Invalid", "percentageOfNodesToScore")],
    ),
    ("scheduler-name-not-set", {"profiles.1.schedulerName": ""}, [("Required", "profiles[1].schedulerName")]),
    (
        "repeated-scheduler-name",
        {"profiles.0.schedulerName": "other"},
        [("Duplicate", "profiles[1].schedulerName")],
    ),
    (
        "greater-than-100-profile-percentage-of-nodes-to-score",
        {"profiles.1.percentageOfNodesToScore": 101},
        [("Invalid", "profiles[1].percentageOfNodesToScore")],
    ),
    (
        "negative-profile-percentage-of-nodes-to-score",
        {"profiles.1.percentageOfNodesToScore": -1},
        [("Invalid", "profiles[1].percentageOfNodesToScore")],
    ),
    (
        "different-queue-sort",
        {"profiles.1.plugins.queueSort.enabled.0.name": "AnotherSort"},
        [("Invalid", "profiles[1].plugins.queueSort")],
    ),
    (
        "one-empty-queue-sort",
        {"profiles.0.plugins.queueSort": {}},
        [("Invalid", "profiles[1].plugins.queueSort")],
    ),
    ("extender-negative-weight", {"extenders.0.weight": -1}, [("Invalid", "extenders[0].weight")]),
    (
        "extender-duplicate-managed-resources",
        {"extenders.0.managedResources": [{"name": "example.com/foo"}, {"name": "example.com/foo"}]},
        [("Invalid", "extenders[0].managedResources[1].name")],
    ),
    (
        "extender-duplicate-bind",
        {
            "extenders.0.bindVerb": "foo",
            "extenders.1": {"prioritizeVerb": "prioritize", "bindVerb": "bar", "weight": 1},
        },
        [("Invalid", "extenders")],
    ),
    (
        "invalid-node-percentage",
        {
            "profiles.0.pluginConfig": [
                {
                    "name": "DefaultPreemption",
                    "args": {"minCandidateNodesPercentage": 200, "minCandidateNodesAbsolute": 100},
                }
            ]
        },
        [("Invalid", "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage")],
    ),
    (
        "duplicated-plugin-config",
        {"profiles.0.pluginConfig": [{"name": "config"}, {"name": "config"}]},
        [("Duplicate", "profiles[0].pluginConfig[1]")],
    ),
    (
        "mismatch-queue-sort",
        {
            "profiles": [
                {
                    "schedulerName": "me",
                    "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
                    "pluginConfig": [{"name": "PrioritySort"}],
                },
                {
                    "schedulerName": "other",
                    "plugins": {"queueSort": {"enabled": [{"name": "CustomSort"}]}},
                    "pluginConfig": [{"name": "CustomSort"}],
                },
            ]
        },
        [("Invalid", "profiles[1].plugins.queueSort")],
    ),
    (
        "invalid-plugins",
        {
            "profiles.0.plugins.score.enabled": [
                {"name": "AzureDiskLimits"},
                {"name": "CinderLimits"},
                {"name": "EBSLimits"},
                {"name": "GCEPDLimits"},
            ]
        },
        [("Invalid", f"profiles[0].plugins.score.enabled[{i}]") for i in range(4)],
    ),
    ("valid-plugins", {"profiles.0.plugins.score.enabled": [{"name": "PodTopologySpread", "weight": 2}]}, []),
]


@pytest.mark.parametrize(("mutations", "want"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_validation_scenarios(mutations: dict[str, Any], want: list[tuple[str, str]]) -> None:
    doc = ks.defaulted(ks.decode(copy.deepcopy(VALID)))
    for path, value in mutations.items():
        if path == "extenders.1":
            doc["extenders"].append(value)
        else:
            _set(doc, path, value)
    assert [(e.kind, e.path) for e in ks.validation_errors(doc)] == want


# --- the engine's profiles -------------------------------------------------------------------------


def test_a_files_profiles_become_engine_profiles_with_their_settings() -> None:
    config = ks.load(
        HEAD
        + """
percentageOfNodesToScore: 20
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 30
profiles:
- schedulerName: packer
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 3}]
    score:
      disabled: [{name: ImageLocality}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy: {type: MostAllocated}
- schedulerName: spreader
  percentageOfNodesToScore: 70
"""
    )
    packer, spreader = profiles_from_config(config)
    assert (packer.scheduler_name, spreader.scheduler_name) == ("packer", "spreader")
    assert (packer.percentage_of_nodes_to_score, spreader.percentage_of_nodes_to_score) == (20, 70)
    assert (packer.pod_initial_backoff_seconds, packer.pod_max_backoff_seconds) == (2, 30)
    assert packer.resolved is not None and spreader.resolved is not None
    assert packer.resolved.weights["NodeResourcesFit"] == 3
    assert "ImageLocality" not in packer.resolved.points["score"]
    assert "ImageLocality" in spreader.resolved.points["score"]
    assert packer.resolved.args["NodeResourcesFit"].scoring_strategy.type == "MostAllocated"


def test_a_profile_resource_may_carry_type_meta_in_its_args() -> None:
    args = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeResourcesFitArgs"}
    profile = parse_profile(
        {"schedulerName": "x", "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}
    )
    assert profile.plugin_config[0].args == {}
    with pytest.raises(ProfileError) as exc:
        parse_profile(
            {
                "schedulerName": "x",
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {**args, "kind": "InterPodAffinityArgs"}}
                ],
            }
        )
    group = "kubescheduler.config.k8s.io"
    assert exc.value.errors == [
        (
            "pluginConfig[0].args",
            f"args for plugin NodeResourcesFit were not of type NodeResourcesFitArgs.{group}, "
            f"got InterPodAffinityArgs.{group}",
        )
    ]


# --- Go's spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ns", "shown"),
    [
        ("15s", 15 * 10**9, "15s"),
        ("600s", 600 * 10**9, "10m0s"),
        ("1h", 3600 * 10**9, "1h0m0s"),
        ("1m30s", 90 * 10**9, "1m30s"),
        ("1.5s", 1_500_000_000, "1.5s"),
        ("500ms", 500_000_000, "500ms"),
        ("-1s", -(10**9), "-1s"),
        ("0", 0, "0s"),
    ],
)
def test_durations_as_go(text: str, ns: int, shown: str) -> None:
    assert parse_duration(text) == ns and format_duration(ns) == shown


def test_feature_gate_messages_are_the_references() -> None:
    cases = {
        "Foo=true": "unrecognized feature gate: Foo",
        "GenericWorkload=maybe": "invalid value of GenericWorkload=maybe, err: "
        'strconv.ParseBool: parsing "maybe": invalid syntax',
        "NodeDeclaredFeatures=false": "cannot set feature gate NodeDeclaredFeatures to false, "
        "feature is locked to true",
        "DRAWorkloadResourceClaims=true": "DRAWorkloadResourceClaims is enabled, "
        "but depends on features that are disabled: [GenericWorkload]",
        "GenericWorkload": "missing bool value for GenericWorkload",
    }
    for flag, message in cases.items():
        with pytest.raises(features.FeatureGateError) as exc:
            features.FeatureGates.parse(flag)
        assert str(exc.value) == message, flag
    gates = features.FeatureGates.parse(["kube:GenericWorkload=true", "OpportunisticBatching=false"])
    assert gates.enabled("GenericWorkload") and not gates.enabled("OpportunisticBatching")
    assert gates.to_flag() == "GenericWorkload=true,OpportunisticBatching=false"
