"""etcd settings: options, environment fallbacks, validation, and a TLS + auth connection."""

from __future__ import annotations

import argparse
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from l0gc.errors import ConfigError, EtcdUnavailable
from l0gc.etcd.settings import (
    DEFAULT_NAMESPACE,
    EtcdSettings,
    add_etcd_arguments,
    open_kv,
    parse_endpoints,
)
from l0gc.etcd.store import WatermarkStore
from l0gc.options import add_config_option
from l0lab.testing.local_servers import etcd_binary, free_port
from l0lab.testing.pki import issue
from tests.waiting import wait_until_sync


def settings_from(argv: list[str], env: dict[str, str] | None = None) -> EtcdSettings:
    """Parse `argv` with the etcd options and build settings against `env` only."""
    parser = argparse.ArgumentParser()
    add_etcd_arguments(parser)
    return EtcdSettings.from_args(parser.parse_args(argv), environ=env or {})


def test_defaults() -> None:
    """No flags and no environment give the local default etcd and namespace."""
    settings = settings_from([])
    assert settings.endpoints == ("127.0.0.1:2379",)
    assert settings.namespace == DEFAULT_NAMESPACE
    assert settings.timeout_s == 5.0
    assert not settings.uses_tls


@pytest.mark.parametrize(
    ("text", "endpoints", "https"),
    [
        ("etcd-0:2379", ("etcd-0:2379",), False),
        (" a:1 , b:2 ", ("a:1", "b:2"), False),
        ("http://10.0.0.1:2379", ("10.0.0.1:2379",), False),
        ("https://etcd.example:2379/,https://etcd2.example:2379", None, True),
        ("[::1]:2379", ("[::1]:2379",), False),
    ],
)
def test_endpoint_forms(text: str, endpoints: tuple[str, ...] | None, https: bool) -> None:
    """host:port and http(s):// URLs are accepted and normalised to host:port."""
    parsed, is_https = parse_endpoints(text)
    if endpoints is not None:
        assert parsed == endpoints
    assert is_https is https


@pytest.mark.parametrize(
    "text",
    [
        "etcd",
        "etcd:0",
        "etcd:99999",
        "etcd:http",
        "ftp://etcd:1",
        "a:1,,b:2",
        "",
        "e tcd:1",
        "http://a:1,https://b:2",
        "::1:2379",
        "http://a:1/path",
    ],
)
def test_bad_endpoints_name_the_value_and_the_form(text: str) -> None:
    """A bad endpoint raises ConfigError naming it and the expected form."""
    with pytest.raises(ConfigError) as info:
        settings_from(["--etcd", text])
    message = str(info.value)
    assert repr(text) in message or "mix" in message
    assert "host:port" in message or "one scheme" in message


def test_environment_fills_in_and_flags_win() -> None:
    """L0GC_* variables are used when a flag is absent; a flag overrides them."""
    env = {"L0GC_ETCD": "e1:1,e2:2", "L0GC_NAMESPACE": "/l0gc/prod", "L0GC_ETCD_TIMEOUT": "2.5"}
    from_env = settings_from([], env)
    assert from_env.endpoints == ("e1:1", "e2:2")
    assert (from_env.namespace, from_env.timeout_s) == ("/l0gc/prod", 2.5)
    flagged = settings_from(["--etcd", "f:3", "--namespace", "/other"], env)
    assert (flagged.endpoints, flagged.namespace) == (("f:3",), "/other")


@pytest.mark.parametrize("namespace", ["l0gc", "/l0gc/", "/", "/a b"])
def test_bad_namespace(namespace: str) -> None:
    """The namespace must start with '/' and not end with '/'."""
    with pytest.raises(ConfigError, match="namespace"):
        settings_from(["--namespace", namespace])


@pytest.mark.parametrize("timeout", ["abc", "-1", "0", "nan"])
def test_bad_timeout(timeout: str) -> None:
    """The timeout must be a positive number of seconds."""
    with pytest.raises(ConfigError, match="etcd-timeout"):
        settings_from(["--etcd-timeout", timeout])


