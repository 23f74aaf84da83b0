"""The argument rules (:mod:`heteroreason.model.checks`) against a naive restatement of each."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heteroreason.model import checks

ANYTHING = st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=True), st.booleans(),
                     st.none(), st.text(max_size=3))


@given(ANYTHING, st.integers(-5, 5), st.integers(0, 20))
def test_integer_accepts_exactly_the_ints_in_range(value, low, span):
    high = low + span
    ok = type(value) is int and low <= value <= high
    if ok:
        assert checks.integer("n", value, low=low, high=high) == value
    else:
        with pytest.raises(ValueError, match=rf"^n must be an integer in \[{low}, {high}\], "
                                             rf"not "):
            checks.integer("n", value, low=low, high=high)


@given(ANYTHING, st.integers(1, 4096))
def test_power_of_two_that_divides(value, whole):
    ok = type(value) is int and value > 0 and bin(value).count("1") == 1 and whole % value == 0
    if ok:
        assert checks.power_of_two("w", value, divides=(whole, "lanes")) == value
    else:
        with pytest.raises(ValueError, match=rf"^w must be a power of two that divides lanes "
                                             rf"\({whole}\), not "):
            checks.power_of_two("w", value, divides=(whole, "lanes"))


@given(ANYTHING)
def test_a_finite_positive_number(value):
    ok = type(value) in (int, float) and math.isfinite(value) and value > 0
    if ok:
        assert checks.number("rate", value, low=0, low_open=True) == float(value)
    else:
        with pytest.raises(ValueError, match=r"^rate must be a finite positive number, not "):
            checks.number("rate", value, low=0, low_open=True)


@pytest.mark.parametrize("call, message", [
    (lambda: checks.integer("lanes", 0, low=1), "lanes must be a positive integer, not 0"),
    (lambda: checks.integer("seed", -1, low=0), "seed must be a non-negative integer, not -1"),
    (lambda: checks.integer("ports", 9, low=1, high=8, note="the beat's bytes"),
     "ports must be an integer in [1, 8] (the beat's bytes), not 9"),
    (lambda: checks.integer("k", 3, low=1, divides=(8, "param_width")),
     "k must be a positive integer that divides param_width (8), not 3"),
    (lambda: checks.integer("n", True, low=0), "n must be a non-negative integer, not True"),
    (lambda: checks.integer("v", 1, low=2), "v must be an integer >= 2, not 1"),
    (lambda: checks.power_of_two("b", 8, high=4), "b must be a power of two <= 4, not 8"),
    (lambda: checks.number("p", 1.0, low=0, high=1, high_open=True),
     "p must be a finite number in [0, 1), not 1.0"),
    (lambda: checks.number("t", -0.5, low=0), "t must be a finite non-negative number, not -0.5"),
    (lambda: checks.number("t", math.inf, low=0, finite=False),
     None),
    (lambda: checks.number("t", math.nan, low=0, finite=False),
     "t must be a non-negative number, not nan"),
    (lambda: checks.flag("last", 1), "last must be a bool, not 1"),
])
def test_messages_name_the_parameter_the_rule_and_the_value(call, message):
    if message is None:
        assert call() == math.inf
        return
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


def test_the_error_type_is_the_callers():
    with pytest.raises(TypeError, match=r"^width must be a positive integer, not 'x'$"):
        checks.integer("width", "x", low=1, error=TypeError)


def test_member_names_the_choices():
    import enum

    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    assert checks.member(Colour, "red", what="colour") is Colour.RED
    with pytest.raises(KeyError, match="unknown colour 'green'; choose one of red, blue"):
        checks.member(Colour, "green", what="colour", error=KeyError)
