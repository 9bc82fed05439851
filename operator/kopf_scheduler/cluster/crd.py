"""The SchedulerProfile CRD, generated from the engine's pydantic profile models.

The CRD's structural schema is derived from ``config.profile.profile_json_schema()`` so the
apiserver and the engine never disagree on the shape of a profile (``tests/unit/test_crd.py``
fails when ``crds/`` is stale). Regenerate with::

    python -m kopf_scheduler.cluster.crd --write crds/schedulerprofile.yaml
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["GROUP", "KIND", "PLURAL", "VERSION", "crd_manifest", "render", "structural_schema"]

GROUP = "kopfscheduler.io"
VERSION = "v1alpha1"
KIND = "SchedulerProfile"
PLURAL = "schedulerprofiles"
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "crds" / "schedulerprofile.yaml"

# JSON-schema keywords the CRD's OpenAPI v3 subset accepts as they are.
_KEEP = {
    "type",
    "description",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "enum",
    "minItems",
    "maxItems",
    "format",
    "required",
    "multipleOf",
    "uniqueItems",
}


def structural_schema(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Convert a pydantic JSON schema (draft 2020-12) into a Kubernetes structural schema.

    Inlines ``$ref``s, turns ``anyOf [T, null]`` into ``T`` + ``nullable``, maps the numeric
    ``exclusiveMinimum`` to OpenAPI 3.0's boolean form, drops ``additionalProperties: false``
    (structural schemas prune unknown fields; ``kubectl``'s strict field validation rejects them)
    and marks free-form objects with ``x-kubernetes-preserve-unknown-fields``. Defaults are
    dropped on purpose: the engine applies them, so stored objects stay as their authors wrote them.
    """
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        merged = {**defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural_schema(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {schema['anyOf']!r} structurally")
        nullable = len(options) != len(schema["anyOf"])
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        converted = structural_schema({**options[0], **rest}, defs)
        if nullable:
            converted["nullable"] = True
        return converted
    out: dict[str, Any] = {k: v for k, v in schema.items() if k in _KEEP}
    if isinstance(out.get("description"), str):
        out["description"] = " ".join(out["description"].replace("``", "`").split())
    if "exclusiveMinimum" in schema:
        out["minimum"] = schema["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in schema:
        out["maximum"] = schema["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties")
        if props:
            out["properties"] = {k: structural_schema(v, defs) for k, v in props.items()}
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            out["additionalProperties"] = structural_schema(extra, defs)
        elif not props:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["items"] = structural_schema(schema.get("items", {}), defs)
    elif kind is None:
        raise ValueError(f"schema without a type cannot be structural: {schema!r}")
    return out


def _status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "description": "One aspect of the profile's state (metav1.Condition).",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "The condition's type: Ready."},
            "status": {
                "type": "string",
                "enum": ["True", "False", "Unknown"],
                "description": "True while the profile schedules pods; False when its spec was rejected.",
            },
            "reason": {
                "type": "string",
                "description": "Why, in one CamelCase word: Active, InvalidProfile or Conflict.",
            },
            "message": {"type": "string", "description": "Why, for humans: the rejected fields and errors."},
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation this condition was set for.",
            },
            "lastTransitionTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the status last changed.",
            },
        },
    }
    return {
        "type": "object",
        "description": "What the scheduler made of the spec.",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation the scheduler last read.",
            },
            "scoreStrategy": {"type": "string", "description": "NodeResourcesFit scoring strategy in force."},
            "activeGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The generation whose spec is scheduling now (the last valid one).",
            },
            "conditions": {
                "type": "array",
                "description": "The profile's conditions; Ready tells whether the last spec was accepted.",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


# The descriptions every Kubernetes object's schema gives these two fields.
_API_VERSION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)


def crd_manifest() -> dict[str, Any]:
    from kopf_scheduler.config.profile import profile_json_schema

    spec = structural_schema(profile_json_schema())
    spec["description"] = "A scheduler profile (KubeSchedulerProfile), served under spec.schedulerName."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["schedprofile"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "SchedulerName", "type": "string", "jsonPath": ".spec.schedulerName"},
                        {"name": "Strategy", "type": "string", "jsonPath": ".status.scoreStrategy"},
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A scheduling profile that kopf-scheduler serves under "
                            "spec.schedulerName, like a profile of kube-scheduler's configuration.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": _API_VERSION},
                                "kind": {"type": "string", "description": _KIND},
                                # The apiserver forbids anything else here; explain shows ObjectMeta's.
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    # yaml is imported here: the runtime reads this module's names (GROUP, PLURAL) at start-up,
    # and PyYAML's import (~7 ms) would sit before the first bind.
    import yaml

    class NoAliasDumper(yaml.SafeDumper):
        """Spell shared sub-schemas (``$defs``) out instead of YAML anchors: easier to read and diff."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    header = "# Generated by `python -m kopf_scheduler.cluster.crd --write`; do not edit by hand.\n"
    return header + yaml.dump(crd_manifest(), Dumper=NoAliasDumper, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print, write or check the SchedulerProfile CRD.")
    parser.add_argument("--write", nargs="?", const=str(DEFAULT_PATH), help="write to this file")
    parser.add_argument("--check", nargs="?", const=str(DEFAULT_PATH), help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if Path(args.check).read_text(encoding="utf-8") != text:
            print(f"{args.check} is stale; regenerate with --write", file=sys.stderr)
            return 1
        return 0
    if args.write:
        Path(args.write).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write).write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
