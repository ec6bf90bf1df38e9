"""The lean path's SigV4 signer: byte-for-byte botocore's Authorization header.

Two references: botocore's `S3SigV4Auth` signing the very URL and body the lean path
sends, and a real botocore client's own prepared ListObjectsV2 / DeleteObjects (its
serialiser's query encoding, its signer), both at a fixed time, with hostile keys and
prefixes, with and without a session token.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials as BotoCredentials

from gcd.storage.s3.lean import (
    EMPTY_SHA256,
    Credentials,
    SigV4Signer,
    canonical_query,
    host_of,
    learn_endpoint,
)
from gcd.storage.s3.wire import delete_body

WHEN = datetime.datetime(2026, 12, 3, 23, 59, 58, tzinfo=datetime.UTC)
AMZ_DATE = "20261203T235958Z"
TOKEN = "FwoGZXIvYXdzE//+token/with=odd&chars=="
HOSTILE = [
    "",
    "level_zero/data/417/",
    "a b",
    "a+b",
    "100%",
    "tilde~star*",
    "é/日本/😀",
    "k=v&x=y",
    "%2F already encoded?",
    "semi;colon,comma:colon'quote\"",
    "slash/dot./..//",
]


@pytest.fixture(autouse=True)
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs at `WHEN`."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *_, **__: WHEN)


def _credentials(token: str | None) -> Credentials:
    return Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCY/secret", token)


def _botocore_auth(
    method: str, url: str, body: bytes, headers: dict[str, str], token: str | None
) -> str:
    """botocore's S3SigV4Auth on the request the lean path sends (payload always signed)."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    request.context["client_config"] = Config(s3={"payload_signing_enabled": True})
    creds = _credentials(token)
    signer = botocore.auth.S3SigV4Auth(
        BotoCredentials(creds.access_key, creds.secret_key, creds.token), "s3", "eu-west-3"
    )
    signer.add_auth(request)
    return str(request.headers["Authorization"])


def _lean_auth(
    method: str, base: str, params: list[tuple[str, str | None]], body: bytes, token: str | None
) -> tuple[str, str, dict[str, str]]:
    """(the URL sent, its Authorization, the other headers sent) by the lean signer."""
    canonical, sent = canonical_query(params)
    path = base.split("://", 1)[1].partition("/")[1:]
    extra = {}
    if body:
        extra["content-md5"] = base64.b64encode(
            hashlib.md5(body, usedforsecurity=False).digest()
        ).decode()
    payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    headers = SigV4Signer("eu-west-3", "s3").headers(
        method,
        host_of(base),
        "".join(path),
        canonical,
        payload_sha256=payload,
        credentials=_credentials(token),
        amz_date=AMZ_DATE,
        extra=extra,
    )
    authorization = headers.pop("authorization")
    return f"{base}?{sent}", authorization, headers


def _list_params(prefix: str, **more: str) -> list[tuple[str, str | None]]:
    params: list[tuple[str, str | None]] = [
        ("list-type", "2"),
        ("prefix", prefix),
        ("max-keys", "1000"),
        ("encoding-type", "url"),
    ]
    return params + list(more.items())


@pytest.mark.parametrize("token", [None, TOKEN])
@pytest.mark.parametrize(
    "base",
    ["http://127.0.0.1:9000/my-bucket", "https://my-bucket.s3.eu-west-3.amazonaws.com/"],
)
@pytest.mark.parametrize("prefix", HOSTILE)
def test_list_signature_is_botocores(prefix: str, base: str, token: str | None) -> None:
    """A ListObjectsV2 (hostile prefix, StartAfter, ContinuationToken) is signed as
    botocore's S3SigV4Auth signs the same URL: the same Authorization, byte for byte."""
    for more in ({}, {"start-after": prefix + "x= &+"}, {"continuation-token": "1/a+b=="}):
        url, lean, headers = _lean_auth("GET", base, _list_params(prefix, **more), b"", token)
        sent = {name: value for name, value in headers.items() if name != "host"}
        assert lean == _botocore_auth("GET", url, b"", sent, token)


