"""The OpenAPI document cannot drift: the checked-in copy is the generated one, the
routes the app registers are the routes it describes (with their roles), and every
error code the server can answer is in the one error table."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from jsonschema import Draft202012Validator

from l0gc.auth import Access
from tests.publishing import new_publishing
from watermark.api import http_api, http_body, http_errors
from watermark.api.openapi import OPENAPI_JSON, ROUTES, document, render, route_table
from watermark.api.openapi_errors import ERROR_CODES

ROOT = Path(__file__).resolve().parents[3]
ROLE_OF = {
    Access.WRITE: "writer",
    Access.RECONCILE: "reconciler",
    Access.ADMIN: "admin",
    Access.READ: "any",
    Access.REGISTER: "registrar",
    None: None,
}


def test_the_checked_in_document_is_the_generated_one() -> None:
    """docs/openapi.json equals `document()` (regenerate: python -m watermark.api.openapi
    > docs/openapi.json) and is what the server answers."""
    assert (ROOT / "docs" / "openapi.json").read_text() == render()
    assert json.loads(OPENAPI_JSON) == document()


async def test_every_registered_route_is_described_with_its_role_and_no_other() -> None:
    """(method, path, handler) of create_app's router == the document's routes; each
    route's role is the one the auth middleware enforces."""
    world = await new_publishing(namespace="/x", epoch=None)
    app = http_api.create_app(world.publisher("o"))
    registered = set()
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        path = route.resource.canonical.replace("{partition:.+}", "{partition}")
        registered.add((route.method.lower(), path, route.handler.__name__))
        described = next(r for r in ROUTES if r[2] == route.handler.__name__)
        assert described[3] == ROLE_OF[http_api._ACCESS[route.handler]], described
    assert registered == {(m, p, n) for m, p, n, *_ in ROUTES}


def test_every_error_code_the_server_answers_is_in_the_table() -> None:
    """The codes of the API's exception map, of the body checks and of the fixed answers
    (unknown_fence, moved, the router's 404/405, internal_error) are all in ERROR_CODES;
    and the statuses in http_body agree with the table."""
    sources = sorted((ROOT / "watermark" / "api").glob("http_*.py"))  # the app and routes
    literals = {
        n.value
        for path in sources
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    used = {code for _, code in http_errors.ERRORS} | {
        "unknown_fence",
        "moved",
        "internal_error",
        "not_found",
        "method_not_allowed",
        "unauthorized",
        "forbidden",
    }
    assert used <= literals | {"not_found", "method_not_allowed"}
    for problem in (
        http_body.BadRequest,
        http_body.BodyTooLarge,
        http_body.BatchTooLarge,
        http_body.BodyTimeout,
    ):
        assert ERROR_CODES[problem.code].status == problem.status
    assert used <= set(ERROR_CODES)


def test_the_document_is_valid_openapi_and_every_schema_valid_json_schema() -> None:
    """Every component schema is a valid JSON Schema 2020-12; every operation has an id,
    a 200 answer and (unless open) a role; the fence answer links to commit and abort."""
    doc = document()
    assert doc["openapi"].startswith("3.1")
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            assert "200" in op["responses"], (method, path)
            assert op.get("security") == [] or op["x-l0gc-role"], (method, path)
    links = doc["paths"]["/v1/partitions/{partition}/fence"]["post"]["responses"]["200"]["links"]
    assert set(links) == {"commit", "abort", "state"}


def test_the_integration_guides_route_table_is_generated_from_the_routes() -> None:
    """docs/integration.md holds `route_table()` (regenerate: scripts/gen_cli_reference.py),
    which names every route of the document exactly once, with its role."""
    table = route_table()
    assert table in (ROOT / "docs" / "integration.md").read_text()
    for method, path, _name, role, *_ in ROUTES:
        row = f"| `{method.upper()} {path.replace('{partition}', '{p}')}` | {role or 'none'} |"
        assert table.count(row) == 1, row
    assert table.count("\n") == len(ROUTES) + 2


def test_no_module_but_openapi_lists_the_routes() -> None:
    """The routes are written down once, in openapi.py: no other module of the API names
    more than two of its /v1/ paths (a route table in a docstring would; they point to
    `watermark.api.openapi` instead)."""
    paths = {p for _, p, *_ in ROUTES if p.startswith("/v1/")}
    for path in sorted((ROOT / "watermark" / "api").glob("*.py")):
        if path.name == "openapi.py":
            continue
        named = set(re.findall(r"/v1/[A-Za-z0-9_{}./-]*[A-Za-z0-9_}]", path.read_text()))
        assert len(named & paths) <= 2, f"{path.name} repeats openapi.py's routes: {named}"
