"""The architecture as a test: layers, no import cycles, a pure core, the lab outside.

Every module of `watermark`, `gcd` and the lab `l0lab` belongs to one *unit* (a
subpackage such as `watermark.core`, or a root module such as `l0gc.errors`), and
every unit to one layer of `LAYERS`, lowest first. A module may import its own unit and
the units of lower layers, never a unit of its own layer or of a higher one. Every
import counts: at module level, inside a function, or under `TYPE_CHECKING`. The
composition roots (`watermark.__main__`, `gcd.__main__`) are the one exception: they
wire the command together and import whatever it needs.

The lab (`l0lab`: local servers, simulation, chaos, demo) sits above the product (the
layers of `watermark` and `gcd`) and is not part of it: the l0gc wheel and image do not
carry it. So the product never imports it when a module of the product is imported; the
commands that run it (`LAB_COMMANDS`, in `gcd.cli`) import it inside their functions (or
for types, under ``if TYPE_CHECKING:``) and nowhere else does. The lab in turn imports
any layer of the product but the commands (`LAB_NEVER_IMPORTS`).

The pure units (`watermark.core`, `gcd.rules`, both `errors` modules) import none of
the I/O, clock or randomness modules: they decide, the layers above do the I/O.

No re-exports: a name is imported from the module that defines it. The one documented
exception is a *package face* (`FACES`: `watermark/__init__.py`), which exposes the
public API (docs/python-api.md) so users import ``from watermark import Publisher``. A
face imports nothing at run time but `importlib` and `typing` (its names are resolved
lazily, PEP 562; the imports that give them types sit under ``if TYPE_CHECKING:``), and
every name it exposes is listed with the one module that defines it, in whose own
`__all__` the name is, and nowhere else (`test_the_package_face_...` below).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("l0gc", "watermark", "gcd", "l0lab")
PRODUCT = ("l0gc", "watermark", "gcd")
LAB = "l0lab"

LAYERS: tuple[tuple[str, ...], ...] = (
    # the kernel both commands stand on
    ("l0gc", "l0gc.errors"),
    ("l0gc.strictjson", "l0gc.display"),
    ("l0gc.contract",),
    ("l0gc.events",),
    ("l0gc.options", "l0gc.logs", "l0gc.exitcodes"),
    ("l0gc.completion", "l0gc.process", "l0gc.auth"),
    ("l0gc.etcd",),
    # the publisher; never imported by gcd (SIDES)
    ("watermark",),
    ("watermark.events",),
    ("watermark.core",),
    ("watermark.service",),
    ("watermark.api",),
    ("watermark.client",),
    ("watermark.cli",),
    # the sweepers; never imported by watermark
    ("gcd",),
    ("gcd.rules",),
    ("gcd.storage",),
    ("gcd.observe",),
    ("gcd.journal",),
    ("gcd.undo",),
    ("gcd.sweep",),
    ("gcd.explainer",),
    ("gcd.service",),
    ("gcd.status", "gcd.scrub"),
    ("gcd.spark",),
    ("gcd.cli",),
    # the lab, above the product; never imported by it (but lazily by LAB_COMMANDS)
    ("l0lab",),
    ("l0lab.testing",),
    ("l0lab.sim",),
    ("l0lab.demo",),
    ("l0lab.chaos",),
)
SIDES = ("watermark", "gcd")
"""The two commands' packages: each imports the kernel, neither imports the other."""
ROOTS = frozenset({"watermark.__main__", "gcd.__main__"})
LAB_COMMANDS = frozenset(
    {"gcd.cli.demo", "gcd.cli.chaos", "gcd.cli.simulate", "gcd.cli.exhaustive", "gcd.cli.dev"}
)
LAB_NEVER_IMPORTS = ("gcd.cli", "gcd.__main__", "watermark.__main__")
FACES = frozenset({"watermark", "gcd"})
FACE_RUNTIME_IMPORTS = frozenset({"__future__", "importlib", "typing"})
PURE_UNITS = ("l0gc.errors", "watermark.core", "l0gc.errors", "gcd.rules")
FORBIDDEN = frozenset(
    {
        "asyncio",
        "aetcd",
        "etcd3",
        "grpc",
        "boto3",
        "botocore",
        "aiobotocore",
        "azure",
        "gcloud",
        "pyspark",
        "structlog",
        "prometheus_client",
        "time",
        "random",
        "secrets",
        "socket",
        "threading",
        "os",
        "datetime",
        "importlib",
        "subprocess",
        "pathlib",
    }
)


