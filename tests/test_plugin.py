"""The pytest plugin, exercised on synthetic spec directories and test files (pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SPEC = """# Demo area
| ID | Statement | Source | Status |
|----|-----------|--------|--------|
| DEMO-001 | One plus one is two. | arithmetic | active |
| DEMO-002 | Two times two is four. | arithmetic | active |
| DEMO-003 | A later rule. | nowhere | planned:later |
| DEMO-004 | A rule without a test. | nowhere | active |
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "spec").mkdir()
    (pytester.path / "spec" / "demo.md").write_text(SPEC)
    (pytester.path / "conf").mkdir()
    return pytester


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess(
        "conf",
        "--spec-dir",
        str(p.path / "spec"),
        "--conformance-dir",
        str(p.path / "conf"),
        "-p",
        "no:cacheprovider",
        *args,
    )


def test_outcomes_are_aggregated_per_invariant(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "def test_ok(target):\n    assert target.name == 'reference'\n"
        "@pytest.mark.invariant('DEMO-002', 'DEMO-001')\n"
        "def test_bad():\n    assert 2 * 2 == 5\n"
    )
    result = run(suite, "--report-dir", "out")
    assert result.ret == 1
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
    assert outcomes == {
        "DEMO-001": "failed",
        "DEMO-002": "failed",
        "DEMO-003": "planned",
        "DEMO-004": "untested",
    }
    demo1 = next(i for i in report["invariants"] if i["id"] == "DEMO-001")
    assert demo1["tests"] == ["conf/test_demo.py::test_bad", "conf/test_demo.py::test_ok"]
    assert demo1["statement"] == "One plus one is two." and demo1["source"] == "arithmetic"
    assert demo1["status"] == "active"
    summary = report["summary"]
    assert summary["outcomes"] == {
        "passed": 0,
        "failed": 2,
        "skipped": 0,
        "suite-defect": 0,
        "untested": 1,
        "planned": 1,
    }
    assert summary["areas"]["demo"]["total"] == 4
    assert summary["target"]["name"] == "reference"
    assert "commit" in summary
    md = (suite.path / "out" / "conformance.md").read_text()
    assert "| DEMO-002 | **FAILED** |" in md
    result.stdout.fnmatch_lines(
        ["*conformance: target reference*", "*failed invariants: DEMO-001, DEMO-002*"]
    )


def test_passing_invariant(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok():\n    assert 1 + 1 == 2\n"
    )
    result = run(suite, "--report-dir", "out")
    assert result.ret == 0
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    assert {i["id"]: i["outcome"] for i in report["invariants"]}["DEMO-001"] == "passed"


def test_unmarked_unknown_and_planned_ids_stop_collection(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "def test_unmarked():\n    pass\n"
        "@pytest.mark.invariant('DEMO-999')\ndef test_unknown():\n    pass\n"
        "@pytest.mark.invariant('DEMO-003')\ndef test_planned():\n    pass\n"
    )
    result = run(suite, "--report-dir", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_unmarked: conformance test has no @pytest.mark.invariant*",
            "*test_unknown: unknown invariant ID 'DEMO-999'*",
            "*test_planned: invariant DEMO-003 is planned (later)*",
        ]
    )
    assert not (suite.path / "out" / "conformance.json").exists()


def test_strict_traceability_fails_and_names_ids(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001', 'DEMO-002')\ndef test_ok():\n    pass\n"
    )
    warn = run(suite)  # default: warn only
    assert warn.ret == 0
    warn.stdout.fnmatch_lines(["*1 active invariants have no test among the collected ones*"])
    result = run(suite, "--traceability", "strict")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*active invariants without a test (1): DEMO-004*"])


EMPTY_TARGET = (
    "class Empty:\n    name = 'empty'\n    version = '1'\n    capabilities = frozenset()\n"
)


