"""Command-line options of every l0gc command (`gcd` and `watermark`), declared once.

Design notes: docs/internals/kernel.md, `l0gc.options`.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar, overload

from l0gc.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "CommandParser",
    "Option",
    "add_config_option",
    "add_options",
    "boolean",
    "choice",
    "config_path",
    "duration",
    "integer",
    "load_config",
    "positive_duration",
    "positive_number",
    "resolve",
    "resolve_values",
    "text",
    "whole_seconds",
]

Parse = Callable[[object], Any]
CONFIG_ENV = "L0GC_CONFIG"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h|d)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_N = TypeVar("_N")


# --- parsers: a value from a flag, env var (str) or config file (TOML) -> the setting ---


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
        raise ValueError("expected a non-negative duration, e.g. 30s or 10m")
    return seconds


def positive_duration(value: object) -> float:
    """A duration > 0 (see `duration`)."""
    seconds = duration(value)
    if seconds <= 0:
        raise ValueError("expected a duration > 0, e.g. 1s or 500ms")
    return seconds


def whole_seconds(minimum: int) -> Parse:
    """A parser of durations that are a whole number of seconds >= `minimum` ("10s" -> 10)."""

    def parse(value: object) -> int:
        seconds = duration(value)
        if not seconds.is_integer() or seconds < minimum:
            raise ValueError(f"expected whole seconds >= {minimum}, e.g. {max(minimum, 10)}s")
        return int(seconds)

    _DURATION_PARSERS.add(parse)
    return parse


def integer(minimum: int, maximum: int | None = None) -> Parse:
    """A parser of integers >= `minimum` (and <= `maximum`, if given)."""
    allowed = (
        f"an integer >= {minimum}"
        if maximum is None
        else (f"an integer from {minimum} to {maximum}")
    )

    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected {allowed}")
        if isinstance(value, str) and not _INTEGER.fullmatch(value.strip()):
            raise ValueError(f"expected {allowed}")
        number = int(value)
        if number == 0 and isinstance(value, str) and value.strip().startswith("-"):
            raise ValueError(f"expected {allowed}; write 0, not -0")
        if number < minimum or (maximum is not None and number > maximum):
            raise ValueError(f"expected {allowed}")
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
    word = str(value).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("expected true or false (1/0, yes/no, on/off)")


def text(value: object) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


def choice(*choices: str) -> Parse:
    """A parser of one of `choices` (case-insensitive; returned in lower case)."""

    def parse(value: object) -> str:
        word = str(value).strip().lower() if isinstance(value, str) else None
        if word not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return word

    parse.choices = choices  # type: ignore[attr-defined]  # for shell completion
    return parse


_DURATION_PARSERS: set[Parse] = {duration, positive_duration}


# --- options ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its flag, how to parse it, its default and help text."""

    flag: str
    parse: Parse
    default: Any
    help: str
    metavar: str | None = None
    switch: bool = False  # a flag without a value (store_true); env/config take true/false
    values: tuple[str, ...] = ()
    """The words the value may be, for shell completion (`choice` parsers name their own)."""

    @property
    def completions(self) -> tuple[str, ...]:
        """What `gcd completion` offers after the flag (empty: file names)."""
        return self.values or tuple(getattr(self.parse, "choices", ()))

    @property
    def dest(self) -> str:
        """The argparse attribute and config-file key: "--batch-size" -> "batch_size"."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable: "--batch-size" -> "L0GC_BATCH_SIZE"."""
        return "L0GC_" + self.dest.upper()

    @property
    def help_text(self) -> str:
        """The help shown by --help: the help, its env var and its default (unless the
        help already names it, or says the option is required; a switch is off)."""
        said = "default" in self.help or "required" in self.help
        notes = [] if self.switch or said else [f"default {self.shown_default}"]
        notes.append(f"env {self.env}")
        if self.help.endswith(")"):
            return f"{self.help[:-1]}; {'; '.join(notes)})"
        return f"{self.help} ({'; '.join(notes)})"

    @property
    def shown_default(self) -> str:
        """The default as an operator would write it: 10m, 500ms, 8, none."""
        value = self.default
        if value is None:
            return "none"
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.parse in _DURATION_PARSERS and isinstance(value, int | float):
            return _human_seconds(float(value))
        return str(value)


def _human_seconds(seconds: float) -> str:
    for unit, factor in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= factor and (seconds / factor).is_integer():
            return f"{int(seconds / factor)}{unit}"
    if 0 < seconds < 1 and round(seconds * 1000, 6).is_integer():
        return f"{round(seconds * 1000)}ms"
    return f"{seconds:g}s"


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """Add --config FILE (env L0GC_CONFIG)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of option values, keys = flag names with underscores "
        f"(env {CONFIG_ENV}); flags and env vars win over it",
    )


def add_options(
    parser: argparse.ArgumentParser,
    options: Iterable[Option],
    title: str | None = None,
    *,
    hidden: Collection[str] = (),
) -> None:
    """Add `options` to `parser` (in a group named `title`), each mirrored by its env var;
    a `CommandParser` lists them in `.options` (what `resolve` needs for that command).
    The flags in `hidden` are accepted (a shared config file or environment) but not
    listed by --help: they mean nothing to this command."""
    group = parser.add_argument_group(title) if title else parser
    for option in options:
        if isinstance(parser, CommandParser):
            parser.options.append(option)
        text = argparse.SUPPRESS if option.flag in hidden else option.help_text
        if option.switch:
            group.add_argument(option.flag, action="store_true", default=None, help=text)
        else:
            action = group.add_argument(
                option.flag, metavar=option.metavar, default=None, help=text
            )
            action.completions = option.completions  # type: ignore[attr-defined]


# --- resolution ---------------------------------------------------------------------------


def config_path(ns: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The config file named by --config, else by L0GC_CONFIG; None when neither."""
    return getattr(ns, "config", None) or environ.get(CONFIG_ENV) or None


