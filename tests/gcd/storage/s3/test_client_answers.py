"""How the S3 client reads answers that are not what they seem: an S3 error inside a 200
(S3 may send one after the status line) and a body cut short. A loopback HTTP server
plays the S3 endpoint that answers so; everything else is the real client."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from gcd.storage.s3.client import S3ObjectStore, _verify, error_in_200
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import StorageError
from l0lab.testing.local_servers import free_port

pytestmark = pytest.mark.integration

ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)
DELETED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="http://s3.amazonaws.com/'
    b'doc/2006-03-01/"><Deleted><Key>a</Key></Deleted></DeleteResult>'
)


@pytest.fixture
async def answering() -> AsyncIterator[Callable[[bytes], str]]:
    """`start(body)`: an endpoint answering every request 200 with `body`; its URL."""
    runners: list[web.AppRunner] = []

    async def start(body: bytes) -> str:
        async def handle(_: web.Request) -> web.Response:
            return web.Response(status=200, body=body, content_type="application/xml")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}"

    yield start  # type: ignore[misc]
    for runner in runners:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (ERROR_BODY, True),
        (b"<Error><Code>SlowDown</Code></Error>", True),
        (b'  <?xml version="1.0"?>  <Error code="x"/>', True),
        (DELETED_BODY, False),
        (
            b"<ListBucketResult><Contents><Key>&lt;Error&gt;</Key></Contents></ListBucketResult>",
            False,
        ),
        (b"", False),
    ],
)
def test_only_a_root_error_element_turns_a_200_into_a_500(body: bytes, error: bool) -> None:
    """The root element decides; an <Error> deeper in the body (a key's text) does not."""
    answer = {"status_code": 200, "body": body}
    error_in_200(answer)
    assert answer["status_code"] == (500 if error else 200)


async def test_an_error_inside_a_200_is_a_retryable_storage_error(answering: Callable) -> None:
    """DeleteObjects answered 200 with an <Error> body: a retryable InternalError, never
    'every key deleted'."""
    endpoint = await answering(ERROR_BODY)
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        with pytest.raises(StorageError) as raised:
            await store.delete_batch(["a", "b"])
    assert (raised.value.code, raised.value.retryable) == ("InternalError", True)


async def test_a_body_cut_short_is_a_retryable_storage_error(answering: Callable) -> None:
    """A 200 whose XML ends mid-element cannot be parsed: retryable, not 'Unknown'."""
    endpoint = await answering(DELETED_BODY[:-30])
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        with pytest.raises(StorageError) as raised:
            await store.delete_batch(["a"])
    assert raised.value.retryable


async def test_a_plain_200_is_read_as_usual(answering: Callable) -> None:
    """A well-formed DeleteObjects answer is parsed once, as botocore parses it."""
    endpoint = await answering(DELETED_BODY)
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        result = await store.delete_batch(["a"])
    assert (result.deleted, result.errors) == (("a",), ())


@pytest.mark.parametrize(
    "body",
    [
        (
            b"<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a</Key>"
            b"<LastModified>2026-11-22T03:12:50.000Z</LastModified></Contents></ListBucketResult>"
        ),
        (
            b"<ListBucketResult><Contents><LastModified>2026-11-22T03:12:50.000Z</LastModified>"
            b"</Contents></ListBucketResult>"
        ),
        b"<DeleteResult/>",
        b"",
    ],
    ids=["truncated-without-token", "entry-without-key", "wrong-root", "empty"],
)
async def test_a_malformed_listing_is_a_retryable_error_never_an_empty_page(
    answering: Callable, body: bytes
) -> None:
    """The lean parse (`gcd.storage.s3.wire`) refuses what botocore's would have read as a
    last or empty page: the round sees a retryable InternalError."""
    endpoint = await answering(body)
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        with pytest.raises(StorageError) as raised:
            await store.list_page("p/")
    assert (raised.value.code, raised.value.retryable) == ("InternalError", True)


async def test_a_delete_answer_lists_failures_by_key(answering: Callable) -> None:
    """Each <Error> of a DeleteObjects answer is that key's failure, with its code."""
    error = b"<Error><Key>b</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
    endpoint = await answering(DELETED_BODY.replace(b"</DeleteResult>", error + b"</DeleteResult>"))
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        result = await store.delete_batch(["a", "b"])
    assert result.deleted == ("a",)
    assert [(f.key, f.code, f.message) for f in result.errors] == [("b", "AccessDenied", "no")]


_ENTITIES = (
    b'<!DOCTYPE x [<!ENTITY a "' + b"a" * 100_000 + b'">'
    b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
)


async def test_a_utf16_listing_with_a_doctype_is_refused_not_expanded(
    answering: Callable,
) -> None:
    """Issue 35, item 9: the lean ListObjectsV2 path refuses a DOCTYPE in UTF-16 (which
    hides the bytes `<!DOCTYPE`) instead of listing a 1,000,000-character key."""
    text = (
        '<?xml version="1.0" encoding="UTF-16"?>'
        + _ENTITIES.decode()
        + "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>&b;</Key>"
        "<LastModified>2026-11-22T03:12:50.000Z</LastModified><Size>1</Size></Contents>"
        "</ListBucketResult>"
    )
    endpoint = await answering(text.encode("utf-16"))
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        with pytest.raises(StorageError, match="DOCTYPE") as raised:
            await store.list_page("p/")
    assert (raised.value.code, raised.value.retryable) == ("InternalError", True)


async def test_botocores_parse_refuses_a_doctype_too(answering: Callable) -> None:
    """ListObjectVersions (and every error body) goes through botocore's parser, which
    expands internal entities: it is refused there as well."""
    body = (
        _ENTITIES + b"<ListVersionsResult><IsTruncated>false</IsTruncated><Version>"
        b"<Key>&b;</Key><VersionId>v</VersionId><Size>1</Size><LastModified>"
        b"2026-11-22T03:12:50.000Z</LastModified></Version></ListVersionsResult>"
    )
    endpoint = await answering(body)
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        with pytest.raises(StorageError, match="DOCTYPE") as raised:
            await store.list_versions_page("p/")
    assert raised.value.retryable


async def test_an_http_endpoint_builds_no_certificate_store(
    answering: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Talking to an http:// endpoint loads no CA bundle (~0.1 s of CPU per client,
    issue 43): nothing is verified on a plain connection; https:// keeps verifying."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a CA bundle was loaded for an http:// endpoint")

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", refuse)
    endpoint = await answering(DELETED_BODY)
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        assert (await store.delete_batch(["a"])).deleted == ("a",)
    assert _verify(endpoint.upper()) is False
    assert _verify("https://s3.example.com") is None  # botocore's default: verify
    assert _verify(None) is None
