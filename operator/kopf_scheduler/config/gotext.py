"""Go's spellings that kube-scheduler's configuration messages are made of: ``%q``, durations
(``time.ParseDuration`` and ``Duration.String``), apimachinery's field errors and aggregates, and
label-key validation. Written anew from the Go sources' behaviour, so messages read as the reference's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "DurationError",
    "FieldError",
    "aggregate",
    "format_duration",
    "go_quote",
    "is_dns1123_subdomain",
    "is_extended_resource_name",
    "is_qualified_name",
    "parse_duration",
    "render_value",
]

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``)."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


# --- durations -----------------------------------------------------------------------------------

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_UNITS_NS["h"] = 3600 * 10**9
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")


class DurationError(ValueError):
    """``time.ParseDuration``'s error, in its words."""


def parse_duration(text: str) -> int:
    """Go's ``time.ParseDuration``: nanoseconds of ``1h2m3.5s``, ``500ms``, ``-1.5h``, ``0``."""
    original = text
    invalid = DurationError(f"time: invalid duration {go_quote(original)}")
    negative = text[:1] == "-"
    if text[:1] in ("-", "+"):
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise invalid
    total = 0
    while text:
        match = _DURATION_PART.match(text)
        assert match is not None
        number, unit = match.group(1), match.group(2)
        if not number or number == ".":
            raise invalid
        # the unit runs up to the next digit or dot
        if not unit:
            raise DurationError(f"time: missing unit in duration {go_quote(original)}")
        if unit not in _UNITS_NS:
            raise DurationError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(original)}")
        whole, _, frac = number.partition(".")
        scale = _UNITS_NS[unit]
        value = int(whole or "0") * scale
        if frac:
            value += int(frac) * scale // (10 ** len(frac))
        total += value
        if total > 2**63 - 1:
            raise invalid
        text = text[match.end() :]
    return -total if negative else total


def _fraction(value: int, digits: int) -> str:
    """Go's fmtFrac: ``value`` has ``digits`` decimal places; trailing zeros (and a bare dot) dropped."""
    whole, frac = divmod(value, 10**digits)
    frac_text = f"{frac:0{digits}d}".rstrip("0")
    return f"{whole}.{frac_text}" if frac_text else str(whole)


def format_duration(ns: int) -> str:
    """Go's ``time.Duration.String``: ``15s``, ``10m0s``, ``1h0m0s``, ``500ms``, ``1.5µs``, ``0s``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 10**9:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_fraction(u, 3)}µs"
        return f"{sign}{_fraction(u, 6)}ms"
    seconds = _fraction(u % (60 * 10**9), 9) + "s"
    minutes_total = u // (60 * 10**9)
    if minutes_total == 0:
        return sign + seconds
    hours, minutes = divmod(minutes_total, 60)
    if hours == 0:
        return f"{sign}{minutes}m{seconds}"
    return f"{sign}{hours}h{minutes}m{seconds}"


# --- field errors --------------------------------------------------------------------------------

_OMIT = object()

_KINDS = {
    "Invalid": "Invalid value",
    "Required": "Required value",
    "Duplicate": "Duplicate value",
    "NotSupported": "Unsupported value",
    "Forbidden": "Forbidden",
}


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float: integral values without a point, else the shortest repr."""
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def render_value(value: Any) -> str:
    """How a field error prints its bad value: plain numbers and bools, quoted strings, else JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class FieldError:
    """apimachinery's ``field.Error``: ``<path>: <kind>[: <value>][: <detail>]``."""

    __slots__ = ("detail", "kind", "path", "value")

    def __init__(self, kind: str, path: str, value: Any = _OMIT, detail: str = "") -> None:
        self.kind = kind
        self.path = path
        self.value = value
        self.detail = detail

    @classmethod
    def invalid(cls, path: str, value: Any, detail: str) -> FieldError:
        return cls("Invalid", path, value, detail)

    @classmethod
    def required(cls, path: str, detail: str = "") -> FieldError:
        return cls("Required", path, _OMIT, detail)

    @classmethod
    def forbidden(cls, path: str, detail: str) -> FieldError:
        return cls("Forbidden", path, _OMIT, detail)

    @classmethod
    def duplicate(cls, path: str, value: Any) -> FieldError:
        return cls("Duplicate", path, value)

    @classmethod
    def not_supported(cls, path: str, value: Any, supported: Sequence[str]) -> FieldError:
        detail = "supported values: " + ", ".join(go_quote(s) for s in supported) if supported else ""
        return cls("NotSupported", path, value, detail)

    def body(self) -> str:
        text = _KINDS[self.kind]
        if self.value is not _OMIT and self.kind not in ("Required", "Forbidden"):
            text += ": " + render_value(self.value)
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self) -> str:
        return f"{self.path}: {self.body()}"

    def __repr__(self) -> str:
        return f"FieldError({str(self)!r})"


def aggregate(errors: Iterable[object]) -> str:
    """apimachinery's aggregate error text: one message alone, several in brackets, repeats once."""
    messages = list(dict.fromkeys(str(e) for e in errors))
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


# --- names ---------------------------------------------------------------------------------------

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY = re.compile(f"^{_LABEL_KEY_FMT}$")
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """apimachinery's IsQualifiedName (a label key): every message that applies."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _LABEL_KEY.match(name):
        errs.append(
            "name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: domain-qualified outside kubernetes.io, not a quota name."""
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests."):
        return False
    return not is_qualified_name("requests." + name)
