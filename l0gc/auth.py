"""Who may call the publisher's HTTP API: bearer tokens with roles, and where it may listen.

Design notes: docs/internals/kernel.md, `l0gc.auth`.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from l0gc.errors import ConfigError

__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "Access",
    "Exposure",
    "Role",
    "TokenFile",
    "TokenSet",
    "allows",
    "bearer_token",
    "check_exposure",
    "is_loopback",
    "parse_token_file",
    "read_token_file",
    "roles_allowed",
]

MAX_TOKEN_FILE_BYTES = 1 << 20
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]{16,512}=*")
_INLINE_COMMENT = re.compile(r"\s#.*\Z", re.DOTALL)


class Role(enum.Enum):
    """What a token holder is: the role given in its token file line."""

    WRITER = "writer"
    RECONCILER = "reconciler"
    REGISTRAR = "registrar"
    ADMIN = "admin"


class Access(enum.Enum):
    """What a route needs from its caller."""

    READ = "read"
    """Partition state (GET): any role."""
    WRITE = "write"
    """fence, commit, abort: writer or admin."""
    RECONCILE = "reconcile"
    """reconciled: reconciler or admin."""
    REGISTER = "register"
    """register, deregister (without force): registrar or admin."""
    ADMIN = "admin"
    """adopt: admin only."""


_GRANTS: dict[Role, frozenset[Access]] = {
    Role.WRITER: frozenset({Access.READ, Access.WRITE}),
    Role.RECONCILER: frozenset({Access.READ, Access.RECONCILE}),
    Role.REGISTRAR: frozenset({Access.READ, Access.REGISTER}),
    Role.ADMIN: frozenset(Access),
}


def allows(role: Role, access: Access) -> bool:
    """True if a caller with `role` may use a route that needs `access`."""
    return access in _GRANTS[role]


def roles_allowed(access: Access) -> list[Role]:
    """The roles that may use a route needing `access`, in declaration order."""
    return [role for role in Role if allows(role, access)]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class TokenSet:
    """The tokens a service accepts, as (SHA-256 digest, role) pairs; see `role_of`."""

    entries: tuple[tuple[bytes, Role], ...] = field(repr=False)

    def role_of(self, presented: str) -> Role | None:
        """The role of `presented`, or None if it is no known token (constant time)."""
        wanted = _digest(presented)
        found: Role | None = None
        for digest, role in self.entries:
            # Every digest is compared, whatever matched before: no early exit.
            if hmac.compare_digest(digest, wanted):
                found = role
        return found

    def count(self, role: Role) -> int:
        """How many tokens have `role` (for logs: never the tokens themselves)."""
        return sum(1 for _, held in self.entries if held is role)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        counts = ", ".join(f"{role.value}={self.count(role)}" for role in Role)
        return f"TokenSet({counts})"


def parse_token_file(text: str, source: str = "the token file") -> TokenSet:
    """Parse a token file's text (format: module docstring); ConfigError names the line."""
    entries: list[tuple[bytes, Role]] = []
    seen: dict[bytes, int] = {}
    roles = ", ".join(role.value for role in Role)
    for number, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = _INLINE_COMMENT.sub("", raw).strip()
        if not line or line.startswith("#"):
            continue
        role = Role.ADMIN
        if ":" in line:
            role_name, _, line = line.partition(":")
            try:
                role = Role(role_name.strip())
            except ValueError:
                # The text before ':' is not echoed: it may be part of a mangled token.
                raise ConfigError(
                    f"{source} line {number}: unknown role before ':'; write ROLE:TOKEN with "
                    f"ROLE one of {roles}, or a bare TOKEN for admin"
                ) from None
            line = line.strip()
        if not _TOKEN.fullmatch(line):
            raise ConfigError(
                f"{source} line {number}: not a token: a token is 16 to 512 characters of "
                "A-Z a-z 0-9 - . _ ~ + / (optionally ending in '='), one per line, with no "
                "spaces; generate one with `openssl rand -hex 32`"
            )
        digest = _digest(line)
        if digest in seen:
            raise ConfigError(
                f"{source} line {number}: the same token as line {seen[digest]}; give each "
                "token once, with one role"
            )
        seen[digest] = number
        entries.append((digest, role))
    if not entries:
        raise ConfigError(
            f"{source} has no token (only blank or comment lines): add one token per line, "
            "ROLE:TOKEN or a bare TOKEN for admin"
        )
    return TokenSet(tuple(entries))


def read_token_file(path: str) -> TokenSet:
    """Read and parse the token file at `path`; ConfigError names the path and what is wrong."""
    source = f"--auth-token-file {path}"
    try:
        with Path(path).open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"{source}: cannot read it ({exc.strerror or type(exc).__name__}); give the path "
            "of a readable token file"
        ) from exc
    if mode & 0o007:
        raise ConfigError(
            f"{source}: every user of this machine may read or write it (mode "
            f"{stat.S_IMODE(mode):04o}), so anyone here could take the admin token; run "
            f"`chmod 600 {path}` (or 640 for a group; Kubernetes: a secret volume with "
            "defaultMode 0440, as the chart mounts it), as ssh requires of private keys"
        )
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ConfigError(
            f"{source}: larger than {MAX_TOKEN_FILE_BYTES} bytes; is this the token file?"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text; is this the token file?") from None
    return parse_token_file(text, source)


class TokenFile:
    """A token file and the tokens last read from it; `reload` re-reads it (on SIGHUP).

    Raises ConfigError from the constructor if the file is bad; a failed `reload` raises
    and keeps the tokens read before.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.tokens = read_token_file(path)

    def reload(self) -> TokenSet:
        """Re-read the file; on success the new tokens replace the old ones."""
        tokens = read_token_file(self.path)
        self.tokens = tokens
        return tokens


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header value, or None."""
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None


def is_loopback(host: str) -> bool:
    """True if listening on `host` only admits clients on this machine.

    ``localhost`` and loopback addresses are; ``0.0.0.0``, ``::``, an empty host (every
    interface) and any other name or address are not.
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class Exposure(enum.Enum):
    """Who can reach the API, as `check_exposure` decides it."""

    LOOPBACK = "loopback"
    """Only this machine; no authentication needed."""
    AUTHENTICATED = "authenticated"
    """Every caller presents a token or a verified client certificate."""
    INSECURE = "insecure"
    """Anyone who reaches the port, by the operator's explicit choice."""


def check_exposure(host: str, *, authenticated: bool, insecure: bool) -> Exposure:
    """Decide whether the API may listen on `host`; ConfigError if it may not.

    Beyond loopback it needs authentication (a token file or a client CA) unless the
    operator said `insecure` (--insecure-no-auth).
    """
    if authenticated:
        return Exposure.AUTHENTICATED
    if is_loopback(host):
        return Exposure.LOOPBACK
    if insecure:
        return Exposure.INSECURE
    shown = host or "every interface"
    raise ConfigError(
        f"refusing to listen on {shown} without authentication: anyone who reaches the port "
        "could raise watermarks and get live objects deleted; give --auth-token-file "
        "(L0GC_AUTH_TOKEN_FILE) and/or --tls-client-ca-file (L0GC_TLS_CLIENT_CA_FILE), listen "
        "on 127.0.0.1, or, only on a network you trust, --insecure-no-auth "
        "(L0GC_INSECURE_NO_AUTH=1)"
    )
