"""Flag and environment values: `runtime.cli` (parse_bool, parse_duration, env_option) and
`api.featuregates.FeatureGates.parse`.

Properties: any text is accepted or refused with `argparse.ArgumentTypeError` /
`ValidationError` (one line); an accepted duration is a finite, non-negative number; a bad
environment value stops the program with a `SystemExit` naming the variable, never a
traceback; a parsed gate map renders to text that parses back to the same map.
"""

from __future__ import annotations

import argparse
import math

import pytest
from fuzz_support import FUZZ, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from api.featuregates import KNOWN_GATES, FeatureGates
from api.validation_error import ValidationError
from runtime.cli import env_option, parse_bool, parse_duration

duration_text = st.text(alphabet="0123456789.-+ eEnumsµhinfaINF_\u0661", max_size=14)
BOOLS = ["1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"]


@FUZZ
@given(st.text(max_size=12) | st.sampled_from(BOOLS))
def test_parse_bool(text):
    _, err = outcome(lambda: parse_bool(text), argparse.ArgumentTypeError)
    assert (err is None) == (text in BOOLS)


@FUZZ
@given(duration_text | st.text(max_size=12))
@example("nan")
@example("inf")
@example("1e400")
@example("9" * 400 + "h")
@example("1_0")
@example("\u0661s")
def test_parse_duration(text):
    value, _ = outcome(lambda: parse_duration(text), argparse.ArgumentTypeError)
    if value is not None:
        assert isinstance(value, float)
        assert math.isfinite(value) and value >= 0, f"{text!r} parsed as {value!r}"


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(["ns", "us", "µs", "ms", "s", "m", "h"])),
        min_size=1,
        max_size=4,
    )
)
def test_go_durations_sum_their_parts(parts):
    unit = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_duration(text) == pytest.approx(sum(n * unit[u] for n, u in parts))


@FUZZ
@given(st.text(max_size=16), st.sampled_from(["bool", "duration", "int"]))
def test_env_option_bad_value_names_the_variable(raw, kind):
    kinds = {"bool": parse_bool, "duration": parse_duration, "int": int}
    parser = argparse.ArgumentParser()
    try:
        env_option(
            parser, "--value", env="FUZZ_VALUE", type=kinds[kind], environ={"FUZZ_VALUE": raw}
        )
    except SystemExit as err:
        assert "FUZZ_VALUE" in str(err.code) and "--value" in str(err.code)
        return
    assert parser.parse_args([]).value == kinds[kind](raw)


gate_names = st.sampled_from([g.name for g in KNOWN_GATES])
gate_items = st.one_of(
    st.tuples(gate_names, st.sampled_from(BOOLS)).map(lambda t: f"{t[0]}={t[1]}"),
    gate_names,
    st.text(max_size=10),
    st.tuples(gate_names, st.text(max_size=6)).map(lambda t: f" {t[0]} = {t[1]} "),
)


@FUZZ
@given(st.lists(gate_items, max_size=5).map(",".join) | st.text(max_size=30))
@example("=true")
@example("AllAlpha=true,,,")
@example("AllAlpha==true")
def test_feature_gates_parse(text):
    gates, _ = outcome(lambda: FeatureGates.parse(text), ValidationError)
    if gates is not None:
        assert FeatureGates.parse(gates.render()) == gates
        try:
            gates.validate()
        except ValidationError as err:
            assert "feature gate" in str(err)


@pytest.mark.parametrize(
    "text", ["nan", "inf", "Infinity", "1e309", "9" * 400 + "s", "1_0s", "1_0"]
)
def test_non_finite_or_python_only_durations_are_refused(text):
    # Found by this fuzzing: float() let `nan`, `inf` and `1_0` through as durations
    # (runtime/cli.py parse_duration); a NaN poll interval or timeout never compares as due.
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)