def test_missing_capability_skips_and_is_counted(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('model.load')\n"
        "def test_needs_cap():\n    pass\n"
    )
    (suite.path / "emptymod.py").write_text(EMPTY_TARGET)
    result = run(suite, "--target", "emptymod:Empty", "--report-dir", "out", "-rs")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*target 'empty' lacks capability 'model.load'*"])
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    assert {i["id"]: i["outcome"] for i in report["invariants"]}["DEMO-001"] == "skipped"
    assert report["summary"]["skip_reasons"] == {"target 'empty' lacks capability 'model.load'": 1}
    demo1 = next(i for i in report["invariants"] if i["id"] == "DEMO-001")
    assert demo1["needs"] == ["model.load"]
    assert report["summary"]["reach"]["one_capability_away"] == {"model.load": 1}
    result.stdout.fnmatch_lines(["*claiming one more capability would add: model.load +1*"])


def test_touching_an_undeclared_capability_is_a_suite_defect(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('model.load')\n"
        "def test_sneaky(target):\n"
        "    try:\n"
        "        target.forward_logits  # model.forward, not declared\n"
        "    except Exception:\n"
        "        pass  # a test cannot swallow it\n"
        "@pytest.mark.invariant('DEMO-002')\n"
        "@pytest.mark.requires('model.load')\n"
        "def test_honest(target):\n"
        "    assert callable(target.load_model)\n"
    )
    result = run(suite, "--report-dir", "out")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*SuiteDefect: a test touched 'forward_logits', which belongs to capability "
            "'model.forward'*",
            "*suite defects (tests touching undeclared capabilities): DEMO-001*",
        ]
    )
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
    assert outcomes["DEMO-001"] == "suite-defect" and outcomes["DEMO-002"] == "passed"
    assert report["summary"]["outcomes"]["suite-defect"] == 1
    assert "Defects of the suite" in (suite.path / "out" / "conformance.md").read_text()


def test_uses_answers_has_and_nothing_else(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.uses('model.forward')\n"
        "def test_optional(target):\n"
        "    assert target.has('model.forward') == (target.name == 'reference')\n"
        "@pytest.mark.invariant('DEMO-002')\n"
        "def test_undeclared_has(target):\n"
        "    target.has('model.forward')\n"
    )
    (suite.path / "emptymod.py").write_text(EMPTY_TARGET)
    for tgt in ("reference", "emptymod:Empty"):
        result = run(suite, "--target", tgt, "--report-dir", "out")
        report = json.loads((suite.path / "out" / "conformance.json").read_text())
        outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
        assert outcomes["DEMO-001"] == "passed", tgt
        assert outcomes["DEMO-002"] == "suite-defect", tgt
        result.stdout.fnmatch_lines(["*add it to @pytest.mark.uses*"])


def test_minimal_claims_hide_optional_capabilities(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('model.load')\n"
        "@pytest.mark.uses('model.forward')\n"
        "def test_optional(target):\n"
        "    assert not target.has('model.forward')\n"
    )
    assert run(suite, "--claims", "minimal").ret == 0
    assert run(suite).ret == 1  # the reference has it


DIFFERENTIAL = (
    "import pytest\n"
    "@pytest.mark.invariant('DEMO-001')\n"
    "@pytest.mark.requires('model.load')\n"
    "def test_same_name(target, peer):\n"
    "    assert peer.name != target.name\n"
)


