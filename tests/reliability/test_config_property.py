"""Generated configs (types, magnitudes, unicode, nesting) give a clean ConfigError or a run,
never a traceback or a hang (issue 39 item 7).

Each example starts from one of a few valid jobs (single-agent and federated, with and without
DP) and sets one to three fields, known or unknown, to a generated value: integers from -2^70 to
2^70, floats from 5e-324 to 1e308 with NaN and infinities, unicode text with NUL bytes and long
strings, booleans, lists, tables, and lists or tables nested up to 3,000 deep. The outcome must
be a :class:`~fedxab.errors.ConfigError` whose message is one line, or a config from which the
run's parts are built (:func:`~fedxab.run.assembly.build_run` for the server and one client: the
objective, the noise, the algorithm's state machines, the evaluators). Running each built job to
its end would take minutes for 2,000 examples; building it is where a value turns into arrays,
trees and thresholds (every traceback of the issue was raised there or in validation). The
examples are derandomized (the same 2,000 in every CI run) and each has a 10 s deadline.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedxab.config import config_from_dict
from fedxab.errors import ConfigError
from fedxab.run.assembly import build_run
from fedxab.run.identity import run_id_for

BASES: list[dict[str, Any]] = [
    {"run": {"budget": 40}, "objective": {"name": "garland"}, "algorithm": {"name": "hct"}},
    {
        "run": {"budget": 40},
        "objective": {"name": "himmelblau"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 3},
    },
    {
        "run": {"budget": 40},
        "objective": {"name": "rastrigin", "dim": 3},
        "algorithm": {"name": "dpfedpne", "epsilon": 1.0, "privacy_delta": 0.01},
        "federation": {"clients": 2},
        "privacy": {"accountant": "rdp"},
    },
    {
        "run": {"budget": 40},
        "objective": {"function": "mod:f", "domain": [[0.0, 1.0]]},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 2},
    },
]

FIELDS = {
    "run": ["seed", "repeats", "budget", "output", "workers"],
    "objective": ["name", "dim", "normalized", "domain", "noise", "kwargs", "function"],
    "algorithm": ["name", "nu", "rho", "c", "c1", "delta", "k", "split", "preset", "epsilon",
                  "privacy_delta", "calibration"],
    "federation": ["clients", "heterogeneity", "quorum"],
    "broker": ["url", "namespace", "max_message_bytes"],
    "privacy": ["accountant", "budget_epsilon", "ledger", "lifetime_epsilon"],
    "agents": ["heartbeat_s", "rebroadcast_s", "phase_deadline_s"],
}  # fmt: skip

NAMES = ["garland", "himmelblau", "hct", "fedpne", "dpfedpne", "poo", "memory://", "inprocess://",
         "theory", "practical", "random", "rdp", "none", "shift"]  # fmt: skip
MAGNITUDES = [0, 1, 2, -1, 2**31, 2**63 - 1, 2**63, 2**64, 10**6, 10**9, 10**100]
FLOATS = [5e-324, 1e-300, 1e-12, 1e-6, 0.5, 1.0, 1e6, 1e300, 1e308, -0.0, -1e308]


def _deep(depth: int, table: bool) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if table else [value]
    return value


class Deep:
    """A value nested ``depth`` deep, built in the test (hypothesis could not print it)."""

    def __init__(self, depth: int, table: bool) -> None:
        self.depth, self.table = depth, table

    def __repr__(self) -> str:
        return f"Deep({self.depth}, table={self.table})"


scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(MAGNITUDES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(FLOATS),
    st.text(max_size=12),
    st.sampled_from(["", "\x00", "a\x00b", "x" * 5000, "é/../ü", " ", *NAMES]),
    st.booleans(),
)
plausible = st.one_of(  # values a field may well take: most configs then build
    st.integers(min_value=1, max_value=8),
    st.floats(min_value=0.01, max_value=0.99),
    st.sampled_from(NAMES),
)
values = st.one_of(
    plausible,
    plausible,
    plausible,
    scalars,
    st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=6,
    ),
    st.builds(Deep, st.integers(min_value=0, max_value=3000), st.booleans()),
)
known = st.sampled_from([(s, f) for s, fields in FIELDS.items() for f in fields])
keys = st.one_of(
    known,
    known,
    known,
    st.tuples(st.sampled_from([*FIELDS, "nonsection"]), st.text(max_size=8)),
)


def _outcome(raw: dict[str, Any]) -> str:
    """``"error"`` (a clean ConfigError) or ``"built"``; anything else raises."""
    try:
        config = config_from_dict(raw)
        if config.federation is None or config.objective.function is not None:
            return "built"  # (validated, optimizer included; a user's module is not imported)
        build_run(config, config.run.seed, run_id=run_id_for(config, 0), server=True,
                  client_ids=[0])  # fmt: skip
    except ConfigError as exc:
        text = str(exc)
        assert text and "\n" not in text and "Traceback" not in text, text
        return "error"
    return "built"


@settings(
    max_examples=2000,
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    base=st.sampled_from(range(len(BASES))),
    changes=st.lists(st.tuples(keys, values), min_size=1, max_size=1)
    | st.lists(st.tuples(keys, values), min_size=2, max_size=3),
)
def test_a_generated_config_is_a_clean_error_or_a_run(base, changes):
    raw = copy.deepcopy(BASES[base])
    for (section, field), value in changes:
        table = raw.setdefault(section, {})
        table[field] = _deep(value.depth, value.table) if isinstance(value, Deep) else value
    event(_outcome(raw))  # (--hypothesis-show-statistics: how many errors and builds)


def test_the_configs_of_the_issue_are_each_a_one_line_error_naming_the_field():
    """The 19 tracebacks of issue 39, each now a ConfigError naming its field."""
    fed = BASES[1]
    dp = BASES[2]
    cases = [
        (fed, "run", "repeats", 2**63, "run.repeats"),
        (fed, "run", "output", "out\x00put", "run.output"),
        (fed, "run", "output", "x" * 10_000_000, "run.output"),
        (fed, "algorithm", "k", 10**6, "algorithm.k"),
        (dp, "objective", "dim", 10**6, "objective.dim"),
        (dp, "algorithm", "epsilon", 1e-300, "algorithm.epsilon"),
        (fed, "objective", "kwargs", _deep(5000, True), "objective"),
    ]
    cases += [
        (fed, "algorithm", field, value, f"algorithm.{field}")
        for field in ("nu", "c", "c1", "delta")
        for value in (5e-324, 1e308)
    ]
    for base, section, field, value, named in cases:
        raw = copy.deepcopy(base)
        raw[section][field] = value
        try:
            config_from_dict(raw)
        except ConfigError as exc:
            assert exc.field.startswith(named) and "\n" not in str(exc), (field, str(exc))
        else:
            raise AssertionError(f"{section}.{field} = {str(value)[:40]} was taken")
