"""How every l0gc process is told where its etcd is: command-line options and settings.

Design notes: docs/internals/kernel.md, `l0gc.etcd.settings`.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from l0gc.contract.namespace import validate_namespace
from l0gc.errors import ConfigError
from l0gc.options import (
    Option,
    add_options,
    config_path,
    load_config,
    positive_duration,
    resolve_values,
    text,
)

if TYPE_CHECKING:  # aetcd and gRPC load with the client, when one is opened
    from l0gc.etcd.client import EtcdKV

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TIMEOUT_S",
    "ETCD_OPTIONS",
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
    "no etcd endpoint given: pass --etcd HOST:PORT[,HOST:PORT...], set L0GC_ETCD, or put "
    f'etcd = "HOST:PORT" in the --config file (a service does not fall back to {DEFAULT_ENDPOINT})'
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
        """Settings from the `ETCD_OPTIONS` in `ns`: flag > env > config file > default.

        With `required` (services: `gcd daemon`, `gcd sweep`, `watermark serve`) an
        endpoint must be given by --etcd, L0GC_ETCD or the config file's `etcd`:
        ConfigError instead of the loopback default, which in a cluster would only hang
        on connecting. The command has checked the config file's keys; here they are
        only read.
        """
        env = os.environ if environ is None else environ
        path = config_path(ns, env)
        config = load_config(path, strict=False)
        values = resolve_values(ns, ETCD_OPTIONS, environ=env, config=config, path=path)
        if required and values["etcd"] is None:
            raise ConfigError(NO_ENDPOINT)
        endpoint_text = _or_default(values["etcd"], DEFAULT_ENDPOINT)
        endpoints, https = parse_endpoints(endpoint_text)
        explicit_http = "http://" in endpoint_text.lower()
        files = {
            name: None if values[dest] is None else Path(values[dest])
            for name, dest in (
                ("ca", "etcd_ca_file"),
                ("cert", "etcd_cert_file"),
                ("key", "etcd_key_file"),
            )
        }
        if explicit_http and (files["ca"] or files["cert"]):
            raise ConfigError(
                "etcd TLS files are given but the endpoints are http://; use https:// endpoints"
            )
        password_file = values["etcd_password_file"]
        password = (
            _read_password(password_file)
            if password_file is not None
            else env.get("L0GC_ETCD_PASSWORD") or None
        )
        timeout = values["etcd_timeout"]
        return cls(
            endpoints=endpoints,
            namespace=_or_default(values["namespace"], DEFAULT_NAMESPACE),
            ca_file=files["ca"],
            cert_file=files["cert"],
            key_file=files["key"],
            username=values["etcd_username"],
            password=password,
            timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
            tls=https,
        )


def _or_default(value: str | None, default: str) -> str:
    return default if value is None else value


def _endpoint_list(value: object) -> str:
    """The --etcd value, checked: a comma-separated string or (config file) a list."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ValueError(f"expected {_ENDPOINT_FORM}")
    try:
        parse_endpoints(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return value


def _namespace(value: object) -> str:
    try:
        return validate_namespace(text(value))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _existing_file(value: object) -> str:
    path = text(value)
    if not Path(path).is_file():
        raise ValueError("no such readable file; give the path of an existing file")
    return path


def _read_password(value: str) -> str:
    try:
        content = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--etcd-password-file {value!r} cannot be read: {exc}") from exc
    password = content.rstrip("\r\n")
    if not password:
        raise ConfigError(f"--etcd-password-file {value!r} is empty")
    return password


# Defaults are None so that "not given" stays visible (`required`, `gcd sweep
# --safe-epoch` without etcd); `from_args` applies the real defaults named in the help.
ETCD_OPTIONS: tuple[Option, ...] = (
    Option(
        "--etcd",
        _endpoint_list,
        None,
        f"etcd endpoints: {_ENDPOINT_FORM}; tried in order (required by watermark serve, "
        "and by gcd daemon and gcd sweep unless --safe-epoch is given; other commands "
        f"default to {DEFAULT_ENDPOINT})",
        "ENDPOINTS",
    ),
    Option(
        "--namespace",
        _namespace,
        None,
        "etcd key prefix of this cluster's GC state, starting with '/' "
        f"(default {DEFAULT_NAMESPACE})",
        "PREFIX",
    ),
    Option(
        "--etcd-ca-file",
        _existing_file,
        None,
        "PEM CA certificates to verify etcd's server certificate; turns TLS on",
        "PATH",
    ),
    Option(
        "--etcd-cert-file",
        _existing_file,
        None,
        "PEM client certificate for etcd mutual TLS; needs --etcd-key-file",
        "PATH",
    ),
    Option("--etcd-key-file", _existing_file, None, "PEM private key of --etcd-cert-file", "PATH"),
    Option("--etcd-username", text, None, "etcd user for authentication; needs a password", "USER"),
    Option(
        "--etcd-password-file",
        text,
        None,
        "file holding the etcd user's password, or the password itself in "
        "L0GC_ETCD_PASSWORD (never a flag value)",
        "PATH",
    ),
    Option(
        "--etcd-timeout",
        positive_duration,
        None,
        f"timeout of each etcd call, e.g. 5, 1.5 or 500ms (default {DEFAULT_TIMEOUT_S:g}s)",
        "DURATION",
    ),
)


def add_etcd_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the etcd options (`ETCD_OPTIONS`, see the module docstring) to `parser`."""
    add_options(parser, ETCD_OPTIONS, "etcd")


async def open_kv(settings: EtcdSettings, *, connect: bool = True) -> EtcdKV:
    """An `EtcdKV` for `settings`; with `connect`, raise `EtcdUnavailable` now if unreachable."""
    from l0gc.etcd.client import EtcdKV  # noqa: PLC0415 - gRPC only when etcd is used

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
