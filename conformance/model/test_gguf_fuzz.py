"""Corrupted GGUF files (GGUF-045): every load ends with a model or a typed load error.

The cases are deterministic corruptions of the ``mha`` fixture: bit flips in the header and in
the metadata / tensor-info region, truncation at every region, huge counts and lengths, and
spliced garbage. Each load runs in its own child process under CPU-time and address-space
limits (``resource.setrlimit``), so a crash, a hang or a runaway allocation fails the case
instead of the suite. One worker process builds the target from ``--target`` once and forks a
child per case: the worker never computes with torch, so each child starts clean.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import select
import signal
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conformance.fixtures.gguf_models import fixture_path

pytestmark = [
    pytest.mark.invariant("GGUF-045"),
    pytest.mark.requires("model.load", "model.errors"),
]

# The codes of spec/model.md's load-error table (GGUF_*): any other outcome fails.
LOAD_CODES = frozenset(
    {
        "GGUF_FILE_NOT_FOUND",
        "GGUF_MALFORMED",
        "GGUF_UNSUPPORTED_ARCH",
        "GGUF_MISSING_KEY",
        "GGUF_KEY_TYPE",
        "GGUF_INVALID_HPARAM",
        "GGUF_UNSUPPORTED_FEATURE",
        "GGUF_UNSUPPORTED_TOKENIZER",
        "GGUF_MISSING_TENSOR",
        "GGUF_UNEXPECTED_TENSOR",
        "GGUF_UNSUPPORTED_TENSOR_TYPE",
        "GGUF_SHAPE_MISMATCH",
        "GGUF_TENSOR_NOT_FINITE",
        "GGUF_SPLIT_MISSING",
        "GGUF_SPLIT_MISMATCH",
        "GGUF_DUPLICATE_TENSOR",
    }
)
CPU_SECONDS = 20  # per load
EXTRA_MEMORY = 512 << 20  # address space a load may add to the worker's own
WALL_SECONDS = 30


def _flip(data: bytes, rng: np.random.Generator, lo: int, hi: int, n: int) -> bytes:
    out = bytearray(data)
    for pos in rng.integers(lo, hi, size=n):
        out[int(pos)] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def _u64(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + value.to_bytes(8, "little") + data[at + 8 :]


def _array_count_offset(data: bytes, key: str) -> int:
    """Offset of the item count of the array-valued key ``key``: key, ARRAY, item type, count."""
    at = data.index(key.encode()) + len(key) + 8
    return at


def corruptions(data: bytes, meta_end: int) -> dict[str, bytes]:
    """Named corrupted variants of the GGUF bytes ``data`` (tensor data starts at
    ``meta_end``)."""
    rng = np.random.default_rng(45)
    cases: dict[str, bytes] = {}
    for i in range(4):
        cases[f"header-flip-{i}"] = _flip(data, rng, 0, 24, 1 + i % 3)
    for i in range(10):
        cases[f"metadata-flip-{i}"] = _flip(data, rng, 24, meta_end, 1 + i % 4)
    for i, cut in enumerate([0, 8, 23, 40, meta_end // 3, meta_end - 5, meta_end + 100]):
        cases[f"truncated-{i}"] = data[:cut]
    huge = [2**63 - 1, 2**64 - 1, 2**32 + 1]
    for i, value in enumerate(huge):
        cases[f"huge-tensor-count-{i}"] = _u64(data, 8, value)
        cases[f"huge-kv-count-{i}"] = _u64(data, 16, value)
    cases["huge-first-key-length"] = _u64(data, 24, 2**62)
    tokens = _array_count_offset(data, "tokenizer.ggml.tokens")
    cases["huge-token-array"] = _u64(data, tokens, 2**60)
    cases["token-array-off-by-one"] = _u64(data, tokens, 509)
    for i in range(3):
        at = int(rng.integers(24, meta_end))
        junk = rng.integers(0, 256, size=int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
        cases[f"spliced-{i}"] = data[:at] + junk + data[at:]
        cases[f"overwritten-{i}"] = data[:at] + junk + data[at + len(junk) :]
    return cases


def _outcome_of_child(engine: Any, path: str, fd: int) -> None:
    """In the forked child: limit CPU and address space, load, report one line on ``fd``."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    limit = pages * os.sysconf("SC_PAGE_SIZE") + EXTRA_MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    try:
        engine.load_model(path)
        line = "loaded"
    except MemoryError:
        line = "out of memory"
    except Exception as exc:
        code = getattr(exc, "code", None)
        line = f"code {code}" if code is not None else f"untyped {type(exc).__name__}: {exc}"
    os.write(fd, line[:500].encode("utf-8", "replace"))


def _worker(spec: str, paths: list[str], conn: Any) -> None:
    """Build the engine once (imports), then fork one child per file; send the outcomes."""
    from conformance.engines import load_engine

    engine = load_engine(spec)  # imports everything the children need, before forking
    outcomes = []
    for path in paths:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(read_fd)
            code = 0
            try:
                _outcome_of_child(engine, path, write_fd)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        ready, _, _ = select.select([read_fd], [], [], WALL_SECONDS)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        chunks = []
        while ready:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        text = b"".join(chunks).decode("utf-8", "replace")
        if not ready:
            text = f"no answer within {WALL_SECONDS} s"
        elif not text:
            text = f"died ({_status(status)})"
        outcomes.append(text)
    conn.send(outcomes)
    conn.close()


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


def run_loads(spec: str, paths: list[Path]) -> list[str]:
    """The outcome of loading each file with the engine ``spec``, in a fresh worker."""
    ctx = multiprocessing.get_context("forkserver")  # a clean parent: no torch threads yet
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(spec, [str(p) for p in paths], send))
    proc.start()
    send.close()
    try:
        if not recv.poll(WALL_SECONDS * (len(paths) + 2)):
            pytest.fail("the fuzz worker gave no answer")
        try:
            outcomes: list[str] = recv.recv()
        except EOFError:
            pytest.fail(f"the fuzz worker died (exit code {proc.exitcode})")
    finally:
        proc.join(5)
        with contextlib.suppress(Exception):
            proc.kill()
    return outcomes


def load_corruptions(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Every corruption of the ``mha`` fixture written under ``tmp_path`` and loaded by the
    engine under test (``--target``): case name -> outcome."""
    source = fixture_path("mha")
    cases = corruptions(source.read_bytes(), int(gguf.GGUFReader(str(source)).data_offset))
    paths = []
    for name, blob in cases.items():
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(blob)
        paths.append(path)
    outcomes = run_loads(str(request.config.getoption("--target")), paths)
    assert len(outcomes) == len(cases)
    return dict(zip(cases, outcomes, strict=True))


@pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="needs fork"
)
def test_corrupted_files_load_or_fail_typed(
    target: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    outcomes = load_corruptions(request, tmp_path)
    bad = {
        name: got
        for name, got in outcomes.items()
        if got != "loaded" and not (got.startswith("code ") and got[5:] in LOAD_CODES)
    }
    assert not bad, f"{len(bad)} of {len(outcomes)} corrupted files: {bad}"
    # The cases must exercise both sides: most corruptions are refused, some still load.
    refused = sum(got != "loaded" for got in outcomes.values())
    assert refused > len(outcomes) // 2, outcomes
    request.node.user_properties.append(("fuzz_cases", len(outcomes)))
