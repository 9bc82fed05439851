"""Affinity terms parsed once per pod and cached (the framework's ``AffinityTerm``,
``WeightedAffinityTerm`` in the reference), and matching pods against them."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.types import LabelSelector, LabelSelectorRequirement, PodAffinityTerm

EVERYTHING = LabelSelector()


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A processed PodAffinityTerm (``framework.AffinityTerm``); None selectors match nothing."""

    namespaces: frozenset[str]
    selector: LabelSelector | None
    topology_key: str
    namespace_selector: LabelSelector | None = None

    def matches(self, pod: Pod, ns_labels: Mapping[str, str] | None) -> bool:
        if pod.namespace in self.namespaces or (
            self.namespace_selector is not None and self.namespace_selector.matches(ns_labels or {})
        ):
            return self.selector is not None and self.selector.matches(pod.labels)
        return False


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()


NO_TERMS = PodTerms()


def selector_with_label_keys(pod: Pod, term: PodAffinityTerm) -> LabelSelector | None:
    """matchLabelKeys (In) / mismatchLabelKeys (NotIn) from the term owner's labels; nil stays nil."""
    sel = term.selector
    if sel is None or not (term.match_label_keys or term.mismatch_label_keys):
        return sel
    labels = pod.labels
    extra = [
        LabelSelectorRequirement(k, "In", frozenset({labels[k]}))
        for k in term.match_label_keys
        if k in labels
    ]
    extra += [
        LabelSelectorRequirement(k, "NotIn", frozenset({labels[k]}))
        for k in term.mismatch_label_keys
        if k in labels
    ]
    return sel.with_requirements(extra) if extra else sel


def new_affinity_term(pod: Pod, term: PodAffinityTerm) -> AffinityTerm:
    """Empty namespaces and a nil namespaceSelector mean the owner's own namespace."""
    if not term.namespaces and term.namespace_selector is None:
        namespaces = frozenset({pod.namespace})
    else:
        namespaces = term.namespaces
    return AffinityTerm(
        namespaces, selector_with_label_keys(pod, term), term.topology_key, term.namespace_selector
    )


def build_terms(pod: Pod) -> PodTerms:
    aff = pod.affinity
    if aff is None or (aff.pod_affinity is None and aff.pod_anti_affinity is None):
        return NO_TERMS
    pa, paa = aff.pod_affinity, aff.pod_anti_affinity
    return PodTerms(
        tuple(new_affinity_term(pod, t) for t in pa.required) if pa else (),
        tuple(new_affinity_term(pod, t) for t in paa.required) if paa else (),
        tuple(WeightedAffinityTerm(new_affinity_term(pod, w.term), w.weight) for w in pa.preferred)
        if pa
        else (),
        tuple(WeightedAffinityTerm(new_affinity_term(pod, w.term), w.weight) for w in paa.preferred)
        if paa
        else (),
    )


class TermCache:
    """Processed terms per Pod object (identity-checked so a recycled id() is never trusted).

    Pods are held weakly and an entry is dropped when its pod is freed: holding them strongly kept
    every pod ever scheduled (raw object and all) alive under churn, the memory growing with the
    pods ever seen rather than the pods alive. Pods without pod (anti-)affinity are not cached:
    their answer is as cheap as a lookup.
    """

    __slots__ = ("__weakref__", "_data")

    def __init__(self) -> None:
        self._data: dict[int, tuple[weakref.ref[Pod], PodTerms]] = {}

    def get(self, pod: Pod) -> PodTerms:
        aff = pod.affinity
        if aff is None or (aff.pod_affinity is None and aff.pod_anti_affinity is None):
            return NO_TERMS
        key = id(pod)
        hit = self._data.get(key)
        if hit is not None and hit[0]() is pod:
            return hit[1]
        terms = build_terms(pod)
        # The callback holds the cache weakly too: no cycle through the pod's weakref.
        this = weakref.ref(self)

        def drop(ref: weakref.ref[Pod]) -> None:
            cache = this()
            if cache is not None:
                entry = cache._data.get(key)
                if entry is not None and entry[0] is ref:
                    del cache._data[key]

        self._data[key] = (weakref.ref(pod, drop), terms)
        return terms

    def __len__(self) -> int:
        return len(self._data)


def pod_matches_all_terms(terms: Sequence[AffinityTerm], pod: Pod) -> bool:
    """True iff there are terms and the pod matches every one (incoming-pod terms: no ns labels)."""
    if not terms:
        return False
    return all(t.matches(pod, None) for t in terms)


def pod_matches_any_term(terms: Sequence[AffinityTerm], pod: Pod) -> bool:
    """``podMatchesAnyAffinityTerms`` (anti-affinity): the pod matches at least one term."""
    return any(t.matches(pod, None) for t in terms)
