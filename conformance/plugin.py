"""The decode-conformance pytest plugin (registered through the ``pytest11`` entry point).

* ``--target``: the engine under test (``reference``, ``llamacpp``, ``mutant:<id>`` or
  ``module:attr``); ``--peer``: the engine differential tests compare it with (llama.cpp by
  default where installed; ``none`` for no peer). See :mod:`conformance.engines`.
* ``@pytest.mark.invariant("ID", ...)``: every conformance test names the invariants it
  checks; an unknown or planned ID, or a conformance test without the marker, stops collection.
* ``@pytest.mark.requires("capability", ...)``: skipped (and counted) when the target lacks it;
  ``@pytest.mark.uses("capability", ...)``: used when the target has it (``target.has``). The
  ``target`` / ``peer`` fixtures expose only those capabilities (:mod:`conformance.gate`);
  touching anything else is a *suite defect*, reported apart from the target's failures.
* A test that takes the ``peer`` fixture is differential (marked ``differential``): skipped,
  with one reason per cause, when there is no peer, when the peer lacks a capability, or when
  target and peer are the same engine.
* ``--traceability=strict``: an active invariant with no test fails the run, naming the IDs;
  ``strict`` and ``warn`` also list the active invariants that no mutant (hand-written, or
  mechanical in ``tools/mutation/covered.txt``) proves the suite can catch.
* ``--report-dir DIR``: writes ``DIR/conformance.json`` and ``DIR/conformance.md``.
* ``--only-invariants ID,...``: run only the tests that check those invariants (used by the
  meta-tests to run a mutant against the checks it must fail); with ``--stop-once-failed``
  (serial runs) the run stops as soon as each of them has a failed test, all a mutant's verdict
  needs: the tests it did not reach are reported as not run.
* ``--claims=black-box``: the target keeps only the capabilities of a public decode API
  (:data:`conformance.protocol.BLACK_BOX`); what it earns then is its black-box reach.
* ``--claims=minimal``: each test sees a target that claims exactly the capabilities the test
  requires (its ``uses`` ones absent): proves that no test leans on more than it declares.
* Collect-only runs (``--co``) leave ``--report-dir`` alone.
* pytest-xdist (``-n auto``): workers send what they collected (tests per invariant, links,
  target) to the controller, which writes the one report; test outcomes travel in the reports
  xdist already forwards. The report's content equals a serial run's.
* ``--shard I/N``: keep part I of N of the collected tests (:mod:`conformance.sharding`,
  balanced by ``conformance/durations.json``); the report is a partial one that
  ``python -m conformance.report merge`` combines with the other parts.
* ``--record-durations PATH``: write each test's seconds (what ``--shard`` balances with).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance import gate, hypothesis_profiles, sharding
from conformance.report import (
    TestResult,
    aggregate,
    area_table,
    build_report,
    format_table,
    reach_line,
    write_report,
)
from conformance.spec import Invariant, SpecError, load_spec

CONFORMANCE_ROOT = Path(__file__).resolve().parent


@dataclass
class _State:
    target_spec: str
    peer_spec: str
    peer_named: bool  # --peer given explicitly (a bad one is a usage error, not a skip)
    claims: str
    spec_dir: Path | None
    report_dir: Path | None
    traceability: str
    only: frozenset[str]
    conformance_root: Path = CONFORMANCE_ROOT
    registry: dict[str, Invariant] | None = None
    target: Any = None
    peer: Any = None
    peer_error: str | None = None
    tests_by_invariant: dict[str, set[str]] = field(default_factory=dict)
    conformance_items: set[str] = field(default_factory=set)
    results: dict[str, TestResult] = field(default_factory=dict)
    untested: list[str] = field(default_factory=list)
    links: dict[str, list[str]] | None = None  # invariant -> implementing code (@implements)
    unlinked: list[str] = field(default_factory=list)  # active invariants without a link
    profile: str = ""
    shard: sharding.Shard | None = None
    shard_selected: list[str] = field(default_factory=list)  # conformance tests of this shard
    record_durations: Path | None = None
    durations: dict[str, float] = field(default_factory=dict)
    engines_info: dict[str, Any] | None = None  # target/peer description sent by an xdist worker
    requires_by_test: dict[str, list[str]] = field(default_factory=dict)
    stop_once_failed: bool = False
    stopped_early: bool = False


_STATE_KEY = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("decode-conformance")
    group.addoption(
        "--target",
        default=os.environ.get("DC_TARGET", "reference"),
        help="engine under test: reference (default), llamacpp, mutant:<id> or module:attr",
    )
    group.addoption(
        "--peer",
        default=os.environ.get("DC_PEER", "auto"),
        help="engine the differential tests compare the target with: auto (llamacpp where "
        "installed), none, or any --target value",
    )
    group.addoption(
        "--claims",
        choices=("target", "minimal", "black-box"),
        default="target",
        help="minimal: each test sees a target claiming only the capabilities it requires; "
        "black-box: the target keeps only what a public decode API offers (protocol.BLACK_BOX)",
    )
    group.addoption(
        "--spec-dir", default=None, help="directory of spec/*.md (default: packaged spec)"
    )
    group.addoption(
        "--conformance-dir",
        default=None,
        help="tests under this directory are conformance tests (default: the conformance package)",
    )
    group.addoption(
        "--report-dir",
        default=None,
        help="write conformance.json and conformance.md into this directory",
    )
    group.addoption(
        "--traceability",
        choices=("strict", "warn", "off"),
        default="warn",
        help="strict: fail the run when an active invariant has no test",
    )
    group.addoption(
        "--shard",
        default=None,
        help="I/N: run part I of N of the suite (balanced by conformance/durations.json); "
        "merge the parts' reports with `python -m conformance.report merge`",
    )
    group.addoption(
        "--record-durations",
        default=None,
        metavar="PATH",
        help="write each test's duration (seconds) to PATH, the file --shard balances with",
    )
    group.addoption(
        "--only-invariants",
        default="",
        help="comma-separated invariant IDs: run only tests marked with at least one of them",
    )
    group.addoption(
        "--stop-once-failed",
        action="store_true",
        help="with --only-invariants, in a serial run: stop once every one of those invariants "
        "has a failed test (a mutant's verdict can no longer change)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "invariant(*ids): the spec invariants (e.g. SAN-001) this test checks"
    )
    config.addinivalue_line(
        "markers", "requires(*capabilities): skip unless the target has these capabilities"
    )
    config.addinivalue_line(
        "markers", "uses(*capabilities): capabilities the test uses when the target has them"
    )
    config.addinivalue_line(
        "markers",
        "differential: compares the target with a peer engine (tests taking the peer fixture)",
    )
    spec_dir = config.getoption("--spec-dir")
    report_dir = config.getoption("--report-dir")
    only = frozenset(
        x.strip() for x in config.getoption("--only-invariants").split(",") if x.strip()
    )
    peer_spec = config.getoption("--peer").strip()
    peer_named = peer_spec not in ("auto", "none")
    if peer_spec == "auto":
        from conformance.engines import default_peer

        peer_spec = default_peer()
    state = _State(
        target_spec=config.getoption("--target"),
        peer_spec=peer_spec,
        peer_named=peer_named,
        claims=config.getoption("--claims"),
        spec_dir=Path(spec_dir) if spec_dir else None,
        report_dir=Path(report_dir) if report_dir else None,
        traceability=config.getoption("--traceability"),
        only=only,
    )
    if config.getoption("--shard"):
        try:
            state.shard = sharding.parse_shard(config.getoption("--shard"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    if config.getoption("--stop-once-failed"):
        if not only:
            raise pytest.UsageError("--stop-once-failed needs --only-invariants")
        if _is_xdist_controller(config):
            raise pytest.UsageError(
                "--stop-once-failed runs serially (it cannot stop xdist workers)"
            )
        state.stop_once_failed = True
    if config.getoption("--record-durations"):
        state.record_durations = Path(config.getoption("--record-durations"))
    if _is_xdist_controller(config):
        # Each worker is one process on one core: torch's own threads would only oversubscribe.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if config.getoption("--conformance-dir"):
        state.conformance_root = Path(config.getoption("--conformance-dir")).resolve()
    try:
        state.profile = hypothesis_profiles.load(state.target_spec)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STATE_KEY] = state
    if config.getoption("collectonly", False) and hasattr(config.option, "warn_unused_snapshots"):
        config.option.warn_unused_snapshots = True  # nothing ran, so every snapshot is "unused"
    config.pluginmanager.register(
        _ResultRecorder(state), f"decode-conformance-recorder-{id(config)}"
    )


def _state(config: pytest.Config) -> _State:
    return config.stash[_STATE_KEY]


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_xdist_controller(config: pytest.Config) -> bool:
    dist = getattr(config.option, "dist", "no")
    numprocesses = getattr(config.option, "numprocesses", None)
    return not _is_xdist_worker(config) and (dist != "no" or bool(numprocesses))


def pytest_report_header(config: pytest.Config) -> list[str]:
    st = _state(config)
    return [
        f"decode-conformance: target={st.target_spec} peer={st.peer_spec} "
        f"hypothesis-profile={st.profile}"
        + (f" claims={st.claims}" if st.claims != "target" else "")
    ]


def _registry(st: _State) -> dict[str, Invariant]:
    if st.registry is None:
        try:
            st.registry = load_spec(st.spec_dir)
        except SpecError as exc:
            raise pytest.UsageError(f"spec error: {exc}") from None
    return st.registry


def _ensure_target(st: _State) -> Any:
    if st.target is None:
        from conformance.engines import load_engine
        from conformance.targets.base import TargetLoadError

        try:
            st.target = load_engine(st.target_spec)
        except TargetLoadError as exc:
            raise pytest.UsageError(str(exc)) from None
    return st.target


def _ensure_peer(st: _State) -> Any:
    """The peer engine, or None with ``st.peer_error`` saying why (loaded on first use)."""
    from conformance.engines import NO_PEER, load_engine
    from conformance.targets.base import TargetLoadError

    if st.peer is None and st.peer_error is None:
        if st.peer_spec == NO_PEER:
            st.peer_error = (
                "no peer engine: llama-cpp-python is not installed (the 'llamacpp' extra); "
                "choose one with --peer"
            )
        else:
            try:
                st.peer = load_engine(st.peer_spec, role="peer")
            except TargetLoadError as exc:
                st.peer_error = str(exc)
    return st.peer


def is_conformance_item(item: pytest.Item) -> bool:
    root = _state(item.config).conformance_root
    try:
        Path(item.path).resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _check_links(st: _State, registry: dict[str, Invariant]) -> None:
    """The @implements links of the packaged spec's reference (ID -> code): a link to an unknown
    or planned ID stops collection like a bad test marker; an active invariant without one is
    listed (and fails --traceability strict) like one without a test."""
    if st.spec_dir is not None:  # a spec of one's own: the reference's links are not about it
        return
    from conformance.spec import implementation_problems, load_implementations

    st.links = load_implementations()
    problems = implementation_problems(registry, st.links)
    bad = [p for p in problems if not p.startswith("active invariant")]
    if bad:
        raise pytest.UsageError("invalid @implements links:\n  " + "\n  ".join(bad))
    st.unlinked = sorted(p.split()[2] for p in problems if p.startswith("active invariant"))


def _capabilities(item: pytest.Item, marker: str) -> frozenset[str]:
    return frozenset(cap for mark in item.iter_markers(marker) for cap in mark.args)


def _marked_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("invariant"):
        for arg in mark.args:
            ids.extend([arg] if isinstance(arg, str) else list(arg))
    return ids


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    st = _state(config)
    conf_items = [it for it in items if is_conformance_item(it)]
    if not conf_items:
        return
    registry = _registry(st)
    from conformance.protocol import RENAMED
    from conformance.protocol import registry as capabilities

    known_caps = capabilities()
    problems: list[str] = []
    for item in conf_items:
        st.conformance_items.add(item.nodeid)
        if "peer" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.differential)
        ids = _marked_ids(item)
        if not ids:
            problems.append(f"{item.nodeid}: conformance test has no @pytest.mark.invariant(...)")
        for inv_id in ids:
            inv = registry.get(inv_id)
            if inv is None:
                problems.append(f"{item.nodeid}: unknown invariant ID {inv_id!r}")
            elif not inv.active:
                problems.append(
                    f"{item.nodeid}: invariant {inv_id} is planned ({inv.planned_for}); "
                    "mark it active in spec/ when its test lands"
                )
            else:
                st.tests_by_invariant.setdefault(inv_id, set()).add(item.nodeid)
        st.requires_by_test[item.nodeid] = sorted(_capabilities(item, "requires"))
        for marker in ("requires", "uses"):
            for cap in _capabilities(item, marker):
                if cap not in known_caps:
                    hint = f" (now {RENAMED[cap]!r})" if cap in RENAMED else ""
                    problems.append(f"{item.nodeid}: {marker} unknown capability {cap!r}{hint}")
    if problems:
        st.conformance_items.clear()  # no report for an invalid suite
        raise pytest.UsageError(
            "invalid conformance tests:\n  "
            + "\n  ".join(problems[:50])
            + (f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else "")
        )
    st.untested = sorted(
        inv.id for inv in registry.values() if inv.active and inv.id not in st.tests_by_invariant
    )
    _check_links(st, registry)
    if st.only:
        unknown = sorted(st.only - set(registry))
        if unknown:
            raise pytest.UsageError(
                f"--only-invariants: unknown invariant IDs {', '.join(unknown)}"
            )
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            (keep if set(_marked_ids(item)) & st.only else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    if st.shard is not None:
        _keep_shard(st, config, items)
    # Load the target now so a bad --target (or an explicitly named --peer) is reported before
    # any test runs.
    _ensure_target(st)
    if st.peer_named:
        _ensure_peer(st)
        if st.peer_error is not None:
            raise pytest.UsageError(st.peer_error)


def _keep_shard(st: _State, config: pytest.Config, items: list[pytest.Item]) -> None:
    assert st.shard is not None
    durations = sharding.load_durations()
    place = sharding.assign((it.nodeid for it in items), st.shard.count, durations)
    keep = [it for it in items if place[it.nodeid] == st.shard.index]
    drop = [it for it in items if place[it.nodeid] != st.shard.index]
    st.shard_selected = sorted(it.nodeid for it in keep if it.nodeid in st.conformance_items)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _claimed(st: _State, engine: Any) -> frozenset[str]:
    """What the engine claims in this run (``--claims=black-box`` withdraws the internals)."""
    caps = frozenset(engine.capabilities)
    if st.claims == "black-box":
        from conformance.protocol import black_box

        return black_box(caps)
    return caps


def _grant(st: _State, item: pytest.Item, engine: Any, label: str) -> gate.Grant:
    required = _capabilities(item, "requires")
    optional = _capabilities(item, "uses")
    claimed = required if st.claims == "minimal" else _claimed(st, engine)
    return gate.make_grant(f"{label} '{engine.name}'", required, optional, claimed)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> gate.TargetView:
    """The engine under test, as this test may use it: the members of the capabilities the test
    declares (``requires`` / ``uses``), nothing else."""
    st = _state(request.config)
    engine = _ensure_target(st)
    return gate.view(engine, _grant(st, request.node, engine, "target"))


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> gate.TargetView:
    """The engine a differential test compares the target with (``--peer``), seen through the
    same capabilities as the target."""
    st = _state(request.config)
    engine = _ensure_peer(st)
    if engine is None:
        pytest.skip(st.peer_error or "no peer engine")
    if st.peer_spec.strip() == st.target_spec.strip():
        pytest.skip(f"target and peer are the same engine ({st.peer_spec})")
    missing = sorted(_capabilities(request.node, "requires") - _claimed(st, engine))
    if missing:
        pytest.skip(f"peer '{engine.name}' lacks capability '{missing[0]}'")
    return gate.view(engine, _grant(st, request.node, engine, "peer"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not is_conformance_item(item):
        return
    st = _state(item.config)
    tgt = _ensure_target(st)
    caps = _claimed(st, tgt)
    for cap in sorted(_capabilities(item, "requires")):
        if cap not in caps:
            pytest.skip(f"target '{tgt.name}' lacks capability '{cap}'")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(gate.SuiteDefect):
        # user_properties travel with the report from an xdist worker to the controller.
        report.user_properties = [
            *report.user_properties,
            ("dc_suite_defect", str(call.excinfo.value)),
        ]
    return report


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if _is_xdist_controller(config) and not _collect_only(config):
        # The controller collects nothing: load the engines here so that a bad --target (or
        # --peer) is one usage error before any worker starts.
        st = _state(config)
        _ensure_target(st)
        if st.peer_named:
            _ensure_peer(st)
            if st.peer_error is not None:
                raise pytest.UsageError(st.peer_error)


_WORKER_KEY = "decode_conformance"


class _ResultRecorder:
    """Per-session hook object: records each test's worst phase outcome and its duration (the
    report keeps the conformance tests' ones). Under xdist it runs on the controller, which
    receives every worker's reports, and merges what each worker collected."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        payload = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
        if payload:
            _merge_worker(self.state, payload)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self.state
        st.durations[report.nodeid] = st.durations.get(report.nodeid, 0.0) + report.duration
        outcome, reason = _classify(report)
        if outcome is None:
            return
        prev = st.results.get(report.nodeid)
        rank = {"passed": 0, "skipped": 1, "failed": 2, "suite-defect": 3}
        if prev is None or rank[outcome] > rank[prev.outcome]:
            st.results[report.nodeid] = TestResult(report.nodeid, outcome, reason)
        if (
            st.stop_once_failed
            and outcome == "failed"
            and self.session is not None
            and all(_has_failed(st, inv_id) for inv_id in st.only)
        ):
            st.stopped_early = True
            self.session.shouldfail = "every selected invariant has failed"