def module_name(path: Path) -> str:
    """`watermark/core/window.py` -> `watermark.core.window` (a package: its name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the two packages, by dotted name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def imports(name: str, source: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, absolute, wherever it is written.

    `from pkg import name` counts as an import of `pkg.name` when that is a module, so
    importing a submodule through its package is seen for what it is.
    """
    known = MODULES
    base = name.split(".") if is_package else name.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                dotted = f"{target}.{alias.name}"
                found.append((node.lineno, dotted if dotted in known else target))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            found.append((node.lineno, "__import__"))
    return found


def eager_lines(source: str) -> set[int]:
    """The lines of the imports that run when the module is imported: not inside a
    function, not under ``if TYPE_CHECKING:`` (class bodies and module-level if, try and
    with blocks do run)."""
    found: set[int] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and ast.unparse(child.test) in {
                "TYPE_CHECKING",
                "typing.TYPE_CHECKING",
            }:
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.add(child.lineno)
            visit(child)

    visit(ast.parse(source))
    return found


def lab_imports(name: str, source: str, *, is_package: bool = False) -> list[str]:
    """'line: module' of every import of the lab by product module `name` that breaks the
    rule: any that runs when `name` is imported, and any at all outside LAB_COMMANDS."""
    eager = eager_lines(source)
    return [
        f"{line}: {target}"
        for line, target in imports(name, source, is_package=is_package)
        if is_lab(target) and (line in eager or name not in LAB_COMMANDS)
    ]


def unit_of(module: str) -> str | None:
    """The unit of `module`: the longest unit name it is, or lies under; None if outside."""
    best: str | None = None
    for layer in LAYERS:
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and (
                best is None or len(unit) > len(best)
            ):
                best = unit
    return best


def layer_of(unit: str) -> int:
    """The index of `unit`'s layer in LAYERS."""
    return next(index for index, layer in enumerate(LAYERS) if unit in layer)


def is_lab(module: str) -> bool:
    """`module` is the lab or inside it."""
    return module == LAB or module.startswith(LAB + ".")


def violations(name: str, targets: list[tuple[int, str]]) -> list[str]:
    """'line: module' for every import of `name` that is not of a lower layer (a lab
    command's imports of the lab aside: `lab_imports` judges those), and every import
    of a command by the lab."""
    own = unit_of(name)
    assert own is not None, f"{name} belongs to no unit of LAYERS: add it"
    found = []
    for line, target in targets:
        if is_lab(name) and any(
            target == c or target.startswith(c + ".") for c in LAB_NEVER_IMPORTS
        ):
            found.append(f"{line}: {target}")
            continue
        unit = unit_of(target)
        if unit is None or unit == own or (name in LAB_COMMANDS and is_lab(target)):
            continue
        if layer_of(unit) >= layer_of(own):
            found.append(f"{line}: {target}")
    return found


MODULES = modules()


@pytest.mark.parametrize("name", sorted(set(MODULES) - ROOTS - FACES))
def test_a_module_imports_only_its_own_unit_and_lower_layers(name: str) -> None:
    """No module imports a unit of its own layer or of a layer above it."""
    path = MODULES[name]
    found = violations(name, imports(name, path.read_text(), is_package=path.stem == "__init__"))
    assert found == [], f"{path.relative_to(ROOT)} imports above its layer: {found}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not is_lab(n)))
def test_the_product_never_imports_the_lab_when_it_is_imported(name: str) -> None:
    """No module of gcd or watermark imports l0lab at import time; only the lab commands
    import it at all, inside their functions (or for types)."""
    path = MODULES[name]
    found = lab_imports(name, path.read_text(), is_package=path.stem == "__init__")
    assert found == [], f"{path.relative_to(ROOT)} imports the lab: {found}"


