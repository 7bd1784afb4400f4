"""Mutation sites of the reference: where a one-token defect can be planted, and planting it.

A small AST driver of our own rather than mutmut or cosmic-ray: the suite needs mutants drawn
per spec area from ``reference_impl/`` and ``kernels/`` with stable ids a triage file can name,
each run against its own area's conformance folder with the repository's pytest plugin, and
planted in memory (an import hook compiles the mutated tree), so the working tree is never
rewritten and runs can go in parallel. Both tools assume one test command for the whole project
and rewrite files on disk.

Operators (``kind``): ``cmp`` (a comparison flipped: < <=, > >=, == !=, is / is not, in / not
in), ``arith`` (+ and - swapped), ``const`` (an integer constant plus one, True / False
swapped), ``negate`` (an if / while / conditional-expression test negated), ``boolop`` (and /
or swapped), ``return`` (a returned value replaced by None), ``minmax`` (min and max swapped)
and ``delete`` (a simple statement replaced by ``pass``).

A site's id is its file, function, operator, text before and after, and the statement it sits
in (the header of a compound one), with a count only among sites alike in all of those: an edit
elsewhere in the function leaves it alone, and an edit of its own statement retires it, so a
triage line never slides onto another site.

Not mutated: docstrings, annotations, decorators, ``assert`` statements (internal checks),
``if TYPE_CHECKING`` blocks, functions compiled by ``triton.jit`` (the Triton interpreter
reads their source from disk, so a mutant there would silently not run) and the ``-1`` of a
``.reshape`` (numpy infers any negative size, so ``-2`` is the same; torch refuses it at once).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# source file (relative, without .py) -> spec area whose conformance folder must catch it
AREAS: dict[str, str] = {
    "reference_impl/allocator": "allocator",
    "reference_impl/batch": "batch",
    "reference_impl/decoder": "decoder",
    "reference_impl/native": "decoder",
    "reference_impl/kv": "kv",
    "reference_impl/memory": "memory",
    "reference_impl/model": "model",
    "reference_impl/sampling": "sampling",
    "reference_impl/tokenizer": "tokenizer",
    "reference_impl/generator": "generator",
    "reference_impl/decoupled": "decoupled",
    "kernels/quant": "kv_quant",
    "kernels/quant_triton": "kv_quant",
    "kernels/policy": "kv_quant",
    "kernels/decoupled_cache": "decoupled",
    "kernels/decoupled": "kernels",
    "kernels/decoupled_triton": "kernels",
    "kernels/decode_attention": "kernels",
    "kernels/gqa_triton": "kernels",
    "kernels/dispatch": "kernels",
}

_FLIP: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass(frozen=True)
class Site:
    """One mutant: where (file, line, function) and what (kind, the original and the new text)."""

    id: str
    area: str
    path: str  # relative to the repository
    module: str
    line: int
    function: str
    kind: str
    before: str
    after: str
    index: int  # position among the file's sites (what :func:`mutate` needs)

    def describe(self) -> str:
        return f"{self.path}:{self.line} in {self.function}: {self.kind} `{self.before}` -> `{self.after}`"


# shared code whose only readers live in another area: its mutants also run against that area's
# folder (the dispatch record sink and the formats' ``quantized`` flag serve the decoupled model;
# the ubatch compute statuses and decode return codes are read by the decoder alone)
ALSO_TESTED_BY: dict[str, tuple[str, ...]] = {
    "kernels/dispatch": ("decoupled",),
    "kernels/policy": ("decoupled",),
    "reference_impl/memory/status": ("decoder",),
}


def test_folders(site: Site) -> list[str]:
    """The conformance folders a mutant of ``site`` runs against: its area's, then any that read
    the shared code it sits in."""
    extra = ALSO_TESTED_BY.get(site.path.removesuffix(".py"), ())
    return [f"conformance/{a}" for a in (site.area, *extra)]


def area_of(rel: str) -> str | None:
    stem = rel.removesuffix(".py")
    while stem:
        if stem in AREAS:
            return AREAS[stem]
        stem = stem.rpartition("/")[0]
    return None


# second implementations the reference target never runs: tests/ proves them equal to the
# vectorized ones, so no conformance test can reach a mutant in them
NOT_MUTATED = ("reference_impl/batch/sanitize_scalar.py", "reference_impl/batch/split_scalar.py")


def source_files() -> list[Path]:
    out = []
    for base in ("reference_impl", "kernels"):
        for path in sorted((ROOT / base).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name != "__init__.py" and area_of(rel) is not None and rel not in NOT_MUTATED:
                out.append(path)
    return out


def _is_triton_jit(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _is_stub(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of ``...`` alone (after a docstring): a typing.Protocol method, which never runs,
    so neither its defaults nor its body are code a test could reach."""
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    return (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is Ellipsis
    )


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


@dataclass(frozen=True)
class _Candidate:
    """One mutation the walker met: ``apply()`` plants it in the tree; ``anchor`` is the
    statement (or compound header) it sits in, part of its id."""

    kind: str
    node: ast.AST
    function: str
    before: str
    after: str
    apply: Callable[..., object]
    anchor: str


