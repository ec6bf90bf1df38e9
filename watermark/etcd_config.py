"""How every l0gc process is told where its etcd is: command-line options and settings.

`add_etcd_arguments(parser)` adds the same etcd options to every entry point, each
mirrored by an environment variable (the flag wins). `EtcdSettings.from_args(ns)`
validates them into a frozen `EtcdSettings`; `open_kv(settings)` opens the client.

    --etcd                 L0GC_ETCD            comma-separated host:port or http(s)://host:port
                                                (required by services, `from_args(required=True)`)
    --namespace            L0GC_NAMESPACE       key prefix, e.g. /l0gc/prod-eu (no trailing /)
    --etcd-ca-file         L0GC_ETCD_CA_FILE    PEM CA bundle that signed etcd's server cert
    --etcd-cert-file       L0GC_ETCD_CERT_FILE  PEM client certificate (with --etcd-key-file)
    --etcd-key-file        L0GC_ETCD_KEY_FILE   PEM client private key
    --etcd-username        L0GC_ETCD_USERNAME   etcd user (needs a password)
    --etcd-password-file   L0GC_ETCD_PASSWORD_FILE, or the password itself in L0GC_ETCD_PASSWORD
    --etcd-timeout         L0GC_ETCD_TIMEOUT    seconds per etcd call

TLS is on when an endpoint is https:// or a CA or client certificate is given. The
password is never a flag value (it would show in `ps`) and never appears in a repr.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from watermark.errors import ConfigError
from watermark.etcd_kv import EtcdKV
from watermark.store import validate_namespace

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TIMEOUT_S",
    "NO_ENDPOINT",
    "EtcdSettings",
    "add_etcd_arguments",
    "open_kv",
    "parse_endpoints",
]

DEFAULT_ENDPOINT = "127.0.0.1:2379"
DEFAULT_NAMESPACE = "/l0gc/default"
DEFAULT_TIMEOUT_S = 5.0
_ENDPOINT_FORM = "host:port, http://host:port or https://host:port (comma-separated)"
NO_ENDPOINT = (
    "no etcd endpoint given: pass --etcd HOST:PORT[,HOST:PORT...] or set L0GC_ETCD "
    f"(a service does not fall back to {DEFAULT_ENDPOINT})"
)


def _parse_endpoint(item: str) -> tuple[str, str | None]:
    """One endpoint as ("host:port", scheme or None)."""
    scheme: str | None = None
    rest = item
    if "://" in item:
        scheme, rest = item.split("://", 1)
        scheme = scheme.lower()
        rest = rest.removesuffix("/")
        if scheme not in ("http", "https"):
            raise ConfigError(f"etcd endpoint {item!r}: unknown scheme; expected {_ENDPOINT_FORM}")
    host, sep, port = rest.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    valid_host = bool(host) and (bracketed or ("[" not in host and ":" not in host))
    if (
        not sep
        or not valid_host
        or "/" in host
        or any(ch.isspace() for ch in host)
        or not port.isascii()
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise ConfigError(f"etcd endpoint {item!r} is not valid; expected {_ENDPOINT_FORM}")
    return f"{host}:{int(port)}", scheme


def parse_endpoints(text: str) -> tuple[tuple[str, ...], bool]:
    """Parse a comma-separated endpoint list into ("host:port", ...) and whether it is https."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(
            f"etcd endpoint list {text!r} has an empty entry; expected {_ENDPOINT_FORM}"
        )
    parsed = [_parse_endpoint(item) for item in items]
    schemes = {scheme for _, scheme in parsed if scheme is not None}
    if len(schemes) > 1:
        raise ConfigError(
            f"etcd endpoints {text!r} mix http:// and https://; use one scheme for all"
        )
    return tuple(endpoint for endpoint, _ in parsed), schemes == {"https"}


