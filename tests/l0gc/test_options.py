"""l0gc.options: the one option system of `gcd` and `watermark`."""

from __future__ import annotations

from pathlib import Path

import pytest

from l0gc.errors import ConfigError
from l0gc.options import (
    CommandParser,
    Option,
    add_config_option,
    add_options,
    boolean,
    choice,
    duration,
    integer,
    load_config,
    positive_duration,
    resolve,
    text,
    whole_seconds,
)

TABLE = (
    Option("--tick-interval", duration, 0.0, "advance the epoch this often", "DURATION"),
    Option("--publish-interval", positive_duration, 1.0, "publish this often", "DURATION"),
    Option("--batch-size", integer(1, 1000), 1000, "keys per request", "N"),
    Option("--owner-id", text, None, "owner id (default hostname-pid)", "ID"),
    Option("--register", boolean, False, "register first", switch=True),
)


def parser_with(table: tuple[Option, ...] = TABLE) -> CommandParser:
    """A parser named `tool run` with --config and `table`."""
    parser = CommandParser(prog="tool run")
    add_config_option(parser)
    add_options(parser, table, "run")
    return parser


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("10s", 10.0),
        ("1.5", 1.5),
        ("500ms", 0.5),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        (" 3 s ", 3.0),
        (90, 90.0),
        (0.25, 0.25),
        ("0", 0.0),
    ],
)
def test_durations_take_seconds_or_a_unit(given: object, seconds: float) -> None:
    """Plain seconds and ms/s/m/h/d suffixes give seconds."""
    assert duration(given) == seconds


@pytest.mark.parametrize(
    "bad", ["abc", "-1", "1y", "10 sec", "nan", "inf", "1e3", "", True, "1" * 400]
)
def test_bad_durations_are_refused(bad: object) -> None:
    """Anything but a finite non-negative number with an optional unit is refused."""
    with pytest.raises(ValueError, match="expected"):
        duration(bad)


def test_positive_duration_and_whole_seconds() -> None:
    """A positive duration refuses 0; whole seconds take units but no fractions."""
    assert positive_duration("500ms") == 0.5
    with pytest.raises(ValueError, match="> 0"):
        positive_duration("0s")
    lease = whole_seconds(1)
    assert lease("10s") == 10
    assert lease("1m") == 60
    for bad in ("1.5", "0", "500ms"):
        with pytest.raises(ValueError, match="whole seconds >= 1"):
            lease(bad)


@pytest.mark.parametrize("bad", ["1_000", "٣", "1.0", "0x10", True, 2.0, "", "1001", "0"])
def test_integers_are_plain_decimal_within_bounds(bad: object) -> None:
    """Only plain ASCII decimal integers within the bounds pass (no 1_000, no other digits)."""
    parse = integer(1, 1000)
    assert parse(" 42 ") == 42
    assert parse(7) == 7
    with pytest.raises(ValueError, match="an integer from 1 to 1000"):
        parse(bad)


def test_choice_and_boolean() -> None:
    """Choices are case-insensitive; booleans take the usual words and nothing else."""
    level = choice("debug", "info")
    assert level("INFO") == "info"
    with pytest.raises(ValueError, match="one of debug, info"):
        level("verbose")
    assert boolean("yes") is True
    assert boolean("Off") is False
    with pytest.raises(ValueError, match="true or false"):
        boolean("maybe")


def test_precedence_is_flag_then_env_then_config_then_default(tmp_path: Path) -> None:
    """Each option takes the flag, else the env var, else the config key, else its default."""
    config = tmp_path / "tool.toml"
    config.write_text('tick_interval = "30s"\npublish_interval = 2\nbatch_size = 10\n')
    ns = parser_with().parse_args(["--config", str(config), "--batch-size", "20"])
    env = {"L0GC_PUBLISH_INTERVAL": "3s", "L0GC_BATCH_SIZE": "30", "L0GC_REGISTER": "true"}
    resolve(ns, TABLE, environ=env)
    assert ns.batch_size == 20  # flag over env and config
    assert ns.publish_interval == 3.0  # env over config
    assert ns.tick_interval == 30.0  # config
    assert ns.owner_id is None  # default
    assert ns.register is True  # a switch from its env var


def test_config_file_from_the_environment_and_empty_env_is_unset(tmp_path: Path) -> None:
    """L0GC_CONFIG names the file when --config is absent; an empty variable is not set."""
    config = tmp_path / "tool.toml"
    config.write_text('tick_interval = "1m"\n')
    ns = parser_with().parse_args([])
    resolve(ns, TABLE, environ={"L0GC_CONFIG": str(config), "L0GC_TICK_INTERVAL": ""})
    assert ns.tick_interval == 60.0


