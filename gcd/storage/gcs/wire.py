"""GCS JSON batch requests for deletes: the multipart body, and the answer per object.

A batch (``POST /batch/storage/v1``, at most `MAX_BATCH` calls) is a ``multipart/mixed``
body with one ``application/http`` part per call, each with a ``Content-ID``; GCS
answers one part per call with ``Content-ID: <response-ID>``, in any order. `triage`
matches each answer to its object by that id only: an answer without an id, with an
unknown id or with an id answered twice never counts an object as deleted (the object
gets the failure ``UnmatchedAnswer``). Each matched answer is sorted as a DeleteObjects
key is: 204 and 404 (already gone) deleted; 429 ``SlowDown`` and 503 throttle (retried);
408/500/502/504 retried; anything else a failure named by GCS's error reason
(``forbidden``, ``retentionPolicyNotMet``, ...) or, without one, the HTTP status.

Pure functions (no I/O); `gcd.storage.gcs.client` sends the request.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from gcd.storage.objectstore import DeleteResult, KeyFailure

__all__ = ["MAX_BATCH", "SubAnswer", "batch_body", "error_code", "parse_answer", "triage"]

MAX_BATCH = 100
"""Calls GCS takes in one batch request."""
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_STATUS = re.compile(r"HTTP/\d(?:\.\d)? ([1-5]\d\d)(?: [^\r\n]*)?")
"""A status line exactly (RFC 9112: version SP 3-digit code [SP reason]): "HTTP/1.1 2040"
is no 204, "HTTP/1.1 204x" none either; such a part has no status (never deleted)."""


@dataclass(frozen=True, slots=True)
class SubAnswer:
    """One part of a batch answer: its Content-ID (None without one), HTTP status
    (None when the part has no status line) and body."""

    content_id: str | None
    status: int | None
    body: str


def _object_path(bucket: str, key: str) -> str:
    return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}"


def batch_body(bucket: str, keys: Sequence[str]) -> tuple[bytes, str]:
    """The body and Content-Type of one batch deleting `keys` (ids ``k0``, ``k1``...)."""
    if not 1 <= len(keys) <= MAX_BATCH:
        raise ValueError(f"a GCS batch takes 1-{MAX_BATCH} calls, got {len(keys)}")
    boundary = "gcd_" + secrets.token_hex(12)
    parts = [
        f"--{boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary"
        f"\r\nContent-ID: <k{index}>\r\n\r\nDELETE {_object_path(bucket, key)} HTTP/1.1\r\n\r\n"
        for index, key in enumerate(keys)
    ]
    body = "".join(parts) + f"--{boundary}--\r\n"
    return body.encode("utf-8"), f"multipart/mixed; boundary={boundary}"


def parse_answer(body: bytes, content_type: str) -> list[SubAnswer]:
    """The parts of a batch answer. A part's own headers end at a blank line or at the
    inner status line (the emulator writes no blank line there)."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise ValueError(f"a batch answer of type {content_type!r} has no boundary")
    text = body.decode("utf-8", "replace")
    answers: list[SubAnswer] = []
    for part in text.split(f"--{found.group(1)}")[1:]:
        if part.startswith("--"):
            break
        lines = part.strip("\r\n").splitlines()
        content_id: str | None = None
        index = 0
        while index < len(lines) and not lines[index].startswith("HTTP/"):
            name, _, value = lines[index].partition(":")
            if name.strip().lower() == "content-id":
                content_id = value.strip()
            index += 1
        status: int | None = None
        if index < len(lines) and (match := _STATUS.fullmatch(lines[index].rstrip())) is not None:
            status = int(match.group(1))
        index += 1
        while index < len(lines) and lines[index].strip():  # the inner headers
            index += 1
        answers.append(SubAnswer(content_id, status, "\n".join(lines[index + 1 :])))
    return answers


def _answer_index(content_id: str | None, count: int) -> int | None:
    """The call a ``<response-kN>`` id answers, or None."""
    if content_id is None:
        return None
    name = content_id.strip().strip("<>").strip()
    name = name.removeprefix("response-")
    if not re.fullmatch(r"k\d{1,3}", name):
        return None
    index = int(name[1:])
    return index if index < count else None


def error_code(status: int, body: str) -> tuple[str, str]:
    """(code, message) of a failed call: throttling in the sweeper's vocabulary
    (429 "SlowDown", 503 "503"), else GCS's error reason, else the status."""
    reason, message = "", ""
    try:
        doc = json.loads(body) if body.strip() else {}
        error = doc.get("error", {}) if isinstance(doc, dict) else {}
        if isinstance(error, dict):
            message = str(error.get("message", ""))
            errors = error.get("errors") or [{}]
            reason = str(errors[0].get("reason", "")) if isinstance(errors[0], dict) else ""
    except (ValueError, AttributeError, IndexError):
        pass
    text = f"HTTP {status}" + (f": {message}" if message else "")
    if status == 429:
        return "SlowDown", text
    if status in (500, 502, 503, 504):
        return str(status), text
    if status == 408:
        return "RequestTimeout", text
    return reason or str(status), text


def triage(keys: Sequence[str], answers: Sequence[SubAnswer]) -> DeleteResult:
    """What one batch did per key, matched by Content-ID (module docstring)."""
    by_index: dict[int, SubAnswer | None] = {}
    for sub in answers:
        index = _answer_index(sub.content_id, len(keys))
        if index is not None:
            by_index[index] = None if index in by_index else sub  # twice: unmatched
    deleted: list[str] = []
    errors: list[KeyFailure] = []
    for index, key in enumerate(keys):
        answer = by_index.get(index)
        if answer is None or answer.status is None:
            errors.append(
                KeyFailure(
                    key,
                    "UnmatchedAnswer",
                    "the batch answer has no readable part with this object's Content-ID",
                )
            )
        elif answer.status in (204, 404):
            deleted.append(key)
        else:
            code, message = error_code(answer.status, answer.body)
            errors.append(KeyFailure(key, code, message))
    return DeleteResult(tuple(deleted), tuple(errors))