def _has_failed(st: _State, inv_id: str) -> bool:
    return any(
        (r := st.results.get(t)) is not None and r.outcome == "failed"
        for t in st.tests_by_invariant.get(inv_id, ())
    )


def _classify(report: pytest.TestReport) -> tuple[str | None, str]:
    defect = dict(report.user_properties).get("dc_suite_defect")
    if defect is not None:
        return "suite-defect", str(defect)
    if hasattr(report, "wasxfail"):
        # An expected failure is still a failure to conform.
        return "failed", f"xfail: {report.wasxfail}"
    if report.failed:
        return "failed", ""
    if report.skipped:
        reason = ""
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        return "skipped", reason
    if report.when == "call" and report.passed:
        return "passed", ""
    return None, ""


def _worker_payload(st: _State) -> dict[str, Any]:
    return {
        "tests_by_invariant": {k: sorted(v) for k, v in st.tests_by_invariant.items()},
        "conformance_items": sorted(st.conformance_items),
        "untested": st.untested,
        "links": st.links,
        "unlinked": st.unlinked,
        "shard_selected": st.shard_selected,
        "engines": _target_info(st),
        "requires_by_test": st.requires_by_test,
    }


def _merge_worker(st: _State, payload: dict[str, Any]) -> None:
    """Every worker collects the whole suite: the first payload is the collection, later ones
    add nothing new (xdist itself refuses workers that collected differently)."""
    for inv_id, tests in payload["tests_by_invariant"].items():
        st.tests_by_invariant.setdefault(inv_id, set()).update(tests)
    st.conformance_items.update(payload["conformance_items"])
    st.untested = payload["untested"]
    st.links = payload["links"]
    st.unlinked = payload["unlinked"]
    st.shard_selected = payload["shard_selected"]
    st.requires_by_test.update(payload["requires_by_test"])
    engines = dict(payload["engines"])
    if st.engines_info is not None and len(st.engines_info["peer"]) > len(engines["peer"]):
        engines["peer"] = st.engines_info["peer"]  # a worker that loaded the peer names it
    st.engines_info = engines


