"""Every pin installs on Debian 12's own Python (issue 55): bookworm's only python3.11 is
3.11.2, and a pin that needs a later patch release (gcloud-aio-auth 5.6.0 needs 3.11.3)
made `make demo` and `pip install l0gc` fail there with pip's bare "ResolutionImpossible",
while CI, on a newer 3.11, never saw it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_PYTHON = os.environ.get("L0GC_DEBIAN_PYTHON", "/usr/bin/python3.11")


@pytest.mark.deep
def test_every_pin_resolves_on_debian_bookworms_python(tmp_path: Path) -> None:
    """pip resolves the bootstrap's whole install (every extra and the lab, with the
    constraints) in a venv of Debian's interpreter, without installing it."""
    if shutil.which(DEBIAN_PYTHON) is None:
        pytest.skip(f"no Debian python3.11 at {DEBIAN_PYTHON} (set L0GC_DEBIAN_PYTHON)")
    version = subprocess.run(
        [DEBIAN_PYTHON, "-c", "import sys; print(sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert version.startswith("(3, 11,"), version
    venv = tmp_path / "venv"
    subprocess.run([DEBIAN_PYTHON, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "pip==25.3"], check=True, timeout=300)
    done = subprocess.run(
        [
            *pip,
            "install",
            "--dry-run",
            "--quiet",
            "-c",
            "constraints.txt",
            "-e",
            ".[dev,spark,bench]",
            "-e",
            "./l0lab",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"Python {version}: {done.stderr[-3000:]}"
