"""`l0gc.process.tls`: aiohttp's import-time contexts load their CA store at first use,
and verify exactly as they would have (a real TLS server on loopback, a throwaway CA)."""

from __future__ import annotations

import http.server
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from l0gc.process.tls import DEFERRED_MODULE, _DeferringFinder, deferred_ca_loads
from l0lab.testing.pki import issue

REPO = Path(__file__).parents[3]


@pytest.fixture
def ca_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CA of our own as OpenSSL's default CA file: one certificate, wherever we run."""
    issue(tmp_path, "ca", None)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))
    return tmp_path / "ca.pem"


def loaded(context: ssl.SSLContext) -> int:
    """CA certificates in `context`'s store, read without loading a deferred one."""
    return ssl.SSLContext.cert_store_stats(context)["x509_ca"]


def test_a_default_context_made_inside_loads_its_cas_at_first_use(ca_file: Path) -> None:
    with deferred_ca_loads():
        context = ssl.create_default_context()
    assert loaded(context) == 0
    eager = ssl.create_default_context()
    assert loaded(eager) == 1  # outside: as always, at once
    assert context.cert_store_stats() == eager.cert_store_stats()
    assert type(context) is ssl.SSLContext  # loaded: a plain context again
    assert (context.verify_mode, context.check_hostname, context.options) == (
        eager.verify_mode,
        eager.check_hostname,
        eager.options,
    )


def test_a_handshake_loads_the_cas_first(ca_file: Path) -> None:
    with deferred_ca_loads():
        context = ssl.create_default_context()
        unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        unverified.set_default_verify_paths()  # aiohttp's second context, as it makes it
    context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="localhost")
    assert loaded(context) == 1
    assert loaded(unverified) == 0
    assert len(unverified.get_ca_certs()) == 1
    assert loaded(unverified) == 1


def test_only_plain_contexts_wait_and_the_window_always_closes(ca_file: Path) -> None:
    class Theirs(ssl.SSLContext):
        pass

    theirs = Theirs(ssl.PROTOCOL_TLS_CLIENT)

    def fail_inside() -> None:
        with deferred_ca_loads():
            theirs.set_default_verify_paths()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert loaded(theirs) == 1  # someone else's subclass: loaded at once, as always
    assert loaded(ssl.create_default_context()) == 1  # the window closed with the error


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def https_url(tmp_path: Path) -> Iterator[str]:
    """An https server on loopback whose certificate the CA `tmp_path`/ca.pem signed."""
    issue(tmp_path, "server", issue(tmp_path, "server-ca", None))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server-key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


_CLIENT = """
import asyncio, inspect, sys
from l0gc.process.tls import defer_aiohttp_ca_load
defer_aiohttp_ca_load()
import aiohttp, aiohttp.connector as connector
contexts = (connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED)
kinds = {type(c).__name__ for c in contexts}
def hooks():
    return len([f for f in sys.meta_path if type(f).__name__ == "_DeferringFinder"])
after_import = hooks()
defer_aiohttp_ca_load()  # imported: a no-op
print("KINDS", sorted(kinds), "HOOKS", after_import, hooks())
print("SOURCE", "_make_ssl_context" in inspect.getsource(connector))
async def get():
    async with aiohttp.ClientSession() as session:
        async with session.get(sys.argv[1], timeout=aiohttp.ClientTimeout(total=30)) as answer:
            return answer.status, await answer.text()
try:
    print("ANSWER", asyncio.run(get()))
except aiohttp.ClientConnectorCertificateError as exc:
    print("REFUSED", exc.certificate_error.verify_message)
"""


def _client(url: str, ca: Path) -> str:
    env = {**os.environ, "SSL_CERT_FILE": str(ca), "SSL_CERT_DIR": str(ca.parent / "none")}
    return subprocess.run(
        [sys.executable, "-c", _CLIENT, url],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
        timeout=120,
    ).stdout


def test_aiohttp_imported_deferred_still_verifies_every_https_connection(
    https_url: str, tmp_path: Path
) -> None:
    """A fresh interpreter: aiohttp's two contexts are imported unloaded, the hook leaves
    sys.meta_path, the module's source is still readable; then a GET with aiohttp's own
    verified context trusts the server's CA and refuses a server another CA signed."""
    issue(tmp_path, "other-ca", None)
    trusted = _client(https_url, tmp_path / "server-ca.pem")
    assert "KINDS ['_DeferredCAContext'] HOOKS 0 0" in trusted, trusted
    assert "SOURCE True" in trusted
    assert "ANSWER (200, 'hello')" in trusted, trusted
    refused = _client(https_url, tmp_path / "other-ca.pem")
    assert "REFUSED unable to get local issuer certificate" in refused, refused


def test_the_finder_leaves_sys_meta_path_alone_while_the_import_system_reads_it(
    tmp_path: Path,
) -> None:
    """Taking itself off the list importlib is iterating would make it skip the next
    finder; the loader does that once the module is loaded."""
    finder = _DeferringFinder()
    sys.meta_path.insert(0, finder)
    try:
        assert finder.find_spec(DEFERRED_MODULE, [str(tmp_path)]) is None  # not there
        assert sys.meta_path[0] is finder
        assert finder.find_spec(DEFERRED_MODULE, None) is None  # once only
    finally:
        sys.meta_path.remove(finder)
