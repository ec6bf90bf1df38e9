"""Errors raised by gcd. One hierarchy; every message names the value and what to do."""

from watermark.errors import ConfigError, L0gcError, StorageError, WatermarkUnavailable

__all__ = ["ConfigError", "L0gcError", "StorageError", "WatermarkUnavailable"]