@pytest.mark.parametrize("token", [None, TOKEN])
@pytest.mark.parametrize(
    "base",
    ["http://127.0.0.1:9000/my-bucket", "https://s3.eu-west-3.amazonaws.com/my-bucket"],
)
def test_delete_signature_is_botocores(base: str, token: str | None) -> None:
    """DeleteObjects (``?delete``, a body of hostile keys, Content-MD5) is signed as
    botocore signs it, payload hash included."""
    body = delete_body([*HOSTILE[1:], "a&b<c>d", "x\ry"], quiet=True)
    url, lean, headers = _lean_auth("POST", base, [("delete", None)], body, token)
    assert url.endswith("?delete")
    sent = {name: value for name, value in headers.items() if name != "host"}
    assert lean == _botocore_auth("POST", url, body, sent, token)


class _Captured(Exception):
    """Raised from before-send: the request botocore was about to send."""

    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


def _botocore_prepared(call: str, token: str | None, **params: Any) -> Any:
    """The request a real botocore client prepares for `call` (never sent)."""
    creds = _credentials(token)
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="eu-west-3",
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        aws_session_token=token,
        config=Config(
            s3={"addressing_style": "path"}, request_checksum_calculation="when_required"
        ),
    )

    def capture(request: Any, **_: Any) -> None:
        raise _Captured(request)

    client.meta.events.register("before-send.s3.*", capture)
    with pytest.raises(_Captured) as captured:
        getattr(client, call)(**params)
    return captured.value.request


@pytest.mark.parametrize("token", [None, TOKEN])
@pytest.mark.parametrize("prefix", HOSTILE)
def test_botocores_own_listing_request_is_reproduced(prefix: str, token: str | None) -> None:
    """The endpoint learnt from botocore's own prepared ListObjectsV2, and the lean
    signer on the same parameters, give botocore's exact Authorization (its query
    encoding included)."""
    for more in ({}, {"StartAfter": prefix + "=&+ ~"}, {"ContinuationToken": "1/a+b=="}):
        request = _botocore_prepared(
            "list_objects_v2", token, Bucket="b", Prefix=prefix, MaxKeys=1000, **more
        )
        endpoint = learn_endpoint(request.url, dict(request.headers))
        assert endpoint is not None
        assert (endpoint.base, endpoint.region, endpoint.service) == (
            "http://127.0.0.1:9/b",
            "eu-west-3",
            "s3",
        )
        wire = {"StartAfter": "start-after", "ContinuationToken": "continuation-token"}
        params = _list_params(prefix, **{wire[name]: value for name, value in more.items()})
        canonical, sent = canonical_query(params)
        headers = SigV4Signer(endpoint.region, endpoint.service).headers(
            "GET",
            endpoint.host,
            endpoint.path,
            canonical,
            payload_sha256=EMPTY_SHA256,
            credentials=_credentials(token),
            amz_date=AMZ_DATE,
        )
        assert headers["authorization"] == request.headers["Authorization"].decode()
        assert sorted(sent.split("&")) == sorted(request.url.split("?", 1)[1].split("&"))


def test_learning_refuses_what_it_cannot_repeat() -> None:
    """No endpoint from an unsigned request, a SigV4a one, or one signing a header the
    lean path does not send."""
    request = _botocore_prepared("list_objects_v2", None, Bucket="b", Prefix="p")
    headers = dict(request.headers)
    assert learn_endpoint(request.url, headers) is not None
    unsigned = {k: v for k, v in headers.items() if k != "Authorization"}
    assert learn_endpoint(request.url, unsigned) is None
    sigv4a = {**headers, "Authorization": b"AWS4-ECDSA-P256-SHA256 Credential=x"}
    assert learn_endpoint(request.url, sigv4a) is None
    owner = headers["Authorization"].replace(b"x-amz-date", b"x-amz-date;x-amz-expected-owner")
    assert learn_endpoint(request.url, {**headers, "Authorization": owner}) is None


def test_the_signing_key_is_derived_once_per_day() -> None:
    """The key is kept for the same secret and day, and derived again when either changes."""
    signer = SigV4Signer("us-east-1", "s3")
    first = signer.signing_key("secret", "20261203")
    assert signer.signing_key("secret", "20261203") is first
    assert signer.signing_key("secret", "20261204") != first
    assert signer.signing_key("other", "20261204") != signer.signing_key("secret", "20261204")
