"""The decoupled KV cache policy string, e.g. ``ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=128``.

Grammar (spec QNT-012..QNT-018)::

    policy  := field ("," field)*
    field   := key "=" value          (whitespace around keys and values is ignored)
    key     := ksem | kgeo | v | resid    (case-insensitive, "_" ignored; aliases below)
    value   := kind ["@" qblock]  for ksem/kgeo/v;   an int >= 0 for resid
    kind    := fp16 | fp32 | q8_0 | q4_0 | nf4;  qblock := power of two in [2, 256], default 32

Aliases (the decoupled project's): ``ksemkind``, ``kgeokind``, ``vkind``, ``residual``,
``residuallen`` (so ``residual_len=`` works). Unlike that project, an unknown or repeated key is
an error rather than silently ignored or overwritten: a typo must not change the cache layout.
Every error is a :class:`KernelError` with a stable code and the offending field.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.quant import ALL_KINDS, FOUR_BIT_KINDS
from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

_KEYS = {
    "ksem": "ksem",
    "ksemkind": "ksem",
    "kgeo": "kgeo",
    "kgeokind": "kgeo",
    "v": "v",
    "vkind": "v",
    "resid": "resid",
    "residual": "resid",
    "residuallen": "resid",
}
REQUIRED = ("ksem", "kgeo", "v", "resid")
DEFAULT_QBLOCK = 32
MAX_QBLOCK = 256


@dataclass(frozen=True)
class TensorFormat:
    kind: str
    qblock: int = DEFAULT_QBLOCK

    @property
    def quantized(self) -> bool:
        return self.kind not in ("fp16", "fp32")

    @implements("QNT-013")
    def short(self) -> str:
        return f"{self.kind}@{self.qblock}"


@dataclass(frozen=True)
class KVCachePolicy:
    """Formats of the three decoupled cache tensors and the fp16 residual tail length."""

    k_sem: TensorFormat
    k_geo: TensorFormat
    v: TensorFormat
    residual_len: int

    @implements("QNT-013")
    def short(self) -> str:
        """The canonical string; ``parse_policy(p.short()) == p``."""
        return (
            f"ksem={self.k_sem.short()},kgeo={self.k_geo.short()},"
            f"v={self.v.short()},resid={self.residual_len}"
        )

    @implements("QNT-012")
    def is_fused_layout(self) -> bool:
        """True for the layout the fused decoupled kernels read: q4_0@32 / q8_0@32 / q4_0@32."""
        return (
            self.k_sem == TensorFormat("q4_0", 32)
            and self.k_geo == TensorFormat("q8_0", 32)
            and self.v == TensorFormat("q4_0", 32)
        )


def _is_uint(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _err(code: str, message: str, key: str | None = None) -> KernelError:
    return KernelError(code, message, field=key)


@implements("QNT-014", "QNT-015", "QNT-016")
def _parse_format(key: str, value: str) -> TensorFormat:
    kind, sep, qb_text = value.partition("@")
    kind = kind.strip().lower()
    if kind not in ALL_KINDS:
        raise _err(
            "QNT_POLICY_UNKNOWN_KIND",
            f"{key}: unknown kind {kind!r}; expected one of {', '.join(ALL_KINDS)}",
            key,
        )
    qblock = DEFAULT_QBLOCK
    if sep:
        qb_text = qb_text.strip()
        if not _is_uint(qb_text):
            raise _err("QNT_POLICY_BAD_BLOCK", f"{key}: block size {qb_text!r} is not an int", key)
        qblock = int(qb_text)
    if not (2 <= qblock <= MAX_QBLOCK) or qblock & (qblock - 1):
        raise _err(
            "QNT_POLICY_BAD_BLOCK",
            f"{key}: block size {qblock} must be a power of two in [2, {MAX_QBLOCK}]",
            key,
        )
    if kind in FOUR_BIT_KINDS and qblock % 2:  # unreachable for powers of two >= 2; kept explicit
        raise _err("QNT_POLICY_BAD_BLOCK", f"{key}: {kind} needs an even block size", key)
    return TensorFormat(kind, qblock)


@implements("QNT-012", "QNT-014", "QNT-017", "QNT-018")
def parse_policy(text: str) -> KVCachePolicy:
    """Parse and validate a policy string; raises KernelError naming the field at fault."""
    if not isinstance(text, str) or not text.strip():
        raise _err("QNT_POLICY_SYNTAX", "empty KV cache policy string")
    seen: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise _err("QNT_POLICY_SYNTAX", f"empty field in policy {text!r}")
        name, sep, value = item.partition("=")
        if not sep:
            raise _err("QNT_POLICY_SYNTAX", f"field {item!r} is not key=value")
        norm = name.strip().lower().replace("_", "")
        key = _KEYS.get(norm)
        if key is None:
            raise _err(
                "QNT_POLICY_UNKNOWN_KEY",
                f"unknown key {name.strip()!r}; expected ksem, kgeo, v, resid",
                name.strip(),
            )
        if key in seen:
            raise _err("QNT_POLICY_DUPLICATE_KEY", f"key {key!r} given twice", key)
        seen[key] = value.strip()
    missing = [k for k in REQUIRED if k not in seen]
    if missing:
        raise _err(
            "QNT_POLICY_MISSING_KEY", f"missing policy fields: {', '.join(missing)}", missing[0]
        )
    resid_text = seen["resid"]
    if not _is_uint(resid_text):
        raise _err(
            "QNT_POLICY_BAD_RESID", f"resid must be an integer >= 0, got {resid_text!r}", "resid"
        )
    return KVCachePolicy(
        k_sem=_parse_format("ksem", seen["ksem"]),
        k_geo=_parse_format("kgeo", seen["kgeo"]),
        v=_parse_format("v", seen["v"]),
        residual_len=int(resid_text),
    )
