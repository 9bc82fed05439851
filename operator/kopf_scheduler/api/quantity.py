"""Kubernetes ``resource.Quantity`` parsing, exact like apimachinery's.

Quantities are parsed into :class:`fractions.Fraction` so that ``0.1``, ``100m`` and ``1e-1``
are the same number; the engine then keeps integers in canonical units (millicores for cpu,
bytes or plain counts for everything else), rounding up as ``Quantity.MilliValue()`` and
``Quantity.Value()`` do.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "ceil_milli", "ceil_value", "milli_value", "parse_quantity", "value"]


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The pattern apimachinery names in its error message (ours below is stricter about suffixes).
_REFERENCE_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
# <sign><digits>[.<digits>]<suffix>, where suffix is binary, decimal SI, or a decimal exponent.
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


# Far beyond any real resource amount (2**63 is int64's limit in the reference) yet small enough that
# arithmetic stays cheap: the apiserver accepts ``cpu: 1e5000000``, and exact big-integer maths on it
# would freeze the event loop for seconds on every parse.
_MAX_EXPONENT = 40
SATURATED = 2**63 - 1


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity; raise :class:`QuantityError` naming the bad input."""
    if not isinstance(text, str | int | float):  # lists and dicts are unhashable: check before the cache
        raise QuantityError(f"quantity must be a string or a number, got {type(text).__name__}")
    if isinstance(text, bool):  # before the cache too: True == 1 there, so a cached 1 would answer it
        raise QuantityError(f"quantities must match the regular expression, got {text!r}")
    return _parse_quantity(text)


@lru_cache(maxsize=4096)
def _parse_quantity(text: str | int | float) -> Fraction:
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        try:
            return Fraction(str(text))
        except ValueError:  # inf, nan (YAML can spell them)
            raise QuantityError(f"quantity must be a finite number, got {text!r}") from None
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string or a number, got {type(text).__name__}")
    match = _QUANTITY.match(text.strip())
    if not match or text.strip() != text:
        pattern = _REFERENCE_PATTERN
        raise QuantityError(f"quantities must match the regular expression '{pattern}', got {text!r}")
    number = Fraction(match["num"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if number and exponent > _MAX_EXPONENT:
            number = Fraction(SATURATED)
        elif exponent < -_MAX_EXPONENT:
            number = Fraction(1, 10**_MAX_EXPONENT) if number else Fraction(0)
        else:
            number *= Fraction(10) ** exponent
    return -number if match["sign"] == "-" else number


def _ceil(number: Fraction) -> int:
    return -((-number.numerator) // number.denominator)


def _saturate(number: int) -> int:
    return max(-SATURATED, min(SATURATED, number))


def ceil_milli(number: Fraction) -> int:
    """``MilliValue()`` of an already parsed (or summed) quantity."""
    return _saturate(_ceil(number * 1000))


def ceil_value(number: Fraction) -> int:
    """``Value()`` of an already parsed (or summed) quantity."""
    return _saturate(_ceil(number))


def milli_value(text: str | int | float) -> int:
    """Like ``Quantity.MilliValue()``: thousandths, rounded up (cpu in millicores), within int64."""
    return _saturate(_ceil(parse_quantity(text) * 1000))


def value(text: str | int | float) -> int:
    """Like ``Quantity.Value()``: the integer value, rounded up (bytes, counts), within int64."""
    return _saturate(_ceil(parse_quantity(text)))
