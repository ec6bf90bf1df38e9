"""docs/integration.md's table "After each error" is the API's one error table
(`watermark.ERROR_CODES`) with the Python exception of each code: regenerate the rows with
``python -m tests.watermark.api.test_openapi_errors`` after changing the table."""

from __future__ import annotations

import sys
from pathlib import Path

from watermark.api.http_errors import ERRORS
from watermark.api.openapi_errors import ERROR_CODES

DOC = Path(__file__).resolve().parents[3] / "docs" / "integration.md"
HEADER = "| code | HTTP | action | Python (embedded) | meaning |\n|---|---|---|---|---|\n"


def rows() -> str:
    """The table's rows, by status then code."""
    raised = {code: kind.__name__ for kind, code in reversed(ERRORS)}
    lines = []
    for code, error in sorted(ERROR_CODES.items(), key=lambda item: (item[1].status, item[0])):
        python = f"`{raised[code]}`" if code in raised else "-"
        lines.append(f"| `{code}` | {error.status} | {error.action} | {python} | {error.meaning} |")
    return "\n".join(lines) + "\n"


def test_the_documented_error_table_is_the_api_table() -> None:
    """The rows under the table's header in docs/integration.md equal `rows()`."""
    text = DOC.read_text()
    start = text.index(HEADER) + len(HEADER)
    end = text.index("\n\n", start) + 1
    assert text[start:end] == rows()


if __name__ == "__main__":
    sys.stdout.write(rows())
