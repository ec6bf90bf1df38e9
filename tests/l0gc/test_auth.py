"""Bearer tokens and roles of the publisher's HTTP API (`l0gc.auth`), pure parts
first, then reading and reloading the token file."""

from __future__ import annotations

import hmac
from pathlib import Path

import pytest

from l0gc import auth
from l0gc.auth import (
    Access,
    Exposure,
    Role,
    TokenFile,
    allows,
    bearer_token,
    check_exposure,
    is_loopback,
    parse_token_file,
    read_token_file,
)
from l0gc.errors import ConfigError

WRITER = "w-0123456789abcdef0123"
RECONCILER = "r-0123456789abcdef0123"
ADMIN = "a-0123456789abcdef0123"
BARE = "b-0123456789abcdef0123=="


def test_roles_tokens_comments_and_blank_lines() -> None:
    """ROLE:TOKEN lines get their role, a bare token is admin, comments and blank lines
    are skipped, and an unknown token has no role."""
    tokens = parse_token_file(
        f"# publisher callers\n\nwriter:{WRITER}\n  reconciler: {RECONCILER}  \n"
        f"admin:{ADMIN}\n{BARE}\n"
    )
    assert len(tokens) == 4
    assert tokens.role_of(WRITER) is Role.WRITER
    assert tokens.role_of(RECONCILER) is Role.RECONCILER
    assert tokens.role_of(ADMIN) is Role.ADMIN
    assert tokens.role_of(BARE) is Role.ADMIN
    assert tokens.role_of(WRITER + "x") is None
    assert tokens.role_of("") is None


def test_what_each_role_may_do() -> None:
    """writer: fence/commit/abort; reconciler: reconciled; admin: everything; all read."""
    assert {a for a in Access if allows(Role.WRITER, a)} == {Access.READ, Access.WRITE}
    assert {a for a in Access if allows(Role.RECONCILER, a)} == {Access.READ, Access.RECONCILE}
    assert all(allows(Role.ADMIN, a) for a in Access)
    assert auth.roles_allowed(Access.ADMIN) == [Role.ADMIN]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"writer:{WRITER}\nshort\n", "line 2: not a token"),
        (f"# c\n\nwriter:{WRITER} {ADMIN}\n", "line 3: not a token"),
        (f"boss:{WRITER}\n", "line 1: unknown role"),
        (f"Writer:{WRITER}\n", "line 1: unknown role"),
        ("writer:\n", "line 1: not a token"),
        (f"writer:{WRITER}\nadmin:{WRITER}\n", "line 2: the same token as line 1"),
        ("# only a comment\n\n", "has no token"),
    ],
)
def test_a_bad_line_is_refused_by_number_never_echoing_the_token(text: str, says: str) -> None:
    """Malformed lines, unknown roles, repeated tokens and empty files are ConfigErrors
    naming the line, and the message never contains a token or the text before ':'."""
    with pytest.raises(ConfigError, match=says) as refused:
        parse_token_file(text, "tokens.txt")
    message = str(refused.value)
    for secret in (WRITER, ADMIN, "short", "boss", "Writer"):
        assert secret not in message


def test_every_token_is_compared_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """role_of compares the presented token with every known token, even after a match,
    so the time taken does not say which one matched."""
    tokens = parse_token_file(f"writer:{WRITER}\nreconciler:{RECONCILER}\n{ADMIN}\n")
    calls: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    for presented in (WRITER, ADMIN, "unknown-0123456789abcdef"):
        calls.clear()
        tokens.role_of(presented)
        assert len(calls) == 3
        assert {len(a) for pair in calls for a in pair} == {32}  # digests: no length leak


