"""The value parsers `diskless serve` settings share (settings.py and its companions for the
cleaner and security settings), and the error they raise, reported with the setting's source."""

from __future__ import annotations

from typing import Any


class SettingsError(ValueError):
    pass


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"expected true or false, got {value!r}")


def integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SettingsError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(value.strip())
    except ValueError:
        raise SettingsError(f"expected an integer, got {value!r}") from None


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SettingsError(f"expected a number, got {value!r}")
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise SettingsError(f"expected a number, got {value!r}") from None
