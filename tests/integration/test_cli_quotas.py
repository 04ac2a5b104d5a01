"""`diskless quotas describe|alter` as users run it, in a subprocess, against a real broker:
entities of each kind set and described with filters, keys deleted, --validate-only changing
nothing, and refusals (the broker's and the arguments') as one line on stderr with exit 1 or
2. Every broker is fresh, so a describe of everything is exact. No IP default and no low IP
rate for 127.0.0.1: the broker would throttle the tests' own connections."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diskless.client.admin_quotas import QUOTA_KEYS


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


def ok(*args: str) -> str:
    done = diskless(*args)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout


def refused(code: int, *args: str) -> str:
    done = diskless(*args)
    assert (done.returncode, done.stdout) == (code, ""), done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_help_explains_each_option_and_key() -> None:
    for action in ("describe", "alter"):
        text = ok("quotas", action, "--help")
        for key in QUOTA_KEYS:
            assert f"\n  {key} " in text
        for flag in ("--user", "--user-defaults", "--client-id", "--client-defaults", "--ip", "--ip-defaults", "--bootstrap-server"):
            assert f"  {flag} " in text
    alter = ok("quotas", "alter", "--help")
    assert "bytes per second the entity's clients may produce to a broker" in alter
    assert "connections a broker accepts per second from the address (ip)" in alter
    assert "kafka-configs.sh" in alter
    for flag in ("--add", "--delete", "--validate-only"):
        assert f"  {flag} " in alter
    assert "  --strict " in ok("quotas", "describe", "--help")


def test_entities_are_set_described_with_filters_and_deleted(broker) -> None:
    b = ("-b", broker.bootstrap)
    assert ok("quotas", "describe", *b) == ""
    assert ok("quotas", "alter", "--client-id", "app", "--add", "producer_byte_rate=1048576", *b) == (
        "altered client-id=app: set producer_byte_rate=1048576\n")
    assert ok("quotas", "alter", "--user", "alice", "--client-defaults",
              "--add", "producer_byte_rate=1048576,consumer_byte_rate=2097152", *b) == (
        "altered user=alice,client-id=<default>: set producer_byte_rate=1048576, consumer_byte_rate=2097152\n")  # fmt: skip
    assert ok("quotas", "alter", "--user", "alice", "--add", "request_percentage=12.5", "--add", "controller_mutation_rate=5", *b) == (
        "altered user=alice: set request_percentage=12.5, controller_mutation_rate=5\n")
    assert ok("quotas", "alter", "--client-defaults", "--add", "consumer_byte_rate=4096", *b) == (
        "altered client-id=<default>: set consumer_byte_rate=4096\n")
    assert ok("quotas", "alter", "--ip", "192.0.2.7", "--add", "connection_creation_rate=100", *b) == (
        "altered ip=192.0.2.7: set connection_creation_rate=100\n")

    everything = [
        "user=alice  request_percentage=12.5, controller_mutation_rate=5",
        "user=alice,client-id=<default>  producer_byte_rate=1048576, consumer_byte_rate=2097152",
        "client-id=<default>  consumer_byte_rate=4096",
        "client-id=app  producer_byte_rate=1048576",
        "ip=192.0.2.7  connection_creation_rate=100",
    ]
    assert ok("quotas", "describe", *b).splitlines() == everything
    assert ok("quotas", "describe", "--user", "alice", *b).splitlines() == everything[:2]
    assert ok("quotas", "describe", "--user", "alice", "--strict", *b).splitlines() == everything[:1]
    assert ok("quotas", "describe", "--user", "alice", "--client-defaults", *b).splitlines() == everything[1:2]
    assert ok("quotas", "describe", "--client-defaults", *b).splitlines() == everything[1:3]
    assert ok("quotas", "describe", "--client-defaults", "--strict", *b).splitlines() == everything[2:3]
    assert ok("quotas", "describe", "--client-id", *b).splitlines() == everything[1:4]
    assert ok("quotas", "describe", "--client-id", "app", *b).splitlines() == everything[3:4]
    assert ok("quotas", "describe", "--ip", *b).splitlines() == everything[4:]
    assert ok("quotas", "describe", "--user", "bob", *b) == ""
    assert ok("quotas", "describe", "--ip-defaults", *b) == ""

    # --validate-only: the broker checks, nothing changes
    assert ok("quotas", "alter", "--user", "bob", "--add", "producer_byte_rate=1", "--validate-only", *b) == (
        "validated (--validate-only, nothing changed) user=bob: set producer_byte_rate=1\n")
    assert ok("quotas", "alter", "--user", "alice", "--delete", "request_percentage", "--validate-only", *b) == (
        "validated (--validate-only, nothing changed) user=alice: deleted request_percentage\n")
    assert ok("quotas", "describe", *b).splitlines() == everything

    # Deleting one key keeps the other; deleting the last removes the entity; a change and a
    # deletion in one alteration.
    assert ok("quotas", "alter", "--user", "alice", "--delete", "request_percentage", *b) == (
        "altered user=alice: deleted request_percentage\n")
    assert ok("quotas", "alter", "--client-id", "app", "--delete", "producer_byte_rate", *b) == (
        "altered client-id=app: deleted producer_byte_rate\n")
    assert ok("quotas", "alter", "--user", "alice", "--client-defaults", "--add", "producer_byte_rate=2048",
              "--delete", "consumer_byte_rate", *b) == (
        "altered user=alice,client-id=<default>: set producer_byte_rate=2048; deleted consumer_byte_rate\n")  # fmt: skip
    assert ok("quotas", "describe", *b).splitlines() == [
        "user=alice  controller_mutation_rate=5",
        "user=alice,client-id=<default>  producer_byte_rate=2048",
        "client-id=<default>  consumer_byte_rate=4096",
        "ip=192.0.2.7  connection_creation_rate=100",
    ]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (("alter", "--user", "alice", "--add", "producer_byte_rate=1.5"), 1,
         "INVALID_REQUEST (entity=user=alice): Configuration producer_byte_rate must be a Long value"),
        (("alter", "--user", "alice", "--add", "consumer_byte_rate=-1"), 1,
         "INVALID_REQUEST (entity=user=alice): Configuration consumer_byte_rate must be greater than 0, not -1"),
        (("alter", "--client-id", "app", "--add", "connection_creation_rate=10"), 1,
         "INVALID_REQUEST (entity=client-id=app): Invalid configuration key connection_creation_rate"),
        (("alter", "--ip", "192.0.2.7", "--add", "producer_byte_rate=10"), 1,
         "INVALID_REQUEST (entity=ip=192.0.2.7): Invalid configuration key producer_byte_rate"),
        (("alter", "--ip", "not-an-address", "--add", "connection_creation_rate=10"), 1,
         "INVALID_REQUEST (entity=ip=not-an-address): not-an-address is not a valid IP address"),
        (("alter", "--user", "alice", "--ip", "192.0.2.7", "--add", "producer_byte_rate=10"), 1,
         "INVALID_REQUEST (entity=user=alice,ip=192.0.2.7): Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (("describe", "--user", "--ip"), 1,
         "INVALID_REQUEST: Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component."),
        (("alter", "--user", "alice", "--add", "producer_byte_rate=fast"), 2,
         "Cannot parse quota configuration value for producer_byte_rate: fast"),
        (("alter", "--user", "alice", "--add", "producer_byte_rate"), 2, "--add takes KEY=VALUE[,KEY=VALUE...], not 'producer_byte_rate'"),
        (("alter", "--user", "alice", "--add", "producer_byte_rate=1", "--delete", "producer_byte_rate"), 2,
         "producer_byte_rate is both added and deleted"),
        (("alter", "--user", "alice"), 2, "give --add KEY=VALUE,... and/or --delete KEY,..."),
        (("alter", "--add", "producer_byte_rate=1"), 2,
         "name the entity: --user, --client-id or --ip (or --user-defaults, --client-defaults, --ip-defaults)"),
    ],
)  # fmt: skip
def test_refusals_are_one_line_with_their_exit_code(shared_broker, args, code, message) -> None:
    # shared_broker: no test of this module leaves an entity on it
    assert refused(code, "quotas", *args, "-b", shared_broker.bootstrap) == f"diskless quotas {args[0]}: {message}\n"
    assert ok("quotas", "describe", "-b", shared_broker.bootstrap) == ""


def test_a_refused_entity_among_flags_is_argparse_usage() -> None:
    done = diskless("quotas", "alter", "--user", "alice", "--user-defaults", "--add", "producer_byte_rate=1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == "diskless quotas alter: error: argument --user-defaults: not allowed with argument --user"
