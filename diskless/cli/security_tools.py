"""`diskless users create|list|delete` and `diskless acls add|list|remove`: SCRAM credentials
(KIP-554) and ACLs, through the Kafka protocol like `kafka-configs.sh --alter --add-config
'SCRAM-SHA-512=[password=...]'` and `kafka-acls.sh`, so they work against any broker.

`--command-config FILE` takes a Kafka client properties file (security.protocol, sasl.mechanism,
sasl.username, sasl.password or sasl.jaas.config, ssl.truststore.location, ...), to reach a
SASL or TLS listener as an administrator. Without it the tools connect in PLAINTEXT.

A password is read from --password, else from the DISKLESS_USER_PASSWORD variable, else asked for
on the terminal; it never reaches the broker: the client sends the salted password.

`diskless users create|list|delete --metadata URL` (or `--data-dir DIR`) works on the metadata
store itself, without a broker (users_store.py): how the first user is made when every listener
asks for SASL. Only the flag chooses this; DISKLESS_METADATA alone does not.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diskless.client import Admin, KafkaError
from diskless.client.admin_security import Acl, AclFilter
from diskless.client.errors import BrokerResponseError
from diskless.client.security import SecurityConfigError
from diskless.wire.scram import MECHANISMS

from .client_options import add_client_options, bootstrap_servers, client_security

# Kafka's codes (metadata/security.py), by the names kafka-acls.sh prints.
RESOURCE_TYPES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES = {"LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
}  # fmt: skip
PERMISSIONS = {"DENY": 2, "ALLOW": 3}
_NAMES = {
    "resource": {v: k for k, v in RESOURCE_TYPES.items()}, "pattern": {v: k for k, v in PATTERN_TYPES.items()},
    "operation": {v: k for k, v in OPERATIONS.items()}, "permission": {v: k for k, v in PERMISSIONS.items()},
}  # fmt: skip
ACL_COLUMNS = ("RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")


def add_commands(commands: Any) -> None:
    users = commands.add_parser("users", help="create, list and delete SCRAM users (KIP-554)")
    actions = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", aliases=["alter"], help="set a user's SCRAM credential (creates or replaces it)")
    create.add_argument("user")
    create.add_argument("--password", help="the password (else env DISKLESS_USER_PASSWORD, else asked)")
    create.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS), default=None,
                        help="SCRAM-SHA-512 (default) or SCRAM-SHA-256; repeat for both")  # fmt: skip
    create.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096 to 16384 (default 4096)")
    listing = actions.add_parser("list", help="list users and their SCRAM mechanisms")
    listing.add_argument("user", nargs="*", help="only these users")
    delete = actions.add_parser("delete", help="delete a user's SCRAM credentials")
    delete.add_argument("user")
    delete.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS), default=None,
                        help="only this mechanism (default: every one the user has)")  # fmt: skip

    acls = commands.add_parser("acls", help="add, list and remove ACLs (as kafka-acls.sh)")
    acl_actions = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = acl_actions.add_parser("add", help="add ALLOW or DENY bindings")
    remove = acl_actions.add_parser("remove", help="remove the bindings that match (unset options match anything)")
    acl_list = acl_actions.add_parser("list", help="list the bindings that match (unset options match anything)")
    for parser in (add, remove, acl_list):
        resource = parser.add_mutually_exclusive_group(required=parser is add)
        resource.add_argument("--topic", help="a topic (or '*' for every topic)")
        resource.add_argument("--group", help="a consumer group (or '*')")
        resource.add_argument("--transactional-id", help="a transactional id (or '*')")
        resource.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
        parser.add_argument("--resource-pattern-type", type=str.upper, choices=sorted(PATTERN_TYPES), default=None,
                            help="LITERAL (default for add) or PREFIXED")  # fmt: skip
        parser.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        parser.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        parser.add_argument("--principal", help="(list, remove) any permission for this principal", default=None)
        parser.add_argument("--host", default=None, help="client address the binding applies to (default '*' for add)")
        parser.add_argument("--operation", action="append", type=str.upper, choices=sorted(OPERATIONS), default=[],
                            help="repeatable (default ALL for add)")  # fmt: skip
    for parser in (create, listing, delete, add, remove, acl_list):
        add_client_options(parser)
    for parser in (create, listing, delete):
        offline = parser.add_argument_group(
            "without a broker", "write to (or read) the metadata store itself, as kafka-storage format --add-scram: "
            "how the first user of a cluster whose listeners all ask for SASL is made")
        offline.add_argument("--metadata", metavar="URL", default=None,
                             help="the store diskless serve --metadata names: sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")
        offline.add_argument("--data-dir", metavar="DIR", default=None,
                             help="the broker's data directory, for its default store sqlite:///DIR/metadata.db")  # fmt: skip
    users.set_defaults(run_command=run_users)
    acls.set_defaults(run_command=run_acls)


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(bootstrap_servers=bootstrap_servers(args), security=client_security(args), default_api_timeout_ms=30000)


def _run(command: str, args: argparse.Namespace, action: Any) -> int:
    try:
        return asyncio.run(action(args))
    except (KafkaError, SecurityConfigError, OSError) as exc:
        print(f"diskless {command} {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# --- users -------------------------------------------------------------------------------------


def run_users(args: argparse.Namespace) -> int:
    if args.metadata is not None or args.data_dir is not None:
        return _run_users_offline(args)
    action = {"create": _create_user, "alter": _create_user, "list": _list_users, "delete": _delete_user}[args.action]
    return _run("users", args, action)


def _password(args: argparse.Namespace) -> str:
    return args.password or os.environ.get("DISKLESS_USER_PASSWORD") or getpass.getpass(f"password for {args.user}: ")


async def _create_user(args: argparse.Namespace) -> int:
    password = _password(args)
    if not password:
        print("diskless users create: an empty password is refused", file=sys.stderr)
        return 2
    async with _admin(args) as admin:
        for mechanism in args.mechanism or ["SCRAM-SHA-512"]:
            await admin.upsert_user_scram_credential(args.user, password, mechanism, args.iterations)
            print(f"set {mechanism} credential of user {args.user} ({args.iterations} iterations)")
    return 0


async def _list_users(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        infos = await admin.describe_user_scram_credentials(args.user or None)
    _print_table(("USER", "MECHANISM", "ITERATIONS"), [(i.user, i.mechanism, str(i.iterations)) for i in infos])
    return 0


async def _delete_user(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        mechanisms = args.mechanism or [i.mechanism for i in await admin.describe_user_scram_credentials([args.user])]
        for mechanism in mechanisms:
            await admin.delete_user_scram_credential(args.user, mechanism)
            print(f"deleted {mechanism} credential of user {args.user}")
    return 0


# --- users, without a broker (users_store.py) ---------------------------------------------------


def _run_users_offline(args: argparse.Namespace) -> int:
    import logging

    from metadata.errors import MetadataError, MetadataStorageError, UnsupportedMetadataUrl

    from .users_store import NoSuchCredential

    command = f"diskless users {args.action}"
    if args.metadata is not None and args.data_dir is not None:
        print(f"{command}: give --metadata or --data-dir, not both", file=sys.stderr)
        return 2
    if args.bootstrap_server is not None or args.command_config is not None:
        print(f"{command}: --metadata and --data-dir write to the store without a broker: "
              "they go without --bootstrap-server and --command-config", file=sys.stderr)  # fmt: skip
        return 2
    url = args.metadata or "sqlite:///" + str(Path(args.data_dir).absolute() / "metadata.db")
    logging.getLogger("metadata").setLevel(logging.ERROR)  # the error line below says what failed
    action = {"create": _create_user_offline, "alter": _create_user_offline, "list": _list_users_offline,
              "delete": _delete_user_offline}[args.action]  # fmt: skip
    try:
        return asyncio.run(action(args, url))
    except UnsupportedMetadataUrl as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except MetadataStorageError as exc:
        print(f"{command}: {exc.reason}", file=sys.stderr)
        return 1
    except (MetadataError, NoSuchCredential, ValueError, OSError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _create_user_offline(args: argparse.Namespace, url: str) -> int:
    from .users_store import new_credential, upsert_credentials

    password = _password(args)
    if not password:
        print("diskless users create: an empty password is refused", file=sys.stderr)
        return 2
    mechanisms = list(dict.fromkeys(args.mechanism or ["SCRAM-SHA-512"]))
    credentials = [new_credential(args.user, password, mechanism, args.iterations) for mechanism in mechanisms]
    await upsert_credentials(url, credentials)
    for mechanism in mechanisms:
        print(f"set {mechanism} credential of user {args.user} ({args.iterations} iterations)")
    return 0


async def _list_users_offline(args: argparse.Namespace, url: str) -> int:
    from .users_store import list_credentials

    found = await list_credentials(url, args.user or None)
    _print_table(("USER", "MECHANISM", "ITERATIONS"), [(c.user, c.mechanism, str(c.iterations)) for c in found])
    return 0


async def _delete_user_offline(args: argparse.Namespace, url: str) -> int:
    from .users_store import delete_credentials

    for mechanism in await delete_credentials(url, args.user, args.mechanism):
        print(f"deleted {mechanism} credential of user {args.user}")
    return 0


# --- ACLs --------------------------------------------------------------------------------------


def run_acls(args: argparse.Namespace) -> int:
    given = [*args.allow_principal, *args.deny_principal, *([] if args.principal is None else [args.principal])]
    for principal in given:
        # Kafka's kafka-acls.sh parses each principal (SecurityUtils.parseKafkaPrincipal) before sending anything.
        principal_type, sep, name = principal.partition(":")
        if not (principal_type and sep and name):
            example = f"User:{principal}" if principal and not sep else "User:alice"
            print(f"diskless acls {args.action}: Invalid principal {principal!r} (expected TYPE:NAME, e.g. {example})", file=sys.stderr)
            return 2
    return _run("acls", args, {"add": _add_acls, "list": _list_acls, "remove": _remove_acls}[args.action])


def _resource(args: argparse.Namespace) -> tuple[int, str | None]:
    if args.topic is not None:
        return RESOURCE_TYPES["TOPIC"], args.topic
    if args.group is not None:
        return RESOURCE_TYPES["GROUP"], args.group
    if args.transactional_id is not None:
        return RESOURCE_TYPES["TRANSACTIONAL_ID"], args.transactional_id
    if args.cluster:
        return RESOURCE_TYPES["CLUSTER"], "kafka-cluster"
    return 1, None  # ANY


def _principals(args: argparse.Namespace) -> list[tuple[str | None, int]]:
    chosen = [(p, PERMISSIONS["ALLOW"]) for p in args.allow_principal] + [(p, PERMISSIONS["DENY"]) for p in args.deny_principal]
    if args.principal is not None:
        chosen.append((args.principal, 1))
    return chosen


async def _add_acls(args: argparse.Namespace) -> int:
    resource_type, name = _resource(args)
    principals = _principals(args)
    if not principals or any(permission == 1 for _p, permission in principals):
        print("diskless acls add: give --allow-principal or --deny-principal", file=sys.stderr)
        return 2
    pattern = PATTERN_TYPES[args.resource_pattern_type or "LITERAL"]
    acls = [
        Acl(resource_type, name or "", pattern, principal or "", args.host or "*", OPERATIONS[operation], permission)
        for principal, permission in principals
        for operation in args.operation or ["ALL"]
    ]
    async with _admin(args) as admin:
        try:
            await admin.create_acls(acls)
        except BrokerResponseError as exc:
            refused = exc.context.get("acl")
            if not isinstance(refused, Acl):
                raise
            reason = f"{exc.name}: {exc.message}" if exc.message else exc.name
            print(f"diskless acls add: {reason} (refused binding: {_binding_text(refused)})", file=sys.stderr)
            return 1
    _print_acls(acls, "added")
    return 0


def _binding_text(acl: Acl) -> str:
    """One binding as a sentence, with kafka-acls.sh's names rather than the protocol's codes."""
    name = {kind: _NAMES[kind].get(code, str(code)) for kind, code in (
        ("permission", acl.permission_type), ("operation", acl.operation), ("resource", acl.resource_type), ("pattern", acl.pattern_type),
    )}  # fmt: skip
    return (f"{name['permission']} {acl.principal} {name['operation']} on {name['resource']} {acl.resource_name!r} "
            f"({name['pattern']}) from host {acl.host}")


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    resource_type, name = _resource(args)
    pattern = PATTERN_TYPES[args.resource_pattern_type] if args.resource_pattern_type else 1
    principals = _principals(args) or [(None, 1)]
    operations = [OPERATIONS[o] for o in args.operation] or [1]
    return [AclFilter(resource_type, name, pattern, principal, args.host, operation, permission)
            for principal, permission in principals for operation in operations]  # fmt: skip


async def _list_acls(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        found: set[Acl] = set()
        for acl_filter in _filters(args):
            found.update(await admin.describe_acls(acl_filter))
    _print_acls(sorted(found), None)
    return 0


async def _remove_acls(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        removed = await admin.delete_acls(_filters(args))
    _print_acls(sorted(set(removed)), "removed")
    return 0


def _print_acls(acls: Sequence[Acl], verb: str | None) -> None:
    if verb is not None:
        print(f"{verb} {len(acls)} ACL binding(s)")
    rows = [
        (_NAMES["resource"].get(a.resource_type, str(a.resource_type)), a.resource_name, _NAMES["pattern"].get(a.pattern_type, str(a.pattern_type)),
         a.principal, a.host, _NAMES["operation"].get(a.operation, str(a.operation)), _NAMES["permission"].get(a.permission_type, str(a.permission_type)))
        for a in acls
    ]  # fmt: skip
    if rows:
        _print_table(ACL_COLUMNS, rows)


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
