"""`diskless quotas describe|alter`: client quotas (KIP-546), as `kafka-configs.sh
--bootstrap-server ... --describe|--alter --entity-type users|clients|ips` shows and sets
them, through the Kafka protocol (DescribeClientQuotas, AlterClientQuotas), so they work
against any broker. `--command-config` takes Kafka client properties for SASL/TLS, as the
other tools.

    describe [--user [U] | --user-defaults] [--client-id [C] | --client-defaults]
             [--ip [IP] | --ip-defaults] [--strict]

prints one line per entity, users first, then client ids, then addresses, a default before
names; its keys in Kafka's order, integral values without a fraction:

    user=alice,client-id=<default>  producer_byte_rate=1048576, consumer_byte_rate=2097152

    alter <entity options> [--add KEY=VALUE,...] [--delete KEY,...] [--validate-only]

prints `altered ENTITY: set KEY=VALUE, ...; deleted KEY, ...` (with --validate-only:
`validated (--validate-only, nothing changed) ENTITY: ...`). Values are parsed here as
numbers; whether a key fits the entity and its value the key is the broker's answer.

Errors are one line on stderr: exit 1 for what the broker answered (INVALID_REQUEST with
Kafka's message, CLUSTER_AUTHORIZATION_FAILED), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from diskless.client import Admin, KafkaError
from diskless.client.admin_quotas import (
    CLIENT_ID,
    IP,
    USER,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
)
from diskless.client.security import SecurityConfigError

from .client_options import add_client_options, bootstrap_servers, client_security

KEYS_HELP = """\
quota keys (Kafka's; each broker enforces them on its own):
  producer_byte_rate        bytes per second the entity's clients may produce to a broker
                            before their responses are delayed (user, client-id)
  consumer_byte_rate        bytes per second of records they may fetch from a broker (user, client-id)
  request_percentage        share of the broker's request handling time they may use, in
                            percent of one I/O thread per quota window (user, client-id)
  controller_mutation_rate  partitions they may create or delete per second (CreateTopics,
                            CreatePartitions, DeleteTopics; KIP-599) (user, client-id)
  connection_creation_rate  connections a broker accepts per second from the address (ip)

entities: --user and/or --client-id (a quota of both applies to that client id of that
user), or --ip alone; the -defaults flags name the default entity (<default>), which applies
to every user, client id or address without a quota of its own. Kafka's kafka-configs.sh
--bootstrap-server reads and writes the same quotas."""

# entity type, its flag, the flag of its default, what a name is
_ENTITY_FLAGS = ((USER, "user", "user-defaults", "a principal's name: alice for User:alice, ANONYMOUS without authentication"),
                 (CLIENT_ID, "client-id", "client-defaults", "the client.id clients send"),
                 (IP, "ip", "ip-defaults", "a client's IPv4 or IPv6 address"))  # fmt: skip
_ANY = object()  # describe's `--user` without a name: any user


def add_commands(commands: Any) -> None:
    quotas = commands.add_parser(
        "quotas", help="describe and alter client quotas (as kafka-configs.sh --entity-type users|clients|ips)",
        description="Client quotas (KIP-546): byte rates, request time, partition mutations and "
        "connection rates per user, client id or address.", epilog=KEYS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    actions = quotas.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe", help="the quotas of the entities that match (no options: every entity)",
        description="Print the quotas of every entity that matches every option given (none: every "
        "entity), one line per entity: users, then client ids, then addresses, defaults first.",
        epilog=KEYS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    alter = actions.add_parser(
        "alter", help="set or delete quotas of one entity",
        description="Set (--add) or delete (--delete) quota keys of one entity: --user and/or "
        "--client-id, or --ip. An entity without keys left is gone.",
        epilog=KEYS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    for entity_type, flag, default_flag, what in _ENTITY_FLAGS:
        chosen = describe.add_mutually_exclusive_group()
        chosen.add_argument(f"--{flag}", nargs="?", const=_ANY, metavar="NAME",
                            help=f"entities with {flag} NAME ({what}); without NAME: with any {flag}, the default included")  # fmt: skip
        chosen.add_argument(f"--{default_flag}", action="store_true", help=f"entities with the default {flag} ({flag}=<default>)")
        chosen = alter.add_mutually_exclusive_group()
        chosen.add_argument(f"--{flag}", metavar="NAME", help=f"{flag} NAME ({what})")
        chosen.add_argument(f"--{default_flag}", action="store_true",
                            help=f"the default {flag} ({flag}=<default>): every {flag} without a quota of its own")  # fmt: skip
    describe.add_argument("--strict", action="store_true",
                          help="only entities of exactly the types named (e.g. --user alice: not alice's client ids)")  # fmt: skip
    alter.add_argument("--add", action="append", default=[], metavar="KEY=VALUE,...",
                       help="set these keys (repeatable; keys below)")  # fmt: skip
    alter.add_argument("--delete", action="append", default=[], metavar="KEY,...",
                       help="delete these keys, so a default or a broader entity applies again (repeatable)")  # fmt: skip
    alter.add_argument("--validate-only", action="store_true", help="only ask the broker whether it would accept the change")
    for parser in (describe, alter):
        add_client_options(parser)
    quotas.set_defaults(run_command=run_quotas)


class UsageError(ValueError):
    """Arguments the broker is not asked about: exit 2."""


def run_quotas(args: argparse.Namespace) -> int:
    command = f"diskless quotas {args.action}"
    try:
        action = _describe(args) if args.action == "describe" else _alter(args)
        return asyncio.run(action)
    except UsageError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, SecurityConfigError, OSError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _dest(flag: str) -> str:
    return flag.replace("-", "_")


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(bootstrap_servers=bootstrap_servers(args), security=client_security(args), default_api_timeout_ms=30000)


# --- describe -------------------------------------------------------------------------------


def _filter(args: argparse.Namespace) -> list[ClientQuotaFilterComponent]:
    components = []
    for entity_type, flag, default_flag, _what in _ENTITY_FLAGS:
        name = getattr(args, _dest(flag))
        if getattr(args, _dest(default_flag)):
            components.append(ClientQuotaFilterComponent.of_default_entity(entity_type))
        elif name is _ANY:
            components.append(ClientQuotaFilterComponent.of_entity_type(entity_type))
        elif name is not None:
            components.append(ClientQuotaFilterComponent.of_entity(entity_type, name))
    return components


async def _describe(args: argparse.Namespace) -> int:
    components = _filter(args)
    async with _admin(args) as admin:
        found = await admin.describe_client_quotas(components, strict=args.strict)
    for entity, values in found.items():
        print(f"{entity}  {', '.join(f'{key}={format_value(value)}' for key, value in values.items())}")
    return 0


def format_value(value: float) -> str:
    """1048576.0 as 1048576, 12.5 as 12.5 (Kafka keeps doubles; most quotas are integral)."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)


# --- alter ----------------------------------------------------------------------------------


def _entity(args: argparse.Namespace) -> ClientQuotaEntity:
    pairs = []
    for entity_type, flag, default_flag, _what in _ENTITY_FLAGS:
        if getattr(args, _dest(default_flag)):
            pairs.append((entity_type, None))
        elif getattr(args, _dest(flag)) is not None:
            pairs.append((entity_type, getattr(args, _dest(flag))))
    if not pairs:
        raise UsageError("name the entity: --user, --client-id or --ip (or --user-defaults, --client-defaults, --ip-defaults)")
    return ClientQuotaEntity(pairs)


def parse_ops(add: list[str], delete: list[str]) -> list[tuple[str, float | None]]:
    """--add KEY=VALUE,... and --delete KEY,... as AlterClientQuotas' ops; UsageError."""
    ops: list[tuple[str, float | None]] = []
    for item in (part.strip() for text in add for part in text.split(",")):
        key, equals, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not key or not value:
            raise UsageError(f"--add takes KEY=VALUE[,KEY=VALUE...], not {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {key}: {value}") from None  # Kafka's words
        ops.append((key, number))
    added = {key for key, _ in ops}
    for key in (part.strip() for text in delete for part in text.split(",")):
        if not key:
            raise UsageError("--delete takes KEY[,KEY...]")
        if key in added:
            raise UsageError(f"{key} is both added and deleted")
        ops.append((key, None))
    if not ops:
        raise UsageError("give --add KEY=VALUE,... and/or --delete KEY,...")
    return ops


async def _alter(args: argparse.Namespace) -> int:
    alteration = ClientQuotaAlteration(_entity(args), parse_ops(args.add, args.delete))
    async with _admin(args) as admin:
        await admin.alter_client_quotas([alteration], validate_only=args.validate_only)
    changes = []
    set_ = [f"{key}={format_value(value)}" for key, value in alteration.ops if value is not None]
    deleted = [key for key, value in alteration.ops if value is None]
    if set_:
        changes.append(f"set {', '.join(set_)}")
    if deleted:
        changes.append(f"deleted {', '.join(deleted)}")
    verb = "validated (--validate-only, nothing changed)" if args.validate_only else "altered"
    print(f"{verb} {alteration.entity}: {'; '.join(changes)}")
    return 0
