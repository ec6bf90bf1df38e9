"""The Spark commands share the config file of the other gcd commands."""

from __future__ import annotations

from gcd.cli.options import _UNIVERSE, SPARK_ONLY_KEYS
from gcd.cli.spark import CONF_OPTION, SPARK_OPTIONS


def test_every_spark_option_is_a_known_config_key() -> None:
    """A config file with Spark keys is not rejected by `gcd sweep` as unknown keys."""
    spark_dests = {option.dest for option in (*SPARK_OPTIONS, CONF_OPTION)}
    assert spark_dests - _UNIVERSE == set()
    assert spark_dests >= SPARK_ONLY_KEYS
