"""Rough edges a first day found (issue 42): the version attribute, the served OpenAPI
document's address, an open Error schema, no `_created` series, the namespace command's
name in its errors, GCS in `gcd --help`.

Named by behaviour, not module: findings of one review across watermark, gcd and the docs."""

from __future__ import annotations

import json
import tomllib
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from jsonschema import Draft202012Validator

import gcd
import l0gc
import watermark
from gcd.cli.main import main as gcd_main
from gcd.observe.metrics import SweeperMetrics
from tests.publishing import api_on_loopback, new_publishing
from watermark.__main__ import main as watermark_main
from watermark.api.http_api import create_app
from watermark.api.openapi import OPENAPI_JSON, document, served
from watermark.service.metrics import WatermarkMetrics

ROOT = Path(__file__).resolve().parents[2]


def test_watermark_has_the_distributions_version() -> None:
    """watermark.__version__ == gcd.__version__ == l0gc.__version__ == pyproject's version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert watermark.__version__ == gcd.__version__ == l0gc.__version__ == project["version"]


async def test_the_served_document_names_the_address_it_was_fetched_from() -> None:
    """GET /v1/openapi.json on a free port says that port in `servers`, not 8080; the
    rest is the generated document; a hostile Host gets the default entry."""
    publisher = (await new_publishing(namespace="/l0gc/doc", epoch=None)).publisher("pub")
    async with AsyncExitStack() as stack:
        _, port = await api_on_loopback(stack, create_app(publisher), metrics=publisher.metrics)
        url = f"http://127.0.0.1:{port}/v1/openapi.json"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            doc = await response.json()
    assert doc["servers"] == [{"url": f"http://127.0.0.1:{port}"}]
    assert {**doc, "servers": document()["servers"]} == document()
    assert served('http://x"}/evil') == OPENAPI_JSON
    assert served("http://" + "a" * 300) == OPENAPI_JSON


def test_the_error_schema_admits_fields_added_later() -> None:
    """An error answer with a field this version does not know still validates."""
    doc = document()
    schema = {**doc["components"]["schemas"]["Error"], "components": doc["components"]}
    Draft202012Validator(schema).validate(
        {"error": "not_registered", "message": "m", "added_in_a_later_version": 1}
    )


def test_no_created_series_are_exported() -> None:
    """Neither the publisher's nor the sweeper's metrics carry `_created` samples."""
    for text in (WatermarkMetrics().render(), SweeperMetrics().render()):
        lines = text.decode().splitlines()
        assert any("_total" in line for line in lines)
        assert not [line for line in lines if "_created" in line]


def test_watermark_namespace_errors_name_the_watermark_command(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """`watermark namespace bind` with a bad value: the error starts 'watermark namespace'."""
    code = watermark_main(
        ["namespace", "bind", "--bucket", "b", "--etcd", "127.0.0.1:1", "--namespace", "no-slash"]
    )
    err = capfd.readouterr().err
    assert code == 2
    assert err.startswith("watermark namespace: error: flag --namespace: invalid value"), err
    assert "gcd namespace" not in err


def test_gcd_help_names_every_storage_of_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo line of `gcd --help` lists S3, Azure and GCS (gcd demo --storage gcs)."""
    assert gcd_main(["--help"]) == 0
    demo = next(line for line in capsys.readouterr().out.splitlines() if "demo" in line)
    assert "S3, Azure or GCS" in demo


def test_the_checked_in_openapi_document_is_json() -> None:
    """docs/openapi.json parses and keeps the generated default server."""
    assert json.loads((ROOT / "docs" / "openapi.json").read_text())["servers"] == [
        {"url": "http://127.0.0.1:8080"}
    ]
