"""One config file may serve every gcd command: no command refuses another's keys."""

from __future__ import annotations

from pathlib import Path

from gcd.cli.explain import EXPLAIN_OPTIONS
from gcd.cli.journal import _READ_OPTIONS
from gcd.cli.namespace import OPTIONS as NAMESPACE_OPTIONS
from gcd.cli.options import _UNIVERSE, OTHER_COMMAND_KEYS
from gcd.cli.pause import PAUSE_OPTIONS, RESUME_OPTIONS
from gcd.cli.restore import RESTORE_OPTIONS
from gcd.cli.status import STATUS_OPTIONS
from gcd.cli.storage import AZURE_OPTIONS
from tests.clirun import run_cli


def test_every_command_option_is_a_known_config_key() -> None:
    """The keys listed for the commands outside gcd/cli/options.py are exactly theirs."""
    tables = (
        _READ_OPTIONS,
        NAMESPACE_OPTIONS,
        PAUSE_OPTIONS,
        RESUME_OPTIONS,
        STATUS_OPTIONS,
        AZURE_OPTIONS,
        RESTORE_OPTIONS,
        EXPLAIN_OPTIONS,
    )
    dests = {option.dest for table in tables for option in table}
    repeatable = {"partition"}  # `gcd restore --partition` (append); a config key all the same
    assert dests - _UNIVERSE == set()
    assert dests | repeatable >= OTHER_COMMAND_KEYS


def test_status_takes_the_config_file_of_an_azure_daemon(tmp_path: Path) -> None:
    """`gcd status --config` with the Azure keys a daemon's file holds: it gets as far as
    etcd (here a closed port: exit 1, an etcd error), not a refusal of the file (exit 2)."""
    config = tmp_path / "gcd.toml"
    config.write_text(
        'storage = "azure"\naccount_url = "https://a.blob.core.windows.net"\n'
        'container = "l0gc"\netcd = "127.0.0.1:1"\nnamespace = "/l0gc/x"\n'
        'grace = "10m"\n'
    )
    done = run_cli("gcd", "status", "--config", str(config), "--etcd-timeout", "1")
    assert "unknown key" not in done.stderr, done.stderr
    assert done.returncode != 2, done.stderr