def test_password_comes_from_a_file_or_env_and_is_never_shown(tmp_path: Path) -> None:
    """The password is read from a file (or env), needs a user, and is hidden from repr."""
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    settings = settings_from(["--etcd-username", "gc", "--etcd-password-file", str(secret)])
    assert (settings.username, settings.password) == ("gc", "hunter2")
    assert "hunter2" not in repr(settings)
    from_env = settings_from(["--etcd-username", "gc"], {"L0GC_ETCD_PASSWORD": "s3cret"})
    assert from_env.password == "s3cret"
    with pytest.raises(ConfigError, match="no password"):
        settings_from(["--etcd-username", "gc"])
    with pytest.raises(ConfigError, match="no user"):
        settings_from(["--etcd-password-file", str(secret)])
    with pytest.raises(ConfigError, match="cannot be read"):
        settings_from(["--etcd-username", "gc", "--etcd-password-file", str(tmp_path / "x")])


def test_tls_options_are_validated(tmp_path: Path) -> None:
    """TLS files must exist, cert and key go together, and http:// cannot use them."""
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    assert settings_from(["--etcd-ca-file", str(pem)]).uses_tls
    assert settings_from(["--etcd", "https://e:1"]).uses_tls
    with pytest.raises(ConfigError, match=r"missing\.pem"):
        settings_from(["--etcd-ca-file", str(tmp_path / "missing.pem")])
    with pytest.raises(ConfigError, match="together"):
        settings_from(["--etcd-cert-file", str(pem)])
    with pytest.raises(ConfigError, match="http://"):
        settings_from(["--etcd", "http://e:1", "--etcd-ca-file", str(pem)])


def test_durations_and_the_config_file(tmp_path: Path) -> None:
    """The etcd options follow the one option system: durations, config keys, precedence."""
    assert settings_from(["--etcd-timeout", "500ms"]).timeout_s == 0.5
    config = tmp_path / "l0gc.toml"
    config.write_text(
        'etcd = ["c0:1", "c1:2"]\nnamespace = "/l0gc/from-file"\netcd_timeout = "2s"\n'
        'bucket = "other commands\' keys are not checked here"\n'
    )
    parser = argparse.ArgumentParser()
    add_config_option(parser)
    add_etcd_arguments(parser)
    ns = parser.parse_args(["--config", str(config), "--etcd-timeout", "4s"])
    settings = EtcdSettings.from_args(ns, {"L0GC_NAMESPACE": "/l0gc/env"}, required=True)
    assert settings.endpoints == ("c0:1", "c1:2")  # config
    assert settings.namespace == "/l0gc/env"  # env over config
    assert settings.timeout_s == 4.0  # flag over config
    env_config = EtcdSettings.from_args(parser.parse_args([]), {"L0GC_CONFIG": str(config)})
    assert env_config.namespace == "/l0gc/from-file"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"L0GC_ETCD_TIMEOUT": "abc"}, "env L0GC_ETCD_TIMEOUT: invalid value 'abc'"),
        ([], {"L0GC_NAMESPACE": "no-slash"}, "env L0GC_NAMESPACE: invalid value 'no-slash'"),
        ([], {"L0GC_ETCD": "etcd"}, "env L0GC_ETCD: invalid value 'etcd'"),
        (
            ["--etcd-ca-file", "/nonexistent/ca.pem"],
            {},
            "flag --etcd-ca-file: invalid value '/nonexistent/ca.pem'",
        ),
    ],
)
def test_bad_values_name_their_source(argv: list[str], env: dict[str, str], message: str) -> None:
    """A bad etcd setting names the flag or env var it came from, and the value."""
    with pytest.raises(ConfigError) as info:
        settings_from(argv, env)
    assert message in str(info.value)


def test_a_service_without_any_endpoint_is_refused_naming_every_source() -> None:
    """required=True and no flag, env or config: ConfigError naming --etcd and L0GC_ETCD."""
    with pytest.raises(ConfigError, match=r"--etcd .*L0GC_ETCD.*config"):
        settings_from_required([])


def settings_from_required(argv: list[str]) -> EtcdSettings:
    """Like `settings_from`, for a service (an endpoint is required)."""
    parser = argparse.ArgumentParser()
    add_etcd_arguments(parser)
    return EtcdSettings.from_args(parser.parse_args(argv), {}, required=True)


