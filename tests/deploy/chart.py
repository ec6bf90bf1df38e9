"""Helpers for the chart tests: render helm/l0gc, and start its containers' CLIs dry.

`render(env, *args)` runs `helm template` and returns the objects. `parse_container`
takes one rendered container and does what the kubelet and the CLI would do before
the CLI first touches the network: builds the environment (ConfigMaps, literal env,
downward API, Secret references), mounts the Secret volumes as files in a temp dir,
expands `$(VAR)` in the arguments, then runs the real parsers and settings resolution
of `gcd` or `watermark` on them. A value the CLI would refuse fails here, naming the
container, instead of crash-looping a pod.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import functools
import importlib
import io
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "l0gc"
HELM = REPO / ".tools" / "helm" / "helm"
KUBE_VERSION = "1.30.0"
RELEASE = "l0gc"
NAMESPACE = "gc"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "CronJob", "Job", "Pod")
L0GC_PROGRAMS = ("gcd", "watermark")
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")

Obj = dict[str, Any]


def helm_env(home: Path) -> dict[str, str]:
    """The environment for helm, its cache/config/data under `home`; fails without helm."""
    if not HELM.is_file():
        pytest.fail(f"helm is not installed at {HELM}: run scripts/bootstrap.sh (it installs helm)")
    env = dict(os.environ)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(home / var.lower())
    return env


def helm(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run the repo's helm binary."""
    return subprocess.run(
        [str(HELM), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def objects_of(manifest: str) -> list[Obj]:
    """The objects of a rendered manifest stream."""
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def pod_spec(workload: Obj) -> Obj:
    """The pod spec of a Deployment, StatefulSet, Job, CronJob or Pod (the helm test)."""
    if workload["kind"] == "Pod":
        return dict(workload["spec"])
    if workload["kind"] == "CronJob":
        return dict(workload["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(workload["spec"]["template"]["spec"])


def containers(objects: list[Obj]) -> list[tuple[Obj, Obj]]:
    """(workload, container) for every l0gc container (`gcd` or `watermark`, not the
    user's sidecars) of every workload."""
    return [
        (workload, container)
        for workload in objects
        if workload["kind"] in WORKLOAD_KINDS
        for container in pod_spec(workload)["containers"]
        if container.get("command", [""])[0] in L0GC_PROGRAMS
    ]


# --- the kubelet's part --------------------------------------------------------------


@functools.cache
def _self_signed() -> tuple[bytes, bytes]:
    """A PEM certificate (its own CA) and its key, so TLS files load like real ones."""
    from cryptography import x509  # noqa: PLC0415 - only chart tests need it
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "l0gc-chart-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _secret_file(objects: list[Obj], secret: str, key: str, path: str) -> bytes:
    """A Secret item's content: the chart's own Secret as rendered, else a stand-in."""
    for obj in objects:
        if obj["kind"] == "Secret" and obj["metadata"]["name"] == secret:
            return base64.b64decode(obj["data"][key])
    cert, private = _self_signed()
    if path.endswith(".crt"):
        return cert
    if path.endswith(".key"):
        return private
    if path == "tokens":
        return b"writer:stand-in-token-0123456789\n"
    return b"stand-in-secret\n"


def _mount_secrets(objects: list[Obj], spec: Obj, container: Obj, root: Path) -> dict[str, str]:
    """Write the container's Secret volumes under `root`; return mountPath -> local path."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounted: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" not in volume:
            continue
        local = root / mount["mountPath"].lstrip("/")
        local.mkdir(parents=True, exist_ok=True)
        secret = volume["secret"]
        for item in secret["items"]:
            content = _secret_file(objects, secret["secretName"], item["key"], item["path"])
            written = local / item["path"]
            written.write_bytes(content)
            # As the kubelet does: the item's mode, else the volume's defaultMode (0644).
            written.chmod(item.get("mode", secret.get("defaultMode", 0o644)))
        mounted[mount["mountPath"]] = str(local)
    return mounted


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion (an unknown variable stays as written)."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _configmap(objects: list[Obj], name: str) -> dict[str, str]:
    found = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    assert len(found) == 1, f"no ConfigMap {name} in the render"
    return dict(found[0].get("data") or {})


def container_env(
    objects: list[Obj], workload: Obj, container: Obj, root: Path
) -> tuple[list[str], dict[str, str]]:
    """(command + args, environment) as the container would see them, Secrets under `root`."""
    spec = pod_spec(workload)
    mounted = _mount_secrets(objects, spec, container, root)

    def local(value: str) -> str:
        for mount_path, path in mounted.items():
            if value == mount_path or value.startswith(mount_path + "/"):
                return path + value[len(mount_path) :]
        return value

    env: dict[str, str] = {}
    own = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    for source in container.get("envFrom", []):
        name = source.get("configMapRef", {}).get("name")
        if name in own:  # the user's extraEnvFrom sources are not in the render
            env.update(_configmap(objects, name))
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = local(_expand(entry["value"], env))
        elif entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[entry["name"]] = "10.1.2.3"  # a publisher replica's address
        elif entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[entry["name"]] = workload["metadata"]["name"] + "-1"  # a StatefulSet's 2nd pod
        elif "fieldRef" in entry["valueFrom"]:
            env[entry["name"]] = "0"  # pod index / completion index of the first pod
        else:
            env[entry["name"]] = "from-secret"
    argv = [local(_expand(arg, env)) for arg in [*container["command"], *container["args"]]]
    return argv, env


# --- the CLI's part ----------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """What a container's CLI made of its command line and environment."""

    program: str
    command: str
    args: argparse.Namespace
    etcd: Any  # l0gc.etcd.settings.EtcdSettings, or None for gcd --safe-epoch alone
    partitions: list[str]


def _parse(parser: argparse.ArgumentParser, argv: list[str], where: str) -> argparse.Namespace:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: the CLI refuses its arguments {argv}: {stderr.getvalue().strip()}")


def _parse_gcd(argv: list[str], where: str) -> Parsed:
    from gcd.cli.main import SUBCOMMANDS  # noqa: PLC0415 - imported per CLI
    from gcd.cli.options import resolve  # noqa: PLC0415
    from gcd.cli.sweep import round_setup  # noqa: PLC0415
    from l0gc.etcd.settings import EtcdSettings  # noqa: PLC0415
    from l0gc.options import CommandParser  # noqa: PLC0415

    # What gcd.cli.main and the subcommand's run() do before any I/O: parse, resolve the
    # options the command declared (flag > env > config > default), build its settings.
    command = argv[0]
    checked = ("daemon", "sweep", "status")
    assert command in checked, f"{where}: no parse-only check for `gcd {command}`"
    module = importlib.import_module(SUBCOMMANDS[command].module)
    parser = CommandParser(prog=f"gcd {command}")
    module.add_arguments(parser)
    ns = _parse(parser, argv[1:], where)
    resolve(ns, parser.options)
    if command == "status":  # what `gcd status` builds before it reads etcd
        return Parsed("gcd", command, ns, EtcdSettings.from_args(ns), [])
    return Parsed("gcd", command, ns, round_setup(ns).etcd, [])


def _parse_watermark(argv: list[str], where: str) -> Parsed:
    from watermark.cli import main as cli  # noqa: PLC0415 - imported per CLI

    # watermark's own parse-only entry point: options, etcd settings, HTTP security files.
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            invocation = cli.parse(argv)
    except SystemExit:
        pytest.fail(f"{where}: the CLI refuses its arguments {argv}: {stderr.getvalue().strip()}")
    partitions = list(invocation.args.partitions) if invocation.command == "serve" else []
    return Parsed("watermark", invocation.command, invocation.args, invocation.etcd, partitions)


def parse_container(
    objects: list[Obj], workload: Obj, container: Obj, root: Path, monkeypatch: pytest.MonkeyPatch
) -> Parsed:
    """Run the container's CLI parsers on its rendered command line and environment."""
    where = f"{workload['kind']} {workload['metadata']['name']} container {container['name']}"
    argv, env = container_env(objects, workload, container, root)
    for name in list(os.environ):
        if name.startswith(("L0GC_", "AWS_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(root))
    program, rest = Path(argv[0]).name, argv[1:]
    from l0gc.errors import L0gcError  # noqa: PLC0415

    try:
        if program == "gcd":
            return _parse_gcd(rest, where)
        if program == "watermark":
            return _parse_watermark(rest, where)
    except L0gcError as exc:
        pytest.fail(f"{where}: the CLI refuses its settings: {exc}")
    pytest.fail(f"{where}: unknown program {argv[0]!r}")