def load_config(
    path: str | None, known: Iterable[str] = (), *, strict: bool = True
) -> dict[str, Any]:
    """The config file's keys; ConfigError when unreadable, not TOML, or (`strict`) a key
    is not in `known`."""
    if path is None:
        return {}
    import tomllib  # noqa: PLC0415 - only with a config file

    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path!r} cannot be read ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML ({exc}); fix it") from exc
    if strict:
        universe = sorted(set(known))
        for key in data:
            if key not in universe:
                close = difflib.get_close_matches(key, universe, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                msg = (
                    f"config file {path!r}: unknown key {key!r}{hint}; keys are flag names with "
                    'underscores, e.g. tick_interval = "10s" for --tick-interval; remove it '
                    "or fix the spelling"
                )
                raise ConfigError(msg)
    return data


def resolve_values(
    ns: argparse.Namespace,
    options: Iterable[Option],
    *,
    environ: Mapping[str, str],
    config: Mapping[str, Any],
    path: str | None = None,
) -> dict[str, Any]:
    """Each option's value by flag > env > config > default, parsed; ConfigError names the
    source of a bad value (`path` is the config file, for the message)."""
    values: dict[str, Any] = {}
    for option in options:
        raw: object = getattr(ns, option.dest, None)
        source = f"flag {option.flag}"
        if raw is None and environ.get(option.env) not in (None, ""):
            raw, source = environ[option.env], f"env {option.env}"
        if raw is None and option.dest in config:
            raw, source = config[option.dest], f"config key {option.dest} in {path}"
        if raw is None:
            values[option.dest] = option.default
            continue
        try:
            values[option.dest] = option.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: invalid value {raw!r}: {exc}") from None
    return values


def resolve(
    ns: argparse.Namespace,
    options: Iterable[Option],
    *,
    environ: Mapping[str, str] | None = None,
    known: Iterable[str] = (),
) -> None:
    """Replace each option's value in `ns` by flag > env > config > default, validated.

    The config file may hold the keys of `options` and `known` (other commands' keys,
    ignored here); any other key is an error.
    """
    env = os.environ if environ is None else environ
    options = tuple(options)
    path = config_path(ns, env)
    config = load_config(path, {o.dest for o in options} | set(known))
    values = resolve_values(ns, options, environ=env, config=config, path=path)
    for dest, value in values.items():
        setattr(ns, dest, value)


# --- the parser ---------------------------------------------------------------------------


class CommandParser(argparse.ArgumentParser):
    """argparse for l0gc commands: no abbreviations, two-line usage errors with a hint.

    A flag the command does not know ends the parse with exit 2 and

        watermark serve: unknown option --tick-intervall; did you mean --tick-interval?
        usage: watermark serve [options]; `watermark serve --help` lists them

    Other usage errors (a missing argument, an unknown subcommand) print the same two
    lines with argparse's message. Subcommand parsers made by `add_subparsers` are
    CommandParsers too. `options` lists the `Option`s `add_options` put on the parser, so
    a caller can resolve exactly what the command declares.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.options: list[Option] = []  # every Option `add_options` put on this parser

    def short_usage(self) -> str:
        """One line: the program, [options], the positional arguments."""
        words = [self.prog, "[options]"]
        # argparse keeps its actions in `_actions`; it has no public accessor.
        for action in self._actions:
            if action.option_strings:
                continue
            if isinstance(action, argparse._SubParsersAction):
                words.append(f"{action.metavar or 'COMMAND'} ...")
            else:
                name = str(action.metavar or action.dest)
                words.append(f"{name}..." if action.nargs in ("+", "*") else name)
        return f"usage: {' '.join(words)}; `{self.prog} --help` lists them\n"

    def error(self, message: str) -> NoReturn:
        """Print `prog: message` and the short usage on stderr; exit 2."""
        self.exit(2, f"{self.prog}: {message}\n{self.short_usage()}")

    def unknown_option(self, extras: Sequence[str]) -> NoReturn:
        """Refuse arguments this parser does not take, naming the closest known flag."""
        flags = [a for a in extras if a.startswith("-")]
        if not flags:
            self.error(f"unexpected argument {extras[0]!r}")
        given = flags[0].split("=", 1)[0]
        # argparse's table of option strings; it has no public accessor.
        known = sorted(s for s in self._option_string_actions if s.startswith("--"))
        # An abbreviation names what it abbreviates; a typo, the closest flag.
        close = [flag for flag in known if flag.startswith(given) and given != "--"][:3]
        close = close or difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        self.error(f"unknown option {given}{hint}")

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(
        self, args: Iterable[str] | None, namespace: _N
    ) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        """argparse's, but a parser without subcommands refuses what it does not know."""
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # set by add_subparsers
            self.unknown_option(extras)
        return ns, extras

    @overload
    def parse_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...
    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        """Parse everything; an argument no parser takes is a usage error (exit 2)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unknown_option(extras)
        return ns
