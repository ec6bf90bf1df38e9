"""`gcd spark-package`: l0gc as one zip for Spark's `--py-files`, and what executors need.

Design notes: docs/internals/spark.md, `gcd.spark.package`.
"""

from __future__ import annotations

import hashlib
import importlib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gcd import __version__
from gcd.storage.registry import BACKENDS, backend
from l0gc.errors import ConfigError

__all__ = [
    "DRIVER_ONLY_MODULES",
    "EXECUTOR_REQUIREMENTS",
    "LAUNCHER",
    "PACKAGES",
    "STORE_REQUIREMENTS",
    "PackageSummary",
    "build_package",
    "write_launcher",
]

PACKAGES: Final = ("gcd", "l0gc")
EXECUTOR_REQUIREMENTS: Final = ("boto3", "pandas", "pyarrow")
"""Third-party distributions an executor's Python must have (pyspark comes with Spark)."""
STORE_REQUIREMENTS: Final = {
    kind: needs for kind in BACKENDS if (needs := backend(kind).executor_requirements)
}
"""What executors need besides `EXECUTOR_REQUIREMENTS` for `--storage azure|gcs`
(azure-identity only without a connection string file; google-auth not for an
anonymous emulator)."""
DRIVER_ONLY_MODULES: Final = frozenset(
    {"aiobotocore", "aiohttp", "structlog", "aetcd", "prometheus_client"}
)
"""Imported by the driver (etcd, the S3 preflight, logs) and never by executors."""
LAUNCHER: Final = "from gcd.cli.main import main\n\nraise SystemExit(main())\n"
_SUFFIXES: Final = (".py", ".typed")
_STAMP: Final = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


@dataclass(frozen=True, slots=True)
class PackageSummary:
    """What `build_package` wrote."""

    path: Path
    files: int
    bytes: int
    sha256: str
    l0gc_version: str = __version__

    def to_dict(self) -> dict[str, object]:
        """The `--json` document of `gcd spark-package`."""
        return {
            "version": 1,
            "path": str(self.path),
            "files": self.files,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "l0gc_version": self.l0gc_version,
            "packages": list(PACKAGES),
            "executor_requirements": list(EXECUTOR_REQUIREMENTS),
            "store_requirements": {k: list(v) for k, v in STORE_REQUIREMENTS.items()},
        }


def _package_dir(name: str) -> Path:
    module = importlib.import_module(name)
    if module.__file__ is None:
        raise ConfigError(f"package {name!r} has no source directory to zip; reinstall l0gc")
    return Path(module.__file__).resolve().parent


def _sources(name: str) -> list[tuple[str, Path]]:
    """(name in the zip, file) for every source file of package `name`, sorted."""
    root = _package_dir(name)
    found = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts or not path.is_file():
            continue
        if path.suffix in _SUFFIXES:
            found.append(("/".join((name, *relative.parts)), path))
    return sorted(found)


def build_package(output: str | Path) -> PackageSummary:
    """Write `gcd` and `watermark` into the zip `output`; ConfigError if it cannot be one."""
    path = Path(output)
    if path.suffix.lower() != ".zip":
        msg = (
            f"--output {str(path)!r} must end in .zip: PySpark puts only .zip, .egg and .jar "
            "files on the executors' path (a wheel is not), e.g. --output l0gc-spark.zip"
        )
        raise ConfigError(msg)
    if path.is_dir():
        raise ConfigError(f"--output {str(path)!r} is a directory; give a file name ending .zip")
    entries = [entry for name in PACKAGES for entry in _sources(name)]
    temporary = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, source in entries:
                info = zipfile.ZipInfo(name, _STAMP)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, source.read_bytes())
        temporary.replace(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        msg = f"cannot write {str(path)!r} ({exc.strerror or exc}); choose a writable --output"
        raise ConfigError(msg) from exc
    payload = path.read_bytes()
    return PackageSummary(path, len(entries), len(payload), hashlib.sha256(payload).hexdigest())


def write_launcher(output: str | Path) -> Path:
    """Write `LAUNCHER` (the spark-submit application file) to `output`."""
    path = Path(output)
    if path.suffix != ".py":
        raise ConfigError(f"--main {str(path)!r} must end in .py (spark-submit runs it)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(LAUNCHER, encoding="utf-8")
    except OSError as exc:
        msg = f"cannot write {str(path)!r} ({exc.strerror or exc}); choose a writable --main"
        raise ConfigError(msg) from exc
    return path
