"""Typed reads of a GGUF file's metadata for vocabulary-only loads (no tensors are touched).

The model loader (``reference_impl.model.gguf_loader``) has its own reader and hands it to
:func:`reference_impl.tokenizer.load_vocab`; this one serves files loaded for their vocabulary
alone. Errors are :class:`~reference_impl.errors.ModelLoadError` with the loader's codes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reference_impl.errors import ModelLoadError

_INT_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")


class GgufMeta:
    """``get_str`` / ``get_int`` / ``get_bool`` / ``get_array`` over a GGUF file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import gguf

        p = Path(path)
        if not p.is_file():
            raise ModelLoadError("GGUF_FILE_NOT_FOUND", f"no file at {p}", field="path")
        try:
            self.fields = gguf.GGUFReader(str(p)).fields
        except Exception as e:  # the reader raises assorted errors on corrupt files
            raise ModelLoadError("GGUF_MALFORMED", f"not a readable GGUF file: {e}") from e

    def _field(self, key: str, required: bool) -> Any:
        f = self.fields.get(key)
        if f is None and required:
            raise ModelLoadError("GGUF_MISSING_KEY", f"required key {key!r} is missing", field=key)
        return f

    @staticmethod
    def _type(f: Any) -> str:
        return str(f.types[0].name) if f.types else "?"

    def _check(self, key: str, f: Any, allowed: tuple[str, ...], what: str) -> None:
        if self._type(f) not in allowed:
            raise ModelLoadError(
                "GGUF_KEY_TYPE", f"key {key!r} must be {what}, got {self._type(f)}", field=key
            )

    def get_str(self, key: str, default: str | None = None) -> str:
        f = self._field(key, default is None)
        if f is None:
            assert default is not None
            return default
        self._check(key, f, ("STRING",), "a string")
        return str(f.contents())

    def get_int(self, key: str, default: int | None = None) -> int:
        f = self._field(key, default is None)
        if f is None:
            assert default is not None
            return default
        self._check(key, f, _INT_TYPES, "an integer")
        return int(f.contents())

    def get_bool(self, key: str, default: bool) -> bool:
        f = self._field(key, False)
        if f is None:
            return default
        self._check(key, f, ("BOOL",), "a bool")
        return bool(f.contents())

    def get_array(self, key: str, item_types: tuple[str, ...]) -> list[Any] | None:
        f = self._field(key, False)
        if f is None:
            return None
        if self._type(f) != "ARRAY" or f.types[-1].name not in item_types:
            raise ModelLoadError(
                "GGUF_KEY_TYPE",
                f"key {key!r} must be an array of {'/'.join(item_types)}",
                field=key,
            )
        return list(f.contents())
