"""GCS batch deletes, pure (`gcd.storage.gcs.wire`): the request body, and each answer
matched to its object by Content-ID only, then triaged like a DeleteObjects key."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from gcd.rules.triage import THROTTLE_CODES
from gcd.storage.gcs.wire import MAX_BATCH, SubAnswer, batch_body, parse_answer, triage

KEYS = ["r/001/a", "r/001/b c", "r/002/ü?#"]


def answer(parts: list[tuple[str | None, str]], *, blank_line: bool = True) -> tuple[bytes, str]:
    """A batch answer: (Content-ID, inner status line + body) per part."""
    out = []
    for content_id, inner in parts:
        head = "--B\r\nContent-Type: application/http\r\n"
        if content_id is not None:
            head += f"Content-ID: {content_id}\r\n"
        out.append(head + ("\r\n" if blank_line else "") + inner + "\r\n")
    return ("".join(out) + "--B--\r\n").encode(), 'multipart/mixed; boundary="B"'


NO_CONTENT = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


def error(status: int, reason: str) -> str:
    body = json.dumps(
        {"error": {"code": status, "message": f"it is {reason}", "errors": [{"reason": reason}]}}
    )
    return f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\r\n{body}"


def test_the_body_names_each_object_once_with_its_id() -> None:
    """One DELETE per key with Content-ID <kN>, the name escaped ('/' too), the boundary
    in the Content-Type; more than 100 calls is refused."""
    body, content_type = batch_body("bkt", KEYS)
    boundary = content_type.split("boundary=")[1]
    parts = body.decode().split(f"--{boundary}")[1:-1]
    assert len(parts) == len(KEYS)
    for index, (part, key) in enumerate(zip(parts, KEYS, strict=True)):
        assert f"Content-ID: <k{index}>" in part
        assert f"DELETE /storage/v1/b/bkt/o/{urllib.parse.quote(key, safe='')} HTTP/1.1" in part
    assert body.decode().endswith(f"--{boundary}--\r\n")
    with pytest.raises(ValueError, match="1-100"):
        batch_body("bkt", ["k"] * (MAX_BATCH + 1))


def test_answers_out_of_order_are_matched_by_id() -> None:
    """GCS may answer in any order: each answer goes to the object its id names."""
    body, content_type = answer(
        [
            ("<response-k2>", error(403, "forbidden")),
            ("<response-k0>", NO_CONTENT),
            ("<response-k1>", error(404, "notFound")),
        ]
    )
    result = triage(KEYS, parse_answer(body, content_type))
    assert result.deleted == (KEYS[0], KEYS[1])
    assert [(f.key, f.code, f.retryable) for f in result.errors] == [(KEYS[2], "forbidden", False)]
    assert "it is forbidden" in result.errors[0].message


def test_an_answer_without_its_id_never_counts_as_deleted() -> None:
    """No id, an unknown id, an id answered twice, a part without a status line: the
    object is reported (UnmatchedAnswer), never deleted, even when the answers' places
    would line up with the objects."""
    body, content_type = answer(
        [
            (None, NO_CONTENT),
            ("<response-k7>", NO_CONTENT),
            ("<response-k1>", NO_CONTENT),
            ("<response-k1>", NO_CONTENT),
            ("<response-k2>", "garbage"),
        ]
    )
    result = triage(KEYS, parse_answer(body, content_type))
    assert result.deleted == ()
    assert [f.code for f in result.errors] == ["UnmatchedAnswer"] * 3


def test_throttling_and_server_errors_are_retried_others_named() -> None:
    """429 is SlowDown and 503 throttles (the deleter halves its concurrency), 500 is
    retried; 412 and a reasonless 400 are reported with their reason or status."""
    statuses = [
        (429, "rateLimitExceeded"),
        (503, "backendError"),
        (500, "backendError"),
        (412, "conditionNotMet"),
        (400, ""),
    ]
    keys = [f"k/{i}" for i in range(len(statuses))]
    body, content_type = answer(
        [(f"<response-k{i}>", error(s, r)) for i, (s, r) in enumerate(statuses)],
        blank_line=False,  # the emulator writes no blank line before the status line
    )
    result = triage(keys, parse_answer(body, content_type))
    codes = {f.key: f for f in result.errors}
    assert codes["k/0"].code == "SlowDown"
    assert "SlowDown" in THROTTLE_CODES
    assert codes["k/1"].code == "503"
    assert "503" in THROTTLE_CODES
    assert codes["k/2"].retryable
    assert codes["k/1"].retryable
    assert codes["k/0"].retryable
    assert (codes["k/3"].code, codes["k/3"].retryable) == ("conditionNotMet", False)
    assert (codes["k/4"].code, codes["k/4"].retryable) == ("400", False)
    assert result.deleted == ()


def test_an_answer_without_a_boundary_is_refused() -> None:
    """A body that is not multipart cannot be read per object: ValueError (the store
    makes it a retryable request failure)."""
    with pytest.raises(ValueError, match="no boundary"):
        parse_answer(b"{}", "application/json")
    assert parse_answer(b"--B--\r\n", "multipart/mixed; boundary=B") == []
    assert SubAnswer(None, None, "").status is None


@pytest.mark.parametrize(
    "line",
    [
        "HTTP/1.1 2040",
        "HTTP/1.1 4040 Not Found",
        "HTTP/1.1 204x",
        "HTTP/1.1  204 No Content",
        "HTTP/1.1 0204",
        "HTTP/1.1 20",
    ],
)
def test_a_status_line_is_read_strictly(line: str) -> None:
    """Issue 35, item 10: "HTTP/1.1 2040" is not 204 nor "4040" 404: a status line that
    is not exactly one is no answer, and the object is never counted deleted."""
    body, content_type = answer([("<response-k0>", f"{line}\r\nContent-Length: 0\r\n\r\n")])
    parsed = parse_answer(body, content_type)
    assert [sub.status for sub in parsed] == [None]
    result = triage(KEYS[:1], parsed)
    assert result.deleted == ()
    assert [f.code for f in result.errors] == ["UnmatchedAnswer"]


@pytest.mark.parametrize(
    ("line", "status"),
    [("HTTP/1.1 204 No Content", 204), ("HTTP/1.1 404", 404), ("HTTP/2 204 ", 204)],
)
def test_a_status_line_with_or_without_a_reason_is_read(line: str, status: int) -> None:
    body, content_type = answer([("<response-k0>", f"{line}\r\n\r\n")])
    assert [sub.status for sub in parse_answer(body, content_type)] == [status]
