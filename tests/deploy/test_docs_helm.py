"""The helm commands and chart values shown in the docs work as written.

Every `helm install`, `helm upgrade` and `helm template` command in README.md and
docs/*.md is run as `helm template` with the same flags (install-only flags such as
`--create-namespace` dropped). A values file it names must exist in the repository or
be a YAML block of the docs that starts with `# <name>.yaml` (the file the reader is
told to write). Every other YAML block of the docs made of chart values is rendered on
top of the docs' own values file. Each render's containers then go through the CLIs'
parsers (tests/deploy/chart.py), so a documented setting the processes would refuse
fails here. A YAML block that is not chart values must say what it is in a first-line
comment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import (
    CHART,
    REPO,
    containers,
    helm,
    helm_env,
    objects_of,
    parse_container,
)

DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_BLOCK = re.compile(r"^```([a-z]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NAMED = re.compile(r"#\s*([\w.-]+\.ya?ml)\s*$")
_SUBCOMMANDS = {"install", "upgrade", "template"}
_HELM_LINE = re.compile(r"\bhelm\s+(?:install|upgrade|template)\b")
# Flags of install/upgrade that `helm template` does not take (value-less / with a value).
_DROP = {"--create-namespace", "--install", "-i", "--wait", "--atomic", "--dry-run"}
_DROP_WITH_VALUE = {"--timeout"}
VALUE_KEYS = set(yaml.safe_load((CHART / "values.yaml").read_text()))


@dataclass(frozen=True)
class Block:
    """One fenced code block of a doc."""

    doc: str
    line: int
    lang: str
    text: str


def blocks() -> list[Block]:
    """Every fenced code block of the docs."""
    found = []
    for path in DOCS:
        source = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(source):
            line = source.count("\n", 0, match.start()) + 1
            found.append(Block(path.name, line, match.group(1), match.group(2)))
    return found


def named_values() -> dict[str, str]:
    """YAML blocks that start with `# <name>.yaml`: files the docs tell the reader to write."""
    named: dict[str, str] = {}
    for block in blocks():
        first = block.text.splitlines()[0] if block.text else ""
        match = _NAMED.fullmatch(first)
        if block.lang == "yaml" and match:
            assert match.group(1) not in named, f"{match.group(1)} is written twice in the docs"
            named[match.group(1)] = block.text
    return named


def helm_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every helm install/upgrade/template command in a shell block."""
    commands = []
    for block in blocks():
        if block.lang not in {"sh", "bash", "console", "shell"}:
            continue
        logical = re.sub(r"\\\n", " ", block.text)
        for offset, raw in enumerate(logical.splitlines()):
            line = raw.removeprefix("$ ").strip()
            if not _HELM_LINE.search(line):
                continue
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = []
            for token in lexer:
                if token in {"|", "||", "&&", ";", ">", "<"}:
                    break
                tokens.append(token)
            if len(tokens) > 1 and Path(tokens[0]).name == "helm" and tokens[1] in _SUBCOMMANDS:
                commands.append((f"{block.doc}:{block.line + 1 + offset}", tokens))
    return commands


def values_fragments() -> list[tuple[str, str]]:
    """(where, text) of every YAML block made of chart values that is not a named file."""
    fragments = []
    for block in blocks():
        if block.lang != "yaml" or _NAMED.fullmatch(block.text.splitlines()[0]):
            continue
        doc = yaml.safe_load(block.text)
        if isinstance(doc, dict) and set(doc) <= VALUE_KEYS:
            fragments.append((f"{block.doc}:{block.line}", block.text))
        elif block.doc == "kubernetes.md":
            assert block.text.startswith("# "), (
                f"{block.doc}:{block.line}: a YAML block that is not chart values must say "
                "what it is in a first-line comment"
            )
    return fragments


def as_template(argv: list[str], files: dict[str, Path], where: str) -> list[str]:
    """The `helm template` arguments of a documented install/upgrade/template command."""
    args = argv[2:]
    out: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in _DROP:
            continue
        if arg in _DROP_WITH_VALUE:
            skip = True
            continue
        if index > 0 and args[index - 1] in {"-f", "--values"}:
            if arg in files:
                out.append(str(files[arg]))
                continue
            assert (REPO / arg).is_file(), f"{where}: values file {arg} does not exist"
        out.append(arg)
    return ["template", *out]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def written(tmp_path: Path) -> dict[str, Path]:
    """The values files the docs tell the reader to write, written to a temp dir."""
    files = {}
    for name, text in named_values().items():
        files[name] = tmp_path / name
        files[name].write_text(text)
    return files


def _check_render(
    env: dict[str, str],
    args: list[str],
    where: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done = helm(env, *args)
    assert done.returncode == 0, f"{where}: helm {' '.join(args)}\n{done.stderr}"
    objects = objects_of(done.stdout)
    pairs = containers(objects)
    assert pairs, f"{where}: no container rendered"
    for index, (workload, container) in enumerate(pairs):
        with monkeypatch.context() as patch:
            parse_container(objects, workload, container, tmp_path / f"pod-{index}", patch)


COMMANDS = helm_commands()
FRAGMENTS = values_fragments()


def test_the_docs_show_helm_commands_and_values() -> None:
    """The extraction finds the install commands and the values snippets (it is not empty)."""
    wheres = [where for where, _ in COMMANDS]
    assert any(where.startswith("kubernetes.md") for where in wheres)
    assert any(argv[1] == "install" for _, argv in COMMANDS)
    assert "values-prod.yaml" in named_values()
    assert len(FRAGMENTS) >= 5


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_helm_command_renders_and_its_pods_would_start(
    env: dict[str, str],
    written: dict[str, Path],
    where: str,
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command, as `helm template`, renders; every container's CLI accepts its settings."""
    _check_render(env, as_template(argv, written, where), where, tmp_path, monkeypatch)


@pytest.mark.parametrize(("where", "text"), FRAGMENTS, ids=[w for w, _ in FRAGMENTS])
def test_documented_values_snippet_renders_and_its_pods_would_start(
    env: dict[str, str],
    written: dict[str, Path],
    where: str,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A values snippet on top of the docs' values-prod.yaml renders; the CLIs accept it."""
    fragment = tmp_path / "fragment.yaml"
    fragment.write_text(text)
    args = [
        "template",
        "l0gc",
        str(CHART),
        "-f",
        str(written["values-prod.yaml"]),
        "-f",
        str(fragment),
    ]
    _check_render(env, args, where, tmp_path, monkeypatch)