def _target_info(st: _State) -> dict[str, Any]:
    if st.engines_info is not None:  # an xdist controller: what the workers ran
        return st.engines_info
    tgt = st.target
    info: dict[str, Any] = {"name": st.target_spec, "version": None, "capabilities": []}
    if tgt is not None:
        info = {"name": tgt.name, "version": tgt.version, "capabilities": sorted(_claimed(st, tgt))}
    peer = {"spec": st.peer_spec}
    if st.peer is not None:
        peer |= {"name": st.peer.name, "version": st.peer.version}
    return {**info, "spec": st.target_spec, "peer": peer, "claims": st.claims}


def _build(st: _State) -> dict[str, Any]:
    registry = _registry(st)
    unrun = f"not in this shard ({st.shard})" if st.shard else "not selected in this run"
    if st.stopped_early:
        unrun = "not run: the run stopped once every selected invariant had failed"
    results = aggregate(registry, st.tests_by_invariant, st.results, missing_reason=unrun)
    info = _target_info(st)
    claimed = frozenset(info.get("capabilities") or ())
    needs = {
        inv_id: [sorted(set(st.requires_by_test.get(t, ())) - claimed) for t in tests]
        for inv_id, tests in st.tests_by_invariant.items()
    }
    report = build_report(
        results,
        info,
        extra={"hypothesis_profile": st.profile},
        links=st.links,
        needs={k: min(v, key=lambda m: (len(m), m)) for k, v in needs.items() if v},
    )
    if st.shard is not None:
        report["shard"] = {
            "index": st.shard.index,
            "count": st.shard.count,
            "selected": st.shard_selected,
            "results": {
                n: {"outcome": r.outcome, **({"reason": r.reason} if r.reason else {})}
                for n, r in sorted(st.results.items())
                if n in st.conformance_items
            },
        }
    return report


