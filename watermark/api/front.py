"""The listeners of `watermark serve`: its HTTP API and its probes, as one `Front`.

`watermark.service.runner.PublisherRunner` owns a running publisher's parts and their
order; the listeners are in this layer (they serve `watermark.api.http_api`'s app), so
the command hands the runner an `ApiFront` built from its flags. `ServeHttp` is how the
API is exposed: the token file, TLS, connection and time limits, and who can reach it
(`l0gc.auth.check_exposure`); the command builds it before etcd is contacted,
so a bad token or TLS file exits 2 having changed nothing. `ServeHttp.reload_tokens` is
the SIGHUP handler.

`ApiFront.bind` builds the app, binds the API socket without accepting yet (a port in
use fails here, before any etcd write), and starts the probe listener (``--probe-port``,
`watermark.api.probes`), which answers from then on; `open` accepts API connections and
says who may call; `close` stops the API, then the probes.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TextIO

import structlog

from l0gc.auth import Exposure, TokenFile, TokenSet, check_exposure
from l0gc.errors import ConfigError
from watermark.api.http_api import create_app
from watermark.api.http_routing import Router
from watermark.api.http_server import ApiServer, server_ssl_context
from watermark.api.limits import HttpLimits
from watermark.api.probes import create_probe_app
from watermark.service.publisher import Publisher

__all__ = ["ApiFront", "ServeHttp"]

_log = structlog.get_logger("watermark.front")


@dataclass(eq=False)
class ServeHttp:
    """How `serve` exposes its HTTP API: tokens, TLS, limits, and who can reach it.

    Built from the flags before anything else (`open` raises ConfigError, exit 2);
    `reload_tokens` is the SIGHUP handler.
    """

    token_file: TokenFile | None
    ssl_context: ssl.SSLContext | None
    limits: HttpLimits
    exposure: Exposure

    @classmethod
    def open(
        cls,
        host: str,
        *,
        auth_token_file: str | None,
        tls_cert_file: str | None,
        tls_key_file: str | None,
        tls_client_ca_file: str | None,
        insecure_no_auth: bool,
        limits: HttpLimits,
    ) -> ServeHttp:
        """Read and check the token file and TLS files; refuse an unauthenticated exposure."""
        ssl_context = server_ssl_context(tls_cert_file, tls_key_file, tls_client_ca_file)
        token_file = None if auth_token_file is None else TokenFile(auth_token_file)
        authenticated = token_file is not None or tls_client_ca_file is not None
        exposure = check_exposure(host, authenticated=authenticated, insecure=insecure_no_auth)
        return cls(token_file, ssl_context, limits, exposure)

    def tokens(self) -> TokenSet | None:
        """The tokens callers must present now (None: none asked)."""
        return None if self.token_file is None else self.token_file.tokens

    def reload_tokens(self) -> None:
        """SIGHUP: re-read the token file; if it is bad, keep the tokens and log why."""
        if self.token_file is None:
            _log.info("watermark.auth_reload_skipped", reason="no --auth-token-file")
            return
        try:
            tokens = self.token_file.reload()
        except ConfigError as exc:
            _log.error("watermark.auth_reload_failed", error=str(exc), kept=repr(self.tokens()))
            return
        _log.info("watermark.auth_reloaded", tokens=repr(tokens))

    def log_exposure(self, host: str, port: int) -> None:
        """Say at start who can call the API; loudly if anyone can."""
        if self.exposure is Exposure.INSECURE:
            _log.warning(
                "watermark.http_insecure_no_auth",
                host=host,
                port=port,
                message="--insecure-no-auth: anyone who reaches this port can raise watermarks "
                "and get live objects deleted; give --auth-token-file or --tls-client-ca-file",
            )
            return
        context = self.ssl_context
        client_ca = context is not None and context.verify_mode == ssl.CERT_REQUIRED
        _log.info(
            "watermark.http_access",
            exposure=self.exposure.value,
            tokens=repr(self.tokens()),
            client_certificates=client_ca,
        )


@dataclass(eq=False)
class ApiFront:
    """The API on `host`:`port` and, with `probe_port`, the probes on a port of their own
    (a `watermark.service.runner.Front`)."""

    http: ServeHttp
    host: str
    port: int
    probe_port: int | None
    _: KW_ONLY
    announce: TextIO | None = None
    """Where `open` says where it listens (the serve command's terminal), if anywhere."""
    _server: ApiServer | None = field(init=False, default=None, repr=False)
    _probes: ApiServer | None = field(init=False, default=None, repr=False)

    @property
    def tls(self) -> bool:
        """The API is served over TLS."""
        return self.http.ssl_context is not None

    async def bind(
        self, publisher: Publisher, ready: Callable[[], bool], router: Router | None
    ) -> int:
        """Bind the API socket (connections wait in the backlog until `open`) and start
        the probes, which answer from now on; the API's port. On failure nothing stays
        open (ConfigError naming the flag for a port in use)."""
        http = self.http
        app = create_app(
            publisher, ready=ready, tokens=http.tokens, limits=http.limits, router=router
        )
        self._server = ApiServer(app, ssl_context=http.ssl_context, metrics=publisher.metrics)
        self.port = await self._server.start(self.host, self.port, serving=False)
        if self.probe_port is not None:
            self._probes = ApiServer(create_probe_app(publisher, ready), metrics=publisher.metrics)
            try:
                await self._probes.start(self.host, self.probe_port, flag="--probe-port")
            except BaseException:
                await self.close()
                raise
        return self.port

    async def open(self) -> None:
        """Accept the API's connections; log who may call it; write one line saying
        where it listens to `announce` (the serve command's terminal: at its default
        log level a person saw nothing, issue 55)."""
        announce = self.announce
        assert self._server is not None, "bind() first"
        await self._server.start_serving()
        self.http.log_exposure(self.host, self.port)
        if announce is not None:
            scheme = "https" if self.tls else "http"
            probes = (
                ""
                if self.probe_port is None
                else (f"; probes and /metrics on http://{self.host}:{self.probe_port}")
            )
            announce.write(
                f"watermark serve: listening on {scheme}://{self.host}:{self.port}{probes}\n"
            )
            announce.flush()

    async def close(self) -> None:
        """Stop the API (running requests finish, bounded), then the probes."""
        if self._server is not None:
            await self._server.stop()
        if self._probes is not None:
            await self._probes.stop()

    def reload(self) -> None:
        """SIGHUP: re-read the token file (`ServeHttp.reload_tokens`)."""
        self.http.reload_tokens()
