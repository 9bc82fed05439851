"""``/metrics/resources``: kube-scheduler's ``kube_pod_resource_request`` and ``kube_pod_resource_limit``.

The reference (``pkg/scheduler/metrics/resources``) lists the pods of its informer at each scrape
and reports, per pod and resource, ``resourcehelper.PodRequests``/``PodLimits`` with default options:
spec only (no resize status), pod-level resources applied, overhead added (to limits only where a
limit is set), sidecar and init containers as the kubelet admits them. Pods on a node that have
succeeded or failed are left out; pods not yet on a node are reported with ``node=""``. Zero
amounts are left out.

The values are ``Quantity.AsApproximateFloat64()`` of the summed quantities, and that depends on
how apimachinery holds them (an integer and a power of ten: ``300m`` is 300e-3 = 0.3 but ``0.3`` is
3e-1 = 0.30000000000000004), so amounts are kept here in the same form (``_Amount``) and added as
``int64Amount.Add`` does: Prometheus sees the same number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, parse_quantity

__all__ = ["CONTENT_TYPE", "HELP", "pod_resource_samples", "render"]

# The reference serves this registry through component-base's handler (promhttp): text format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
_SHOWS = (
    "This shows the resource usage the scheduler and kubelet expect per pod for resources along with "
    "the unit for the resource if any."
)
HELP = {
    "kube_pod_resource_limit": "[STABLE] Resources limit for workloads on the cluster, broken down by pod. "
    + _SHOWS,
    "kube_pod_resource_request": "[STABLE] Resources requested by workloads on the cluster, broken down by "
    "pod. " + _SHOWS,
}
# Sorted by name: the order Prometheus' Go client writes a metric's labels in.
LABELS = ("namespace", "node", "pod", "priority", "resource", "scheduler", "unit")

_INT64_MAX = 2**63 - 1
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# A quantity as apimachinery holds it: (value, scale) for its int64Amount, value * 10**scale; or the
# exact number where it would fall back to an inf.Dec (out of int64 range, or finer than nano).
_Amount = tuple[int, int] | Fraction


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: sign, integer digits (leading zeros dropped), fraction digits, suffix."""
    positive = True
    pos = 0
    if text[:1] in ("-", "+"):
        positive = text[0] == "+"
        pos = 1
    while pos < len(text) and text[pos] == "0":
        pos += 1
    start = pos
    while pos < len(text) and text[pos].isdigit():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < len(text) and text[pos] == ".":
        start = pos = pos + 1
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        denom = text[start:pos]
    return positive, num, denom, text[pos:]


def _amount(raw: Any) -> _Amount:
    """``resource.ParseQuantity``'s fast path (an int64Amount), else the exact value."""
    return _parsed(raw) if isinstance(raw, str) else _parse(raw)


@lru_cache(maxsize=4096)  # a cluster's pods spell few distinct amounts; a scrape parses them all
def _parsed(raw: str) -> _Amount:
    return _parse(raw)


def _parse(raw: Any) -> _Amount:
    exact = parse_quantity(raw)  # validates; QuantityError for what the apiserver would refuse
    if not isinstance(raw, str):
        raw = str(raw)
    positive, num, denom, suffix = _split(raw)
    mantissa = 1
    if suffix in _BINARY_SUFFIX:
        exponent = _BINARY_SUFFIX[suffix]
        scale = 0
        if denom:
            return exact
        mantissa = 1 << exponent
        # 1Mi (2**20) has about 6 decimal digits: the reference's estimate of what still fits.
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        if suffix in _DECIMAL_SUFFIX:
            scale = _DECIMAL_SUFFIX[suffix]
        elif suffix[:1] in ("e", "E"):
            scale = int(suffix[1:])
        else:
            return exact
        precision = 18 - (len(num) + len(denom))
    if precision < 0:
        return exact
    scale -= len(denom)
    if scale < -9:
        return exact
    value = int(num + denom) * mantissa
    if value > _INT64_MAX:
        return exact
    return (value if positive else -value), scale


def _is_zero(a: _Amount) -> bool:
    return a == 0 if isinstance(a, Fraction) else a[0] == 0


def _exact(a: _Amount) -> Fraction:
    if isinstance(a, Fraction):
        return a
    value, scale = a
    return Fraction(value) * Fraction(10) ** scale


def _add(a: _Amount, b: _Amount) -> _Amount:
    """``Quantity.Add``: at the finer of the two scales; an overflow becomes exact arithmetic."""
    if isinstance(a, Fraction) or isinstance(b, Fraction):
        return _exact(a) + _exact(b)
    (av, ascale), (bv, bscale) = a, b
    if bv == 0:
        return a
    if av == 0:
        return b
    scale = min(ascale, bscale)
    value = av * 10 ** (ascale - scale) + bv * 10 ** (bscale - scale)
    if abs(av * 10 ** (ascale - scale)) > _INT64_MAX or abs(bv * 10 ** (bscale - scale)) > _INT64_MAX:
        return _exact(a) + _exact(b)
    if abs(value) > _INT64_MAX:
        return _exact(a) + _exact(b)
    return value, scale


def _pow10(n: int) -> float:
    """``math.Pow10``: exact powers up to 1e22, their reciprocals rounded once."""
    return 10.0**n if n >= 0 else 1.0 / 10.0**-n


def approximate_float(a: _Amount) -> float:
    """``Quantity.AsApproximateFloat64``."""
    if isinstance(a, Fraction):
        return float(a)
    value, scale = a
    return float(value) if scale == 0 else float(value) * _pow10(scale)


