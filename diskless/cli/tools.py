"""`diskless topics ...`, `diskless produce` and `diskless consume`: Kafka tools for people at a
terminal, speaking to any Kafka-compatible broker through `diskless.client`; `--command-config
FILE` (Kafka's client properties, client_options.py) reaches a SASL or TLS listener."""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from diskless.client import KafkaError, Producer, TopicPartition
from diskless.client.cluster import Cluster
from diskless.client.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from diskless.client.security import ClientSecurity

from .client_options import DEFAULT_BOOTSTRAP, add_client_options, bootstrap_servers, client_security
from .progress import Progress, want_progress
from .record_format import compile_format, legacy_format

if TYPE_CHECKING:
    from diskless.client import Admin, Consumer

COMMANDS = ("topics", "produce", "consume")  # the commands add_commands adds


def add_commands(commands: Any) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=positive, default=None,
                        help="number of partitions (default: the broker's default, num.partitions, as kafka-topics.sh)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", help="topic config, e.g. retention.ms=3600000 (repeatable)")
    actions.add_parser("list", help="list topics")
    describe = actions.add_parser("describe", help="partitions, offsets and configs of a topic (and tiering, with --http)")
    describe.add_argument("topic")
    describe.add_argument("--http", metavar="HOST:PORT", default=None,
                          help="the broker's admin HTTP address, to show local/bucket segments and upload lag; env DISKLESS_HTTP")
    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("topic")
    alter = actions.add_parser("alter", help="change topic configs or add partitions")
    alter.add_argument("topic")
    alter.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="NAME", help="reset a config to its default (repeatable)")
    alter.add_argument("--partitions", type=positive, help="grow the topic to this many partitions")

    produce = commands.add_parser("produce", help="produce lines from standard input, one record each")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    produce.add_argument("--partition", type=non_negative, metavar="N",
                         help="produce to this partition (default: by key; without keys, batches spread over partitions)")
    produce.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                         help="compression.type of the record batches: none, gzip, snappy, lz4 or zstd (default none)")
    produce.add_argument("--acks", default="all", choices=["0", "1", "all"],
                         help="acks: 0 (do not wait), 1 (the leader appended) or all (durable; default all)")
    produce.add_argument("--progress", default="auto", choices=["auto", "on", "off"],
                         help="progress bar on standard error (default auto: when it is a terminal and input is not)")

    consume = commands.add_parser(
        "consume", help="print records, one per line (like kcat -C)",
        description="Print the records of a topic, by default the value of each on its own line, from the end of "
        "every partition on (only new records), until interrupted. A summary line goes to standard error at the end.",
    )
    consume.add_argument("topic")
    consume.add_argument("--group", help="consume as a member of this group: partitions assigned by the group, "
                         "starting at its committed offsets, which are committed as records are read")
    consume.add_argument("--partition", type=non_negative, action="append", metavar="N",
                         help="read only this partition (repeatable; default all; not with --group)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (--offset beginning; with --group: where a new group starts)")
    start.add_argument("--offset", type=offset_spec, metavar="OFFSET",
                       help="where to start in each partition: beginning, end (default), N (that offset) or -N "
                       "(N records before the end); not with --group")
    start.add_argument("--timestamp", type=non_negative, metavar="MS",
                       help="start at the first record with a timestamp at or after MS (epoch milliseconds); not with --group")
    consume.add_argument("--until-end", action="store_true",
                         help="exit once every partition is read up to the end it had at the start (like kcat -e)")
    consume.add_argument("--max-messages", type=positive, metavar="N", help="exit after N records")
    consume.add_argument("--timeout-ms", type=positive, metavar="MS", help="exit when no record arrives for this long")
    consume.add_argument("--format", metavar="FMT",
                         help="output format, as kcat's -f: %%t topic, %%p partition, %%o offset, %%T timestamp (ms), %%k key, "
                         "%%s value, %%K / %%S key / value length, %%h headers, \\n newline, \\t tab (default '%%s\\n')")
    consume.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE (--format '%%k\\t%%s\\n')")
    consume.add_argument("--print-offset", action="store_true", help="print PARTITION:OFFSET<TAB> first")
    consume.add_argument("--progress", default="auto", choices=["auto", "on", "off"],
                         help="progress bar on standard error (default auto: when it is a terminal and standard output is not)")

    for parser in (create, actions.choices["list"], describe, delete, alter, produce, consume):
        add_client_options(parser)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text!r}")
    return value


