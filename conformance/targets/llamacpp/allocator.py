"""The allocator area of the ``llamacpp`` target: the real ggml allocator (``ggml-alloc.c`` in the
``libggml-base.so`` that llama-cpp-python ships) driven through ctypes, so the suite can compare
the reference allocator with ggml placement for placement (spec/allocator.md).

How a graph description reaches ggml
------------------------------------
* One ``no_alloc`` ggml context per graph handed to the planner. Every :class:`Tensor` becomes a
  ``ggml_tensor`` whose fields are written directly (type, ``ne``/``nb``, op, flags, ``src``,
  ``view_src``/``view_offs``): ggml's op constructors would check shapes, the allocator does not.
  The graph's ``nodes``/``leafs`` arrays are written in exactly the description's order.
* A tensor's allocation size is ``Tensor.size``: the dummy buffer type's ``get_alloc_size``
  returns it. ggml aborts when that exceeds ``ggml_nbytes`` for an op that may not grow, so such
  a description is refused before ggml sees it.
* A tensor with ``has_data`` gets a fake non-NULL ``data`` pointer; when it is not a view it also
  lives on an "external" buffer (as weights loaded by ``alloc_ctx_tensors`` do), so that ggml can
  initialise views of it instead of aborting.
* Buffer types are dummy backends built from Python callbacks (alignment, max size, allocation
  size, ``alloc_buffer``); buffers own no memory, each gets a distinct fake base address.
  Equal names in one planner are the same ggml buffer type, so ggml shares their allocator.
* Placements are read back from each tensor's ``buffer``/``data`` as ggml set them: the buffer
  gives the chunk (its index in the planner's virtual buffer, read from the private
  ``ggml_gallocr`` struct of this exact ggml version, checked at load time), ``data - base`` the
  offset, and the plan entry the tensor was assigned from gives its buffer id (a type listed
  twice shares one virtual buffer, so the buffer alone cannot tell the ids apart).

Inputs that would kill the process
----------------------------------
ggml answers many bad inputs with ``abort()`` or a segfault. The adapter refuses each one it can
predict, before calling ggml, with a ``RuntimeError`` whose message starts with ``"ggml would
abort:"``: an alignment that is 0 or not a power of two; a buffer id out of range or negative, or
an id list of the wrong length; a planner over no buffer type or used after ``release``; a linear
allocation past the buffer end; ``alloc_ctx_tensors`` without ``no_alloc``, or with a view that
precedes its root; an allocation size above ``ggml_nbytes`` for an op that may not grow, or below
it; a graph reaching more tensors than ggml's hash set holds; and an ``alloc_graph`` whose address
assignment, replayed against the stored plan and the buffers ggml holds, would fail: after
``reserve_size`` (no buffers), a stale plan entry for a leaf (ggml checks only nodes and their
sources before reusing a plan: an entry for a tensor with data, or too small for the leaf), and a
zero-byte tensor in a zero-byte chunk that is visited twice or viewed (its ``data`` stays NULL).

Known limits: the 257th free block of a chunk cannot happen with at most 255 tensors to place;
above that the reference planner predicts it, so a divergence there could still abort. Sizes,
offsets and strides must be below 2**62 and alignments at most 2**32 (fake addresses must not
wrap). A tensor type is one of ``i8 i16 i32 f16 f32``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import itertools
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_impl.allocator.context import CtxAllocation
from reference_impl.allocator.graph import Graph, Tensor
from reference_impl.allocator.planner import BufferType, Placement

GGML_VERSION = "0.25.3"
GGML_COMMIT = "0c1e570"  # the llama.cpp commit vendored by llama-cpp-python 0.3.36

SIZE_MAX = 2**64 - 1
MAX_SRC = 10
MAX_CHUNKS = 16  # GGML_VBUFFER_MAX_CHUNKS
MAX_FREE_BLOCKS = 256
OP_COUNT = 101  # GGML_OP_COUNT of this version (ggml_op_name reads past its table beyond it)
TENSOR_BYTES = 336
FLAG_INPUT = 1
FLAG_OUTPUT = 2
# enum ggml_type values (installed include/ggml.h), checked against ggml_type_name at load time
TYPES = {"f32": 0, "f16": 1, "i8": 24, "i16": 25, "i32": 26}
# ops whose allocation size may exceed ggml_nbytes without ggml aborting: the empty ops
# (ggml_op_is_empty, static in ggml-impl.h) plus ggml_op_alloc_size_may_expand, read at load time
EMPTY_OPS = frozenset({"NONE", "RESHAPE", "TRANSPOSE", "VIEW", "PERMUTE"})
SIZE_LIMIT = 2**62  # adapter limit on any size or offset (fake addresses must not wrap)

ABORT = "ggml would abort: "


def _refuse(why: str) -> RuntimeError:
    return RuntimeError(ABORT + why)


# -- ABI (x86-64, ggml 0.25.3) -----------------------------------------------------------------
class _TensorStruct(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("_pad", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


class _InitParams(ctypes.Structure):
    _fields_ = [
        ("mem_size", ctypes.c_size_t),
        ("mem_buffer", ctypes.c_void_p),
        ("no_alloc", ctypes.c_bool),
    ]


class _Tallocr(ctypes.Structure):
    _fields_ = [
        ("buffer", ctypes.c_void_p),
        ("base", ctypes.c_void_p),
        ("alignment", ctypes.c_size_t),
        ("offset", ctypes.c_size_t),
    ]


class _BuftIface(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_void_p)
        for n in (
            "get_name",
            "alloc_buffer",
            "get_alignment",
            "get_max_size",
            "get_alloc_size",
            "is_host",
        )
    ]


class _BuftStruct(ctypes.Structure):
    _fields_ = [("iface", _BuftIface), ("device", ctypes.c_void_p), ("context", ctypes.c_void_p)]


class _BufIface(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_void_p)
        for n in (
            "free_buffer",
            "get_base",
            "init_tensor",
            "memset_tensor",
            "set_tensor",
            "get_tensor",
            "set_tensor_2d",
            "get_tensor_2d",
            "cpy_tensor",
            "clear",
            "reset",
        )
    ]


class _BufferStruct(ctypes.Structure):  # struct ggml_backend_buffer (ggml-backend-impl.h)
    _fields_ = [
        ("iface", _BufIface),
        ("buft", ctypes.c_void_p),
        ("context", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("usage", ctypes.c_int),
    ]


class _Cgraph(ctypes.Structure):  # the head of struct ggml_cgraph (ggml-impl.h)
    _fields_ = [
        ("size", ctypes.c_int),
        ("n_nodes", ctypes.c_int),
        ("n_leafs", ctypes.c_int),
        ("nodes", ctypes.c_void_p),
        ("grads", ctypes.c_void_p),
        ("grad_accs", ctypes.c_void_p),
        ("leafs", ctypes.c_void_p),
    ]


class _Address(ctypes.Structure):  # struct buffer_address (ggml-alloc.c)
    _fields_ = [("chunk", ctypes.c_int), ("offset", ctypes.c_size_t)]


class _Slot(ctypes.Structure):  # struct tensor_alloc (ggml-alloc.c)
    _fields_ = [("buffer_id", ctypes.c_int), ("addr", _Address), ("size_max", ctypes.c_size_t)]


class _NodeSlots(ctypes.Structure):  # struct node_alloc (ggml-alloc.c)
    _fields_ = [("dst", _Slot), ("src", _Slot * MAX_SRC)]


class _Gallocr(ctypes.Structure):  # struct ggml_gallocr (ggml-alloc.c)
    _fields_ = [
        ("bufts", ctypes.c_void_p),
        ("buffers", ctypes.c_void_p),  # struct vbuffer ** (a vbuffer is 16 buffer pointers)
        ("buf_tallocs", ctypes.c_void_p),
        ("n_buffers", ctypes.c_int),
        ("hash_size", ctypes.c_size_t),
        ("hash_used", ctypes.c_void_p),
        ("hash_keys", ctypes.c_void_p),
        ("hash_values", ctypes.c_void_p),
        ("node_allocs", ctypes.c_void_p),
        ("n_nodes", ctypes.c_int),
        ("leaf_allocs", ctypes.c_void_p),
        ("n_leafs", ctypes.c_int),
    ]


_LAYOUT = {
    _TensorStruct: (
        TENSOR_BYTES,
        {
            "buffer": 8,
            "ne": 16,
            "nb": 48,
            "op": 80,
            "flags": 148,
            "src": 152,
            "view_src": 232,
            "view_offs": 240,
            "data": 248,
        },
    ),
    _BuftStruct: (64, {"device": 48, "context": 56}),
    _BufferStruct: (120, {"buft": 88, "context": 96, "size": 104, "usage": 112}),
    _Cgraph: (48, {"n_nodes": 4, "n_leafs": 8, "nodes": 16, "leafs": 40}),
    _Slot: (32, {"addr": 8, "size_max": 24}),
    _NodeSlots: (352, {"src": 32}),
    _Gallocr: (
        96,
        {
            "buffers": 8,
            "n_buffers": 24,
            "node_allocs": 64,
            "n_nodes": 72,
            "leaf_allocs": 80,
            "n_leafs": 88,
        },
    ),
}


# -- callbacks ---------------------------------------------------------------------------------
# The callback thunks live as long as the process (module globals); they find their Python state
# through the buffer-type struct's address. The registry holds weak references so a dropped
# planner is finalised (its __del__ frees the ggml objects first, so ggml never calls back into
# a dead buffer type).
_REGISTRY: weakref.WeakValueDictionary[int, _Buft] = weakref.WeakValueDictionary()
_CALLBACK_ERRORS: list[str] = []
_DEFAULT_NAME = ctypes.create_string_buffer(b"dc-dummy")
_FALLBACK_BASE = 1 << 44  # returned only if a get_base callback fails (reported right after)
_base_serial = itertools.count()


def _next_base() -> int:
    """A distinct fake base address per buffer: multiples of 2**32 well below 2**63, so base +
    size never wraps and every alignment the adapter accepts divides it."""
    return ((next(_base_serial) % (1 << 20)) + 1) << 32


def _safe(default: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A callback never raises into C (ctypes would hand C an undefined value): it records the
    error, returns ``default``, and the adapter raises once ggml has returned."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def guarded(*args: Any) -> Any:
            try:
                return fn(*args)
            except BaseException as exc:  # nothing may cross into C
                _CALLBACK_ERRORS.append(f"{fn.__name__}: {exc!r}")
                return default

        return guarded

    return wrap


def _check_callbacks() -> None:
    if _CALLBACK_ERRORS:
        errors = "; ".join(_CALLBACK_ERRORS)
        _CALLBACK_ERRORS.clear()
        raise RuntimeError(f"a ggml callback of the adapter failed: {errors}")


@_safe(ctypes.addressof(_DEFAULT_NAME))
def _cb_get_name(buft: int) -> int:
    return ctypes.addressof(_REGISTRY[buft].name)


@_safe(None)
def _cb_alloc_buffer(buft: int, size: int) -> int | None:
    st = _REGISTRY[buft]
    buf = _lib().buffer_init(buft, _next_base(), size)
    if st.on_alloc is not None:
        st.on_alloc(buf, size)
    return buf


@_safe(1)
def _cb_get_alignment(buft: int) -> int:
    return _REGISTRY[buft].alignment


@_safe(SIZE_MAX)
def _cb_get_max_size(buft: int) -> int:
    return _REGISTRY[buft].max_size


@_safe(0)
def _cb_get_alloc_size(buft: int, tensor: int) -> int:
    sizes = _REGISTRY[buft].sizes
    size = None if sizes is None else sizes.get(tensor)
    return _lib().dll.ggml_nbytes(tensor) if size is None else size


@_safe(_FALLBACK_BASE)
def _cb_get_base(buffer: int) -> int:
    base = _BufferStruct.from_address(buffer).context  # the context of our buffers is their base
    if not base:
        raise RuntimeError("buffer without a base")
    return int(base)


_GET_NAME = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_ALLOC_BUFFER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_GET_SIZE = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)
_ALLOC_SIZE = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
_GET_BASE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


class _Lib:
    """``libggml-base.so`` with the signatures the adapter uses, checked against the version whose
    struct layouts this module encodes."""

    def __init__(self, path: Path) -> None:
        # before anything can abort: no gdb/lldb backtrace attempts from a dying process
        os.environ["GGML_NO_BACKTRACE"] = "1"
        self.path = path
        dll = self.dll = ctypes.CDLL(str(path))
        vp, sz, i32, b = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_bool
        pint, psz = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
        sigs: dict[str, tuple[Any, list[Any]]] = {
            "ggml_version": (ctypes.c_char_p, []),
            "ggml_commit": (ctypes.c_char_p, []),
            "ggml_init": (vp, [_InitParams]),
            "ggml_free": (None, [vp]),
            "ggml_tensor_overhead": (sz, []),
            "ggml_graph_overhead_custom": (sz, [sz, b]),
            "ggml_new_tensor_1d": (vp, [vp, i32, ctypes.c_int64]),
            "ggml_set_name": (vp, [vp, ctypes.c_char_p]),
            "ggml_nbytes": (sz, [vp]),
            "ggml_op_name": (ctypes.c_char_p, [i32]),
            "ggml_type_name": (ctypes.c_char_p, [i32]),
            "ggml_type_size": (sz, [i32]),
            "ggml_op_alloc_size_may_expand": (b, [i32]),
            "ggml_op_can_inplace": (b, [i32]),
            "ggml_new_graph_custom": (vp, [vp, sz, b]),
            "ggml_backend_buffer_init": (vp, [vp, _BufIface, vp, sz]),
            "ggml_backend_buffer_free": (None, [vp]),
            "ggml_backend_buffer_get_base": (vp, [vp]),
            "ggml_backend_buffer_get_size": (sz, [vp]),
            "ggml_tallocr_new": (_Tallocr, [vp]),
            "ggml_tallocr_alloc": (i32, [ctypes.POINTER(_Tallocr), vp]),
            "ggml_gallocr_new_n": (vp, [ctypes.POINTER(vp), i32]),
            "ggml_gallocr_free": (None, [vp]),
            "ggml_gallocr_reserve_n": (b, [vp, vp, pint, pint]),
            "ggml_gallocr_reserve_n_size": (None, [vp, vp, pint, pint, psz]),
            "ggml_gallocr_alloc_graph": (b, [vp, vp]),
            "ggml_gallocr_get_buffer_size": (sz, [vp, i32]),
            "ggml_backend_alloc_ctx_tensors_from_buft": (vp, [vp, vp]),
            "ggml_backend_alloc_ctx_tensors_from_buft_size": (sz, [vp, vp]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(dll, name)
            fn.restype, fn.argtypes = restype, argtypes

        version = dll.ggml_version().decode()
        commit = dll.ggml_commit().decode()
        if version != GGML_VERSION or not commit.startswith(GGML_COMMIT):
            raise RuntimeError(
                f"{path}: ggml {version} (commit {commit}); the allocator adapter encodes the struct "
                f"layouts of ggml {GGML_VERSION} (commit {GGML_COMMIT}, llama-cpp-python 0.3.36) "
                "and cannot drive another version"
            )
        for struct, (size, offsets) in _LAYOUT.items():
            got = {f: getattr(struct, f).offset for f in offsets}
            if ctypes.sizeof(struct) != size or got != offsets:
                raise RuntimeError(
                    f"{struct.__name__}: layout {ctypes.sizeof(struct)} {got} != {size} {offsets}"
                )
        if dll.ggml_tensor_overhead() != TENSOR_BYTES + 32:
            raise RuntimeError(
                f"ggml_tensor_overhead() = {dll.ggml_tensor_overhead()}, expected {TENSOR_BYTES + 32}"
            )
        for tname, tid in TYPES.items():
            if dll.ggml_type_name(tid).decode() != tname:
                raise RuntimeError(
                    f"ggml type {tid} is {dll.ggml_type_name(tid)!r}, expected {tname!r}"
                )
        self.type_size = {t: int(dll.ggml_type_size(i)) for t, i in TYPES.items()}
        self.ops = {dll.ggml_op_name(i).decode(): i for i in range(OP_COUNT)}
        if self.ops.get("NONE") != 0 or self.ops.get("GLU") != OP_COUNT - 1:
            raise RuntimeError("ggml op table does not match GGML_OP_COUNT = 101")
        self.may_grow = EMPTY_OPS | {
            n for n, i in self.ops.items() if dll.ggml_op_alloc_size_may_expand(i)
        }
        self.in_place = frozenset(n for n, i in self.ops.items() if dll.ggml_op_can_inplace(i))
        self.tensor_overhead = int(dll.ggml_tensor_overhead())

        self.callbacks = (
            _GET_NAME(_cb_get_name),
            _ALLOC_BUFFER(_cb_alloc_buffer),
            _GET_SIZE(_cb_get_alignment),
            _GET_SIZE(_cb_get_max_size),
            _ALLOC_SIZE(_cb_get_alloc_size),
            _GET_BASE(_cb_get_base),
        )
        addr = [ctypes.cast(cb, ctypes.c_void_p).value for cb in self.callbacks]
        self.cb_get_name, self.cb_alloc_buffer, self.cb_alignment, self.cb_max_size = addr[:4]
        self.cb_alloc_size, cb_base = addr[4], addr[5]
        self.buf_iface = _BufIface(get_base=cb_base)  # every other slot optional or never called

    def buffer_init(self, buft: int, base: int, size: int) -> int:
        buf = self.dll.ggml_backend_buffer_init(buft, self.buf_iface, base, size)
        if not buf:
            raise RuntimeError("ggml_backend_buffer_init returned NULL")
        return int(buf)

    def new_context(self, n_tensors: int, graph_size: int = 0) -> int:
        mem = n_tensors * self.tensor_overhead + 4096
        if graph_size:
            mem += self.dll.ggml_graph_overhead_custom(graph_size, False)
        ctx = self.dll.ggml_init(_InitParams(mem, None, True))
        if not ctx:
            raise RuntimeError("ggml_init failed")
        return int(ctx)

    def base_of(self, buffer: int) -> int:
        return int(self.dll.ggml_backend_buffer_get_base(buffer) or 0)


def library_path() -> Path:
    """``libggml-base.so`` of the installed llama-cpp-python (found without importing it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llama-cpp-python is not installed (the 'llamacpp' extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / "lib" / "libggml-base.so"
    if not path.exists():
        raise RuntimeError(f"{path} not found: llama-cpp-python without a bundled ggml")
    return path


@functools.cache
def _lib() -> _Lib:
    return _Lib(library_path())


# -- buffer types ------------------------------------------------------------------------------
class _Buft:
    """A dummy backend buffer type: a ``ggml_backend_buffer_type`` struct whose interface is the
    module's callbacks, plus the constants they answer with."""

    def __init__(
        self,
        lib: _Lib,
        name: str,
        alignment: int,
        max_size: int,
        sizes: dict[int, int] | None = None,
        on_alloc: Callable[[int, int], None] | None = None,
    ) -> None:
        self.name = ctypes.create_string_buffer(name.encode("utf-8", "replace")[:63])
        self.alignment = alignment
        self.max_size = max_size
        self.sizes = sizes  # tensor address -> allocation size (None: ggml_nbytes)
        self.on_alloc = on_alloc  # (buffer, size) after each alloc_buffer
        self.struct = _BuftStruct()
        iface = self.struct.iface
        iface.get_name = lib.cb_get_name
        iface.alloc_buffer = lib.cb_alloc_buffer
        iface.get_alignment = lib.cb_alignment
        iface.get_max_size = lib.cb_max_size
        iface.get_alloc_size = lib.cb_alloc_size if sizes is not None else None
        self.address = ctypes.addressof(self.struct)
        _REGISTRY[self.address] = self

    def close(self) -> None:
        _REGISTRY.pop(self.address, None)


class _External:
    """Memory outside the allocators: the buffer of tensors that already have data."""

    def __init__(self, lib: _Lib) -> None:
        self.buft = _Buft(lib, "dc-external", 1, SIZE_MAX)
        self.base = _next_base()
        self.buffer = lib.buffer_init(self.buft.address, self.base, 1 << 32)
        self._next = itertools.count()

    def data(self) -> int:
        return self.base + 64 * (next(self._next) % (1 << 25))

    def free(self, lib: _Lib) -> None:
        if self.buffer:
            lib.dll.ggml_backend_buffer_free(self.buffer)
            self.buffer = 0
        self.buft.close()


def _check_alignment(alignment: int, what: str) -> None:
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _refuse(
            f"{what}: alignment {alignment!r} is not a power of two (ggml divides by it and "
            "rounds with a bit mask)"
        )
    if alignment > 1 << 32:
        raise RuntimeError(f"adapter limit: {what}: alignment {alignment} above 2**32")


def _check_size(value: int, what: str) -> None:
    if not isinstance(value, int) or not 0 <= value < SIZE_LIMIT:
        raise RuntimeError(f"adapter limit: {what} = {value!r} outside [0, 2**62)")


# -- graph descriptions as ggml tensors -----------------------------------------------------------
def _check_description(tensors: Iterable[Tensor], *, with_src: bool) -> dict[str, Tensor]:
    by_name: dict[str, Tensor] = {}
    for t in tensors:
        if t.name in by_name:
            raise RuntimeError(f"tensor name {t.name!r} used twice")
        by_name[t.name] = t
    for t in by_name.values():
        _check_size(t.size, f"{t.name}: size")
        _check_size(t.view_offs, f"{t.name}: view_offs")
        lay = t.shape
        if lay.type not in TYPES:
            raise RuntimeError(f"{t.name}: type {lay.type!r} is not one of {sorted(TYPES)}")
        if any(not 0 <= n < 2**63 for n in lay.ne) or any(not 0 <= n < SIZE_LIMIT for n in lay.nb):
            raise RuntimeError(f"{t.name}: layout {lay} outside int64 ne / size_t nb")
        if with_src:
            if len(t.src) > MAX_SRC:
                raise RuntimeError(f"{t.name}: {len(t.src)} sources, ggml has {MAX_SRC}")
            for s in t.src:
                if s not in by_name:
                    raise RuntimeError(f"{t.name}: unknown source {s!r}")
        if t.view_src is not None:
            root = by_name.get(t.view_src)
            if root is None:
                raise RuntimeError(f"{t.name}: unknown view source {t.view_src!r}")
            if root.view_src is not None:
                raise RuntimeError(
                    f"{t.name}: view source {root.name!r} is a view (ggml names the root)"
                )
    return by_name


@dataclass
class _Ctx:
    """One ggml context holding a description's tensors."""

    ctx: int
    ptr: dict[str, int]
    nbytes: dict[str, int]
    cgraph: int = 0


def _make_tensors(
    lib: _Lib,
    by_name: dict[str, Tensor],
    order: Sequence[str],
    sizes: dict[int, int],
    ext: _External,
    *,
    graph_size: int = 0,
    with_src: bool = True,
) -> _Ctx:
    dll = lib.dll
    ctx = lib.new_context(len(order), graph_size)
    made = _Ctx(ctx, {}, {})
    try:
        for name in order:
            t = by_name[name]
            p = dll.ggml_new_tensor_1d(ctx, TYPES[t.shape.type], 1)
            if not p:
                raise RuntimeError("ggml_new_tensor_1d failed")
            made.ptr[name] = int(p)
            dll.ggml_set_name(p, name.encode("utf-8", "replace")[:63])
        for name in order:
            t, p = by_name[name], made.ptr[name]
            s = _TensorStruct.from_address(p)
            lay = t.shape
            for i in range(4):
                s.ne[i] = lay.ne[i]
                s.nb[i] = lay.nb[i]
            if t.op not in lib.ops:
                raise RuntimeError(f"{name}: {t.op!r} is not a ggml op")
            s.op = lib.ops[t.op]
            s.flags = (FLAG_INPUT if t.input else 0) | (FLAG_OUTPUT if t.output else 0)
            if with_src:
                for j, src in enumerate(t.src):
                    s.src[j] = made.ptr[src]
            if t.view_src is not None:
                s.view_src = made.ptr[t.view_src]
                s.view_offs = t.view_offs
            if t.has_data:
                s.data = ext.data()
                if t.view_src is None:
                    s.buffer = ext.buffer
            made.nbytes[name] = int(dll.ggml_nbytes(p))
    except BaseException:
        dll.ggml_free(ctx)
        raise
    return made


def _check_alloc_sizes(
    lib: _Lib, by_name: dict[str, Tensor], made: _Ctx, names: Iterable[str], sizes: dict[int, int]
) -> None:
    """ggml asks the buffer type for the allocation size of every tensor it places (not views,
    not tensors with data) and aborts when it is above ggml_nbytes for an op that may not grow;
    ggml also requires it to be at least ggml_nbytes (asserted in debug builds, and an in-place
    reuse of a smaller parent asserts in release builds too). The sizes that pass are what the
    buffer type's get_alloc_size answers; any other tensor gets ggml_nbytes."""
    for name in names:
        t = by_name[name]
        if t.is_view or t.has_data:
            continue
        nbytes = made.nbytes[name]
        if t.size < nbytes:
            raise _refuse(
                f"{name}: allocation size {t.size} below ggml_nbytes {nbytes} of its layout "
                "(ggml requires get_alloc_size >= ggml_nbytes)"
            )
        if t.size > nbytes and t.op not in lib.may_grow:
            raise _refuse(
                f"{name}: allocation size {t.size} above ggml_nbytes {nbytes} for op {t.op} "
                "(GGML_ASSERT in ggml_backend_buft_get_alloc_size; only empty ops and "
                "ggml_op_alloc_size_may_expand ops may grow)"
            )
        sizes[made.ptr[name]] = t.size


# -- the graph planner -------------------------------------------------------------------------
class GgmlPlanner:
    """A ``ggml_gallocr`` over dummy buffer types (role ``planner``)."""

    def __init__(self, lib: _Lib, bufts: Sequence[BufferType]) -> None:
        self._lib = lib
        self._galloc = 0
        self._ctx: _Ctx | None = None
        self._bufts: list[_Buft] = []
        self._ext: _External | None = None
        self._released = False
        self._sizes: dict[int, int] = {}  # tensor address -> allocation size (this graph's)
        if not bufts:
            raise _refuse("a planner needs at least one buffer type (node buffer id 0 must exist)")
        self.bufts = list(bufts)
        self._allocations: list[tuple[int, int]] = []
        self._placements: dict[str, Placement | None] = {}
        first: dict[str, int] = {}
        ptrs: list[int] = []
        for i, bt in enumerate(self.bufts):
            _check_alignment(bt.alignment, f"bufts[{i}]")
            if not isinstance(bt.max_size, int) or not 0 <= bt.max_size <= SIZE_MAX:
                raise RuntimeError(f"bufts[{i}]: max size {bt.max_size!r} outside [0, SIZE_MAX]")
            j = first.setdefault(bt.name, i)
            if j != i:
                if self.bufts[j] != bt:
                    raise RuntimeError(
                        f"bufts[{i}] is named {bt.name!r} like bufts[{j}] but differs from it "
                        "(one ggml buffer type has one alignment and one max size)"
                    )
                ptrs.append(ptrs[j])
                continue
            buft = _Buft(
                lib,
                bt.name,
                bt.alignment,
                bt.max_size,
                self._sizes,
                functools.partial(_log_alloc, self._allocations, i),
            )
            self._bufts.append(buft)
            ptrs.append(buft.address)
        self._ext = _External(lib)
        arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self._galloc = int(lib.dll.ggml_gallocr_new_n(arr, len(ptrs)) or 0)
        if not self._galloc:
            raise RuntimeError("ggml_gallocr_new_n failed")

    # -- protocol --------------------------------------------------------------------------------
    def reserve(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> bool:
        made, nodes, leafs = self._prepare(graph, node_buffer_ids, leaf_buffer_ids)
        ok = bool(self._lib.dll.ggml_gallocr_reserve_n(self._galloc, made.cgraph, nodes, leafs))
        _check_callbacks()
        return ok

    def reserve_size(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> list[int]:
        made, nodes, leafs = self._prepare(graph, node_buffer_ids, leaf_buffer_ids)
        sizes = (ctypes.c_size_t * len(self.bufts))()
        self._lib.dll.ggml_gallocr_reserve_n_size(self._galloc, made.cgraph, nodes, leafs, sizes)
        _check_callbacks()
        return [int(s) for s in sizes]

    def alloc_graph(self, graph: Graph) -> bool:
        dll = self._lib.dll
        made, _, _ = self._prepare(graph, None, None)
        if self._needs_new_plan(graph, made):
            if len(self.bufts) != 1:
                ok = bool(dll.ggml_gallocr_alloc_graph(self._galloc, made.cgraph))  # refuses
                _check_callbacks()
                return ok
            # what ggml_gallocr_alloc_graph does first on a single buffer; done here so the plan
            # can be checked against the buffers before ggml assigns addresses from it
            ok = bool(dll.ggml_gallocr_reserve_n(self._galloc, made.cgraph, None, None))
            _check_callbacks()
            if not ok:
                return False
        problem, _ = self._replay(graph)
        if problem is not None:
            raise _refuse(problem)
        ok = bool(dll.ggml_gallocr_alloc_graph(self._galloc, made.cgraph))
        _check_callbacks()
        if ok:
            self._placements = self._read_placements(graph, made)
        return ok

    def buffer_size(self, buffer_id: int) -> int:
        self._live()
        self._check_id(buffer_id, "buffer_id")
        return int(self._lib.dll.ggml_gallocr_get_buffer_size(self._galloc, buffer_id))

    def chunk_sizes(self, buffer_id: int) -> list[int]:
        self._live()
        self._check_id(buffer_id, "buffer_id")
        return [int(self._lib.dll.ggml_backend_buffer_get_size(c)) for c in self._chunks(buffer_id)]

    @property
    def placements(self) -> dict[str, Placement | None]:
        return dict(self._placements)

    @property
    def allocations(self) -> list[tuple[int, int]]:
        return list(self._allocations)

    def release(self) -> None:
        """Free the gallocr (and with it every chunk buffer), the contexts, the external buffer,
        then forget the buffer types; safe to call twice and from ``__del__``."""
        if self._released:
            return
        self._released = True
        lib = self._lib
        if self._galloc:
            lib.dll.ggml_gallocr_free(self._galloc)
            self._galloc = 0
        if self._ctx is not None:
            lib.dll.ggml_free(self._ctx.ctx)
            self._ctx = None
        if self._ext is not None:
            self._ext.free(lib)
            self._ext = None
        for b in self._bufts:
            b.close()
        self._sizes.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()

    # -- helpers ---------------------------------------------------------------------------------
    def _live(self) -> None:
        if self._released:
            raise _refuse("the planner was released (its gallocr is freed: use after free)")

    def _check_id(self, b: object, what: str, index: int | None = None) -> None:
        if not isinstance(b, int) or not 0 <= b < len(self.bufts):
            at = "" if index is None else f"[{index}]"
            raise _refuse(f"{what}{at}: buffer id {b!r} outside [0, {len(self.bufts)})")

    def _ids(self, ids: Sequence[int] | None, n: int, what: str) -> Any:
        if ids is None:
            return None
        if len(ids) != n:
            raise _refuse(f"{what} has {len(ids)} entries for {n} (ggml reads {n})")
        for i, b in enumerate(ids):
            self._check_id(b, what, i)
        return (ctypes.c_int * max(n, 1))(*ids)

    def _prepare(
        self, graph: Graph, node_ids: Sequence[int] | None, leaf_ids: Sequence[int] | None
    ) -> tuple[_Ctx, Any, Any]:
        """Check ``graph`` against everything that would make ggml abort, then build it (the
        context of the previous call is freed: ggml keeps no pointer into it)."""
        self._live()
        lib = self._lib
        nodes_arr = self._ids(node_ids, len(graph.nodes), "node_buffer_ids")
        leafs_arr = self._ids(leaf_ids, len(graph.leafs), "leaf_buffer_ids")
        by_name = _check_description(graph.tensors.values(), with_src=True)
        for name in (*graph.nodes, *graph.leafs):
            if name not in by_name:
                raise RuntimeError(f"graph lists unknown tensor {name!r}")
        touched = _touched(graph)
        hashed = set(touched)
        hashed.update(by_name[n].view_src for n in touched if by_name[n].view_src is not None)  # type: ignore[misc]
        n_listed = len(graph.nodes) + len(graph.leafs)
        if len(hashed) > n_listed + n_listed // 4:
            raise _refuse(
                f"the graph reaches {len(hashed)} distinct tensors, more than ggml's hash set for "
                f"{n_listed} nodes and leafs holds"
            )
        placeable = [n for n in touched if not by_name[n].is_view and not by_name[n].has_data]
        total = sum(by_name[n].size + max(b.alignment for b in self.bufts) for n in placeable)
        if total >= SIZE_LIMIT:
            raise RuntimeError("adapter limit: the graph's tensors add up to 2**62 bytes or more")
        if len(placeable) >= MAX_FREE_BLOCKS:
            self._predict_free_blocks(graph, node_ids, leaf_ids)
        order = list(dict.fromkeys(n for n in graph.order if n in by_name))
        order += [n for n in by_name if n not in set(order)]
        self._sizes.clear()  # addresses of the previous context may come back
        size = max(len(graph.nodes), len(graph.leafs), 1)
        assert self._ext is not None
        made = _make_tensors(lib, by_name, order, self._sizes, self._ext, graph_size=size)
        try:
            _check_alloc_sizes(lib, by_name, made, touched, self._sizes)
            cg = lib.dll.ggml_new_graph_custom(made.ctx, size, False)
            if not cg:
                raise RuntimeError("ggml_new_graph_custom failed")
            made.cgraph = int(cg)
            head = _Cgraph.from_address(made.cgraph)
            nodes = (ctypes.c_void_p * size).from_address(head.nodes)
            leafs = (ctypes.c_void_p * size).from_address(head.leafs)
            for i, n in enumerate(graph.nodes):
                nodes[i] = made.ptr[n]
            for i, n in enumerate(graph.leafs):
                leafs[i] = made.ptr[n]
            head.n_nodes, head.n_leafs = len(graph.nodes), len(graph.leafs)
        except BaseException:
            lib.dll.ggml_free(made.ctx)
            raise
        if self._ctx is not None:
            lib.dll.ggml_free(self._ctx.ctx)
        self._ctx = made
        return made, nodes_arr, leafs_arr

    def _predict_free_blocks(
        self, graph: Graph, node_ids: Sequence[int] | None, leaf_ids: Sequence[int] | None
    ) -> None:
        """With 256 or more tensors to place a chunk may run out of free blocks (ggml aborts);
        the reference planner, which models ggml's free lists, predicts it."""
        from reference_impl.allocator.planner import GraphAllocator
        from reference_impl.errors import AllocError

        try:
            GraphAllocator(self.bufts).reserve_size(graph, node_ids, leaf_ids)
        except AllocError as exc:
            if exc.code == "ALLOC_TOO_MANY_FREE_BLOCKS":
                raise _refuse(f"out of free blocks ({exc})") from exc

    def _gallocr(self) -> _Gallocr:
        return _Gallocr.from_address(self._galloc)

    def _chunks(self, buffer_id: int) -> list[int]:
        """The chunk buffers of ``buffer_id`` (its virtual buffer), in chunk order."""
        g = self._gallocr()
        vbuf = ctypes.c_void_p.from_address(g.buffers + 8 * buffer_id).value
        if not vbuf:
            return []
        chunks = (ctypes.c_void_p * MAX_CHUNKS).from_address(vbuf)
        return [int(c) for c in itertools.takewhile(bool, chunks)]

    def _alloc_size(self, made: _Ctx, name: str) -> int:
        return self._sizes.get(made.ptr[name], made.nbytes[name])

    def _needs_new_plan(self, graph: Graph, made: _Ctx) -> bool:
        """ggml_gallocr_needs_realloc (static in ggml-alloc.c), read from the stored plan."""
        g = self._gallocr()
        if g.n_nodes != len(graph.nodes) or g.n_leafs != len(graph.leafs):
            return True
        plan = (_NodeSlots * max(g.n_nodes, 1)).from_address(g.node_allocs) if g.n_nodes else []

        def fits(name: str, slot: _Slot) -> bool:
            t = graph[name]
            if t.has_data or t.is_view:
                return True
            return slot.buffer_id >= 0 and slot.size_max >= self._alloc_size(made, name)

        for i, name in enumerate(graph.nodes):
            if not fits(name, plan[i].dst):
                return True
            for j, s in enumerate(graph[name].src):
                if not fits(s, plan[i].src[j]):
                    return True
        return False

    def _replay(self, graph: Graph) -> tuple[str | None, dict[str, int]]:
        """Replay ggml_gallocr_alloc_graph's address assignment (leafs, then each node's sources
        and the node; a tensor takes its address at its first visit) against the stored plan and
        the buffers ggml holds. Returns why ggml would abort or crash (or None), and the buffer id
        of the plan entry each tensor takes its address from (views: their root's)."""
        g = self._gallocr()
        made = self._ctx
        assert made is not None
        n_buf = len(self.bufts)
        nodes = (_NodeSlots * max(g.n_nodes, 1)).from_address(g.node_allocs) if g.n_nodes else []
        leafs = (_Slot * max(g.n_leafs, 1)).from_address(g.leaf_allocs) if g.n_leafs else []
        placed: dict[str, bool] = {}  # tensors given an address -> their data is NULL
        buffer_of: dict[str, int] = {}

        def init(name: str, slot: _Slot) -> str | None:
            t = graph[name]
            if t.view_src is not None:
                # ggml_backend_view_init once the root has a buffer; until then nothing
                if name in buffer_of:
                    return None
                root = graph[t.view_src]
                if root.has_data:
                    buffer_of[name] = -1  # the external buffer
                elif t.view_src in placed:
                    if placed[t.view_src]:
                        return f"{name} views {t.view_src}, whose data is NULL (zero-byte chunk)"
                    buffer_of[name] = buffer_of[t.view_src]
                return None
            if t.has_data:
                return None
            if name in placed:
                if placed[name]:
                    return (
                        f"{name} sits in a zero-byte chunk (NULL data): ggml would place it twice"
                    )
                return None
            b = slot.buffer_id
            if not 0 <= b < n_buf:
                return f"the stored plan has no buffer for {name} (buffer id {b}): stale plan"
            chunks = self._chunks(b)
            c = slot.addr.chunk
            if not chunks:
                return f"buffer {b} has no backing memory for {name} (plan from reserve_size?)"
            if not 0 <= c < len(chunks):
                return f"{name} is planned in chunk {c} of buffer {b}, which has {len(chunks)}"
            size = int(self._lib.dll.ggml_backend_buffer_get_size(chunks[c]))
            need = self._alloc_size(made, name)
            if slot.addr.offset + need > size:
                return (
                    f"{name} ({need} bytes at offset {slot.addr.offset}) ends past chunk {c} of "
                    f"buffer {b} ({size} bytes)"
                )
            placed[name] = size == 0
            buffer_of[name] = b
            return None

        for i, name in enumerate(graph.leafs):
            if (why := init(name, leafs[i])) is not None:
                return why, buffer_of
        for i, name in enumerate(graph.nodes):
            for j, s in enumerate(graph[name].src):
                if (why := init(s, nodes[i].src[j])) is not None:
                    return why, buffer_of
            if (why := init(name, nodes[i].dst)) is not None:
                return why, buffer_of
        return None, buffer_of

    def _read_placements(self, graph: Graph, made: _Ctx) -> dict[str, Placement | None]:
        """Each tensor's chunk and offset from its ``buffer`` and ``data`` as ggml set them; its
        buffer id from the plan entry it was assigned from (a buffer type listed twice shares
        one virtual buffer, so the buffer alone cannot tell the two ids apart)."""
        _, buffer_of = self._replay(graph)
        where: dict[int, tuple[int, int]] = {}
        for b in range(len(self.bufts)):
            for c, buf in enumerate(self._chunks(b)):
                where.setdefault(buf, (b, c))
        out: dict[str, Placement | None] = {}
        for name in _touched(graph):
            s = _TensorStruct.from_address(made.ptr[name])
            at = where.get(s.buffer or 0)
            if at is None:
                out[name] = None
                continue
            b = buffer_of.get(name, at[0])
            if self._chunks(b) != self._chunks(at[0]):
                raise RuntimeError(
                    f"{name}: ggml put it in buffer {at[0]}, its plan entry says {b}"
                )
            base = self._lib.base_of(s.buffer or 0)
            out[name] = Placement(b, at[1], (s.data or 0) - base)
        return out


def _log_alloc(log: list[tuple[int, int]], buffer_id: int, buffer: int, size: int) -> None:
    log.append((buffer_id, size))


def _touched(graph: Graph) -> list[str]:
    """Leafs, then each node's sources and the node: what ggml reads (and assigns) in order."""
    seen: dict[str, None] = dict.fromkeys(graph.leafs)
    for n in graph.nodes:
        for s in graph[n].src:
            seen.setdefault(s)
        seen.setdefault(n)
    return list(seen)


# -- the linear allocator --------------------------------------------------------------------
_LINEAR_ZERO_BASE = 1 << 40  # stands for base 0 (ggml refuses a NULL base): same residues


class GgmlLinearAllocator:
    """A ``ggml_tallocr`` over one dummy buffer (role ``linear_allocator``)."""

    _PER_CTX = 64

    def __init__(self, lib: _Lib, size: int, alignment: int, base: int = 0) -> None:
        self._lib = lib
        self._buffer = 0
        self._ctxs: list[int] = []
        self._buft: _Buft | None = None
        _check_alignment(alignment, "alignment")
        _check_size(size, "size")
        _check_size(base, "base")
        self._size = size
        self._buft = _Buft(lib, "dc-linear", alignment, SIZE_MAX)
        self._buffer = lib.buffer_init(self._buft.address, base or _LINEAR_ZERO_BASE, size)
        self._talloc = lib.dll.ggml_tallocr_new(self._buffer)
        _check_callbacks()
        self._room = 0

    @property
    def offset(self) -> int:
        return int(self._talloc.offset)

    def alloc(self, name: str, size: int) -> int:
        _check_size(size, f"{name}: size")
        a = int(self._talloc.alignment)
        padded = (size + a - 1) & ~(a - 1)
        if self._talloc.offset + padded > self._size:
            raise _refuse(
                f"{name}: needs {padded} bytes, {self._size - self._talloc.offset} left in the "
                "buffer (ggml_tallocr_alloc: not enough space in the buffer)"
            )
        dll = self._lib.dll
        if self._room == 0:
            self._ctxs.append(self._lib.new_context(self._PER_CTX))
            self._room = self._PER_CTX
        t = dll.ggml_new_tensor_1d(self._ctxs[-1], TYPES["i8"], size)
        self._room -= 1
        if not t:
            raise RuntimeError("ggml_new_tensor_1d failed")
        dll.ggml_set_name(t, name.encode("utf-8", "replace")[:63])
        status = dll.ggml_tallocr_alloc(ctypes.byref(self._talloc), t)
        _check_callbacks()
        if status != 0:
            raise RuntimeError(f"ggml_tallocr_alloc({name}) returned status {status}")
        data = _TensorStruct.from_address(t).data or 0
        return int(data) - self._lib.base_of(self._buffer)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            dll = self._lib.dll
            if self._buffer:
                dll.ggml_backend_buffer_free(self._buffer)
                self._buffer = 0
            while self._ctxs:
                dll.ggml_free(self._ctxs.pop())
            if self._buft is not None:
                self._buft.close()


# -- alloc_ctx_tensors ---------------------------------------------------------------------------
def _ctx_ranges(tensors: Sequence[Tensor], buft: BufferType) -> list[tuple[int, int]]:
    """``[first, end)`` of each buffer ggml makes (its split rule, sizes padded to alignment)."""
    out: list[tuple[int, int]] = []
    first, cur = 0, 0
    a = buft.alignment
    for i, t in enumerate(tensors):
        this = 0 if t.has_data or t.is_view else (t.size + a - 1) & ~(a - 1)
        if cur > 0 and cur + this > buft.max_size:
            out.append((first, i))
            first, cur = i, this
        else:
            cur += this
    if cur > 0:
        out.append((first, len(tensors)))
    return out


def _ctx_tensors(
    lib: _Lib, tensors: Sequence[Tensor], buft: BufferType, no_alloc: bool, size_only: bool
) -> CtxAllocation | int | None:
    if not no_alloc:
        raise _refuse(
            "alloc_ctx_tensors needs a no_alloc context (GGML_ASSERT(ggml_get_no_alloc(ctx)))"
        )
    _check_alignment(buft.alignment, "buft")
    if not isinstance(buft.max_size, int) or not 0 <= buft.max_size <= SIZE_MAX:
        raise RuntimeError(f"buft: max size {buft.max_size!r} outside [0, SIZE_MAX]")
    tensors = list(tensors)
    by_name = _check_description(tensors, with_src=False)
    if sum(t.size + buft.alignment for t in tensors) >= SIZE_LIMIT:
        raise RuntimeError("adapter limit: the tensors add up to 2**62 bytes or more")
    if not size_only:
        # a view is initialised when ggml reaches it in an allocated range; its root must have
        # memory by then (ggml_backend_view_init asserts it)
        index = {t.name: i for i, t in enumerate(tensors)}
        for first, end in _ctx_ranges(tensors, buft):
            for t in tensors[first:end]:
                if t.view_src is None:
                    continue
                root = by_name[t.view_src]
                if root.has_data:
                    continue
                if index[root.name] > index[t.name]:
                    raise _refuse(
                        f"{t.name} is a view of {root.name}, which is created after it: "
                        "ggml_backend_view_init asserts that the root already has memory"
                    )
    sizes: dict[int, int] = {}
    made_buffers: list[int] = []
    dummy = _Buft(
        lib,
        buft.name,
        buft.alignment,
        buft.max_size,
        sizes,
        lambda buf, size: made_buffers.append(buf),
    )
    ext = _External(lib)
    made: _Ctx | None = None
    result = 0
    try:
        made = _make_tensors(lib, by_name, [t.name for t in tensors], sizes, ext, with_src=False)
        _check_alloc_sizes(lib, by_name, made, by_name, sizes)
        if size_only:
            total = int(
                lib.dll.ggml_backend_alloc_ctx_tensors_from_buft_size(made.ctx, dummy.address)
            )
            _check_callbacks()
            return total
        result = int(lib.dll.ggml_backend_alloc_ctx_tensors_from_buft(made.ctx, dummy.address) or 0)
        _check_callbacks()
        if not result:
            if made_buffers:
                raise RuntimeError("ggml_backend_alloc_ctx_tensors_from_buft failed")
            return None
        which = {buf: i for i, buf in enumerate(made_buffers)}
        placements: dict[str, tuple[int, int] | None] = {}
        for t in tensors:
            s = _TensorStruct.from_address(made.ptr[t.name])
            b = which.get(s.buffer or 0)
            placements[t.name] = (
                None if b is None else (b, (s.data or 0) - lib.base_of(made_buffers[b]))
            )
        buffer_sizes = tuple(int(lib.dll.ggml_backend_buffer_get_size(b)) for b in made_buffers)
        return CtxAllocation(buffer_sizes, placements)
    finally:
        if result:
            lib.dll.ggml_backend_buffer_free(result)  # a multi-buffer frees its parts
        if made is not None:
            lib.dll.ggml_free(made.ctx)
        ext.free(lib)
        dummy.close()


# -- the target mixin ------------------------------------------------------------------------------
class LlamaCppAllocator:
    """``allocator.linear``, ``allocator.planner`` and ``allocator.ctx_tensors`` over the real
    ggml allocator. Not claimed: ``allocator.chunks`` (``ggml_dyn_tallocr`` is static in
    ggml-alloc.c) and ``allocator.errors`` (ggml aborts instead of raising)."""

    def allocator_linear(self, size: int, alignment: int, base: int = 0) -> GgmlLinearAllocator:
        return GgmlLinearAllocator(_lib(), size, alignment, base)

    def allocator_planner(self, bufts: Sequence[BufferType]) -> GgmlPlanner:
        return GgmlPlanner(_lib(), bufts)

    def allocator_ctx_tensors(
        self, tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool = True
    ) -> CtxAllocation | None:
        out = _ctx_tensors(_lib(), tensors, buft, no_alloc, size_only=False)
        assert not isinstance(out, int)
        return out

    def allocator_ctx_tensors_size(
        self, tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool = True
    ) -> int:
        out = _ctx_tensors(_lib(), tensors, buft, no_alloc, size_only=True)
        assert isinstance(out, int)
        return out