_RList = dict[str, _Amount]


def _rlist(raw: Any) -> _RList:
    if not raw or not isinstance(raw, dict | Mapping):  # dict first: the ABC check is slow
        return {}
    out: _RList = {}
    for name, qty in raw.items():
        try:
            out[str(name)] = _amount(qty)
        except QuantityError:
            continue  # the apiserver validated it; a value we cannot read is left out, not fatal
    return out


def _add_into(acc: _RList, other: Mapping[str, _Amount]) -> None:
    for name, amount in other.items():
        acc[name] = _add(acc[name], amount) if name in acc else amount


def _max_into(acc: _RList, other: Mapping[str, _Amount]) -> None:
    for name, amount in other.items():
        if name not in acc or _exact(amount) > _exact(acc[name]):
            acc[name] = amount


def _aggregate(spec: Mapping[str, Any], which: str) -> _RList:
    """``aggregateContainerResourcesByFn``: containers and sidecars add up, init containers take
    the max (each with the sidecars started before it)."""
    result: _RList = {}
    for container in spec.get("containers") or ():
        _add_into(result, _rlist(((container or {}).get("resources") or {}).get(which)))
    sidecars: _RList = {}
    init_max: _RList = {}
    for container in spec.get("initContainers") or ():
        container = container or {}
        resources = _rlist((container.get("resources") or {}).get(which))
        if container.get("restartPolicy") == "Always":
            _add_into(result, resources)
            _add_into(sidecars, resources)
            resources = sidecars
        else:
            combined: _RList = {}
            _add_into(combined, resources)
            _add_into(combined, sidecars)
            resources = combined
        _max_into(init_max, resources)
    _max_into(result, init_max)
    return result


def _pod_level_supported(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(spec: Mapping[str, Any]) -> _RList:
    """``resourcehelper.PodRequests(pod, PodResourcesOptions{})``."""
    reqs = _aggregate(spec, "requests")
    level = (spec.get("resources") or {}).get("requests") or {}
    if any(_pod_level_supported(str(n)) for n in level):
        for name, amount in _rlist(level).items():
            if _pod_level_supported(name):
                reqs[name] = amount
    _add_into(reqs, _rlist(spec.get("overhead")))
    return reqs


def pod_limits(spec: Mapping[str, Any]) -> _RList:
    """``resourcehelper.PodLimits(pod, PodResourcesOptions{})``: overhead only onto limits set."""
    limits = _aggregate(spec, "limits")
    level = spec.get("resources") or {}
    names = [*(level.get("requests") or {}), *(level.get("limits") or {})]
    if any(_pod_level_supported(str(n)) for n in names):
        for name, amount in _rlist(level.get("limits")).items():
            if _pod_level_supported(name):
                limits[name] = amount
    for name, amount in _rlist(spec.get("overhead")).items():
        if name in limits and not _is_zero(limits[name]):
            limits[name] = _add(limits[name], amount)
    return limits


def _unit(resource: str) -> str:
    if resource == "cpu":
        return "cores"
    if resource in ("memory", "storage", "ephemeral-storage") or resource.startswith("hugepages-"):
        return "bytes"
    if resource.startswith("attachable-volumes-"):
        return "integer"
    return ""


def pod_resource_samples(pods: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """(metric name, label values in ``LABELS`` order, value) for each pod, resource and kind."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        node = str(spec.get("nodeName") or "")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase in ("Succeeded", "Failed"):
            continue
        priority = spec.get("priority")
        labels = (
            str(meta.get("namespace") or ""),
            node,
            str(meta.get("name") or ""),
            "" if priority is None else str(int(priority)),
            str(spec.get("schedulerName") or ""),
        )
        ns, node_, name, prio, scheduler = labels
        for metric, amounts in (
            ("kube_pod_resource_request", pod_requests(spec)),
            ("kube_pod_resource_limit", pod_limits(spec)),
        ):
            for resource, amount in amounts.items():
                if not _is_zero(amount):
                    values = (ns, node_, name, prio, resource, scheduler, _unit(resource))
                    yield metric, values, approximate_float(amount)


@lru_cache(maxsize=4096)
def go_float(value: float) -> str:
    """A sample value as Prometheus' Go client writes it: ``strconv.FormatFloat(v, 'g', -1, 64)``,
    the shortest digits, an exponent below 1e-4 and from 1e6 on (``2``, ``1.3``, ``1.34217728e+08``);
    prometheus_client would write ``2.0``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    exp = int(parts.exponent) + len(digits) - 1  # the first digit's power of ten
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole, frac = digits[: exp + 1].ljust(exp + 1, "0"), digits[exp + 1 :]
    return f"{sign}{whole}{'.' + frac if frac else ''}"


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(pods: Iterable[Mapping[str, Any]]) -> bytes:
    """The text exposition the reference serves: families by name, samples by label values, a
    family without samples left out altogether."""
    families: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for metric, values, number in pod_resource_samples(pods):
        families.setdefault(metric, []).append((values, number))
    lines: list[str] = []
    for metric in sorted(families):
        help_text = HELP[metric].replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for values, number in sorted(families[metric]):
            ns, node, pod, prio, resource, scheduler, unit = map(_escape, values)  # LABELS' order
            lines.append(
                f'{metric}{{namespace="{ns}",node="{node}",pod="{pod}",priority="{prio}",'
                f'resource="{resource}",scheduler="{scheduler}",unit="{unit}"}} {go_float(number)}'
            )
    return ("\n".join(lines) + "\n").encode() if lines else b""
