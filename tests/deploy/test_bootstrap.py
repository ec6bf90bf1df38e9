"""`make demo` on any laptop (issue 42): the bootstrap's demo part needs no root, apt-get or
promtool; the test set-up installs promtool with apt-get where it can, skips it with one
line where it cannot, and `make test` (CI) requires it. The scripts run for real, in a
copy of the repository's scripts, with a PATH of stubs: no apt-get, no promtool, no
sudo unless a test puts one there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
REAL_TOOLS = (
    "bash",
    "cat",
    "chmod",
    "cut",
    "dirname",
    "env",
    "grep",
    "mkdir",
    "mktemp",
    "rm",
    "sha256sum",
)


def stub_bin(tmp: Path, **stubs: str) -> Path:
    """A bin directory with the real basic tools and `stubs` (name -> bash body)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in REAL_TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)  # a Python >= 3.11, as the README asks
    stubs.setdefault("id", "echo 1000")  # not root unless a test says so
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f"#!{shutil.which('bash')}\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def run(script: Path, *args: str, path: Path) -> subprocess.CompletedProcess[str]:
    """Run `script` with PATH = `path` only."""
    env = {"PATH": str(path), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [shutil.which("bash") or "bash", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_apt_get_promtool_is_skipped_with_one_line(tmp_path: Path) -> None:
    """No apt-get: exit 0 and one line saying what was skipped and who needs it; with
    --required (make test) exit 1 naming what to install."""
    path = stub_bin(tmp_path)
    done = run(SCRIPTS / "install-prometheus.sh", path=path)
    assert done.returncode == 0, done.stderr
    skipped = (
        "prometheus fish: skipped (no apt-get on this machine); only the tests need "
        "them (make test)"
    )
    assert done.stdout.splitlines() == [skipped]
    required = run(SCRIPTS / "install-prometheus.sh", "--required", path=path)
    assert required.returncode == 1
    assert "prometheus fish missing and cannot be installed here (no apt-get" in required.stderr
    assert "apt-get install -y prometheus fish" in required.stderr


def test_the_cluster_etcd_is_fetched_without_root_or_skipped_with_one_line(
    tmp_path: Path,
) -> None:
    """install-etcd.sh (the multi-member clusters' etcd 3.4.23): without apt-get, one line
    and exit 0, or with --required (make test) exit 1 naming what to do; with apt-get it
    downloads the pinned package (no root: `apt-get download`, never `install`) and
    extracts it under .tools/etcd."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "install-etcd.sh", repo / "scripts" / "install-etcd.sh")
    path = stub_bin(tmp_path)
    done = run(repo / "scripts" / "install-etcd.sh", path=path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        (
            "etcd 3.4.23: skipped (no apt-get on this machine); "
            "only the tests' etcd clusters use it (make test)"
        )
    ]
    required = run(repo / "scripts" / "install-etcd.sh", "--required", path=path)
    assert required.returncode == 1
    assert "L0GC_CLUSTER_ETCD_BINARY" in required.stderr
    log = tmp_path / "apt.log"
    (tmp_path / "with-apt").mkdir()
    fetch = stub_bin(
        tmp_path / "with-apt", **{"apt-get": f'echo "$@" >> {log}; exit 1', "dpkg-deb": "exit 0"}
    )
    done = run(repo / "scripts" / "install-etcd.sh", path=fetch)
    assert log.read_text().splitlines() == ["download -qq etcd-server=3.4.23-4+b4"]
    assert "skipped (apt-get download etcd-server=3.4.23-4+b4 failed)" in done.stdout


def test_apt_get_without_root_or_passwordless_sudo_is_skipped(tmp_path: Path) -> None:
    """apt-get but not root: without sudo, or with a sudo that asks for a password, the
    step is skipped (never a password prompt, never exit 127); apt-get is not run."""
    log = tmp_path / "apt.log"
    path = stub_bin(tmp_path, **{"apt-get": f'echo "$@" >> {log}'})
    done = run(SCRIPTS / "install-prometheus.sh", path=path)
    assert (done.returncode, done.stdout.split("(")[1].split(")")[0]) == (
        0,
        "apt-get needs root, and there is no sudo",
    )
    (path / "sudo").write_text("#!/bin/sh\nexit 1\n")
    (path / "sudo").chmod(0o755)
    done = run(SCRIPTS / "install-prometheus.sh", path=path)
    assert "sudo asks for a password" in done.stdout
    assert not log.exists()


def test_as_root_with_apt_get_it_installs_prometheus_and_fish(tmp_path: Path) -> None:
    """CI's path (root, apt-get): apt-get update, then install what is missing: the
    prometheus package and fish, or only the one not on PATH."""
    log = tmp_path / "apt.log"
    path = stub_bin(tmp_path, id="echo 0", **{"apt-get": f'echo "$@" >> {log}'})
    done = run(SCRIPTS / "install-prometheus.sh", "--required", path=path)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "update -qq",
        "install -y -qq --no-install-recommends prometheus fish",
    ]
    log.unlink()
    (path / "fish").write_text("#!/bin/sh\nexit 0\n")
    (path / "fish").chmod(0o755)
    assert run(SCRIPTS / "install-prometheus.sh", "--required", path=path).returncode == 0
    assert log.read_text().splitlines()[-1] == "install -y -qq --no-install-recommends prometheus"


def test_promtool_and_fish_on_path_are_left_alone(tmp_path: Path) -> None:
    """Already installed: nothing is run, nothing printed."""
    path = stub_bin(tmp_path, promtool="exit 0", fish="exit 0", **{"apt-get": "exit 99"})
    done = run(SCRIPTS / "install-prometheus.sh", "--required", path=path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def fake_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the bootstrap with the repository's pins, a stub venv python that logs
    its calls, and helm/Azurite installers that log theirs; (repo, log)."""
    repo, log = tmp_path / "repo", tmp_path / "calls.log"
    (repo / "scripts").mkdir(parents=True)
    for name in ("bootstrap.sh", "install-prometheus.sh"):
        shutil.copy(SCRIPTS / name, repo / "scripts" / name)
    for name in ("install-helm.sh", "install-azurite.sh", "install-etcd.sh"):
        (repo / "scripts" / name).write_text(f"#!/bin/sh\necho {name} >> {log}\n")
        (repo / "scripts" / name).chmod(0o755)
    (repo / "l0lab").mkdir()
    for name in ("pyproject.toml", "constraints.txt", "l0lab/pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text(f'#!/bin/sh\necho "python $*" >> {log}\n')
    (repo / ".venv" / "bin" / "python").chmod(0o755)
    return repo, log


def test_the_demo_bootstrap_needs_no_apt_get_root_or_promtool(tmp_path: Path) -> None:
    """`bootstrap.sh --demo` with a PATH lacking apt-get, sudo and promtool, not root:
    installs l0gc and its lab (l0lab, which `gcd demo` runs) into the venv from the pins
    (pip -c constraints.txt), stamps it, and runs none of the test tools' installers; the
    full bootstrap there installs helm and Azurite and skips promtool with its one line,
    exit 0."""
    repo, log = fake_repo(tmp_path)
    path = stub_bin(tmp_path)
    done = run(repo / "scripts" / "bootstrap.sh", "--demo", path=path)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    # issue 55: only l0gc and its lab, not the test extras (a 1.8 GB venv with PySpark)
    assert any(c.endswith("-c constraints.txt -e . -e ./l0lab") for c in calls), calls
    assert not [c for c in calls if "[dev" in c or c.startswith("install-")], calls
    assert (repo / ".venv" / ".l0gc-installed").is_file()
    assert "bootstrap: installing l0gc and its pinned dependencies" in done.stderr
    log.unlink()
    full = run(repo / "scripts" / "bootstrap.sh", path=path)
    assert full.returncode == 0, full.stderr
    calls = log.read_text().splitlines()  # the test extras now, then the test tools
    assert any("-c constraints.txt -e .[dev,spark,bench] -e ./l0lab" in c for c in calls), calls
    assert calls[-3:] == ["install-helm.sh", "install-azurite.sh", "install-etcd.sh"]
    assert "prometheus fish: skipped (no apt-get on this machine)" in full.stdout
    log.unlink()
    for argv in ((), ("--demo",)):  # the pins are unchanged: no pip call at all
        again = run(repo / "scripts" / "bootstrap.sh", *argv, path=path)
        assert again.returncode == 0, again.stderr
    assert "python" not in log.read_text()


def test_make_demo_takes_the_demo_path_and_make_test_requires_promtool() -> None:
    """The wiring: `make demo` runs `bootstrap.sh --demo`; scripts/test.sh (make test, CI)
    runs install-prometheus.sh --required after the full bootstrap."""
    makefile = (ROOT / "Makefile").read_text()
    demo = makefile.split("\ndemo:")[1].split("\n\t")[1]
    assert demo == "scripts/bootstrap.sh --demo"
    test_sh = (SCRIPTS / "test.sh").read_text()
    assert test_sh.index("scripts/bootstrap.sh\n") < test_sh.index(
        "scripts/install-prometheus.sh --required"
    )
