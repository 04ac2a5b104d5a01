"""`diskless transactions find-hanging`'s argument checks: one line on stderr and exit 2,
before any connection (no broker runs here: the bootstrap address is never reached)."""

from __future__ import annotations

import pytest

from diskless.cli.main import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --topic or --broker-id to limit the search"),
        (("--partition", "0"), "give --topic or --broker-id to limit the search"),
        (("--broker-id", "1", "--partition", "0"), "--partition needs --topic"),
        (("--topic", "t", "--max-transaction-timeout", "-1"), "--max-transaction-timeout must be >= 0"),
    ],
)
def test_find_hanging_refuses_a_search_without_scope(args: tuple[str, ...], message: str, capsys) -> None:
    assert main(["transactions", "find-hanging", *args, "-b", "127.0.0.1:1"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"diskless transactions find-hanging: {message}\n")