def test_the_token_set_never_shows_tokens_or_digests() -> None:
    """repr of a token set gives counts by role only."""
    tokens = parse_token_file(f"writer:{WRITER}\n{ADMIN}\n")
    shown = repr(tokens)
    assert shown == "TokenSet(writer=1, reconciler=0, registrar=0, admin=1)"
    assert WRITER not in shown
    assert tokens.entries[0][0].hex() not in shown


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (f"Bearer {WRITER}", WRITER),
        (f"bearer   {WRITER} ", WRITER),
        (WRITER, None),
        (f"Basic {WRITER}", None),
        ("Bearer", None),
        ("Bearer  ", None),
        (None, None),
    ],
)
def test_bearer_token_from_the_authorization_header(header: str | None, token: str | None) -> None:
    """Only the Bearer scheme (any case) yields a token; anything else yields none."""
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("publisher.internal", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    """Loopback addresses and localhost are loopback; every-interface and names are not."""
    assert is_loopback(host) is loopback


def test_exposure_beyond_loopback_needs_auth_or_an_explicit_insecure() -> None:
    """0.0.0.0 without auth is refused with the flags to give; with auth or
    --insecure-no-auth it is allowed, and loopback needs nothing."""
    assert check_exposure("127.0.0.1", authenticated=False, insecure=False) is Exposure.LOOPBACK
    assert check_exposure("0.0.0.0", authenticated=True, insecure=False) is Exposure.AUTHENTICATED
    assert check_exposure("0.0.0.0", authenticated=False, insecure=True) is Exposure.INSECURE
    with pytest.raises(ConfigError) as refused:
        check_exposure("0.0.0.0", authenticated=False, insecure=False)
    message = str(refused.value)
    for flag in ("--auth-token-file", "--tls-client-ca-file", "--insecure-no-auth", "0.0.0.0"):
        assert flag in message


def test_reading_the_token_file_names_the_path(tmp_path: Path) -> None:
    """A missing, oversized or non-UTF-8 file is a ConfigError naming its path."""
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match=f"--auth-token-file {missing}: cannot read it"):
        read_token_file(str(missing))
    big = tmp_path / "big"
    big.write_bytes(b"#" * (auth.MAX_TOKEN_FILE_BYTES + 1))
    big.chmod(0o600)
    with pytest.raises(ConfigError, match="larger than"):
        read_token_file(str(big))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + WRITER.encode())
    binary.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_token_file(str(binary))


def test_a_failed_reload_keeps_the_tokens_read_before(tmp_path: Path) -> None:
    """reload() swaps in a good file's tokens; a bad file raises and changes nothing."""
    path = tmp_path / "tokens"
    path.write_text(f"writer:{WRITER}\n")
    path.chmod(0o600)
    token_file = TokenFile(str(path))
    path.write_text(f"reconciler:{RECONCILER}\n")
    assert token_file.reload().role_of(RECONCILER) is Role.RECONCILER
    assert token_file.tokens.role_of(WRITER) is None
    path.write_text(f"reconciler:{RECONCILER}\noops:{ADMIN}\n")
    with pytest.raises(ConfigError, match="line 2"):
        token_file.reload()
    assert token_file.tokens.role_of(RECONCILER) is Role.RECONCILER
    assert token_file.tokens.role_of(ADMIN) is None


def test_an_inline_comment_and_a_byte_order_mark_are_accepted(tmp_path: Path) -> None:
    """The docs' example: ``writer:TOKEN   # the brokers``; a file saved with a UTF-8 BOM
    (Windows editors) reads the same (it was "unknown role" on line 1)."""
    text = f"writer:{WRITER}        # the brokers: fence, commit, abort\n{BARE}\t# bare: admin\n"
    path = tmp_path / "tokens"
    path.write_bytes(b"\xef\xbb\xbf" + f"reconciler:{RECONCILER}\n{text}".encode())
    path.chmod(0o600)
    tokens = read_token_file(str(path))
    assert len(tokens) == 3
    assert tokens.role_of(WRITER) is Role.WRITER
    assert tokens.role_of(RECONCILER) is Role.RECONCILER
    assert tokens.role_of(BARE) is Role.ADMIN
    with pytest.raises(ConfigError, match="line 1: not a token"):  # '#' inside: no comment
        parse_token_file(f"writer:{WRITER}#x\n")


@pytest.mark.parametrize(
    ("mode", "refused"),
    [(0o644, True), (0o606, True), (0o600, False), (0o640, False), (0o440, False)],
)
def test_a_token_file_others_may_read_or_write_is_refused(
    tmp_path: Path, mode: int, refused: bool
) -> None:
    """Red-team round 4, finding 12: a 0644 token file was accepted silently. Any "other"
    permission is refused with the mode and the chmod to run (never the token); owner-
    or group-only files (the chart mounts 0440) are read."""
    path = tmp_path / "tokens"
    path.write_text(f"writer:{WRITER}\n")
    path.chmod(mode)
    if refused:
        with pytest.raises(ConfigError, match=f"mode {mode:04o}.*chmod 600") as caught:
            read_token_file(str(path))
        assert WRITER not in str(caught.value)
    else:
        assert read_token_file(str(path)).role_of(WRITER) is Role.WRITER