class _Walker:
    """Visits mutable nodes in a fixed order; calls ``found(candidate)`` for each one."""

    def __init__(self, found: Callable[[_Candidate], None]) -> None:
        self.found = found
        self.scope: list[str] = []
        self.kinds: list[str] = []
        # The text a site's id is keyed on besides its own: the enclosing simple statement, or the
        # header part of a compound one, so removing a like mutation elsewhere in the function
        # does not renumber this one (and so move a triage line onto another site).
        self.anchor = ""

    def run(self, tree: ast.Module) -> None:
        self.body(tree.body, docstring=True)

    # -- statements --------------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt], docstring: bool = False) -> None:
        for i, st in enumerate(stmts):
            if (
                docstring
                and i == 0
                and isinstance(st, ast.Expr)
                and isinstance(st.value, ast.Constant)
            ):
                continue
            self.stmt(stmts, i)

    def stmt(self, stmts: list[ast.stmt], i: int) -> None:
        st = stmts[i]
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            if _is_triton_jit(st) or _is_stub(st):
                return
            self.scope.append(st.name)
            self.kinds.append("def")
            positional = [*st.args.posonlyargs, *st.args.args]
            named = zip(positional[len(positional) - len(st.args.defaults) :], st.args.defaults)
            keyword = zip(st.args.kwonlyargs, st.args.kw_defaults)
            for arg, d in [*named, *keyword]:
                if d is not None:
                    self.anchor = f"{arg.arg}={ast.unparse(d)}"
                    self.expr(d)
            self.body(st.body, docstring=True)
            self.scope.pop()
            self.kinds.pop()
            return
        if isinstance(st, ast.ClassDef):
            self.scope.append(st.name)
            self.kinds.append("class")
            self.body(st.body, docstring=True)
            self.scope.pop()
            self.kinds.pop()
            return
        if isinstance(st, ast.Assert | ast.Import | ast.ImportFrom | ast.Pass | ast.Global):
            return
        if isinstance(st, ast.If) and _is_type_checking(st):
            return
        in_function = self.kinds[-1:] == ["def"]  # module and class bodies only define names
        compound = isinstance(st, ast.If | ast.While | ast.For | ast.AsyncFor | ast.With)
        compound = compound or isinstance(st, ast.AsyncWith | ast.Try | ast.Match)
        self.anchor = "" if compound else ast.unparse(st)
        if (
            in_function
            and isinstance(st, ast.Assign | ast.AugAssign | ast.Expr)
            and not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))
        ):
            self.emit("delete", st, ast.unparse(st), "pass", lambda: _replace_stmt(stmts, i))
        if isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.expr(st.value)
            return
        returns_none = isinstance(st, ast.Return) and (
            st.value is None or (isinstance(st.value, ast.Constant) and st.value.value is None)
        )
        if isinstance(st, ast.Return) and not returns_none:
            self.emit(
                "return", st, ast.unparse(st), "return None", lambda: setattr(st, "value", None)
            )
        if isinstance(st, ast.If | ast.While):
            self.anchor = _header(st, "test")
            self.negate(st)
        for field in ("test", "value", "iter", "targets", "target", "exc", "items", "subject"):
            child = getattr(st, field, None)
            if compound and child:
                self.anchor = _header(st, field)
            if isinstance(child, list):
                for c in child:
                    if isinstance(c, ast.expr):
                        self.expr(c)
                    elif isinstance(c, ast.withitem):
                        self.expr(c.context_expr)
            elif isinstance(child, ast.expr):
                self.expr(child)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(st, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self.body(block)
        for handler in getattr(st, "handlers", []) or []:
            self.body(handler.body)
        for case in getattr(st, "cases", []) or []:
            self.body(case.body)

    def negate(self, node: ast.If | ast.While | ast.IfExp) -> None:
        test = node.test
        before = ast.unparse(test)
        self.emit(
            "negate",
            node,
            before,
            f"not ({before})",
            lambda: setattr(node, "test", ast.UnaryOp(ast.Not(), test)),
        )

    # -- expressions -------------------------------------------------------------------------
    def expr(self, e: ast.expr) -> None:
        inferred: set[int] = set()  # the 1s of a reshape's -1s: pre-order meets the call first
        for node in _ordered(e):
            inferred.update(id(c) for c in _reshape_minus_ones(node))
            if id(node) in inferred:
                continue
            if isinstance(node, ast.Compare):
                for k, op in enumerate(node.ops):
                    new = _FLIP.get(type(op))
                    if new is not None:
                        self.emit(
                            "cmp",
                            node,
                            ast.unparse(node),
                            _op_text(node, k, new()),
                            lambda node=node, k=k, new=new: _set_op(node, k, new()),
                        )
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
                new_op: ast.operator = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
                self.emit(
                    "arith",
                    node,
                    ast.unparse(node),
                    ast.unparse(ast.BinOp(node.left, new_op, node.right)),
                    lambda node=node, new_op=new_op: setattr(node, "op", new_op),
                )
            elif isinstance(node, ast.BoolOp):
                flipped: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
                self.emit(
                    "boolop",
                    node,
                    ast.unparse(node),
                    ast.unparse(ast.BoolOp(flipped, node.values)),
                    lambda node=node, flipped=flipped: setattr(node, "op", flipped),
                )
            elif isinstance(node, ast.IfExp):
                self.negate(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, int):
                value = node.value
                new_value = (not value) if isinstance(value, bool) else value + 1
                self.emit(
                    "const",
                    node,
                    repr(node.value),
                    repr(new_value),
                    lambda node=node, new_value=new_value: setattr(node, "value", new_value),
                )
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("min", "max")
            ):
                other = "max" if node.func.id == "min" else "min"
                self.emit(
                    "minmax",
                    node,
                    ast.unparse(node),
                    other + ast.unparse(node)[len(node.func.id) :],
                    lambda node=node, other=other: setattr(node.func, "id", other),
                )

    def emit(
        self, kind: str, node: ast.AST, before: str, after: str, apply: Callable[..., object]
    ) -> None:
        scope = ".".join(self.scope) or "<module>"
        self.found(_Candidate(kind, node, scope, before, after, apply, self.anchor))


