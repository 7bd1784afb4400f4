"""Build and load the native decode step (``decode_step.c``) with the system C compiler.

The library is compiled on first use into ``$DC_NATIVE_CACHE`` (default
``<tmp>/decode-conformance-native``), in a directory keyed by the source, the flags, the
compiler and the machine, and reused after that. Nothing here is required: without a compiler
(or with ``DC_NATIVE=0``) :func:`load` returns a :class:`NativeLibrary` whose ``lib`` is None and
whose ``reason`` says why, and the decoder runs its torch forward instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from reference_impl.spec_links import implements

SOURCE = Path(__file__).with_name("decode_step.c")
ABI_VERSION = 1
# gnu11: the vector extensions, and multiply-adds contracted to FMA; no -ffast-math (the
# kernels' explicit accumulators are the only reassociation).
FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-pthread")


@dataclass(frozen=True)
class NativeLibrary:
    lib: ctypes.PyDLL | None  # None: unavailable (see reason)
    reason: str  # why unavailable, or the path of the loaded library
    defines: tuple[str, ...] = ()


def cache_dir() -> Path:
    env = os.environ.get("DC_NATIVE_CACHE")
    return Path(env) if env else Path(tempfile.gettempdir()) / "decode-conformance-native"


def _compiler() -> str | None:
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc)


@implements("DEC-063")
def _key(cc: str, defines: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    for part in (*FLAGS, *defines, cc, platform.machine(), platform.node(), platform.processor()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


@implements("DEC-063")
def build(defines: tuple[str, ...] = ()) -> Path:
    """Compile (or find) the library for ``defines`` (e.g. ``("DC_MUTANT_ROPE_HALVES",)``).
    Raises RuntimeError naming the compiler's complaint when it cannot be built."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError(f"no C compiler ({os.environ.get('CC', 'cc')!r} not on PATH)")
    out_dir = cache_dir() / _key(cc, defines)
    lib_path = out_dir / "libdc_decode_step.so"
    if lib_path.exists():
        return lib_path
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".build-{os.getpid()}.so"  # then renamed: parallel builds never collide
    cmd = [cc, *FLAGS, *(f"-D{d}" for d in defines), str(SOURCE), "-o", str(tmp), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    os.replace(tmp, lib_path)
    return lib_path


@implements("DEC-063")
@lru_cache(maxsize=8)
def load(defines: tuple[str, ...] = ()) -> NativeLibrary:
    """The loaded library for ``defines`` (cached per process), or why there is none."""
    if os.environ.get("DC_NATIVE", "1") == "0":
        return NativeLibrary(None, "disabled by DC_NATIVE=0", defines)
    try:
        path = build(defines)
        # PyDLL keeps the GIL during calls: the library's thread pool serves one step at a time.
        lib = ctypes.PyDLL(str(path))
    except (OSError, RuntimeError) as exc:
        return NativeLibrary(None, f"native decode step unavailable: {exc}", defines)
    if lib.dc_abi_version() != ABI_VERSION:
        return NativeLibrary(None, f"{path}: ABI {lib.dc_abi_version()} != {ABI_VERSION}", defines)
    return NativeLibrary(lib, str(path), defines)