def test_peer_skip_reasons_have_one_wording_per_cause(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(DIFFERENTIAL)
    (suite.path / "emptymod.py").write_text(EMPTY_TARGET)
    cases = {
        "none": "no peer engine: llama-cpp-python is not installed*choose one with --peer*",
        "reference": "target and peer are the same engine (reference)",
        "emptymod:Empty": "peer 'empty' lacks capability 'model.load'",
    }
    for peer, reason in cases.items():
        result = run(suite, "--peer", peer, "-rs", "--report-dir", "out")
        assert result.ret == 0, peer
        result.stdout.fnmatch_lines([f"*{reason}*"])
        report = json.loads((suite.path / "out" / "conformance.json").read_text())
        assert report["summary"]["target"]["peer"]["spec"] == peer


def test_differential_tests_are_marked_and_run_against_a_peer(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(DIFFERENTIAL)
    result = run(
        suite,
        "--target",
        "mutant:san-gap-accepted",
        "--peer",
        "reference",
        "-m",
        "differential",
        "-v",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_same_name PASSED*"])


def test_collect_only_leaves_reports_alone_and_exits_zero(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok():\n    pass\n"
    )
    result = run(suite, "--co", "--report-dir", "out", "--traceability", "strict")
    assert result.ret == 0
    assert not (suite.path / "out").exists()
    assert "= conformance: target" not in result.stdout.str()


def test_renamed_capability_is_named(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('decode.logits')\ndef test_ok():\n    pass\n"
    )
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*requires unknown capability 'decode.logits' (now 'decoder.logits')*"]
    )


def test_only_invariants_selects_tests(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\ndef test_one():\n    pass\n"
        "@pytest.mark.invariant('DEMO-002')\ndef test_two():\n    assert False\n"
    )
    result = run(suite, "--only-invariants", "DEMO-001", "--report-dir", "out")
    assert result.ret == 0
    result.assert_outcomes(passed=1, deselected=1)
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    demo2 = next(i for i in report["invariants"] if i["id"] == "DEMO-002")
    assert demo2["outcome"] == "skipped"
    assert demo2["details"][0]["reason"] == "not selected in this run"
    bad = run(suite, "--only-invariants", "NOPE-001")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*unknown invariant IDs NOPE-001*"])


def test_stop_once_failed_waits_for_every_selected_invariant(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\ndef test_a():\n    assert False\n"
        "@pytest.mark.invariant('DEMO-001')\ndef test_b():\n    assert False\n"
        "@pytest.mark.invariant('DEMO-002')\ndef test_c():\n    pass\n"
        "@pytest.mark.invariant('DEMO-002')\ndef test_d():\n    assert False\n"
        "@pytest.mark.invariant('DEMO-002')\ndef test_e():\n    assert False\n"
    )
    # DEMO-001 has failed from test_a on, DEMO-002 only at test_d: the run stops there and
    # test_e never runs.
    result = run(
        suite, "--only-invariants", "DEMO-002,DEMO-001", "--stop-once-failed", "--report-dir", "out"
    )
    assert result.ret == 1
    result.assert_outcomes(failed=3, passed=1)
    result.stdout.fnmatch_lines(["*every selected invariant has failed*"])
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
    assert outcomes["DEMO-001"] == outcomes["DEMO-002"] == "failed"
    demo2 = next(i for i in report["invariants"] if i["id"] == "DEMO-002")
    assert demo2["details"][-1] == {
        "test": "conf/test_demo.py::test_e",
        "outcome": "skipped",
        "reason": "not run: the run stopped once every selected invariant had failed",
    }
    alone = run(suite, "--stop-once-failed")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["*--stop-once-failed needs --only-invariants*"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nope", "ERROR: unknown target 'nope'; use one of reference, llamacpp*"),
        ("okmod:Renamed", "ERROR: target 'okmod:Renamed' declares 'decode.logits', which is now*"),
        ("okmod:NoMethod", "ERROR: target 'okmod:NoMethod': capability 'model.load' needs method*"),
        (
            "okmod:BadSignature",
            "ERROR: target 'okmod:BadSignature': capability 'tokenizer.tokenize': "
            "tokenize(model, text, add_special=..., parse_special=...) cannot be called*",
        ),
        (
            "okmod:Implied",
            "ERROR: target 'okmod:Implied' declares 'sampling.top_k' but not 'sampling.chain'*",
        ),
        (
            "no_such_module:x",
            "ERROR: target 'no_such_module:x': module 'no_such_module' failed to import*",
        ),
        (
            "badmod:x",
            "ERROR: target 'badmod:x': module 'badmod' failed to import: RuntimeError: boom",
        ),
        (
            "okmod:missing",
            "ERROR: target 'okmod:missing': module 'okmod' has no attribute 'missing'",
        ),
        ("okmod:NoName", "ERROR: target 'okmod:NoName' has no attribute 'name'"),
        ("okmod:UnknownCap", "ERROR: target 'okmod:UnknownCap' declares unknown capability 'x.y'*"),
        (
            "okmod:Broken",
            "ERROR: target 'okmod:Broken': constructing the adapter failed: ValueError: nope",
        ),
        ("mutant:does-not-exist", "ERROR: unknown mutant 'does-not-exist'*"),
    ],
)
def test_bad_targets_give_one_clear_line(suite: pytest.Pytester, target: str, message: str) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok(target):\n    pass\n"
    )
    (suite.path / "badmod.py").write_text("raise RuntimeError('boom')\n")
    (suite.path / "okmod.py").write_text(
        "class NoName:\n    version = '1'\n    capabilities = ()\n"
        "class UnknownCap:\n    name = 'u'\n    version = '1'\n    capabilities = ('x.y',)\n"
        "class Broken:\n    def __init__(self):\n        raise ValueError('nope')\n"
        "class Renamed:\n    name = 'r'\n    version = '1'\n    capabilities = ('decode.logits',)\n"
        "class NoMethod:\n    name = 'n'\n    version = '1'\n    capabilities = ('model.load',)\n"
        "class BadSignature:\n    name = 'b'\n    version = '1'\n"
        "    capabilities = ('tokenizer.tokenize',)\n"
        "    def load_model(self, path): ...\n"
        "    def model_info(self, model): ...\n"
        "    def tokenize(self, model, text, add_bos=True): ...\n"
        "    def token_to_piece(self, model, token, special=False): ...\n"
        "    def detokenize(self, model, tokens, remove_special=False, unparse_special=False): ...\n"
        "class Implied:\n    name = 'i'\n    version = '1'\n    capabilities = ('sampling.top_k',)\n"
    )
    result = run(suite, "--target", target)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_third_party_target_module_attr(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\n"
        "def test_ok(target):\n    assert target.name == 'mine' and target.version == '9'\n"
    )
    (suite.path / "mine.py").write_text(
        "class Adapter:\n    name = 'mine'\n    version = '9'\n    capabilities = frozenset()\n"
        "def make():\n    return Adapter()\n"
    )
    assert run(suite, "--target", "mine:make").ret == 0
    assert run(suite, "--target", "mine:Adapter").ret == 0


