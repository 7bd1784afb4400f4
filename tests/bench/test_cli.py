"""``python -m tools.bench``: exit statuses, messages and the files it writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tools.bench.cli import main
from tools.bench.compare import synthetic_run
from tools.bench.runs import save_run

ROOT = Path(__file__).resolve().parents[2]
BASE = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03]


def _saved(tmp_path: Path, label: str, samples: dict[str, list[float]]) -> str:
    return str(save_run(synthetic_run(label, samples), tmp_path / label))


def test_compare_two_saved_runs_writes_markdown_json_and_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _saved(tmp_path, "aaaaaaa", {"t.py::x": BASE, "t.py::y": BASE})
    b = _saved(tmp_path, "bbbbbbb", {"t.py::x": BASE, "t.py::y": [1.5 * v for v in BASE]})
    out = tmp_path / "reports"
    assert main(["compare", a, b, "--report-dir", str(out)]) == 1
    md = (out / "compare.md").read_text()
    assert "**FAIL**: 1 slower" in md
    assert "two saved runs (unpaired)" in md
    assert (out / "compare.png").stat().st_size > 1000
    assert (out / "compare.json").is_file()
    assert "FAIL: 1 case(s) slower beyond 10%" in capsys.readouterr().err


def test_compare_without_a_change_passes(tmp_path: Path) -> None:
    a = _saved(tmp_path, "aaaaaaa", {"t.py::x": BASE})
    b = _saved(tmp_path, "bbbbbbb", {"t.py::x": list(reversed(BASE))})
    assert main(["compare", a, b, "--report-dir", str(tmp_path / "r"), "--no-chart"]) == 0


def test_strict_fails_on_inconclusive(tmp_path: Path) -> None:
    a = _saved(tmp_path, "aaaaaaa", {"t.py::x": [1.0, 1.0, 1.0, 1.0]})
    b = _saved(tmp_path, "bbbbbbb", {"t.py::x": [0.6, 1.9, 1.8, 1.7]})
    args = ["compare", a, b, "--report-dir", str(tmp_path / "r"), "--no-chart"]
    assert main(args) == 0
    assert main([*args, "--strict"]) == 1


def test_differing_cases_exit_2_and_name_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _saved(tmp_path, "aaaaaaa", {"t.py::x": BASE, "t.py::old": BASE})
    b = _saved(tmp_path, "bbbbbbb", {"t.py::x": BASE, "t.py::new": BASE})
    assert main(["compare", a, b, "--report-dir", str(tmp_path / "r"), "--no-chart"]) == 2
    err = capsys.readouterr().err
    assert "only in BASE (1): t.py::old" in err
    assert "only in HEAD (1): t.py::new" in err
    args = ["compare", a, b, "--report-dir", str(tmp_path / "r"), "--no-chart", "--common-only"]
    assert main(args) == 0
    assert "cases only in BASE (not compared): t.py::old" in (tmp_path / "r/compare.md").read_text()


def test_saved_runs_by_name(tmp_path: Path) -> None:
    save_dir = tmp_path / "runs"
    for label, created in (
        ("aaaaaaa", "2025-01-01T00:00:00Z"),
        ("bbbbbbb", "2025-01-02T00:00:00Z"),
    ):
        run = synthetic_run(label, {"t.py::x": BASE})
        run.created = created
        save_run(run, save_dir)
    args = ["--save-dir", str(save_dir), "--report-dir", str(tmp_path / "r"), "--no-chart"]
    assert main(["compare", "run:latest~1", "run:latest", *args]) == 0
    md = (tmp_path / "r/compare.md").read_text()
    assert "HEAD bbbbbbb vs BASE aaaaaaa" in md


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (["no-such-commit-xyz"], "unknown commit 'no-such-commit-xyz'"),
        (["run:latest", "run:latest"], "no saved runs in"),
        (["missing.json", "HEAD"], "unknown commit 'missing.json'"),
    ],
)
def test_bad_refs_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refs: list[str], message: str
) -> None:
    args = ["--save-dir", str(tmp_path / "none"), "--report-dir", str(tmp_path / "r")]
    assert main(["compare", *refs, *args]) == 2
    assert message in capsys.readouterr().err


def test_bad_settings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "HEAD", "--threshold", "10"]) == 2
    assert "fraction" in capsys.readouterr().err
    assert main(["compare", "HEAD", "--rounds", "0"]) == 2


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_two_commits_interleaved_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A throwaway repository with two commits: the second makes the loop case several times
    slower. The comparison exports both, interleaves rounds, and flags the case. (Three rounds
    at 75% confidence keep this test to 8 short processes.)"""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "tools", repo / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    case = repo / "tools" / "bench" / "cases" / "test_floor.py"
    _git(repo.parent, "init", "-q", str(repo))
    for k, v in (("user.email", "bench@example.invalid"), ("user.name", "bench")):
        _git(repo, "config", k, v)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    text = case.read_text()
    slow = text.replace("        acc += i & 7\n", "        acc += i & 7\n        _ = [i] * 8\n")
    assert slow != text
    case.write_text(slow)
    _git(repo, "commit", "-qam", "slower loop")
    monkeypatch.chdir(repo)
    out = tmp_path / "r"
    rc = main(
        [
            "compare",
            "HEAD~1",
            "HEAD",
            "-k",
            "python_loop",
            "--rounds",
            "3",
            "--confidence",
            "0.75",
            "--inner-rounds",
            "3",
            "--max-time",
            "0.02",
            "--extra-rounds",
            "0",
            "--report-dir",
            str(out),
            "--no-chart",
        ]
    )
    md = (out / "compare.md").read_text()
    assert rc == 1, md
    assert "interleaved in one job" in md
    assert "`test_floor.py::test_python_loop` | floor" in md and "slower" in md
    assert _git(repo, "worktree", "list").count("\n") == 0  # nothing registered or left behind


@pytest.mark.parametrize(
    ("argv", "timer", "noted"),
    [
        ([], "cpu", False),
        (["--threads", "2"], "wall", False),
        (["--threads", "2", "--timer", "cpu"], "cpu", True),
        (["--timer", "wall"], "wall", False),
    ],
)
def test_timer_default_follows_threads(
    argv: list[str], timer: str, noted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # CPU time sums every thread's time: with several threads it is no throughput measure.
    from tools.bench.cli import _settings, parser

    settings = _settings(parser().parse_args(["run", *argv]))
    assert settings.timer == timer
    assert ("sums the CPU time" in capsys.readouterr().err) is noted
