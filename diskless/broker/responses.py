"""Building kio response entities for any version of an API.

Each version of a Kafka message is its own kio class with only that version's fields. Handlers
pass every field they know; `make` keeps the ones the version has.
"""

from __future__ import annotations

import datetime
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

NO_THROTTLE = datetime.timedelta(0)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(cls.__dataclass_fields__)


def make(cls: type, **values: Any) -> Any:
    names = _field_names(cls)
    return cls(**{name: value for name, value in values.items() if name in names})


_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def timestamp(ms: int) -> datetime.datetime | None:
    """A Kafka int64 millisecond timestamp as kio wants it (-1 becomes None, i.e. -1 again)."""
    return None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)
