"""The public Python API: every name docs/python-api.md documents is importable from
`watermark` (and nothing undocumented is exposed), from the module the table names."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import watermark

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `(\w+)` \| `([\w.]+)` \|", re.MULTILINE)


def documented() -> dict[str, str]:
    """name -> defining module, from the reference page's table."""
    return dict(_ROW.findall((ROOT / "docs" / "python-api.md").read_text()))


def test_every_documented_name_is_importable_from_watermark() -> None:
    """`from watermark import NAME` for every row; the row's module defines it; the table
    is exactly `watermark.__all__`."""
    table = documented()
    assert sorted(table) == sorted(watermark.__all__)
    for name, module in table.items():
        exec(f"from watermark import {name}", {})
        assert getattr(watermark, name) is getattr(importlib.import_module(module), name)


def test_importing_the_package_imports_nothing_heavy() -> None:
    """`import watermark` (and the pure core) loads neither asyncio nor aiohttp nor etcd
    clients: the face resolves names on first use."""
    probe = (
        "import sys, watermark, watermark.core.window; "
        "print(sorted(m for m in ('asyncio', 'aiohttp', 'aetcd', 'urllib3') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name that is not part of the API fails as Python's own lookups do."""
    with pytest.raises(AttributeError, match="Nope"):
        watermark.Nope  # noqa: B018
