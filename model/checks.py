"""The argument rules, one definition each: an integer in a range, a power of two, a finite
number in a range, a flag, a member of an enumeration. Every check returns the value it
accepted and raises ``error`` (``ValueError`` unless the caller names another: the Amaranth
components raise ``TypeError`` for a parameter of the wrong kind, as Amaranth's own library
does) with a message that names the parameter, the allowed values and the value given::

    lanes must be a positive integer, not 0
    ports must be an integer in [1, 8] (the beat's bytes), not 9
    gains must be a power of two that divides width (4), not 3
    rate must be a finite positive number, not inf

A ``bool`` is never an integer or a number here (``True`` is not a count), and a number is
never NaN or infinite unless ``finite=False`` allows infinities. The foundation floor: it
imports nothing of the project, and every floor above may use it."""

from __future__ import annotations

import enum
import math
from numbers import Real
from typing import TypeVar

__all__ = ["flag", "integer", "member", "number", "power_of_two"]

E = TypeVar("E", bound=enum.Enum)


def _fail(error: type[Exception], name: str, rule: str, value, note: str | None):
    suffix = f" ({note})" if note else ""
    raise error(f"{name} must be {rule}{suffix}, not {value!r}")


def _int_rule(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an integer in [{low:,}, {high:,}]"
    if low == 1:
        return "a positive integer"
    if low == 0:
        return "a non-negative integer"
    if low is not None:
        return f"an integer >= {low:,}"
    if high is not None:
        return f"an integer <= {high:,}"
    return "an integer"


def integer(name: str, value, *, low: int | None = None, high: int | None = None,
            divides: tuple[int, str] | None = None, note: str | None = None,
            error: type[Exception] = ValueError) -> int:
    """``value`` if it is an integer (not a bool) in ``[low, high]`` (either end open when
    ``None``) that divides ``divides[0]`` (named ``divides[1]`` in the message)."""
    rule = _int_rule(low, high)
    if divides is not None:
        rule += f" that divides {divides[1]} ({divides[0]})"
    if isinstance(value, bool) or not isinstance(value, int) \
            or (low is not None and value < low) or (high is not None and value > high) \
            or (divides is not None and (value == 0 or divides[0] % value)):
        _fail(error, name, rule, value, note)
    return value


def power_of_two(name: str, value, *, divides: tuple[int, str] | None = None,
                 high: int | None = None, note: str | None = None,
                 error: type[Exception] = ValueError) -> int:
    """``value`` if it is a power of two (1, 2, 4, ...; at most ``high``) that divides
    ``divides[0]``."""
    rule = "a power of two"
    if high is not None:
        rule += f" <= {high:,}"
    if divides is not None:
        rule += f" that divides {divides[1]} ({divides[0]})"
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 \
            or value & (value - 1) or (high is not None and value > high) \
            or (divides is not None and divides[0] % value):
        _fail(error, name, rule, value, note)
    return value


def _number_rule(low, high, low_open: bool, high_open: bool, finite: bool) -> str:
    kind = "a finite number" if finite else "a number"
    if low is not None and high is not None:
        return f"{kind} in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        if low == 0:
            sign = "positive" if low_open else "non-negative"
            return f"a finite {sign} number" if finite else f"a {sign} number"
        return f"{kind} {'above' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{kind} {'below' if high_open else '<='} {high:g}"
    return kind


def number(name: str, value, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, finite: bool = True,
           note: str | None = None, error: type[Exception] = ValueError) -> float:
    """``value`` as a float if it is a real number (not a bool, never NaN; finite unless
    ``finite`` is false) in the range ``low``..``high`` (``low_open``/``high_open``: the end
    itself excluded)."""
    rule = _number_rule(low, high, low_open, high_open, finite)
    if isinstance(value, bool) or not isinstance(value, Real):
        _fail(error, name, rule, value, note)
    x = float(value)
    if math.isnan(x) or (finite and math.isinf(x)) \
            or (low is not None and (x < low or (low_open and x == low))) \
            or (high is not None and (x > high or (high_open and x == high))):
        _fail(error, name, rule, value, note)
    return x


def member(kind: type[E], value, *, what: str, error: type[Exception] = ValueError) -> E:
    """The member of the enumeration ``kind`` whose value is ``value``; the message lists the
    values (``unknown mode 'x'; choose one of a, b``)."""
    try:
        return kind(value)
    except ValueError:
        raise error(f"unknown {what} {value!r}; choose one of "
                    f"{', '.join(str(m.value) for m in kind)}") from None


def flag(name: str, value, *, error: type[Exception] = ValueError) -> bool:
    """``value`` if it is a bool."""
    if not isinstance(value, bool):
        _fail(error, name, "a bool", value, None)
    return value