@pytest.mark.parametrize(
    ("argv", "env", "config", "message"),
    [
        (
            ["--tick-interval", "soon"],
            {},
            "",
            "flag --tick-interval: invalid value 'soon': expected seconds or a number with ms",
        ),
        ([], {"L0GC_TICK_INTERVAL": "abc"}, "", "env L0GC_TICK_INTERVAL: invalid value 'abc'"),
        ([], {}, "publish_interval = 0\n", "config key publish_interval in "),
        ([], {"L0GC_BATCH_SIZE": "1001"}, "", "expected an integer from 1 to 1000"),
        ([], {"L0GC_REGISTER": "maybe"}, "", "env L0GC_REGISTER: invalid value 'maybe'"),
    ],
)
def test_a_bad_value_names_its_source_and_the_value(
    argv: list[str], env: dict[str, str], config: str, message: str, tmp_path: Path
) -> None:
    """ConfigError says flag/env var/config key, the value and what is allowed; no code names."""
    path = tmp_path / "tool.toml"
    path.write_text(config)
    ns = parser_with().parse_args(["--config", str(path), *argv])
    with pytest.raises(ConfigError) as info:
        resolve(ns, TABLE, environ=env)
    assert message in str(info.value)
    assert "_positive" not in str(info.value)
    assert "function" not in str(info.value)


def test_config_file_keys_are_checked(tmp_path: Path) -> None:
    """An unknown key is an error with the closest key; keys of other commands are ignored."""
    path = tmp_path / "tool.toml"
    path.write_text("tick_intervall = 5\n")
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'tick_intervall' \(did you mean "
        r"'tick_interval'\?\)",
    ):
        load_config(str(path), {"tick_interval"})
    path.write_text("expected = 5\ntick_interval = 5\n")
    ns = parser_with().parse_args(["--config", str(path)])
    resolve(ns, TABLE, environ={}, known={"expected"})
    assert ns.tick_interval == 5.0
    assert load_config(str(path), strict=False) == {"expected": 5, "tick_interval": 5}
    path.write_text("tick_interval = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(path), {"tick_interval"})
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(str(tmp_path / "missing.toml"))


def test_help_shows_the_env_var_and_the_default() -> None:
    """Help ends with the default (as an operator writes it) and the env var; switches: env."""
    tick, publish, batch, owner, register = (o.help_text for o in TABLE)
    assert tick == "advance the epoch this often (default 0s; env L0GC_TICK_INTERVAL)"
    assert publish == "publish this often (default 1s; env L0GC_PUBLISH_INTERVAL)"
    assert batch == "keys per request (default 1000; env L0GC_BATCH_SIZE)"
    assert owner == "owner id (default hostname-pid; env L0GC_OWNER_ID)"
    assert register == "register first (env L0GC_REGISTER)"
    assert Option("--grace", duration, 600.0, "g").help_text == "g (default 10m; env L0GC_GRACE)"
    assert Option("--x", duration, 0.5, "x").shown_default == "500ms"
    assert Option("--x", text, None, "x").shown_default == "none"


def test_a_mistyped_flag_is_one_line_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown flag exits 2 with one line naming the closest flag, then a short usage."""
    with pytest.raises(SystemExit) as info:
        parser_with().parse_args(["--tick-intervall", "10s"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "tool run: unknown option --tick-intervall; did you mean --tick-interval?",
        "usage: tool run [options]; `tool run --help` lists them",
    ]
    with pytest.raises(SystemExit):
        parser_with().parse_args(["--zzz=1"])
    assert capsys.readouterr().err.splitlines()[0] == "tool run: unknown option --zzz"


def test_abbreviations_are_not_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tick` is not taken for --tick-interval: a later flag could make it ambiguous."""
    with pytest.raises(SystemExit):
        parser_with().parse_args(["--tick", "5"])
    assert "unknown option --tick; did you mean --tick-interval?" in capsys.readouterr().err


def test_subcommand_errors_name_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    """A subcommand's unknown flag or missing argument is reported by that subcommand."""
    parser = CommandParser(prog="tool")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser("show")
    add_options(show, TABLE[:1])
    show.add_argument("name", metavar="NAME")
    assert isinstance(show, CommandParser)
    assert show.options == [TABLE[0]]
    with pytest.raises(SystemExit):
        parser.parse_args(["show", "x", "--tick-intervl", "1"])
    assert capsys.readouterr().err.splitlines()[0] == (
        "tool show: unknown option --tick-intervl; did you mean --tick-interval?"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["show"])
    assert capsys.readouterr().err.splitlines() == [
        "tool show: the following arguments are required: NAME",
        "usage: tool show [options] NAME; `tool show --help` lists them",
    ]
    with pytest.raises(SystemExit):
        parser.parse_args(["show", "x", "y"])
    assert "tool show: unexpected argument 'y'" in capsys.readouterr().err