def test_every_option_has_help() -> None:
    """Each etcd option carries help text."""
    parser = argparse.ArgumentParser()
    add_etcd_arguments(parser)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(options) == 8
    assert all(action.help for action in options)


# -- a real etcd with TLS, client certificates and authentication ----------------------


@dataclass
class Pki:
    """PEM files of a throwaway CA, a server cert for 127.0.0.1 and a client cert."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA with one server and one client certificate."""
    ca = issue(tmp_path, "ca", None)
    issue(tmp_path, "server", ca)
    issue(tmp_path, "root", ca)
    return Pki(
        ca=tmp_path / "ca.pem",
        server_cert=tmp_path / "server.pem",
        server_key=tmp_path / "server-key.pem",
        client_cert=tmp_path / "root.pem",
        client_key=tmp_path / "root-key.pem",
    )


@pytest.fixture
def tls_etcd(tmp_path: Path, pki: Pki) -> Iterator[str]:
    """An etcd serving only https with client-certificate auth and user auth (root:pw)."""
    port, peer = free_port(), free_port()
    client_url = f"https://127.0.0.1:{port}"
    peer_url = f"http://127.0.0.1:{peer}"
    log = (tmp_path / "etcd.log").open("ab")
    command = [
        str(etcd_binary()),
        "--name",
        "tls",
        "--data-dir",
        str(tmp_path / "data"),
        "--listen-client-urls",
        client_url,
        "--advertise-client-urls",
        client_url,
        "--listen-peer-urls",
        peer_url,
        "--initial-advertise-peer-urls",
        peer_url,
        "--initial-cluster",
        f"tls={peer_url}",
        "--logger=zap",
        "--log-level=error",
        "--cert-file",
        str(pki.server_cert),
        "--key-file",
        str(pki.server_key),
        "--trusted-ca-file",
        str(pki.ca),
        "--client-cert-auth",
    ]
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))

        def healthy() -> bool:
            assert process.poll() is None, "etcd exited; see etcd.log"
            with urllib.request.urlopen(f"{client_url}/health", context=context, timeout=1):
                return True

        wait_until_sync(
            healthy,
            timeout_s=60,
            what="TLS etcd to become healthy",
            ignore=(OSError,),
            detail=lambda: (tmp_path / "etcd.log").read_text(errors="replace")[-3000:],
        )
        etcdctl = [
            str(etcd_binary().with_name("etcdctl")),
            "--endpoints",
            client_url,
            "--cacert",
            str(pki.ca),
            "--cert",
            str(pki.client_cert),
            "--key",
            str(pki.client_key),
        ]
        for command in (["user", "add", "root:pw"], ["user", "grant-role", "root", "root"]):
            subprocess.run([*etcdctl, *command], check=True, capture_output=True)
        subprocess.run([*etcdctl, "auth", "enable"], check=True, capture_output=True)
        yield client_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.mark.integration
async def test_tls_with_client_cert_and_password(tls_etcd: str, pki: Pki, tmp_path: Path) -> None:
    """open_kv connects over TLS with a client cert and a password; bad credentials fail."""
    password = tmp_path / "password"
    password.write_text("pw\n")
    tls_args = [
        "--etcd",
        tls_etcd,
        "--namespace",
        "/l0gc/tls",
        "--etcd-ca-file",
        str(pki.ca),
        "--etcd-cert-file",
        str(pki.client_cert),
        "--etcd-key-file",
        str(pki.client_key),
    ]
    settings = settings_from(
        [*tls_args, "--etcd-username", "root", "--etcd-password-file", str(password)]
    )
    kv = await open_kv(settings)
    try:
        store = WatermarkStore(kv, settings.namespace)
        assert await store.advance_cluster_epoch() == 1
        assert (await store.register_partition("p")).created_epoch == 1
    finally:
        await kv.close()

    password.write_text("wrong\n")
    wrong = settings_from(
        [*tls_args, "--etcd-username", "root", "--etcd-password-file", str(password)]
    )
    with pytest.raises(EtcdUnavailable, match="authentication failed"):
        await open_kv(wrong)
    no_client_cert = settings_from(["--etcd", tls_etcd, "--etcd-ca-file", str(pki.ca)])
    with pytest.raises(EtcdUnavailable):
        await open_kv(no_client_cert)
