"""Conformance fuzzing: schemathesis (the PyPI tool, pinned) against a live `watermark
serve` with a real etcd, driven by the document the server itself serves.

Every operation of the document, in every phase (its examples, the coverage of edge
and invalid values, random fuzzing, and stateful sequences through the document's
links: fence -> commit / abort / state), with an admin token so every route is
reached. Checks: no 5xx, every status, content type, header and body as documented,
invalid requests rejected (4xx), and the auth checks. Excluded, with the reason:

- ``positive_data_acceptance``: a valid request may be refused by the protocol (a
  stale epoch, a partition not hosted here); that is the API, not a mismatch.
- ``allow_header_conformance``: ``GET /v1/partitions/{partition}`` takes names with
  '/', so ``/v1/partitions/x/fence`` also answers GET (the state of partition
  ``x/fence``, as the document's description says); OpenAPI cannot describe two
  templates matching one path, so the ``Allow`` of those paths lists GET too.

Budget: a fixed number of examples per operation in deterministic mode (the same cases
every run), about 15 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd
from tests.serving import ADMIN, live_serve
from watermark.api.openapi import document

pytestmark = pytest.mark.integration

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_a_live_server_conforms_to_its_openapi_document(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """schemathesis finds no failure in any phase (exit 0) and tested every operation."""
    with live_serve(etcd_server, namespace, tmp_path) as serve:
        done = subprocess.run(
            [
                str(SCHEMATHESIS),
                "run",
                serve.url + "/v1/openapi.json",
                "-H",
                f"Authorization: Bearer {ADMIN}",
                "--generation-deterministic",
                "--max-examples",
                "25",
                "--workers",
                "1",
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance,allow_header_conformance",
                "--request-timeout",
                "10",
                "--no-color",
                "--output-truncate",
                "true",
                "--report",
                "junit",
                "--report-dir",
                str(tmp_path / "report"),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            cwd=tmp_path,
        )
        assert serve.child.alive, serve.child.tail()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20000:]
    # every operation but the document's own URL, which schemathesis loads, not tests
    operations = sum(len(methods) for methods in document()["paths"].values()) - 1
    assert f"Selected: {operations}/{operations}" in output, output[-5000:]
    assert f"Tested: {operations}" in output, output[-5000:]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in output, output[-5000:]
