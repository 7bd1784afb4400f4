"""The snapshot extension: top-level snapshots/ tree and the deterministic array format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conformance.snapshots import ArrayAmberSerializer, array_record


def test_float_arrays_round_to_stated_digits() -> None:
    rec = array_record(np.array([[1.0 / 3, -0.0], [np.nan, -np.inf]], dtype=np.float32))
    assert rec["dtype"] == "float32"
    assert rec["shape"] == (2, 2)
    assert rec["rounding"] == "6 significant digits"
    assert rec["values"] == ["[0:4] 0.333333 0 nan -inf"]
    assert array_record(np.array([2.0 / 3]), sig=3)["values"] == ["[0:1] 0.667"]


def test_integer_and_bool_arrays_are_exact() -> None:
    assert array_record(np.arange(3, dtype=np.int64))["values"] == ["[0:3] 0 1 2"]
    assert array_record(np.array([True, False]))["values"] == ["[0:2] 1 0"]
    assert array_record(np.array([7], dtype=np.int8))["rounding"] == "exact"


def test_large_arrays_are_never_truncated() -> None:
    rec = array_record(np.arange(5000, dtype=np.int32))
    text = "\n".join(rec["values"])
    assert "..." not in text
    assert text.count(" ") >= 5000
    assert rec["values"][-1].startswith("[4992:5000] 4992")


def test_torch_tensors_serialize_like_numpy() -> None:
    t = torch.tensor([[1.5, 2.25]], dtype=torch.float16)
    rec = array_record(t)
    assert rec["dtype"] == "float16"
    assert rec["values"] == ["[0:2] 1.5 2.25"]


def test_serializer_is_deterministic_and_readable() -> None:
    data = {"logits": np.array([0.1, 0.2], dtype=np.float32), "n": np.int32(3)}
    a = ArrayAmberSerializer.serialize(data)
    b = ArrayAmberSerializer.serialize(
        {"n": np.int32(3), "logits": np.array([0.1, 0.2], dtype=np.float32)}
    )
    assert a == b
    assert "'dtype': 'float32'" in a and "[0:2] 0.1 0.2" in a
    assert "'n': 3" in a


def test_snapshots_land_in_the_top_level_tree(pytester: pytest.Pytester, tmp_path: Path) -> None:
    root = tmp_path / "snaps"
    (pytester.path / "conformance_like").mkdir()
    (pytester.path / "conformance_like" / "conftest.py").write_text(
        "import pytest\n"
        "from conformance.snapshots import ConformanceSnapshotExtension\n"
        "@pytest.fixture\n"
        "def snapshot(snapshot):\n"
        "    return snapshot.use_extension(ConformanceSnapshotExtension)\n"
    )
    (pytester.path / "conformance_like" / "test_snap.py").write_text(
        "import numpy as np\ndef test_arr(snapshot):\n    assert snapshot == np.arange(4)\n"
    )
    pytester._monkeypatch.setenv("DC_SNAPSHOT_ROOT", str(root))
    opts = (
        "-p",
        "no:cacheprovider",
        "--snapshot-default-extension=conformance.snapshots.ConformanceSnapshotExtension",
    )
    first = pytester.runpytest_subprocess("conformance_like", "--snapshot-update", *opts)
    assert first.ret == 0
    files = list(root.rglob("*.ambr"))
    assert len(files) == 1 and files[0].name == "test_snap.ambr"
    assert "[0:4] 0 1 2 3" in files[0].read_text()
    assert pytester.runpytest_subprocess("conformance_like", *opts).ret == 0
    # A changed value fails; an unused snapshot fails the run.
    (pytester.path / "conformance_like" / "test_snap.py").write_text(
        "import numpy as np\ndef test_arr(snapshot):\n    assert snapshot == np.arange(5)\n"
    )
    assert pytester.runpytest_subprocess("conformance_like", *opts).ret == 1
    (pytester.path / "conformance_like" / "test_snap.py").write_text(
        "def test_other():\n    pass\n"
    )
    unused = pytester.runpytest_subprocess("conformance_like", *opts)
    assert unused.ret == 1
    unused.stdout.fnmatch_lines(["*1 snapshot unused*"])