def test_unit_tests_outside_the_conformance_dir_are_left_alone(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok():\n    pass\n"
    )
    (suite.path / "test_unit.py").write_text("def test_plain():\n    pass\n")
    result = suite.runpytest_subprocess(
        "test_unit.py",
        "--spec-dir",
        str(suite.path / "spec"),
        "--conformance-dir",
        str(suite.path / "conf"),
    )
    assert result.ret == 0
    assert "= conformance: target" not in result.stdout.str()


def test_hypothesis_profile_header_and_bad_profile(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok():\n    pass\n"
    )
    monkeypatch.setenv("DC_HYPOTHESIS_PROFILE", "thorough")
    result = run(suite)
    result.stdout.fnmatch_lines(["*hypothesis-profile=thorough*"])
    monkeypatch.setenv("DC_HYPOTHESIS_PROFILE", "bogus")
    bad = run(suite)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*DC_HYPOTHESIS_PROFILE='bogus' is not one of ci, dev, thorough*"])


def test_report_markdown_lists_areas(tmp_path: Path) -> None:
    from conformance.report import TestResult, aggregate, build_report, render_markdown
    from conformance.spec import load_spec

    (tmp_path / "demo.md").write_text(SPEC)
    reg = load_spec(tmp_path)
    results = aggregate(reg, {"DEMO-001": ["t::a"]}, {"t::a": TestResult("t::a", "passed")})
    report = build_report(results, {"name": "x", "version": "1"})
    md = render_markdown(report)
    assert "| demo  |          4 |      1 |" in md
    assert "planned (later)" in md


def test_xdist_workers_feed_one_report_with_suite_defects_and_traceability(
    suite: pytest.Pytester,
) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('model.load')\n"
        "def test_sneaky(target):\n"
        "    target.forward_logits\n"
        "@pytest.mark.invariant('DEMO-002')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_many(i):\n"
        "    assert i < 5\n"
    )
    result = run(suite, "-n", "2", "--report-dir", "out", "--traceability", "strict")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*suite defects (tests touching undeclared capabilities): DEMO-001*",
            "*active invariants without a test (1): DEMO-004*",
        ]
    )
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
    assert outcomes == {
        "DEMO-001": "suite-defect",
        "DEMO-002": "failed",
        "DEMO-003": "planned",
        "DEMO-004": "untested",
    }
    assert report["summary"]["target"]["name"] == "reference"
    assert len(next(i for i in report["invariants"] if i["id"] == "DEMO-002")["tests"]) == 6