def test_the_lab_commands_are_the_ones_that_import_the_lab() -> None:
    """LAB_COMMANDS is not a stale list: each of them does import the lab (lazily)."""
    for name in LAB_COMMANDS:
        targets = imports(name, MODULES[name].read_text())
        assert any(is_lab(target) for _, target in targets), name


def test_the_wheel_ships_only_the_product_and_the_lab_is_a_distribution_of_its_own() -> None:
    """pyproject.toml's packages are gcd and watermark; l0lab/pyproject.toml lists every
    package of the lab (so an editable install finds each)."""
    import tomllib  # noqa: PLC0415

    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert root["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "gcd*",
        "l0gc*",
        "watermark*",
    ]
    lab = tomllib.loads((ROOT / LAB / "pyproject.toml").read_text())
    packages = {name for name, path in MODULES.items() if is_lab(name) and path.stem == "__init__"}
    assert sorted(lab["tool"]["setuptools"]["packages"]) == sorted(packages)
    assert LAB in root["tool"]["mypy"]["files"]


MAX_MODULE_LINES = 650
"""Issue 37's bound: a module a maintainer can read in one sitting; past it, split the
module by concept (as `l0gc.etcd.watch` left `l0gc.etcd.client`)."""


def test_no_module_of_the_product_is_over_the_line_bound() -> None:
    """Every module of gcd and watermark has at most MAX_MODULE_LINES lines."""
    long = {
        str(path.relative_to(ROOT)): lines
        for name, path in MODULES.items()
        if not is_lab(name) and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_gcd_and_watermark_never_import_each_other() -> None:
    """The sweepers' package and the publisher's share only the kernel (`l0gc`): no
    import between them, wherever it is written (the composition roots included)."""
    crossing = [
        f"{MODULES[name].relative_to(ROOT)}:{line}: {target}"
        for name in MODULES
        for side, other in (SIDES, SIDES[::-1])
        if name == side or name.startswith(side + ".")
        for line, target in imports(name, MODULES[name].read_text())
        if target == other or target.startswith(other + ".")
    ]
    assert crossing == []


def test_there_is_no_import_cycle() -> None:
    """The module import graph (every import, TYPE_CHECKING ones too) is acyclic."""
    graph = {
        name: {
            target
            for _, target in imports(name, path.read_text(), is_package=path.stem == "__init__")
            if target in MODULES and target != name
        }
        for name, path in MODULES.items()
    }
    # A package's own __init__ importing nothing is the rule here; an edge from a module
    # to its package __init__ is a real edge.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_every_package_says_what_lives_there_and_what_it_may_import() -> None:
    """Each package's __init__ has a docstring naming its layer's imports, and no code."""
    for name, path in MODULES.items():
        if path.stem != "__init__":
            continue
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree) or ""
        assert "import" in doc.lower(), f"{path.relative_to(ROOT)}: say what it may import"
        code = [
            node
            for node in tree.body[1:]
            if not isinstance(node, ast.ImportFrom) or node.module != "__future__"
        ]
        allowed = name == "l0gc" or name in FACES  # the version; the faces
        assert allowed or code == [], f"{path.relative_to(ROOT)}: a package re-exports nothing"


def test_a_public_name_means_one_thing() -> None:
    """No two modules define a public class or re-export a name they import: one name,
    one meaning, one import path."""
    defined: dict[str, list[str]] = {}
    reexports: list[str] = []
    for name, path in MODULES.items():
        if name in FACES:
            continue  # the documented exception: test_the_package_face_...
        tree = ast.parse(path.read_text())
        imported: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(name)
            elif (
                isinstance(node, ast.ImportFrom | ast.Import)
                and getattr(node, "module", "") != "__future__"
            ):
                imported |= {alias.asname or alias.name for alias in node.names}
            elif (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(target, ast.Name) and target.id == "__all__"
                    for target in node.targets
                )
                and isinstance(node.value, ast.List | ast.Tuple)
            ):
                exported = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
                reexports.extend(f"{name}.{n}" for n in sorted(exported & imported))
    twice = {cls: where for cls, where in defined.items() if len(where) > 1}
    assert twice == {}, f"one class name, two meanings: {twice}"
    assert reexports == [], f"re-exported (import it from its defining module): {reexports}"


