"""Command-line options shared by the gcd commands, with env vars and a config file.

Every option is declared once as an `Option` in a table below. `add_options` puts a
table on an argparse parser (default None, so "not given" is visible) and `resolve`
fills in each value, first found wins:

    1. the flag                       --batch-size 500
    2. the environment variable       L0GC_BATCH_SIZE=500
    3. the config file                batch_size = 500     (--config FILE or L0GC_CONFIG)
    4. the option's default

The config file is TOML whose top-level keys are flag names with underscores. A key
that no gcd option knows is an error (a typo must not silently keep a default); a key
of another command's option is ignored, so one file can serve `sweep` and `daemon`.
The etcd options (`watermark.etcd_config`) read their env vars themselves; `resolve`
only fills them from the config file when neither the flag nor the env var is set.

Values are checked when resolved: a bad one raises ConfigError naming the flag, where
the value came from, the value, and what is allowed. Durations accept seconds
("90", 1.5) or a unit suffix ("500ms", "30s", "10m", "2h").
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcd.errors import ConfigError
from gcd.layout import DEFAULT_ROOT, KeyLayout

__all__ = [
    "DAEMON_OPTIONS",
    "LAYOUT_OPTIONS",
    "ROUND_OPTIONS",
    "S3_OPTIONS",
    "SWEEP_OPTIONS",
    "Option",
    "add_config_option",
    "add_options",
    "boolean",
    "duration",
    "integer",
    "load_config",
    "positive_number",
    "resolve",
    "text",
]

Parse = Callable[[object], Any]
_ETCD_KEYS = ("etcd", "namespace", "etcd_ca_file", "etcd_cert_file", "etcd_key_file",
              "etcd_username", "etcd_password_file", "etcd_timeout")  # fmt: skip
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h|d)?")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def duration(value: object) -> float:
    """Seconds from 90, 1.5, "90", "500ms", "30s", "10m", "2h" or "1d"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value).strip())
        if match is None:
            raise ValueError("expected seconds or a number with ms/s/m/h/d, e.g. 30s or 10m")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("expected a non-negative duration")
    return seconds


def integer(minimum: int) -> Parse:
    """A parser of integers >= `minimum`."""

    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected an integer >= {minimum}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"expected an integer >= {minimum}") from None
        if number < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        return number

    return parse


def positive_number(value: object) -> float:
    """A finite number > 0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError("expected a number > 0") from None
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise ValueError("expected a number > 0")
    return number


def boolean(value: object) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")


def text(value: object) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its flag, how to parse it, its default and help text."""

    flag: str
    parse: Parse
    default: Any
    help: str
    metavar: str | None = None
    switch: bool = False  # a flag without a value (store_true)

    @property
    def dest(self) -> str:
        """The argparse attribute and config-file key: "--batch-size" -> "batch_size"."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable: "--batch-size" -> "L0GC_BATCH_SIZE"."""
        return "L0GC_" + self.dest.upper()


S3_OPTIONS: tuple[Option, ...] = (
    Option("--bucket", text, None, "bucket holding the L0 objects (required)", "NAME"),
    Option("--endpoint-url", text, None,
           "S3 endpoint URL for S3-compatible stores (default: AWS for the region)", "URL"),
    Option("--region", text, None, "S3 region (default: from the AWS config chain)", "REGION"),
)  # fmt: skip
LAYOUT_OPTIONS: tuple[Option, ...] = (
    Option("--root", text, DEFAULT_ROOT, f"key root of the L0 objects (default {DEFAULT_ROOT})",
           "PREFIX"),
    Option("--layout", text, "default",
           "named key layout: 'default' = {root}/{prefix:03d}/{epoch:018d}/{name}", "NAME"),
    Option("--key-pattern", text, None,
           "custom layout: regex over the key after {root}/ with a named group 'epoch' "
           "(optional 'prefix', 'name'); overrides --layout", "REGEX"),
    Option("--key-template", text, None,
           "with --key-pattern (required): how the writer formats the key after {root}/, "
           "e.g. '{prefix:03d}/{epoch:018d}/{name}'; a key is deleted only if this gives it "
           "back exactly", "TEMPLATE"),
    Option("--epoch-width", integer(1), None,
           "with --key-pattern: epochs are zero padded to this many digits (enables "
           "skipping ahead in listings); omit when not padded", "DIGITS"),
)  # fmt: skip
ROUND_OPTIONS: tuple[Option, ...] = (
    Option("--safe-epoch", integer(-1), None,
           "operator override of M; still checked against the cluster epoch when etcd is "
           "configured; without etcd, the only source of M", "N"),
    Option("--grace", duration, 600.0,
           "only delete objects whose LastModified is older than this (default 10m)",
           "DURATION"),
    Option("--batch-size", integer(1), 1000, "keys per DeleteObjects request, 1-1000 "
           "(default 1000)", "N"),
    Option("--concurrency", integer(1), 8,
           "DeleteObjects requests in flight at most (default 8; halved on SlowDown)", "N"),
    Option("--list-concurrency", integer(1), 4,
           "listing prefixes listed at once (default 4; 1 lists the root as one stream)", "N"),
    Option("--max-deletes-per-second", positive_number, None,
           "token-bucket limit on deleted keys per second (default: unlimited)", "RATE"),
    Option("--max-deletes", integer(1), None, "delete at most N objects per round", "N"),
    Option("--full-listing", boolean, False, "list every key instead of skipping the rest "
           "of a prefix past M (slower; for comparison and audits)", switch=True),
    Option("--shard-index", integer(0), 0, "this sweeper's shard, 0..shard-count-1", "I"),
    Option("--shard-count", integer(1), 1, "number of sweepers splitting prefixes 000-999",
           "N"),
    Option("--log-level", text, "info", "debug, info, warning or error (default info)",
           "LEVEL"),
)  # fmt: skip
DAEMON_OPTIONS: tuple[Option, ...] = (
    Option("--interval", duration, 10.0, "pause between rounds that made progress "
           "(default 10s)", "DURATION"),
    Option("--idle-interval", duration, 60.0,
           "pause when nothing was deletable, while blocked, or after an error; doubles on "
           "consecutive errors (default 60s)", "DURATION"),
    Option("--max-interval", duration, 600.0,
           "cap of the error backoff (default 10m)", "DURATION"),
    Option("--full-pass-interval", duration, 600.0,
           "list everything at least this often even if M did not move (default 10m)",
           "DURATION"),
    Option("--http-host", text, "0.0.0.0", "address of /metrics /healthz /readyz "  # noqa: S104
           "(default 0.0.0.0)", "HOST"),
    Option("--http-port", integer(0), 9464, "port of /metrics /healthz /readyz "
           "(default 9464; 0 picks a free port)", "PORT"),
    Option("--unready-after", duration, 300.0,
           "/readyz fails when etcd was unreachable this long (default 5m)", "DURATION"),
)  # fmt: skip
SWEEP_OPTIONS: tuple[Option, ...] = (
    Option("--dry-run", boolean, False, "delete nothing; report what would be deleted",
           switch=True),
    Option("--plan-out", text, None, "write the keys selected for deletion as JSON lines "
           "(key, epoch, size, last_modified)", "FILE"),
    Option("--json", boolean, False, "print the round summary as JSON on stdout", switch=True),
    Option("--paused-ok", boolean, False, "exit 0, not 3, when GC is paused (`gcd pause`); "
           "every other block still exits 3 (for scheduled runs: a pause is no failure)",
           switch=True),
)  # fmt: skip
_TABLES = (S3_OPTIONS, LAYOUT_OPTIONS, ROUND_OPTIONS, DAEMON_OPTIONS, SWEEP_OPTIONS)
# Keys of the Spark commands (gcd/cli/spark.py, kept there so `gcd sweep` never imports
# the Spark modules): one config file may serve every gcd command.
SPARK_ONLY_KEYS = frozenset({
    "inventory", "inventory_root", "list", "list_tasks", "output", "decisions_uri",
    "master", "delete_concurrency", "price_per_gb_month",
})  # fmt: skip
_UNIVERSE = {o.dest for table in _TABLES for o in table} | set(_ETCD_KEYS) | SPARK_ONLY_KEYS


