"""Mutation testing of the pure core (`watermark/core`, `l0gc/contract`, `gcd/rules`):
do the tests notice?

Each mutant is one small change to one module (a comparison flipped, a constant moved by
one, `and` for `or`, another member of the same enum, `min` for `max`, a statement
deleted: `OPERATORS`). The module's own unit tests and the neighbour suites named in
`TARGETS` run against it, stopping at the first failure. A failing (or timing out) run
kills the mutant; a passing one is a *survivor*: either the tests miss a behaviour (write
the test that kills it) or the mutant is equivalent, i.e. no input can tell it from the
original (list it in `scripts/mutation-equivalents.txt` with a one-line reason). Any
survivor not listed there fails the run, as does a listed one that no longer exists or
that the tests now kill. docs/conventions.md ("Answering a survivor") says how to answer.

A mutant's id is stable across unrelated edits: the module, the function (qualified
name), the operator with what it changed, and the occurrence of that same change in that
same function, e.g. ``l0gc/contract/safe_epoch.py:judge:cmp:>=->>#1``. Line numbers are
shown but are not part of it.

How it runs: one process runs pytest on the test files of every chosen module and, once
they are collected, takes over the test loop. When every mutant of a module runs (no
`--sample` or `--match`), one forked child first runs every collected test on the
unmutated module under a profile hook, which records the functions of the module each
test calls (the baseline run and the coverage in one; for a sample, the profiled run
costs more than it saves, and each mutant runs every test). Each mutant then runs
in a forked child that swaps the mutated function's code object into the live function
and runs, in order, only the tests that called that function (a test that never enters
it runs exactly as on the original, so it cannot kill the mutant; the modules keep no
state between calls that a test could read without a call), stopping at the first
failure; a change outside any function (a module constant, a default value) instead
makes the child import the project again with the mutated module and run pytest afresh,
every test. Hypothesis runs derandomized, without shrinking or
its example database, so a run is reproducible. `--jobs` children run at once; one that
outlives `--timeout-factor` times the unmutated run is run again alone with twice as
long, and counts as killed only if it times out again.

    python scripts/mutation.py --safety            # the five safety modules (CI)
    python scripts/mutation.py --all               # every module of TARGETS (make mutation)
    python scripts/mutation.py watermark/core/window.py --list
    python scripts/mutation.py --show 'ID'         # run one mutant, show pytest's output
    python scripts/mutation.py watermark/core/window.py --explore-killer       # see below

The exhaustive checker as one more killer (`--explore-killer`, opt-in: it costs seconds
per mutant): each mutant that survives the unit tests (or, with `--explore-killer all`,
every mutant run) is made live in a forked child that runs `gcd simulate --exhaustive`'s
search (`l0lab.sim.explore`) on the real simulated cluster, in `EXPLORE_SCOPE`; a
violation (or a crash of the real code) kills it. The report adds a table of what the
checker killed and names the mutants that only it kills (the unit tests let them live).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import enum
import importlib
import io
import os
import pickle
import random
import resource
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "scripts" / "mutation-equivalents.txt"
OPEN = ROOT / "scripts" / "mutation-open.txt"
"""Survivors of the modules outside the safety set that are not answered yet: allowed
(and counted against the score) so that a new survivor still fails; never equivalents."""


@dataclass(frozen=True)
class Target:
    """A module under mutation and the test files run against each of its mutants
    (its own unit tests first: a run stops at the first failure)."""

    tests: tuple[str, ...]
    safety: bool = False
    """One of the safety modules run in CI on every change."""


_CORE = "tests/watermark/core/"
_CONTRACT = "tests/l0gc/contract/"
TARGETS: dict[str, Target] = {
    "watermark/core/window.py": Target(
        (f"{_CORE}test_window.py", f"{_CORE}test_fencelock.py"), safety=True
    ),
    "l0gc/contract/safe_epoch.py": Target(
        (f"{_CONTRACT}test_safe_epoch.py", f"{_CONTRACT}test_gcindex.py"), safety=True
    ),
    "gcd/rules/decision.py": Target(("tests/gcd/rules/test_decision.py",), safety=True),
    "gcd/rules/cursor.py": Target(("tests/gcd/rules/test_cursor.py",), safety=True),
    "watermark/core/fencelock.py": Target((f"{_CORE}test_fencelock.py",), safety=True),
    "gcd/rules/layout.py": Target(
        ("tests/gcd/rules/test_layout.py", "tests/gcd/rules/test_cursor.py")
    ),
    "l0gc/contract/gcindex.py": Target((f"{_CONTRACT}test_gcindex.py",)),
    "watermark/core/assignment.py": Target((f"{_CORE}test_assignment.py",)),
    "l0gc/contract/members.py": Target((f"{_CORE}test_assignment.py",)),
    "l0gc/contract/binding.py": Target((f"{_CONTRACT}test_binding.py",)),
    "l0gc/strictjson.py": Target(("tests/l0gc/test_strictjson.py",)),
    "gcd/rules/undo.py": Target(("tests/gcd/rules/test_undo.py",)),
}

EXPLORE_SCOPE: dict[str, Any] = {"partitions": 1, "fault_kinds": frozenset({"raise"}), "depth": 4}
"""The `--explore-killer` scope (`l0lab.sim.moves.Scope` fields; the rest default: 2
writers, 2 publishers, epochs up to 3, 1 fault): the one that finds the window-floor
mutant (`inclusive-floor`, 3 moves), one move deeper. The whole search, when nothing is
found, costs ~2.5 s of CPU (72 mutants of window.py: 184 s)."""

# -- mutants -------------------------------------------------------------------------

_CMP: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_BIN: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is_not",
    ast.In: "in",
    ast.NotIn: "not_in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_DELETABLE = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Return,
    ast.Raise,
    ast.Delete,
    ast.Continue,
    ast.Break,
)
OPERATORS = ("cmp", "binop", "const", "not", "boolop", "enum", "minmax", "delete")


@dataclass(frozen=True)
class Mutant:
    """One change to one module; `apply` makes it on a copy of the module's tree."""

    module: str
    """The module's path, relative to the repository root."""
    id: str
    line: int
    scope: str
    """The qualified name of the function it is in, or ``<module>``."""
    function: str | None
    """The outermost function around it (whose code object is swapped), if any."""
    at: int
    """The index of the changed node in `_nodes` order."""
    edit: Callable[[list[ast.AST], int], None] = field(repr=False, compare=False)

    def tree(self, original: ast.Module) -> ast.Module:
        """The mutated module."""
        tree = copy.deepcopy(original)
        self.edit(_nodes(tree), self.at)
        return ast.fix_missing_locations(tree)


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` in a fixed depth-first order (a mutant finds its node again
    by its index in a copy)."""
    order: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        order.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return order


def _skipped(tree: ast.Module) -> set[int]:
    """Ids of the nodes never mutated: docstrings, annotations, decorators, asserts
    (internal invariants), imports, `__all__` and `__slots__`, TYPE_CHECKING blocks."""
    skip: set[int] = set()

    def drop(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                drop(first)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            drop(node.returns)
            for dec in node.decorator_list:
                drop(dec)
            for arg in [
                *node.args.args,
                *node.args.kwonlyargs,
                *node.args.posonlyargs,
                node.args.vararg,
                node.args.kwarg,
            ]:
                if arg is not None:
                    drop(arg.annotation)
        elif isinstance(node, ast.ClassDef):
            for dec in node.decorator_list:
                drop(dec)
            for base in node.bases:
                drop(base)
        elif isinstance(node, ast.AnnAssign):
            drop(node.annotation)
        elif isinstance(node, ast.Assert | ast.Import | ast.ImportFrom) or (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id in {"__all__", "__slots__"} for t in node.targets
            )
        ):
            drop(node)
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            drop(node)  # attribute docstrings
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            drop(node)
    return skip


def _scopes(tree: ast.Module) -> dict[int, tuple[str, str | None]]:
    """(qualified name, outermost function) of the scope of every node, by node id."""
    scopes: dict[int, tuple[str, str | None]] = {}

    def visit(node: ast.AST, qual: list[str], outer: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*qual, child.name]
                name = ".".join(inner)
                fn = outer
                if fn is None and not isinstance(child, ast.ClassDef):
                    fn = name
                scopes[id(child)] = (".".join(qual) or "<module>", outer)
                if isinstance(child, ast.ClassDef):
                    visit(child, inner, fn)
                    continue
                # Default values are evaluated where the def runs, not in its code object.
                scopes[id(child.args)] = (".".join(qual) or "<module>", outer)
                visit(child.args, qual, outer)
                for grandchild in ast.iter_child_nodes(child):
                    if grandchild is not child.args:
                        scopes[id(grandchild)] = (name, fn)
                        visit(grandchild, inner, fn)
            else:
                scopes[id(child)] = (".".join(qual) or "<module>", outer)
                visit(child, qual, outer)

    visit(tree, [], None)
    return scopes


def _enum_members(module: types.ModuleType, node: ast.Attribute) -> list[str] | None:
    """The member names of the enum `node` names a member of (``Admission.INSIDE``)."""
    if not isinstance(node.value, ast.Name):
        return None
    cls = getattr(module, node.value.id, None)
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        return None
    names = list(cls.__members__)
    return names if node.attr in names and len(names) > 1 else None


def _replace(nodes: list[ast.AST], at: int, new: ast.AST) -> None:
    """Put `new` where `nodes[at]` is, in its parent."""
    old = nodes[at]
    for parent in nodes[:at]:
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list) and any(v is old for v in value):
                value[next(i for i, v in enumerate(value) if v is old)] = new
                return
    raise AssertionError(f"node {at} has no parent")


def _squeeze(text: str) -> str:
    """Source text as part of an id: no blanks, at most 40 characters."""
    return "".join(text.split())[:40]


Edit = Callable[[list[ast.AST], int], None]


def _edits(
    node: ast.AST, module: types.ModuleType, in_function: bool
) -> Iterator[tuple[str, str, Edit]]:
    """(operator, change, edit) of every mutant of `node` itself."""
    if isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            for new in _CMP.get(type(op), ()):

                def edit_cmp(
                    ns: list[ast.AST], at: int, k: int = k, new: type[ast.cmpop] = new
                ) -> None:
                    compare = ns[at]
                    assert isinstance(compare, ast.Compare)
                    compare.ops[k] = new()

                yield "cmp", f"{_SYMBOL[type(op)]}->{_SYMBOL[new]}", edit_cmp
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BIN:
        new_op = _BIN[type(node.op)]
        eq = "=" if isinstance(node, ast.AugAssign) else ""

        def edit_bin(ns: list[ast.AST], at: int, new_op: type[ast.operator] = new_op) -> None:
            setattr(ns[at], "op", new_op())  # noqa: B010 - BinOp or AugAssign

        yield "binop", f"{_SYMBOL[type(node.op)]}{eq}->{_SYMBOL[new_op]}{eq}", edit_bin
    elif isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes):
        value = node.value
        news: list[object] = []
        if isinstance(value, bool):
            news = [not value]
        elif isinstance(value, int | float):
            news = [value + 1, value - 1]
        for new_value in news:

            def edit_const(ns: list[ast.AST], at: int, new_value: object = new_value) -> None:
                setattr(ns[at], "value", new_value)  # noqa: B010

            yield "const", f"{value!r}->{new_value!r}", edit_const
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):

        def edit_not(ns: list[ast.AST], at: int) -> None:
            unary = ns[at]
            assert isinstance(unary, ast.UnaryOp)
            _replace(ns, at, unary.operand)

        yield "not", _squeeze(ast.unparse(node.operand)), edit_not
    elif isinstance(node, ast.BoolOp):
        mine, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")

        def edit_bool(ns: list[ast.AST], at: int) -> None:
            boolop = ns[at]
            assert isinstance(boolop, ast.BoolOp)
            boolop.op = ast.Or() if isinstance(boolop.op, ast.And) else ast.And()

        yield "boolop", f"{mine}->{other}", edit_bool
    elif isinstance(node, ast.Attribute) and (names := _enum_members(module, node)):
        new_attr = names[(names.index(node.attr) + 1) % len(names)]
        base = ast.unparse(node.value)

        def edit_enum(ns: list[ast.AST], at: int, new_attr: str = new_attr) -> None:
            setattr(ns[at], "attr", new_attr)  # noqa: B010

        yield "enum", f"{base}.{node.attr}->{base}.{new_attr}", edit_enum
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"min", "max"}
    ):
        new_fn = "max" if node.func.id == "min" else "min"

        def edit_fn(ns: list[ast.AST], at: int, new_fn: str = new_fn) -> None:
            setattr(getattr(ns[at], "func"), "id", new_fn)  # noqa: B009, B010

        yield "minmax", f"{node.func.id}->{new_fn}", edit_fn
    if isinstance(node, _DELETABLE) and in_function:

        def edit_delete(ns: list[ast.AST], at: int) -> None:
            _replace(ns, at, ast.Pass())

        yield "delete", _squeeze(ast.unparse(node).splitlines()[0]), edit_delete


def mutants(path: str, source: str, module: types.ModuleType) -> list[Mutant]:
    """Every mutant of the module at `path` (`module` is it, imported: to know enums)."""
    tree = ast.parse(source)
    skip = _skipped(tree)
    scopes = _scopes(tree)
    result: list[Mutant] = []
    seen: dict[str, int] = {}
    for at, node in enumerate(_nodes(tree)):
        if id(node) in skip or id(node) not in scopes:
            continue
        scope, outer = scopes[id(node)]
        for op, change, edit in _edits(node, module, outer is not None):
            base = f"{path}:{scope}:{op}:{change}"
            seen[base] = seen.get(base, 0) + 1
            result.append(
                Mutant(
                    path, f"{base}#{seen[base]}", getattr(node, "lineno", 0), scope, outer, at, edit
                )
            )
    return result


# -- equivalents ---------------------------------------------------------------------


def read_equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:  # also reads OPEN
    """id -> reason, from lines ``ID reason`` (``#`` comments and blank lines aside)."""
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        mutant, _, reason = line.strip().partition(" ")
        if not reason.strip():
            raise SystemExit(f"{path}:{number}: write `ID one-line reason`, not {line!r}")
        if mutant.strip() in listed:
            raise SystemExit(f"{path}:{number}: {mutant.strip()} is listed twice")
        listed[mutant.strip()] = reason.strip()
    return listed


def _say(*lines: str, file: TextIO | None = None) -> None:
    """Write lines to `file` (default: standard output)."""
    (file or sys.stdout).write("".join(f"{line}\n" for line in lines))


# -- running -------------------------------------------------------------------------


def _module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _project_modules() -> list[str]:
    """Names of the imported modules that live in this repository (not this script)."""
    names = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if (
            file
            and name != "__main__"
            and Path(file).resolve().is_relative_to(ROOT)
            and ".venv" not in Path(file).parts
            and Path(file).resolve() != Path(__file__).resolve()
        ):
            names.append(name)
    return names


def _live_function(module: types.ModuleType, qualname: str) -> types.FunctionType | None:
    """The function object `qualname` names in `module` (through classes, properties,
    static and class methods); None when it cannot be found."""
    obj: object = module
    for part in qualname.split("."):
        space = obj.__dict__ if isinstance(obj, type) else vars(obj)
        obj = space.get(part)
        if isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        if obj is None:
            return None
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj if isinstance(obj, types.FunctionType) else None


def _code_named(code: types.CodeType, qualname: str) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_qualname == qualname:
                return const
            if (found := _code_named(const, qualname)) is not None:
                return found
    return None


def _swap(mutant: Mutant, code: types.CodeType) -> bool:
    """Swap the mutated function's code object into the live function; False when the
    mutant is outside any function (or the function cannot be found)."""
    if mutant.function is None:
        return False
    live = _live_function(sys.modules[_module_name(mutant.module)], mutant.function)
    new = _code_named(code, mutant.function)
    if live is None or new is None or new.co_freevars != live.__code__.co_freevars:
        return False
    live.__code__ = new
    return True


def _reload(mutant: Mutant, code: types.CodeType) -> None:
    """Forget every module of the project, then import the mutated module from `code`
    (what imports it next, the tests included, gets the mutant)."""
    name = _module_name(mutant.module)
    for stale in _project_modules():
        del sys.modules[stale]
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / mutant.module)
    module.__package__ = name.rpartition(".")[0]
    sys.modules[name] = module
    exec(code, module.__dict__)  # noqa: S102 - the mutant under test
    setattr(importlib.import_module(module.__package__), name.rpartition(".")[2], module)


def _pytest_args(tests: tuple[str, ...]) -> list[str]:
    return [
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "-m",
        "not slow and not integration",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
        *tests,
    ]


class _Profile:
    """A pytest plugin: Hypothesis derandomized and without its example database, so the
    same mutant always gets the same verdict, and without shrinking (a failure is all a
    kill needs)."""

    def pytest_configure(self) -> None:
        from hypothesis import Phase, settings  # noqa: PLC0415 - a dev dependency

        settings.register_profile(
            "mutation",
            derandomize=True,
            database=None,
            deadline=None,
            print_blob=False,
            phases=(Phase.explicit, Phase.reuse, Phase.generate),
        )
        settings.load_profile("mutation")


def _quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = io.StringIO()


def _run_items(items: list[Any], last_next: Any = None) -> int:
    """Run collected pytest items in order: 1 at the first failure (setup, call or
    teardown), else 0. `last_next`: the item that follows the last one, if any (pytest
    tears down the fixtures the next item does not share)."""
    from _pytest.runner import runtestprotocol  # noqa: PLC0415

    for i, item in enumerate(items):
        following = items[i + 1] if i + 1 < len(items) else last_next
        if any(report.failed for report in runtestprotocol(item, log=False, nextitem=following)):
            return 1
    return 0


def _fork(run: Callable[[], int]) -> int:
    """Start `run` in a forked child whose exit code is its result; return the pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = _CRASHED
        try:
            code = run()
        except BaseException:  # noqa: BLE001 - an error in the child kills the mutant
            code = _CRASHED
        finally:
            os._exit(code)
    return pid


_NO_TESTS = 5  # pytest's exit code when it collected no test
_CRASHED = 70


def _coverage(module_file: str, items: list[Any]) -> tuple[int, list[frozenset[str]]]:
    """Run `items` once, unmutated, in a forked child under a profile hook: (its exit
    code, for each item the qualified names of the functions of `module_file` it called,
    in its setup, call or teardown; nested functions by their own names)."""
    read, write = os.pipe()

    def run() -> int:
        os.close(read)
        _quiet()
        called: set[str] = set()

        def hook(frame: types.FrameType, event: str, _arg: object) -> None:
            if event == "call" and frame.f_code.co_filename == module_file:
                called.add(frame.f_code.co_qualname)

        per_item: list[frozenset[str]] = []
        failed = 0
        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            for i in range(len(items)):
                called.clear()
                failed |= _run_items(items[i : i + 1], items[i + 1] if i + 1 < len(items) else None)
                per_item.append(frozenset(called))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        with os.fdopen(write, "wb") as pipe:
            pickle.dump(per_item, pipe)
        return failed

    pid = _fork(run)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code, (pickle.loads(data) if code == 0 else [])  # noqa: S301 - our own child


def _covering(mutant: Mutant, items: list[Any], covered: list[frozenset[str]] | None) -> list[Any]:
    """The items that called the mutant's function (or a function nested in it); every
    item without coverage (`covered` None)."""
    if mutant.function is None or covered is None:
        return items
    inner = f"{mutant.function}."
    return [
        item
        for item, names in zip(items, covered, strict=True)
        if any(name == mutant.function or name.startswith(inner) for name in names)
    ]


def _mutant_run(
    mutant: Mutant | None, original: ast.Module, items: list[Any], tests: tuple[str, ...]
) -> Callable[[], int]:
    """What a child does: make the mutant live, run the tests, quietly."""

    def run() -> int:
        import pytest  # noqa: PLC0415

        _quiet()
        if mutant is None:
            return _run_items(items)
        code = compile(mutant.tree(original), str(ROOT / mutant.module), "exec")
        if _swap(mutant, code):
            return _run_items(items)
        try:
            _reload(mutant, code)
        except Exception:  # noqa: BLE001 - the mutated module does not import: killed
            return 1
        return int(pytest.main(["-x", *_pytest_args(tests)], plugins=[_Profile()]))

    return run


def _explore_run(mutant: Mutant | None, original: ast.Module) -> Callable[[], int]:
    """What an `--explore-killer` child does: make the mutant live, then run the
    exhaustive search in `EXPLORE_SCOPE` on the unchanged system: 1 on a violation."""

    def run() -> int:
        _quiet()
        if mutant is not None:
            code = compile(mutant.tree(original), str(ROOT / mutant.module), "exec")
            if not _swap(mutant, code):
                try:
                    _reload(mutant, code)
                except Exception:  # noqa: BLE001 - the mutated module does not import
                    return 1
        # Imported after the swap or reload: the lab runs on the mutated module.
        from l0lab.sim.explore import explore  # noqa: PLC0415
        from l0lab.sim.moves import Scope  # noqa: PLC0415
        from l0lab.sim.variants import CORRECT  # noqa: PLC0415

        found = explore(Scope(**EXPLORE_SCOPE), CORRECT, liveness=False)
        return 0 if found.ok else 1

    return run


def _judge(
    runs: list[Mutant],
    make: Callable[[Mutant], Callable[[], int]],
    jobs: int,
    timeout: float,
    result: Result,
) -> None:
    """Run `make(mutant)` for each of `runs` in forked children, `jobs` at once; a
    child that outlives `timeout` runs again alone with twice as long."""
    pending: dict[int, tuple[Mutant, float]] = {}
    for mutant in runs:
        _reap(pending, jobs, timeout, result)
        pending[_fork(make(mutant))] = (mutant, time.monotonic())
        result.run.append(mutant)
    _reap(pending, 1, timeout, result)
    # A busy machine can slow a run past the timeout: only a second one, alone and
    # with twice as long, counts as killed (it loops, or nearly so).
    slow, result.slow = result.slow, []
    for mutant in slow:
        _reap({_fork(make(mutant)): (mutant, time.monotonic())}, 1, timeout * 2, result)
    result.timed_out.extend(result.slow)


@dataclass
class Result:
    """The verdicts on one module's mutants."""

    module: str
    run: list[Mutant] = field(default_factory=list)
    killed: list[Mutant] = field(default_factory=list)
    timed_out: list[Mutant] = field(default_factory=list)
    slow: list[Mutant] = field(default_factory=list)
    """Outlived the timeout once: run again alone, with twice as long."""
    survived: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0
    cpu: float = 0.0
    """CPU seconds of the children (user and system)."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap(
    pending: dict[int, tuple[Mutant, float]], limit: int, timeout: float, result: Result
) -> None:
    """Reap children until fewer than `limit` run; kill any that outlives `timeout`."""
    while len(pending) >= limit and pending:
        reaped = False
        for pid, (mutant, started) in list(pending.items()):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0:
                if time.monotonic() - started > timeout:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    del pending[pid]
                    result.slow.append(mutant)
                    reaped = True
                continue
            del pending[pid]
            reaped = True
            code = os.waitstatus_to_exitcode(status)
            if code in {_NO_TESTS, _CRASHED}:
                raise SystemExit(
                    f"{mutant.id}: the run broke (exit {code}: 5 = pytest ran "
                    "no test, 70 = the tool failed); try it with --show"
                )
            (result.survived if code == 0 else result.killed).append(mutant)
        if not reaped:
            time.sleep(0.005)  # polling children, not synchronising tests


def _sample(found: list[Mutant], size: int | None, seed: int) -> list[Mutant]:
    if size is None or size >= len(found):
        return found
    return sorted(random.Random(seed).sample(found, size), key=found.index)


def _describe(mutant: Mutant, source_lines: list[str]) -> str:
    line = source_lines[mutant.line - 1].strip() if mutant.line else ""
    return f"  {mutant.id}\n      line {mutant.line}: {line}"


@dataclass
class _Campaign:
    """A pytest plugin that, once the tests are collected, runs the mutants instead of
    the tests (`pytest_runtestloop`)."""

    paths: list[str]
    jobs: int
    sample: int | None
    seed: int
    match: str | None
    timeout_factor: float
    equivalents: dict[str, str]
    open_survivors: dict[str, str]
    recheck: bool
    out: Any
    explore: str | None = None
    """`--explore-killer`: None, "survivors" or "all"."""
    failures: int | None = None
    rows: list[str] = field(default_factory=list)
    explored: list[str] = field(default_factory=list)
    """The `--explore-killer` table's rows."""

    def pytest_runtestloop(self, session: Any) -> bool:
        self.failures = 0
        for path in self.paths:
            self.failures += self._module(path, session.items)
        return True

    def _module(self, path: str, collected: list[Any]) -> int:
        tests = TARGETS[path].tests
        items = sorted(
            (i for i in collected if str(Path(i.path).relative_to(ROOT)) in tests),
            key=lambda i: tests.index(str(Path(i.path).relative_to(ROOT))),
        )
        source = (ROOT / path).read_text(encoding="utf-8")
        original = ast.parse(source)
        found = mutants(path, source, sys.modules[_module_name(path)])
        listed = self.equivalents.keys() | self.open_survivors.keys()
        chosen = _sample(
            [
                m
                for m in found
                if (self.match is None or self.match in m.id)
                and (not self.recheck or m.id in listed)
            ],
            self.sample,
            self.seed,
        )
        started, cpu = time.monotonic(), _children_cpu()
        covered: list[frozenset[str]] | None = None
        if len(chosen) == len(found):  # a sample is too few mutants to pay for the profile
            module_file = sys.modules[_module_name(path)].__file__
            assert module_file is not None
            code, covered = _coverage(module_file, items)
        else:
            _, status = os.waitpid(_fork(_mutant_run(None, original, items, tests)), 0)
            code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"{path}: its tests fail without any mutant; fix them first")
        # With coverage the baseline ran under the profile hook (slower): a generous bound
        # for a run of every test, a mutant's tests being a subset.
        timeout = max(10.0, (time.monotonic() - started) * self.timeout_factor)
        result = Result(path)
        _judge(
            chosen,
            lambda m: _mutant_run(m, original, _covering(m, items, covered), tests),
            self.jobs,
            timeout,
            result,
        )
        result.seconds = time.monotonic() - started
        result.cpu = _children_cpu() - cpu
        failures = self._report(result, found, source.splitlines(), full=len(chosen) == len(found))
        if self.explore is not None:
            self._explore(result, original, source.splitlines())
        return failures

    def _explore(self, tested: Result, original: ast.Module, lines: list[str]) -> None:
        """The exhaustive checker as one more killer (`--explore-killer`)."""
        path, out = tested.module, self.out
        started, cpu = time.monotonic(), _children_cpu()
        _, status = os.waitpid(_fork(_explore_run(None, original)), 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{path}: the exhaustive search fails without any mutant")
        baseline = time.monotonic() - started
        runs = tested.run if self.explore == "all" else tested.survived
        result = Result(path)
        _judge(
            runs,
            lambda m: _explore_run(m, original),
            self.jobs,
            max(60.0, baseline * self.timeout_factor),
            result,
        )
        dead = {m.id for m in result.killed + result.timed_out}
        by_tests = {m.id for m in tested.killed + tested.timed_out}
        only = [m for m in result.run if m.id in dead and m.id not in by_tests]
        if only:
            _say(
                f"{path}: killed only by the exhaustive checker (the unit tests let them live):",
                file=out,
            )
            for mutant in only:
                _say(_describe(mutant, lines), file=out)
        both = len(dead & by_tests)
        self.explored.append(
            f"| {path} | {self.explore} | {len(result.run)} | {len(dead)} "
            f"({len(result.timed_out)} timed out) | {both} | {len(only)} | "
            f"{time.monotonic() - started:.0f} s | {_children_cpu() - cpu:.0f} s |"
        )
        out.flush()

    def _report(self, result: Result, found: list[Mutant], lines: list[str], *, full: bool) -> int:
        path = result.module
        out = self.out
        listed = {i for i in self.equivalents if i.startswith(f"{path}:")}
        known = {i for i in self.open_survivors if i.startswith(f"{path}:")}
        equivalent = [m for m in result.survived if m.id in listed]
        still_open = [m for m in result.survived if m.id in known]
        unlisted = [m for m in result.survived if m.id not in listed | known]
        wrongly = [m for m in result.killed + result.timed_out if m.id in listed | known]
        stale = sorted((listed | known) - {m.id for m in found}) if full else []
        if TARGETS[path].safety and known:
            _say(
                f"{path}: a safety module leaves no survivor open: answer these in "
                f"{EQUIVALENTS.name} or with a test:",
                *sorted(known),
                file=out,
            )
            stale.extend(sorted(known))
        new = "survived, not listed (write a test that kills it, or list it as equivalent)"
        killed = "listed but killed (remove it from the equivalents or open list)"
        for title, bad in ((new, unlisted), (killed, wrongly)):
            if bad:
                _say(f"{path}: {title}:", file=out)
                for mutant in bad:
                    _say(_describe(mutant, lines), file=out)
        if stale:
            _say(f"{path}: listed but no such mutant (remove or rename it):", file=out)
            _say("\n".join(f"  {i}" for i in stale), file=out)
        dead = len(result.killed) + len(result.timed_out)
        judged = len(result.run) - len(equivalent)
        score = 100.0 * dead / judged if judged else 100.0
        self.rows.append(
            f"| {path} | {len(found)} | {len(result.run)} | {dead} "
            f"({len(result.timed_out)} timed out) | {len(equivalent)} | "
            f"{len(still_open)} | {len(unlisted)} | {score:.0f} % | "
            f"{result.seconds:.0f} s | "
            f"{result.cpu:.0f} s |"
        )
        out.flush()
        return len(unlisted) + len(wrongly) + len(stale)


def check(
    paths: list[str],
    *,
    jobs: int,
    sample: int | None,
    seed: int,
    match: str | None,
    timeout_factor: float,
    equivalents: dict[str, str],
    open_survivors: dict[str, str],
    recheck: bool = False,
    explore: str | None = None,
) -> int:
    """Run the mutants of `paths`; print a table; 1 on any unlisted survivor (or a stale or
    killed equivalent), else 0."""
    import pytest  # noqa: PLC0415

    tests = tuple(dict.fromkeys(t for p in paths for t in TARGETS[p].tests))
    campaign = _Campaign(
        paths,
        jobs,
        sample,
        seed,
        match,
        timeout_factor,
        equivalents,
        open_survivors,
        recheck,
        sys.stdout,
        explore,
    )
    with contextlib.redirect_stdout(io.StringIO()) as said:
        code = pytest.main(_pytest_args(tests), plugins=[_Profile(), campaign])
    if campaign.failures is None:
        _say(said.getvalue())
        raise SystemExit(f"pytest exit {code} before any mutant ran")
    _say(
        "| module | mutants | run | killed | equivalent | open | unlisted survivors "
        "| score | wall | CPU |"
    )
    _say("|---|---|---|---|---|---|---|---|---|---|")
    _say("\n".join(campaign.rows))
    if explore is not None:
        scope = ", ".join(
            f"{k}={sorted(v) if isinstance(v, frozenset) else v}" for k, v in EXPLORE_SCOPE.items()
        )
        _say(
            "",
            f"Exhaustive checker as a killer (scope: {scope}; judged: the "
            f"{'mutants run' if explore == 'all' else 'survivors of the tests'}):",
            "| module | judged | run | killed by the checker | also by the tests "
            "| only by the checker | wall | CPU |",
            "|---|---|---|---|---|---|---|---|",
        )
        _say("\n".join(campaign.explored))
    return 1 if campaign.failures else 0


def show(mutant_id: str) -> int:
    """Run one mutant with pytest's full output (pytest collects again in the child)."""
    import pytest  # noqa: PLC0415

    path = mutant_id.split(":", 1)[0]
    if path not in TARGETS:
        raise SystemExit(f"{mutant_id!r}: no module of TARGETS; the id starts with its path")
    tests = TARGETS[path].tests
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", *_pytest_args(tests)], plugins=[_Profile()])
    source = (ROOT / path).read_text(encoding="utf-8")
    original = ast.parse(source)
    found = {m.id: m for m in mutants(path, source, sys.modules[_module_name(path)])}
    if mutant_id not in found:
        raise SystemExit(f"no mutant {mutant_id!r}; list them with `{path} --list`")
    mutant = found[mutant_id]
    _say(_describe(mutant, source.splitlines()))
    changed = _nodes(mutant.tree(original))[mutant.at]
    _say("  mutated: " + ast.unparse(changed).splitlines()[0][:100])

    def run() -> int:
        code = compile(mutant.tree(original), str(ROOT / path), "exec")
        if not _swap(mutant, code):
            _reload(mutant, code)
        return int(pytest.main(_pytest_args(tests), plugins=[_Profile()]))

    _, status = os.waitpid(_fork(run), 0)
    _say("killed" if os.waitstatus_to_exitcode(status) else "SURVIVED")
    return 0


def _selected(args: argparse.Namespace) -> Iterator[str]:
    if args.safety:
        yield from (p for p, t in TARGETS.items() if t.safety)
    elif args.rest:
        yield from (p for p, t in TARGETS.items() if not t.safety)
    elif args.all:
        yield from TARGETS
    for path in args.modules:
        if path not in TARGETS:
            raise SystemExit(f"{path!r} is not a module of TARGETS in {__file__}: add it")
        yield path


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module paths, e.g. gcd/rules/cursor.py")
    parser.add_argument("--safety", action="store_true", help="the five safety modules")
    parser.add_argument("--rest", action="store_true", help="the other modules of TARGETS")
    parser.add_argument("--all", action="store_true", help="every module of TARGETS")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--sample", type=int, help="run this many mutants per module")
    parser.add_argument("--seed", type=int, default=31, help="seed of --sample")
    parser.add_argument(
        "--timeout-factor",
        type=float,
        default=5.0,
        help="a mutant is killed after this many times the baseline run",
    )
    parser.add_argument("--match", metavar="TEXT", help="run only the mutants whose id has TEXT")
    parser.add_argument(
        "--equivalents",
        type=Path,
        default=EQUIVALENTS,
        metavar="FILE",
        help="the list of equivalent mutants (default: %(default)s)",
    )
    parser.add_argument(
        "--open",
        type=Path,
        default=OPEN,
        metavar="FILE",
        help="survivors not answered yet (default: %(default)s)",
    )
    parser.add_argument(
        "--recheck", action="store_true", help="run only the listed mutants (equivalent or open)"
    )
    parser.add_argument(
        "--explore-killer",
        nargs="?",
        const="survivors",
        choices=("survivors", "all"),
        default=None,
        help="also run the exhaustive checker (l0lab.sim.explore, a small "
        "scope, seconds per mutant) on each survivor of the tests, or on "
        "every mutant run with 'all'; report the mutants only it kills",
    )
    parser.add_argument("--list", action="store_true", help="print the mutant ids and stop")
    parser.add_argument("--show", metavar="ID", help="run one mutant with pytest's output")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    if args.show:
        return show(args.show)
    paths = list(dict.fromkeys(_selected(args)))
    if not paths:
        parser.error("name modules, or --safety, --rest or --all")
    if args.list:
        for path in paths:
            module = importlib.import_module(_module_name(path))
            source = (ROOT / path).read_text(encoding="utf-8")
            for mutant in mutants(path, source, module):
                _say(f"{mutant.id}  (line {mutant.line})")
        return 0
    return check(
        paths,
        jobs=args.jobs,
        sample=args.sample,
        seed=args.seed,
        match=args.match,
        timeout_factor=args.timeout_factor,
        recheck=args.recheck,
        equivalents=read_equivalents(args.equivalents),
        open_survivors=read_equivalents(args.open),
        explore=args.explore_killer,
    )


if __name__ == "__main__":
    sys.exit(main())
