"""The docs stay true: generated references are current, names and links resolve."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gcd.observe.metrics import SweeperMetrics
from l0gc.contract.binding import CLAIM_NAME
from watermark.service.metrics import WatermarkMetrics

ROOT = Path(__file__).resolve().parent.parent
DOCS = (
    "README.md",
    "docs/operations.md",
    "docs/integration.md",
    "docs/conventions.md",
    "docs/upgrades.md",
    "docs/slos.md",
    "CHANGELOG.md",
)
PAGES = tuple(sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md")))
"""Every page of docs/, the generated ones included."""
LINKED = tuple(dict.fromkeys(("README.md", "CHANGELOG.md", "bench/RESULTS.md", *PAGES)))
"""Every Markdown file whose relative links must resolve."""
_TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`|`::(\w+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_METRIC = re.compile(r"\bl0gc_(?:sweeper|watermark)_[a-z_]+")
_RUNBOOK_ANCHORS = (
    "gc-blocked",
    "m-not-advancing",
    "fencing-violation",
    "slowdown-storms",
    "pausing",
    "etcd-restore",
    "partition-without-owner",
)


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (outside code blocks)."""
    found: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def exported_metrics() -> set[str]:
    """Every sample name the two registries can expose."""
    names: set[str] = set()
    for registry in (SweeperMetrics().registry, WatermarkMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def test_generated_references_are_up_to_date() -> None:
    """docs/cli-reference.md and docs/metrics.md match what the code generates."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_readme_opens_with_the_demo_and_the_two_test_tiers_that_ci_runs() -> None:
    """The first code block of the README is `make demo`, `make test`, `make test-deep`;
    `.ci/run` runs exactly the two test commands, everyday tier first."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[2] == "```sh"
    assert lines[3].startswith("make demo ")
    assert lines[4].startswith("make test ")
    assert lines[5].startswith("make test-deep ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert [line for line in ci if line.startswith("make")] == ["make test", "make test-deep"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_metric_named_in_the_docs_exists(doc: str) -> None:
    """A metric name in the docs is one the sweeper or the publisher exports."""
    named = set(_METRIC.findall((ROOT / doc).read_text(encoding="utf-8")))
    assert named - exported_metrics() == set()


@pytest.mark.parametrize("doc", LINKED)
def test_relative_links_resolve(doc: str) -> None:
    """Every relative link points at an existing file, and every #anchor at a heading."""
    source = ROOT / doc
    for target in _LINK.findall(source.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path_part, _, anchor = target.partition("#")
        path = (source.parent / path_part).resolve() if path_part else source
        assert path.exists(), f"{doc}: link to missing {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{doc}: no heading for {target}"


def test_runbook_anchors_exist_for_every_alert() -> None:
    """operations.md has the required sections, and every alert's runbook_url resolves."""
    have = anchors(ROOT / "docs" / "operations.md")
    assert set(_RUNBOOK_ANCHORS) <= have
    for rules in ("deploy/prometheus/l0gc-alerts.yaml", "helm/l0gc/files/l0gc-alerts.yaml"):
        text = (ROOT / rules).read_text(encoding="utf-8")
        for anchor in re.findall(r"operations\.md#([a-z0-9-]+)", text):
            assert anchor in have, f"{rules}: runbook anchor #{anchor} missing"


def test_json_examples_in_the_runbook_parse() -> None:
    """The IAM policy in operations.md is valid JSON and reads no object but the claim."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    blocks = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]
    sids = {
        statement.get("Sid"): statement
        for block in blocks
        for statement in block.get("Statement", [])
    }
    deny = sids["WritersNeverWriteL0gcClaims"]  # writers are kept off every claim key
    assert (deny["Effect"], deny["Resource"]) == ("Deny", f"arn:aws:s3:::BUCKET/ROOT/*{CLAIM_NAME}")
    (policy,) = [
        block
        for block in blocks
        if "ReadTheNamespaceClaim" in {st.get("Sid") for st in block.get("Statement", [])}
    ]
    actions = {
        action: statement["Resource"]
        for statement in policy["Statement"]
        for action in (
            [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        )
    }
    assert set(actions) == {
        "s3:ListBucket",
        "s3:DeleteObject",
        "s3:GetObject",
        "s3:ListBucketVersions",
        "s3:DeleteObjectVersion",
        "s3:GetBucketVersioning",
        "s3:GetBucketObjectLockConfiguration",
        "s3:GetLifecycleConfiguration",
    }
    assert actions["s3:DeleteObjectVersion"] == "arn:aws:s3:::BUCKET/ROOT/*"
    assert actions["s3:GetObject"] == f"arn:aws:s3:::BUCKET/ROOT/{CLAIM_NAME}"  # the claim only


def test_every_docs_page_is_in_the_index() -> None:
    """docs/README.md links every file of docs/ (its index by reader)."""
    index = ROOT / "docs" / "README.md"
    linked = {
        (index.parent / target.partition("#")[0]).resolve()
        for target in _LINK.findall(index.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "#"))
    }
    pages = {
        path.resolve()
        for path in (ROOT / "docs").iterdir()
        if path.is_file() and path.name != "README.md"
    }
    missing = sorted(path.name for path in pages - linked)
    assert missing == [], f"add these to docs/README.md: {missing}"


def test_the_readme_links_the_docs_index() -> None:
    """The project README points readers at docs/README.md."""
    assert "(docs/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", PAGES)
def test_tests_named_in_the_docs_exist(doc: str) -> None:
    """`tests/x.py::name` (and a following `::name`, same file) names a test that exists."""
    current: Path | None = None
    for path, name, same_file_name in _TEST_REF.findall((ROOT / doc).read_text(encoding="utf-8")):
        if path:
            current = ROOT / path
            assert current.exists(), f"{doc}: no test file {path}"
        assert current is not None, f"{doc}: `::{same_file_name}` names no file before it"
        test = name or same_file_name
        assert re.search(
            rf"^(?:async )?def {test}\(", current.read_text(encoding="utf-8"), re.MULTILINE
        ), f"{doc}: no test {test} in {current.relative_to(ROOT)}"
