"""The tracker core stays sans-IO: no event loop, clock, randomness, network or etcd."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "watermark"
PURE_MODULES = [
    "__init__.py",
    "errors.py",
    "window.py",
    "gcstate.py",
    "snapshot.py",
    "strictjson.py",
    "display.py",
    "safe_epoch.py",
    "gcindex.py",
]
FORBIDDEN = frozenset(
    {
        "asyncio",
        "aetcd",
        "etcd3",
        "grpc",
        "boto3",
        "botocore",
        "aiobotocore",
        "time",
        "random",
        "secrets",
        "socket",
        "threading",
        "os",
        "datetime",
        "importlib",
    }
)


def forbidden_imports(source: str) -> list[str]:
    """Return 'line: module' for every forbidden import (or __import__ call) in `source`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            modules = ["__import__"]
        found.extend(
            f"{node.lineno}: {module}"
            for module in modules
            if module == "__import__" or module.split(".")[0] in FORBIDDEN
        )
    return found


@pytest.mark.parametrize("module", PURE_MODULES)
def test_core_module_imports_nothing_impure(module: str) -> None:
    """The pure core modules import none of the I/O, clock or randomness modules."""
    source = (PACKAGE / module).read_text(encoding="utf-8")
    assert forbidden_imports(source) == [], f"watermark/{module} must stay sans-IO"


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
    ],
)
def test_checker_flags_an_impure_import(source: str) -> None:
    """The checker reports a forbidden import wherever it hides in the source."""
    assert forbidden_imports(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import enum\nfrom dataclasses import dataclass\n",
        "from watermark.errors import StaleEpoch\n",
        "from . import errors\n",
        "import timeit_helpers_are_not_time\n",
        "from collections import deque\n",
    ],
)
def test_checker_accepts_pure_imports(source: str) -> None:
    """Stdlib data modules, intra-package and look-alike names are not flagged."""
    assert forbidden_imports(source) == []


def test_checker_names_the_line_and_module() -> None:
    """A finding says where the import is and what it imports."""
    assert forbidden_imports("import enum\nimport time\n") == ["2: time"]