@dataclass(frozen=True, slots=True)
class EtcdSettings:
    """Validated etcd connection settings. `endpoints` are normalised to "host:port"."""

    endpoints: tuple[str, ...] = (DEFAULT_ENDPOINT,)
    namespace: str = DEFAULT_NAMESPACE
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    tls: bool = False

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ConfigError(f"no etcd endpoint given; expected {_ENDPOINT_FORM}")
        for endpoint in self.endpoints:
            _, scheme = _parse_endpoint(endpoint)
            if scheme is not None:
                raise ConfigError(
                    f"etcd endpoint {endpoint!r}: EtcdSettings takes host:port; "
                    "use EtcdSettings.from_args or parse_endpoints for URLs"
                )
        validate_namespace(self.namespace)
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "--etcd-cert-file and --etcd-key-file must be given together "
                f"(got cert {self.cert_file}, key {self.key_file})"
            )
        if self.username is not None and self.password is None:
            raise ConfigError(
                f"etcd user {self.username!r} has no password: pass --etcd-password-file "
                "or set L0GC_ETCD_PASSWORD"
            )
        if self.password is not None and self.username is None:
            raise ConfigError("an etcd password is set but no user: pass --etcd-username")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ConfigError(
                f"--etcd-timeout {self.timeout_s!r} must be a positive number of seconds"
            )

    @property
    def uses_tls(self) -> bool:
        """True when connections use TLS."""
        return self.tls or self.ca_file is not None or self.cert_file is not None

    @classmethod
    def from_args(
        cls,
        ns: argparse.Namespace,
        environ: Mapping[str, str] | None = None,
        *,
        required: bool = False,
    ) -> EtcdSettings:
        """Settings from `add_etcd_arguments` options, falling back to L0GC_* variables.

        With `required` (services: `gcd daemon`, `gcd sweep`, `watermark serve`) an
        endpoint must be given by --etcd or L0GC_ETCD: ConfigError instead of the
        loopback default, which in a cluster would only hang on connecting.
        """
        env = os.environ if environ is None else environ

        def pick(flag: str, var: str) -> str | None:
            value = getattr(ns, flag, None)
            return value if value is not None else env.get(var) or None

        if required and pick("etcd", "L0GC_ETCD") is None:
            raise ConfigError(NO_ENDPOINT)
        endpoint_text = _or_default(pick("etcd", "L0GC_ETCD"), DEFAULT_ENDPOINT)
        endpoints, https = parse_endpoints(endpoint_text)
        explicit_http = "http://" in endpoint_text.lower()
        files = {
            name: _existing_file(pick(flag, var), option)
            for name, flag, var, option in (
                ("ca", "etcd_ca_file", "L0GC_ETCD_CA_FILE", "--etcd-ca-file"),
                ("cert", "etcd_cert_file", "L0GC_ETCD_CERT_FILE", "--etcd-cert-file"),
                ("key", "etcd_key_file", "L0GC_ETCD_KEY_FILE", "--etcd-key-file"),
            )
        }
        if explicit_http and (files["ca"] or files["cert"]):
            raise ConfigError(
                "etcd TLS files are given but the endpoints are http://; use https:// endpoints"
            )
        password_file = pick("etcd_password_file", "L0GC_ETCD_PASSWORD_FILE")
        password = (
            _read_password(password_file)
            if password_file is not None
            else env.get("L0GC_ETCD_PASSWORD") or None
        )
        timeout_text = pick("etcd_timeout", "L0GC_ETCD_TIMEOUT")
        return cls(
            endpoints=endpoints,
            namespace=_or_default(pick("namespace", "L0GC_NAMESPACE"), DEFAULT_NAMESPACE),
            ca_file=files["ca"],
            cert_file=files["cert"],
            key_file=files["key"],
            username=pick("etcd_username", "L0GC_ETCD_USERNAME"),
            password=password,
            timeout_s=_seconds(timeout_text) if timeout_text is not None else DEFAULT_TIMEOUT_S,
            tls=https,
        )


def _or_default(value: str | None, default: str) -> str:
    return default if value is None else value


def _existing_file(value: str | None, option: str) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise ConfigError(f"{option} {value!r} is not a readable file")
    return path


def _read_password(value: str) -> str:
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--etcd-password-file {value!r} cannot be read: {exc}") from exc
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"--etcd-password-file {value!r} is empty")
    return password


def _seconds(value: object) -> float:
    try:
        seconds = float(str(value))
    except ValueError as exc:
        raise ConfigError(f"--etcd-timeout {value!r} must be a number of seconds") from exc
    return seconds


def add_etcd_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the etcd options (see the module docstring) to `parser`."""
    group = parser.add_argument_group("etcd")
    group.add_argument(
        "--etcd",
        metavar="ENDPOINTS",
        help=f"etcd endpoints: {_ENDPOINT_FORM}; tried in order (env L0GC_ETCD; "
        "required by watermark serve, and by gcd daemon and gcd sweep unless --safe-epoch "
        f"is given; other commands default to {DEFAULT_ENDPOINT})",
    )
    group.add_argument(
        "--namespace",
        metavar="PREFIX",
        help="etcd key prefix of this cluster's GC state, starting with '/' "
        f"(env L0GC_NAMESPACE; default {DEFAULT_NAMESPACE})",
    )
    group.add_argument(
        "--etcd-ca-file",
        metavar="PATH",
        help="PEM CA certificates to verify etcd's server certificate; turns TLS on "
        "(env L0GC_ETCD_CA_FILE)",
    )
    group.add_argument(
        "--etcd-cert-file",
        metavar="PATH",
        help="PEM client certificate for etcd mutual TLS; needs --etcd-key-file "
        "(env L0GC_ETCD_CERT_FILE)",
    )
    group.add_argument(
        "--etcd-key-file",
        metavar="PATH",
        help="PEM private key of --etcd-cert-file (env L0GC_ETCD_KEY_FILE)",
    )
    group.add_argument(
        "--etcd-username",
        metavar="USER",
        help="etcd user for authentication; needs a password (env L0GC_ETCD_USERNAME)",
    )
    group.add_argument(
        "--etcd-password-file",
        metavar="PATH",
        help="file holding the etcd user's password (env L0GC_ETCD_PASSWORD_FILE, or the "
        "password itself in L0GC_ETCD_PASSWORD)",
    )
    group.add_argument(
        "--etcd-timeout",
        metavar="SECONDS",
        help=f"timeout of each etcd call (env L0GC_ETCD_TIMEOUT; default {DEFAULT_TIMEOUT_S})",
    )


async def open_kv(settings: EtcdSettings, *, connect: bool = True) -> EtcdKV:
    """An `EtcdKV` for `settings`; with `connect`, raise `EtcdUnavailable` now if unreachable."""

    def read(path: Path | None, what: str) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{what} {str(path)!r} cannot be read: {exc}") from exc

    kv = EtcdKV(
        settings.endpoints,
        timeout_s=settings.timeout_s,
        username=settings.username,
        password=settings.password,
        tls=settings.uses_tls,
        ca_cert=read(settings.ca_file, "--etcd-ca-file"),
        cert_chain=read(settings.cert_file, "--etcd-cert-file"),
        private_key=read(settings.key_file, "--etcd-key-file"),
    )
    if connect:
        try:
            await kv.connect()
        except BaseException:
            await kv.close()
            raise
    return kv