def test_bad_target_under_xdist_is_one_usage_error(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok(target):\n    pass\n"
    )
    result = run(suite, "-n", "2", "--target", "mutant:does-not-exist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: unknown mutant 'does-not-exist'*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_bad_shard_is_a_usage_error_and_durations_are_recorded(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n@pytest.mark.invariant('DEMO-001')\ndef test_ok(target):\n    pass\n"
    )
    result = run(suite, "--shard", "5/4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --shard '5/4': expected I/N*"])
    result = run(suite, "--record-durations", "d.json", "--shard", "1/1", "--report-dir", "out")
    assert result.ret == 0
    durations = json.loads((suite.path / "d.json").read_text())["durations"]
    assert list(durations) == ["conf/test_demo.py::test_ok"]
    shard = json.loads((suite.path / "out" / "conformance.json").read_text())["shard"]
    assert shard["selected"] == ["conf/test_demo.py::test_ok"] and shard["index"] == 1


def test_report_states_reach_and_white_box_only_invariants(tmp_path: Path) -> None:
    from conformance.report import TestResult, aggregate, build_report, render_markdown
    from conformance.spec import load_spec

    spec = (
        SPEC.replace(
            "| DEMO-004 | A rule without a test. | nowhere | active |",
            "| DEMO-004 | A rule without a test. | nowhere | active; white-box: cells not public |",
        ).replace(  # a white-box rule with a verdict counts as a verdict, not as white-box only
            "| DEMO-001 | One plus one is two. | arithmetic | active |",
            "| DEMO-001 | One plus one is two. | arithmetic | active; white-box: an internal sum |",
        )
        + "| DEMO-005 | Five. | nowhere | active |\n"
    )
    (tmp_path / "demo.md").write_text(spec)
    reg = load_spec(tmp_path)
    results = aggregate(
        reg,
        {"DEMO-001": ["t::a"], "DEMO-002": ["t::b"], "DEMO-005": ["t::c"]},
        {
            "t::a": TestResult("t::a", "passed"),
            "t::b": TestResult("t::b", "failed"),
            "t::c": TestResult("t::c", "skipped", "target 'x' lacks capability 'kv.cache'"),
        },
    )
    report = build_report(results, {"name": "x", "version": "1"}, needs={"DEMO-005": ["kv.cache"]})
    assert report["summary"]["reach"] == {
        "verdicts": 2,
        "active": 4,
        "white_box_only": 1,
        "reachable_unreached": 1,
        "one_capability_away": {"kv.cache": 1},
    }
    demo5 = next(i for i in report["invariants"] if i["id"] == "DEMO-005")
    assert demo5["needs"] == ["kv.cache"]
    demo4 = next(i for i in report["invariants"] if i["id"] == "DEMO-004")
    assert demo4["white_box"] == "cells not public"
    assert (
        "- Reach: verdicts on 2/4 active invariants (50%); 1 white-box only; 1 without a verdict "
        "though a public API could show them" in render_markdown(report)
    )
    assert "- Claiming one more capability would add: `kv.cache` +1" in render_markdown(report)


def test_black_box_claims_withdraw_the_internal_capabilities(suite: pytest.Pytester) -> None:
    (suite.path / "conf" / "test_demo.py").write_text(
        "import pytest\n"
        "@pytest.mark.invariant('DEMO-001')\n"
        "@pytest.mark.requires('kv.cache')\n"
        "def test_cells(target):\n    pass\n"
        "@pytest.mark.invariant('DEMO-002')\n"
        "@pytest.mark.requires('decoder.logits')\n"
        "@pytest.mark.uses('decoder.introspection')\n"
        "def test_decode(target):\n    assert not target.has('decoder.introspection')\n"
    )
    result = run(suite, "--claims=black-box", "--report-dir", "out")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*claims=black-box*"])
    report = json.loads((suite.path / "out" / "conformance.json").read_text())
    outcomes = {i["id"]: i["outcome"] for i in report["invariants"]}
    assert outcomes["DEMO-001"] == "skipped" and outcomes["DEMO-002"] == "passed"
    assert report["summary"]["skip_reasons"] == {
        "target 'reference' lacks capability 'kv.cache'": 1
    }
    assert "kv.cache" not in report["summary"]["target"]["capabilities"]
    assert report["summary"]["target"]["claims"] == "black-box"