def _collect_only(config: pytest.Config) -> bool:
    return bool(config.getoption("collectonly", False))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    st = _state(session.config)
    if _collect_only(session.config):
        return
    if _is_xdist_worker(session.config):
        if st.conformance_items:
            session.config.workeroutput[_WORKER_KEY] = _worker_payload(st)  # type: ignore[attr-defined]
        return
    if st.record_durations is not None and st.durations:
        sharding.write_durations(st.durations, st.record_durations)
    if not st.conformance_items:
        return
    if st.report_dir is not None:
        report = _build(st)
        write_report(report, st.report_dir)
        session.config.stash[_REPORT_KEY] = report
    if st.traceability == "strict" and (st.untested or st.unlinked) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_REPORT_KEY = pytest.StashKey[dict[str, Any]]()


def _mutant_gaps(st: _State) -> list[str]:
    """Active invariants of the packaged spec with no mutant proof (tools/mutation/cover.py);
    the ``tests`` session fails on any, so a user sees this only on a modified suite."""
    if st.traceability == "off" or st.spec_dir is not None:
        return []
    try:
        from tools.mutation.cover import gaps
    except ImportError:  # the suite installed without its tools
        return []
    return gaps()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    st = _state(config)
    if not st.conformance_items or _collect_only(config) or _is_xdist_worker(config):
        return
    report = config.stash.get(_REPORT_KEY, None) or _build(st)
    tr = terminalreporter
    tgt = report["summary"]["target"]
    tr.section(f"conformance: target {tgt['name']} {tgt['version'] or ''}".rstrip())
    for line in format_table(area_table(report)).splitlines():
        tr.write_line(line)
    if reach_line(report):
        tr.write_line(f"reach: {reach_line(report)}")
    away = report["summary"]["reach"].get("one_capability_away") or {}
    if away:
        top = ", ".join(f"{cap} +{n}" for cap, n in list(away.items())[:6])
        tr.write_line(f"claiming one more capability would add: {top}")
    failed = [i["id"] for i in report["invariants"] if i["outcome"] == "failed"]
    if failed:
        tr.write_line(f"failed invariants: {', '.join(failed)}", red=True)
    defects = [i["id"] for i in report["invariants"] if i["outcome"] == "suite-defect"]
    if defects:
        tr.write_line(
            f"suite defects (tests touching undeclared capabilities): {', '.join(defects)}",
            red=True,
        )
    if st.untested and st.traceability == "strict":
        msg = f"active invariants without a test ({len(st.untested)}): {', '.join(st.untested)}"
        tr.write_line(msg, red=True)
    if st.unlinked and st.traceability != "off":
        msg = f"active invariants without an @implements link ({len(st.unlinked)}): " + ", ".join(
            st.unlinked
        )
        tr.write_line(msg, red=st.traceability == "strict", yellow=st.traceability == "warn")
    elif st.untested and st.traceability == "warn":
        tr.write_line(
            f"{len(st.untested)} active invariants have no test among the collected ones "
            "(--traceability strict lists them and fails)",
            yellow=True,
        )
    unproved = _mutant_gaps(st)
    if unproved:
        tr.write_line(
            f"active invariants no mutant proves the suite catches ({len(unproved)}): "
            + ", ".join(unproved),
            yellow=True,
        )
    if st.report_dir is not None:
        tr.write_line(f"report: {st.report_dir / 'conformance.json'} and conformance.md")