def layout_from_args(args: argparse.Namespace) -> KeyLayout:
    """The key layout chosen by --layout, --key-pattern, --key-template, --root, --epoch-width."""
    if args.layout != "default" and args.key_pattern is None:
        spec = args.layout
    else:
        spec = args.key_pattern if args.key_pattern is not None else "default"
    return KeyLayout.from_spec(spec, args.root, epoch_width=args.epoch_width,
                               template=args.key_template)  # fmt: skip


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """Add --config FILE (env L0GC_CONFIG)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of option values, keys = flag names with underscores "
        "(env L0GC_CONFIG); flags and env vars win over it",
    )


def add_options(
    parser: argparse.ArgumentParser, options: Iterable[Option], title: str | None = None
) -> None:
    """Add `options` to `parser` (in a group named `title`), each mirrored by its env var."""
    group = parser.add_argument_group(title) if title else parser
    for option in options:
        text_help = (
            f"{option.help[:-1]}; env {option.env})"
            if option.help.endswith(")")
            else f"{option.help} (env {option.env})"
        )
        if option.switch:
            group.add_argument(option.flag, action="store_true", default=None, help=text_help)
        else:
            group.add_argument(option.flag, metavar=option.metavar, default=None, help=text_help)


def load_config(path: str | None, known: Iterable[str] = ()) -> dict[str, Any]:
    """The config file's keys; ConfigError when unreadable, not TOML, or a key is unknown."""
    if path is None:
        return {}
    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path!r} cannot be read ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML ({exc}); fix it") from exc
    universe = _UNIVERSE | set(known)
    for key in data:
        if key not in universe:
            msg = (
                f"config file {path!r}: unknown key {key!r}; keys are flag names with "
                "underscores, e.g. batch_size = 500; remove it or fix the spelling"
            )
            raise ConfigError(msg)
    return data


def resolve(
    ns: argparse.Namespace,
    options: Iterable[Option],
    *,
    environ: Mapping[str, str] | None = None,
    extra_known: Iterable[str] = (),
) -> None:
    """Replace each option's value in `ns` by flag > env > config > default, validated."""
    env = os.environ if environ is None else environ
    options = tuple(options)
    config_path = getattr(ns, "config", None) or env.get("L0GC_CONFIG") or None
    config = load_config(config_path, {o.dest for o in options} | set(extra_known))
    for option in options:
        raw: object = getattr(ns, option.dest, None)
        source = f"flag {option.flag}"
        if raw is None and env.get(option.env) not in (None, ""):
            raw, source = env[option.env], f"env {option.env}"
        if raw is None and option.dest in config:
            raw, source = config[option.dest], f"config key {option.dest} in {config_path}"
        if raw is None:
            setattr(ns, option.dest, option.default)
            continue
        try:
            setattr(ns, option.dest, option.parse(raw))
        except ValueError as exc:
            raise ConfigError(f"{source}: invalid value {raw!r}: {exc}") from None
    for key in _ETCD_KEYS:
        env_name = "L0GC_" + key.upper()
        if getattr(ns, key, None) is None and not env.get(env_name) and key in config:
            setattr(ns, key, str(config[key]))