def _header(st: ast.stmt, field: str) -> str:
    """A compound statement's anchor while one of its header fields is walked."""
    child = getattr(st, field)
    parts = child if isinstance(child, list) else [child]
    return f"{type(st).__name__}.{field}: " + ", ".join(ast.unparse(c) for c in parts)


def _reshape_minus_ones(node: ast.AST) -> Iterator[ast.Constant]:
    """The ``1`` of each ``-1`` argument of a ``.reshape(...)`` call: numpy infers a dimension
    from any negative size, so ``-2`` reshapes alike, and torch refuses ``-2`` at once; neither
    mutant says anything about the suite."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reshape"
    ):
        args = [a for arg in node.args for a in (arg.elts if isinstance(arg, ast.Tuple) else [arg])]
        for a in args:
            if (
                isinstance(a, ast.UnaryOp)
                and isinstance(a.op, ast.USub)
                and isinstance(a.operand, ast.Constant)
                and a.operand.value == 1
            ):
                yield a.operand


def _ordered(e: ast.AST) -> Iterator[ast.AST]:
    """Pre-order over an expression, skipping lambdas' annotations and f-string formats."""
    yield e
    for child in ast.iter_child_nodes(e):
        if isinstance(child, ast.expr):
            yield from _ordered(child)
        elif isinstance(child, ast.comprehension):
            yield from _ordered(child.iter)
            for cond in child.ifs:
                yield from _ordered(cond)
        elif isinstance(child, ast.keyword):
            yield from _ordered(child.value)


def _replace_stmt(stmts: list[ast.stmt], i: int) -> None:
    old = stmts[i]
    stmts[i] = ast.copy_location(ast.Pass(), old)


def _set_op(node: ast.Compare, k: int, op: ast.cmpop) -> None:
    node.ops[k] = op


def _op_text(node: ast.Compare, k: int, op: ast.cmpop) -> str:
    copy = ast.Compare(node.left, list(node.ops), node.comparators)
    copy.ops[k] = op
    return ast.unparse(copy)


def _walk(tree: ast.Module, visit: Callable[[_Candidate], None]) -> None:
    _Walker(visit).run(tree)


def sites_of(path: Path) -> list[Site]:
    rel = path.relative_to(ROOT).as_posix()
    area = area_of(rel)
    assert area is not None
    module = rel.removesuffix(".py").replace("/", ".")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[Site] = []
    seen: dict[str, int] = {}

    def visit(c: _Candidate) -> None:
        key = f"{c.function}|{c.kind}|{c.before}|{c.after}|{c.anchor}"
        n = seen.get(key, 0)
        seen[key] = n + 1
        digest = hashlib.sha1(f"{key}|{n}".encode()).hexdigest()[:8]
        out.append(
            Site(
                id=f"{rel}::{c.function}::{c.kind}-{digest}",
                area=area,
                path=rel,
                module=module,
                line=getattr(c.node, "lineno", 0),
                function=c.function,
                kind=c.kind,
                before=_short(c.before),
                after=_short(c.after),
                index=len(out),
            )
        )

    _walk(tree, visit)
    return out


def mutate(path: Path, index: int) -> ast.Module:
    """The module's tree with site ``index`` planted."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    count = 0

    def visit(c: _Candidate) -> None:
        nonlocal count
        if count == index:
            c.apply()
        count += 1

    _walk(tree, visit)
    if index >= count:
        raise IndexError(f"{path}: no mutation site {index} (it has {count})")
    return ast.fix_missing_locations(tree)


def all_sites() -> list[Site]:
    return [s for path in source_files() for s in sites_of(path)]


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