def face_runtime_imports(source: str) -> list[str]:
    """'line: module' of every import of a face that is not under ``if TYPE_CHECKING:``
    and not of `FACE_RUNTIME_IMPORTS`."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            typing_only |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in typing_only:
            continue
        modules = (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        found += [
            f"{node.lineno}: {m}" for m in modules if m.split(".")[0] not in FACE_RUNTIME_IMPORTS
        ]
    return found


@pytest.mark.parametrize("face", sorted(FACES))
def test_the_package_face_imports_nothing_at_run_time(face: str) -> None:
    """A face imports only importlib and typing when it runs; the rest is for types."""
    assert face_runtime_imports(MODULES[face].read_text()) == []


@pytest.mark.parametrize("face", sorted(FACES))
def test_the_package_face_exposes_each_name_from_its_one_defining_module(face: str) -> None:
    """Every name of the face's __all__ is in its table with the module that defines it
    (in that module's own __all__, the very object), is typed by an import from that
    same module, and no other module of the packages defines a public class of the name."""
    package = importlib.import_module(face)
    table: dict[str, str] = package._FACE
    assert sorted(package.__all__) == sorted(table)
    typed: dict[str, str] = {}
    for node in ast.walk(ast.parse(MODULES[face].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            typed |= {alias.name: node.module for alias in node.names}
    for name, module_name in table.items():
        module = importlib.import_module(module_name)
        assert name in module.__all__, f"{module_name} does not export {name}"
        assert getattr(package, name) is getattr(module, name)
        assert typed.get(name) == module_name, f"{name}: typed from {typed.get(name)}"
        defined_in = getattr(getattr(module, name), "__module__", module_name)
        assert defined_in == module_name, f"{name} is defined in {defined_in}"
    defining: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in table:
                defining.setdefault(node.name, []).append(name)
    assert {n: w for n, w in defining.items() if len(w) > 1} == {}


def test_the_face_check_flags_a_runtime_import() -> None:
    """A face that imports a module when it runs (not for types only) is reported."""
    source = (
        "from __future__ import annotations\nimport importlib\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from watermark.service.publisher import Publisher\n"
        "from l0gc.etcd.store import WatermarkStore\n"
    )
    assert face_runtime_imports(source) == ["6: l0gc.etcd.store"]


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("gcd.cli.demo", "from l0lab.demo.runner import DemoRun\n"),
        ("gcd.cli.simulate", "import l0lab.sim.runner\n"),
        ("gcd.cli.chaos", "try:\n    import l0lab.chaos\nexcept ImportError:\n    pass\n"),
        ("gcd.cli.dev", "class C:\n    from l0lab.testing import local_servers\n"),
        ("gcd.sweep.sweeper", "def f():\n    from l0lab.testing.memory import M\n"),
        ("watermark.service.guard", "if TYPE_CHECKING:\n    from l0lab.sim import world\n"),
        ("gcd", "import l0lab\n"),
    ],
)
def test_the_lab_check_flags_an_import_of_the_lab_by_the_product(name: str, source: str) -> None:
    """A product module importing the lab when it is imported (or at all, outside the
    lab commands) is reported with its line."""
    assert lab_imports(name, source) != []


@pytest.mark.parametrize(
    "source",
    [
        "def run(args):\n    from l0lab.demo.runner import DemoRun\n",
        "async def run(args):\n    with lab.required():\n        import l0lab.sim.runner\n",
        "if TYPE_CHECKING:\n    from l0lab.demo.storage import DemoStorage\n",
        "from gcd.cli import lab\n",
    ],
)
def test_the_lab_check_accepts_a_lazy_import_by_a_lab_command(source: str) -> None:
    """A lab command may import the lab inside a function or for types."""
    assert lab_imports("gcd.cli.demo", source) == []


def forbidden_imports(source: str) -> list[str]:
    """Return 'line: module' for every forbidden import (or __import__ call) in `source`."""
    return [
        f"{line}: {module}"
        for line, module in imports("x.y", source)
        if module == "__import__" or module.split(".")[0] in FORBIDDEN
    ]


@pytest.mark.parametrize("name", sorted(name for name in MODULES if unit_of(name) in PURE_UNITS))
def test_a_pure_unit_imports_nothing_impure(name: str) -> None:
    """The pure units import none of the I/O, clock or randomness modules."""
    assert forbidden_imports(MODULES[name].read_text()) == [], f"{name} must stay sans-IO"


def test_the_pure_units_are_what_they_claim() -> None:
    """The purity check covers the whole of each pure unit, not a hand-kept list."""
    covered = {unit_of(name) for name in MODULES if unit_of(name) in PURE_UNITS}
    assert covered == set(PURE_UNITS)
    assert len([n for n in MODULES if unit_of(n) == "watermark.core"]) >= 7
    assert len([n for n in MODULES if unit_of(n) == "l0gc.contract"]) >= 8


# -- the checks can fail ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("l0gc.contract.record", "from l0gc.etcd.store import WatermarkStore\n"),
        ("watermark.core.window", "def f():\n    import watermark.service.guard\n"),
        ("l0gc.options", "from l0gc.logs import redact\n"),
        ("gcd.rules.layout", "from gcd.storage import objectstore\n"),
        ("gcd.sweep.sweeper", "from l0lab.testing.memory import MemoryObjectStore\n"),
        ("gcd.sweep.sweeper", "from gcd.spark import delete\n"),
        ("watermark.cli.main", "from gcd.cli.main import main\n"),
        ("l0lab.demo.runner", "from gcd.cli import output\n"),
        ("l0lab.testing.memory", "from l0lab.sim.world import World\n"),
        ("l0lab.sim.world", "def f():\n    from gcd.__main__ import main\n"),
        ("gcd.cli.sweep", "def f():\n    from l0lab.testing import memory\n"),
    ],
)
def test_the_layer_check_flags_an_upward_or_sideways_import(name: str, source: str) -> None:
    """An import of the same or a higher layer is reported with its line."""
    assert violations(name, imports(name, source)) != []


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("l0gc.etcd.store", "from l0gc.contract.record import PartitionRecord\n"),
        ("gcd.sweep.sweeper", "from gcd.rules.layout import KeyLayout\n"),
        ("gcd.cli.main", "from watermark.cli import main\n"),
        ("watermark.core.window", "from l0gc import strictjson\n"),
        ("watermark.core.window", "import json\n"),
        ("l0lab.demo.runner", "from gcd.sweep.sweeper import run_round\n"),
        ("l0lab.chaos.runner", "from l0lab.demo import storage\n"),
        ("gcd.cli.demo", "def run():\n    from l0lab.demo.runner import DemoRun\n"),
    ],
)
def test_the_layer_check_accepts_own_unit_and_lower_layers(name: str, source: str) -> None:
    """Own-unit, lower-layer and stdlib imports pass."""
    assert violations(name, imports(name, source)) == []


@pytest.mark.parametrize(
    "source",
    [
        "import time\n",
        "import os.path\n",
        "from time import monotonic\n",
        "from asyncio import Lock\n",
        "import json, random\n",
        "def f():\n    import socket\n",
        "try:\n    import aetcd\nexcept ImportError:\n    pass\n",
        "clock = __import__('time')\n",
        "from datetime import datetime as dt\n",
        "import structlog\n",
    ],
)
def test_the_purity_check_flags_an_impure_import(source: str) -> None:
    """The checker reports a forbidden import wherever it hides in the source."""
    assert forbidden_imports(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import enum\nfrom dataclasses import dataclass\n",
        "from l0gc.errors import StaleEpoch\n",
        "from . import errors\n",
        "import timeit_helpers_are_not_time\n",
        "from collections import deque\n",
    ],
)
def test_the_purity_check_accepts_pure_imports(source: str) -> None:
    """Stdlib data modules, intra-package and look-alike names are not flagged."""
    assert forbidden_imports(source) == []


def test_the_purity_check_names_the_line_and_module() -> None:
    """A finding says where the import is and what it imports."""
    assert forbidden_imports("import enum\nimport time\n") == ["2: time"]
