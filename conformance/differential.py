"""Shared by the differential tests (those taking the ``peer`` fixture)."""

from __future__ import annotations


class PeerDivergence(UserWarning):
    """A documented difference between the target and the peer, seen in this run (the test
    passes; the warning and the test's ``user_properties`` say what differed)."""
