"""Plant one mechanical mutant in this process: an import hook loads the mutated module in
place of the file on disk, whoever imports it first (its package's ``__init__`` included)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tools.mutation.sites import ROOT, mutate

NOT_APPLIED = 97  # exit status: the run did not test the mutant


class _Loader(importlib.abc.Loader):
    def __init__(self, path: Path, index: int) -> None:
        self.path, self.index = path, index

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        code = compile(mutate(self.path, self.index), str(self.path), "exec")
        exec(code, module.__dict__)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, path: Path, index: int) -> None:
        self.module, self.path, self.index = module, path, index

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != self.module:
            return None
        return importlib.util.spec_from_file_location(
            name, self.path, loader=_Loader(self.path, self.index)
        )


def install(rel_path: str, index: int) -> None:
    """Make ``import <module of rel_path>`` load it with mutation site ``index`` planted."""
    path = ROOT / rel_path
    module = rel_path.removesuffix(".py").replace("/", ".")
    if module in sys.modules:
        raise RuntimeError(f"{module} is already imported: the mutant would not take effect")
    sys.meta_path.insert(0, _Finder(module, path, index))


def main(argv: list[str]) -> int:
    """``python -m tools.mutation.apply REL_PATH INDEX -- pytest args...``"""
    rel, index, sep, *pytest_args = argv
    assert sep == "--", "usage: REL_PATH INDEX -- PYTEST_ARGS"
    install(rel, int(index))
    import pytest

    code = int(pytest.main(pytest_args))
    module = sys.modules.get(rel.removesuffix(".py").replace("/", "."))
    if module is not None and not isinstance(getattr(module.__spec__, "loader", None), _Loader):
        print(f"mutation: {rel} was loaded without the mutant (another import hook came first)")
        return NOT_APPLIED
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