def offset_spec(text: str) -> str | int:
    if text in ("beginning", "end"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected beginning, end, N or -N, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    bootstrap = bootstrap_servers(args)
    command = {"topics": _topics, "produce": _produce, "consume": _consume}[args.command]
    try:
        security = client_security(args)  # a bad --command-config is one line (ValueError), before any connection
        return asyncio.run(command(args, bootstrap, security))
    except TopicNotFound as exc:
        print(f"diskless {args.command}: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:
        print(f"diskless {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `diskless consume ... | head`: the reader left; so do we, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ValueError as exc:
        print(f"diskless {args.command}: {exc}", file=sys.stderr)
        return 2


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        pairs[_config_name(name.strip())] = value.strip()
    return pairs


def _config_name(name: str) -> str:
    """`name` if Kafka has such a topic config; else ValueError with the nearest names.

    Checked here, before anything is sent, against Kafka's list of topic configs (which the
    broker's table follows), so a typo gets a suggestion rather than the broker's refusal.
    """
    import difflib

    from diskless.broker.topic_configs import TOPIC_CONFIGS

    if name in TOPIC_CONFIGS:
        return name
    guesses = difflib.get_close_matches(name, TOPIC_CONFIGS, n=1, cutoff=0.75)
    if guesses:
        raise ValueError(f"unknown config {name}; did you mean {guesses[0]}?")
    raise ValueError(f"unknown config {name}; the topic configs are listed by: diskless topics describe TOPIC")


async def _topics(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    try:
        return await _topic_action(args, bootstrap, security)
    except UnknownTopicOrPartitionError:
        where = "" if bootstrap == DEFAULT_BOOTSTRAP else f" -b {bootstrap}"
        raise TopicNotFound(args.topic, f"; diskless topics list{where} shows the topics there are") from None
    except TopicAlreadyExistsError:
        raise ValueError(f"topic {args.topic} already exists; diskless topics describe {args.topic} shows it") from None


async def _topic_action(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    from diskless.client import Admin  # here, not at the top: `diskless produce` does without it

    async with Admin(bootstrap_servers=bootstrap, security=security) as admin:
        if args.action == "create":
            # Without --partitions: num_partitions -1, the broker's num.partitions (CreateTopics v4+).
            created = await admin.create_topics(args.topic, -1 if args.partitions is None else args.partitions, _pairs(args.config))
            count = created.get(args.topic, -1)
            print(f"created topic {args.topic} with " + (f"{count} partition(s)" if count > 0 else "the broker's default number of partitions"))
        elif args.action == "list":
            for name in sorted(await admin.list_topics()):
                print(name)
        elif args.action == "delete":
            await admin.delete_topics(args.topic)
            print(f"deleted topic {args.topic}")
        elif args.action == "alter":
            changes: dict[str, str | None] = {**_pairs(args.set), **{_config_name(name): None for name in args.delete}}
            if changes:
                await admin.alter_configs(args.topic, changes)
                print(f"updated configs of {args.topic}: {', '.join(sorted(changes))}")
            if args.partitions is not None:
                await admin.create_partitions(args.topic, args.partitions)
                print(f"topic {args.topic} now has {args.partitions} partitions")
        else:
            http = args.http or os.environ.get("DISKLESS_HTTP")
            described = await _describe(admin, args.topic)
            tiering = await _fetch_tiering(http, args.topic) if http else None  # before printing: an error is one line
            print("\n".join(described))
            if tiering is not None:
                _print_tiering(tiering)
    return 0


async def _fetch_tiering(http: str, topic: str) -> dict[str, Any]:
    import aiohttp

    url = f"http://{http}/v1/topics/{topic}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, session.get(url) as response:
            state = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        raise ValueError(
            f"no admin HTTP endpoint answers at http://{http}; start the broker with --http {http}, or leave out --http"
        ) from None
    if response.status != 200:
        raise ValueError(state.get("error", f"admin HTTP answered {response.status}"))
    return state


def _print_tiering(state: dict[str, Any]) -> None:
    print("tiering:")
    print(f"{'partition':>9}  {'local start':>11}  {'local segs':>10}  {'local bytes':>11}  {'bucket segs':>11}  {'bucket bytes':>12}  {'upload lag':>18}")
    for p in state["partitions"]:
        lag = f"{p['upload_lag_segments']} segs/{p['upload_lag_bytes']} B"
        print(f"{p['partition']:>9}  {p['local_log_start_offset']:>11}  {p['local_segments']:>10}  {p['local_bytes']:>11}  "
              f"{p['remote_segments']:>11}  {p['remote_bytes']:>12}  {lag:>18}")
    compacted = [p for p in state["partitions"] if "compaction" in p]
    if compacted:
        print("compaction:")
        print(f"{'partition':>9}  {'dirty ratio':>11}  {'first dirty':>11}  {'dirty bytes':>11}  last cleaned")
        for p in compacted:
            c = p["compaction"]
            print(f"{p['partition']:>9}  {c['dirty_ratio']:>11.2f}  {c['first_dirty_offset']:>11}  {c['cleanable_bytes']:>11}  {_when(c['last_cleaned_ms'])}")


def _when(epoch_ms: int | None) -> str:
    """A UTC time to the millisecond, as the log lines print it; "never" for None."""
    if epoch_ms is None:
        return "never"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


async def _describe(admin: Admin, topic: str) -> list[str]:
    lines = []
    description = (await admin.describe_topics(topic))[topic]
    earliest = await admin.list_offsets(topic, "earliest")
    latest = await admin.list_offsets(topic, "latest")
    configs = await admin.describe_configs(topic)
    lines.append(f"topic {topic}  id {description.topic_id}  partitions {len(description.partitions)}")
    lines.append(f"{'partition':>9}  {'leader':>6}  {'log start':>12}  {'high watermark':>14}  {'records':>10}")
    for p in sorted(description.partitions, key=lambda p: p.partition):
        start = earliest[p.partition].offset if earliest[p.partition] else 0
        end = latest[p.partition].offset if latest[p.partition] else 0
        lines.append(f"{p.partition:>9}  {p.leader:>6}  {start:>12}  {end:>14}  {end - start:>10}")
    lines.append("configs (* = set on the topic):")
    for name in sorted(configs):
        entry = configs[name]
        lines.append(f"  {'*' if not entry.is_default else ' '} {name} = {entry.value}")
    return lines


class TopicNotFound(Exception):
    def __init__(self, topic: str, what_to_do: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic} does not exist{what_to_do}")


async def _require_topic(bootstrap: str, security: ClientSecurity | None, topic: str, command: str) -> int:
    """The partition count of `topic`; TopicNotFound at once if there is none.

    First asks without creating anything; if the topic is missing, asks again as Kafka's
    producers and consumers do (allow_auto_topic_creation), so a broker with
    auto.create.topics.enable creates it (and we say so), while one without answers
    UNKNOWN_TOPIC_OR_PARTITION at once instead of the client waiting out max_block_ms.
    """
    cluster = Cluster(bootstrap, client_id=f"diskless-{command}", allow_auto_topic_creation=False, security=security)
    try:
        await cluster.fetch_metadata([topic])
        if (count := cluster.metadata.partition_count(topic)) is not None:
            return count
        cluster.allow_auto_topic_creation = True
        deadline = time.monotonic() + 10
        while True:
            await cluster.fetch_metadata([topic])
            if (count := cluster.metadata.partition_count(topic)) is not None:
                break
            error = cluster.metadata.topic_errors.get(topic)
            if error == InvalidTopicError.errno:
                raise ValueError(f"{topic!r} is not a valid topic name: at most 249 letters, digits, '.', '_' or '-'")
            if error == UnknownTopicOrPartitionError.errno:
                # Asked with allow_auto_topic_creation: this broker creates nothing on use.
                where = "" if bootstrap == DEFAULT_BOOTSTRAP else f" -b {bootstrap}"
                raise TopicNotFound(topic, f" and the broker does not create topics on use; create it with: diskless topics create {topic}{where}")
            if time.monotonic() > deadline:
                raise KafkaError(f"topic {topic} has no leader after 10 s; try again")
            await asyncio.sleep(0.05)  # LEADER_NOT_AVAILABLE: the topic being created is getting its leaders
    finally:
        await cluster.close()
    print(f"diskless {command}: topic {topic} did not exist; the broker created it with {count} partition(s) "
          "(auto.create.topics.enable)", file=sys.stderr)
    return count


READ_BLOCK_BYTES = 1 << 20  # one thread hand-off per block of input, not per line


async def _produce(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    acks = -1 if args.acks == "all" else int(args.acks)
    await _require_topic(bootstrap, security, args.topic, "produce")
    progress = Progress("produced", args.topic, enabled=want_progress(args.progress, sys.stderr, sys.stdin))
    try:
        async with Producer(bootstrap_servers=bootstrap, acks=acks, compression_type=args.compression, security=security) as producer:
            await _produce_lines(producer, args, progress)
    finally:
        progress.close()
    progress.finish("to")
    return 0


async def _produce_lines(producer: Producer, args: argparse.Namespace, progress: Progress) -> None:
    """Send each line of standard input as one record; raise the first delivery error."""
    loop = asyncio.get_running_loop()
    stdin = sys.stdin.buffer
    read = functools.partial(stdin.read1, READ_BLOCK_BYTES)  # what one read() returns, up to a block
    send_many = producer.send_many  # one delivery future per batch, not per line
    topic, partition = args.topic, args.partition
    separator = args.key_separator.encode() if args.key_separator is not None else None
    unconfirmed: collections.deque[Any] = collections.deque()  # delivery futures, oldest first
    rest = b""
    next_block = loop.run_in_executor(None, read)  # the next block is read while this one is sent
    while True:
        block = await next_block
        if not block:
            lines = [rest] if rest else []
        else:
            next_block = loop.run_in_executor(None, read)
            lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
            rest = lines.pop()
        # The records' bytes: the input without its line ends (a last line without one was counted as read).
        size_bytes = len(block) - len(lines) if block else 0
        if lines and (b"\r" in block or not block):
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
            size_bytes -= block.count(b"\r\n")
        if separator is None:
            unconfirmed.extend(await send_many(topic, lines, None, partition))
        else:
            keys, values = [], []
            for line in lines:
                key, found, value = line.partition(separator)
                if not found:
                    break
                keys.append(key)
                values.append(value)
            unconfirmed.extend(await send_many(topic, values, keys, partition))
            if len(keys) < len(lines):
                # As Kafka's console producer (parse.key=true): the lines before stay sent.
                await producer.flush()
                _confirm_done(unconfirmed)
                sent = progress.records + len(keys)
                raise NoKeySeparator(args.key_separator, sent + 1, lines[len(keys)].decode(errors="replace"), sent, topic)
        _confirm_done(unconfirmed)
        progress.add(len(lines), size_bytes)
        if not block:
            break
    await producer.flush()
    _confirm_done(unconfirmed)


class NoKeySeparator(ValueError):
    """A line of `diskless produce --key-separator` input without the separator (Kafka's
    LineMessageReader: "No key separator found on line number N"); `sent` records before it
    were sent."""

    def __init__(self, separator: str, line_number: int, line: str, sent: int, topic: str) -> None:
        self.separator = separator
        self.line_number = line_number
        self.line = line
        self.sent = sent
        self.topic = topic
        before = "nothing was sent" if sent == 0 else (
            f"the record before it was sent to {topic}" if sent == 1 else f"the {sent} records before it were sent to {topic}")
        super().__init__(f"no key separator {separator!r} found on line number {line_number}: {line!r}; {before}")


def _confirm_done(futures: collections.deque[Any]) -> None:
    """Drop the delivered futures from the front (batches complete about in order, so the
    rest waits for a later block); raises the error of the first that failed."""
    while futures and futures[0].done():
        if (error := futures.popleft().exception()) is not None:
            raise error


async def _consume(args: argparse.Namespace, bootstrap: str, security: ClientSecurity | None) -> int:
    if args.group and (args.partition or args.offset is not None or args.timestamp is not None):
        raise ValueError("--partition, --offset and --timestamp choose partitions and offsets themselves: "
                         "use them without --group (a group reads what it is assigned from its committed offsets)")
    render = compile_format(args.format if args.format is not None else legacy_format(args.print_offset, args.print_key))
    partition_count = await _require_topic(bootstrap, security, args.topic, "consume")
    for partition in args.partition or ():
        if partition >= partition_count:
            raise ValueError(f"topic {args.topic} has partitions 0 to {partition_count - 1}; there is no partition {partition}")
    settings: dict[str, Any] = {"auto_offset_reset": "earliest" if args.from_beginning else "latest"}
    if args.group:
        settings["group_id"] = args.group
    progress = Progress("consumed", args.topic, enabled=want_progress(args.progress, sys.stderr, sys.stdout))
    out = sys.stdout.buffer
    from diskless.client import Consumer  # here, not at the top: `diskless produce` does without it

    try:
        async with Consumer(bootstrap_servers=bootstrap, security=security, **settings) as consumer:
            if args.group:
                consumer.subscribe([args.topic])
            else:
                partitions = [TopicPartition(args.topic, p) for p in sorted(set(args.partition or range(partition_count)))]
                consumer.assign(partitions)
                await _seek(consumer, partitions, args)
            ends: dict[TopicPartition, int] = {}  # --until-end: each partition's end when first assigned
            poll_ms = args.timeout_ms or 1000
            while args.max_messages is None or progress.records < args.max_messages:
                if args.until_end and await _at_end(consumer, ends):
                    break
                limit = None if args.max_messages is None else args.max_messages - progress.records
                batches = await consumer.getmany(timeout_ms=poll_ms, max_records=limit)
                records = [r for batch in batches.values() for r in batch]
                if not records:
                    if args.timeout_ms is not None:
                        break
                    continue
                out.write(render(records))
                out.flush()
                progress.add(len(records), sum(len(r.value) for r in records if r.value is not None))
    finally:
        progress.close()
    progress.finish("from")
    return 0


async def _seek(consumer: Consumer, partitions: list[TopicPartition], args: argparse.Namespace) -> None:
    offset = "beginning" if args.from_beginning else args.offset
    if args.timestamp is not None:
        found = await consumer.offsets_for_times({tp: args.timestamp for tp in partitions})
        later = [tp for tp in partitions if found.get(tp) is None]
        for tp in partitions:
            if found.get(tp) is not None:
                consumer.seek(tp, found[tp].offset)
        if later:
            await consumer.seek_to_end(*later)  # no record that late yet: wait for new ones
    elif offset == "beginning":
        await consumer.seek_to_beginning(*partitions)
    elif offset is None or offset == "end":
        await consumer.seek_to_end(*partitions)
    elif offset >= 0:
        for tp in partitions:
            consumer.seek(tp, offset)
    else:
        begins, ends = await consumer.beginning_offsets(partitions), await consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(begins[tp], ends[tp] + offset))


async def _at_end(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether every assigned partition is read up to the end it had when first seen."""
    assigned = consumer.assignment()
    if not assigned:
        return False  # a group member before its first assignment
    new = [tp for tp in assigned if tp not in ends]
    if new:
        ends.update(await consumer.end_offsets(new))
    for tp in assigned:
        if await consumer.position(tp) < ends[tp]:
            return False
    return True
