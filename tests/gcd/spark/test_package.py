"""`gcd spark-package`: a reproducible zip of gcd + l0gc that a bare Python imports
from (as --py-files puts it on an executor's path), and clear refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from gcd.cli.main import main
from gcd.spark.package import DRIVER_ONLY_MODULES, LAUNCHER
from l0gc import exitcodes


def test_the_zip_is_reproducible_and_holds_both_packages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two builds give the same bytes; the zip has the packages' sources, no bytecode."""
    first, second = tmp_path / "a" / "l0gc-spark.zip", tmp_path / "b" / "l0gc-spark.zip"
    assert main(["spark-package", "--output", str(first), "--json"]) == exitcodes.OK
    document = json.loads(capsys.readouterr().out)
    assert main(["spark-package", "--output", str(second)]) == exitcodes.OK
    line = capsys.readouterr().out
    assert f"--py-files {second}" in line
    assert "boto3, pandas, pyarrow" in line
    assert "--storage azure also azure-storage-blob, azure-identity" in line
    assert "--storage gcs also google-auth" in line
    assert first.read_bytes() == second.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert {"gcd/__init__.py", "gcd/spark/delete.py", "l0gc/__init__.py"} <= set(names)
    assert not [name for name in names if name.startswith("watermark/")]  # executors never need it
    assert "gcd/py.typed" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert (document["version"], document["files"], document["path"]) == (1, len(names), str(first))
    assert document["executor_requirements"] == ["boto3", "pandas", "pyarrow"]
    assert document["store_requirements"] == {
        "azure": ["azure-storage-blob", "azure-identity"],
        "gcs": ["google-auth"],
    }


def test_a_bare_python_deletes_from_the_zip(tmp_path: Path) -> None:
    """An isolated interpreter with the zip first on its path imports the executor side
    from the zip, not from this checkout, without any driver-only module."""
    zipped = tmp_path / "l0gc-spark.zip"
    assert main(["spark-package", "--output", str(zipped)]) == exitcodes.OK
    child = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(zipped)!r})
        for name in {sorted(DRIVER_ONLY_MODULES)!r}:
            sys.modules[name] = None  # importing it raises ImportError
        import gcd.spark.delete, gcd.spark.listing, gcd.storage.rows
        print(gcd.spark.delete.__file__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", child],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"{zipped}/gcd/spark/delete.py"


def test_main_writes_the_launcher_and_a_wheel_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--main writes the spark-submit application; a .whl output exits 2 saying why."""
    launcher = tmp_path / "gcd-main.py"
    code = main(["spark-package", "--output", str(tmp_path / "x.zip"), "--main", str(launcher)])
    assert code == exitcodes.OK
    assert launcher.read_text() == LAUNCHER
    capsys.readouterr()
    assert main(["spark-package", "--output", str(tmp_path / "l0gc.whl")]) == exitcodes.USAGE
    assert "a wheel is not" in capsys.readouterr().err
