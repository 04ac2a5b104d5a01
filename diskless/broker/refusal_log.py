"""Which refusals of the TCP shell are logged (a rate-limited log line per kind of reason),
and how a refused request is named in that line. Sans-IO."""

from __future__ import annotations

import re
import struct


class RefusalLog:
    """Which refusals to log: at most one line per kind of reason per `interval_ms`.

    Sans-IO: the caller passes `now_ms`. The kind of a reason is its text with the numbers taken
    out ("array X claims 7 entries" and "... 9 entries" are one kind), so that a peer cannot
    defeat the limit by varying a length. Kinds are kept at most `max_kinds` at a time (the
    oldest is forgotten first): memory stays bounded whatever peers send.
    """

    _NUMBERS = re.compile(r"-?\d+")

    def __init__(self, interval_ms: int = 1000, max_kinds: int = 1024) -> None:
        self.interval_ms = interval_ms
        self.max_kinds = max_kinds
        self._kinds: dict[str, list[int]] = {}  # kind: [last logged at ms, suppressed since]

    def admit(self, reason: str, now_ms: int) -> int | None:
        """None to suppress this line; else how many lines of its kind were suppressed before it."""
        kind = self._NUMBERS.sub("N", reason)
        entry = self._kinds.get(kind)
        if entry is not None and now_ms - entry[0] < self.interval_ms:
            entry[1] += 1
            return None
        suppressed = 0 if entry is None else entry[1]
        self._kinds.pop(kind, None)
        if len(self._kinds) >= self.max_kinds:
            del self._kinds[next(iter(self._kinds))]
        self._kinds[kind] = [now_ms, 0]
        return suppressed


API_KEY_AND_VERSION = struct.Struct(">hh")


def describe_api(exc: BaseException, frame_start: bytes | None) -> str:
    """'api key K version V' from the error, or from the first bytes of the frame; '' if unknown."""
    api_key, api_version = getattr(exc, "api_key", None), getattr(exc, "api_version", None)
    if frame_start is not None and len(frame_start) >= API_KEY_AND_VERSION.size:
        api_key, api_version = API_KEY_AND_VERSION.unpack_from(frame_start, 0)
    if api_key is None:
        return ""
    return f" (api key {api_key} version {'?' if api_version is None else api_version})"
