"""Hypothesis profiles, selected by the ``DC_HYPOTHESIS_PROFILE`` environment variable.

* ``ci``: derandomized, bounded example counts, no deadline (reproducible in CI);
* ``dev``: random, moderate counts (the default outside CI);
* ``thorough``: many examples, for nightly or pre-release runs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILE_ENV = "DC_HYPOTHESIS_PROFILE"
# The target/peer fixtures are per test (each test sees its own capabilities) but hold no
# state across examples, so hypothesis may reuse them for every example of a test.
_PER_TEST_FIXTURES = [HealthCheck.function_scoped_fixture]
PROFILES = ("ci", "dev", "thorough")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, *_PER_TEST_FIXTURES],
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, *_PER_TEST_FIXTURES],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, *_PER_TEST_FIXTURES],
)


# Mutant runs only need to know *that* a property fails: skip shrinking, which can take tens of
# seconds per failing test and buys nothing for a verdict.
settings.register_profile(
    "mutant",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)


def selected_profile() -> str:
    name = os.environ.get(PROFILE_ENV) or ("ci" if os.environ.get("CI") else "dev")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not one of {', '.join(PROFILES)}")
    return name


def load(target_spec: str = "") -> str:
    name = selected_profile()
    if target_spec.startswith("mutant:") or os.environ.get("DC_MUTATION_RUN"):
        name = "mutant"  # a hand-written or a mechanical mutant (python -m tools.mutation)
    settings.load_profile(name)
    return name
