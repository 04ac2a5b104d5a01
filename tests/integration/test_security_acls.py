"""ACLs on a real `diskless serve` with the authorizer on and allow.everyone.if.no.acl.found
false: every client authenticates with SCRAM-SHA-512 on a SASL_PLAINTEXT listener, and gets
exactly what its bindings allow (confluent-kafka's AdminClient makes them with CreateAcls).

The PLAINTEXT listener is the administrators' (its anonymous principal is a super user here,
as an internal listener in a Kafka set-up); it creates the users and the bindings.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)  # fmt: skip

from tests.integration.broker_process import BrokerProcess, free_port

DEADLINE_S = 30.0
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "gina")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    work = tmp_path_factory.mktemp("acls")
    sasl_port = free_port()
    broker = BrokerProcess(
        work / "data", "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}", "--authorizer", "acl",
        "--allow-everyone-if-no-acl-found", "false", "--super-users", "User:ANONYMOUS;User:admin",
        "--connection-failed-authentication-delay-ms", "100",
    ).start()  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), f"{u}-pw".encode()) for u in USERS]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=20)
    yield broker, admin, sasl_port
    broker.close()


def _as(user: str, port: int, **extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": f"{user}-pw", **extra}  # fmt: skip


def _topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=20)


def _acl(principal: str, rtype: ResourceType, name: str, op: AclOperation, permission=AclPermissionType.ALLOW,
         pattern=ResourcePatternType.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op, permission)


def _create_acls(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=20)


def _produce(config: dict, topic: str, value: bytes) -> KafkaError | None:
    reports: list = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, value, on_delivery=lambda err, _m: reports.append(err))
    assert producer.flush(DEADLINE_S) == 0
    return reports[0]


def _consume(config: dict, topic: str, group: str) -> tuple[list[bytes], list[int]]:
    """Values read, and the error codes the consumer reported, until one value or one error."""
    errors: list[int] = []
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "error_cb": lambda e: errors.append(e.code())})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not values and not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() != KafkaError._PARTITION_EOF:
                errors.append(message.error().code())
    finally:
        consumer.close()
    return values, errors


def test_acls_allow_and_deny_exactly_as_configured(guarded) -> None:
    broker, admin, port = guarded
    topic, other = f"t-{uuid.uuid4().hex[:10]}", f"u-{uuid.uuid4().hex[:10]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    _topics(admin, topic, other)
    _create_acls(
        admin,
        _acl("alice", ResourceType.TOPIC, topic, AclOperation.WRITE),
        _acl("bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE),  # no READ on the topic
        _acl("bob", ResourceType.GROUP, group, AclOperation.READ),
        _acl("carol", ResourceType.TOPIC, topic, AclOperation.READ),  # no READ on the group
        _acl("dave", ResourceType.TOPIC, topic[:6], AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        _acl("dave", ResourceType.GROUP, "g-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
    )
    assert _produce(_as("alice", port), topic, b"hello") is None
    assert _produce(_as("alice", port), other, b"nope").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(_as("carol", port), topic, b"nope").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert _consume(_as("bob", port), topic, group) == ([], [KafkaError.TOPIC_AUTHORIZATION_FAILED])
    assert _consume(_as("carol", port), topic, group) == ([], [KafkaError.GROUP_AUTHORIZATION_FAILED])
    assert _consume(_as("dave", port), topic, group) == ([b"hello"], [])

    # Metadata of every topic lists only those the principal may DESCRIBE.
    alice_admin = AdminClient(_as("alice", port))
    listed = alice_admin.list_topics(timeout=10).topics
    assert topic in listed and other not in listed
    assert listed[topic].error is None

    # DENY beats ALLOW.
    _create_acls(admin, _acl("alice", ResourceType.TOPIC, topic, AclOperation.WRITE, permission=AclPermissionType.DENY))
    assert _produce(_as("alice", port), topic, b"denied").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authorized_operations_are_what_the_acls_allow(guarded) -> None:
    """DescribeCluster, Metadata and DescribeGroups list the operations the principal's bindings
    allow (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS)."""
    broker, admin, port = guarded
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:8]}"
    _topics(admin, topic)
    _create_acls(
        admin,
        _acl("erin", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        _acl("erin", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER_CONFIGS),
        _acl("erin", ResourceType.TOPIC, topic, AclOperation.READ),
        _acl("erin", ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS),
        _acl("erin", ResourceType.GROUP, group, AclOperation.READ),
        _acl("erin", ResourceType.GROUP, group, AclOperation.DELETE),
    )
    consumer = Consumer({**_as("erin", port), "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    erin = AdminClient(_as("erin", port))
    cluster = erin.describe_cluster(include_authorized_operations=True, request_timeout=DEADLINE_S).result(timeout=DEADLINE_S)
    assert {op.name for op in cluster.authorized_operations} == {"DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    described = erin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(timeout=DEADLINE_S)
    assert {op.name for op in described.authorized_operations} == {"READ", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    described = erin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(timeout=DEADLINE_S)
    assert {op.name for op in described.authorized_operations} == {"READ", "DELETE", "DESCRIBE"}
    # A super user (the anonymous PLAINTEXT principal here) may do everything.
    everything = admin.describe_cluster(include_authorized_operations=True, request_timeout=DEADLINE_S).result(timeout=DEADLINE_S)
    assert len(everything.authorized_operations) == 7


def test_describe_and_delete_acls(guarded) -> None:
    broker, admin, port = guarded
    topic = f"d-{uuid.uuid4().hex[:10]}"
    _topics(admin, topic)
    binding = _acl("alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    _create_acls(admin, binding)
    mine = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(mine).result(timeout=20) == [binding]
    assert _produce(_as("alice", port), topic, b"ok") is None
    deleted = admin.delete_acls([mine])
    assert [list(f.result(timeout=20)) for f in deleted.values()] == [[binding]]
    assert admin.describe_acls(mine).result(timeout=20) == []
    assert _produce(_as("alice", port), topic, b"gone").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_only_super_users_and_cluster_alter_may_change_acls_and_users(guarded) -> None:
    broker, admin, port = guarded
    alice_admin = AdminClient(_as("alice", port))
    futures = alice_admin.create_acls([_acl("alice", ResourceType.TOPIC, "x", AclOperation.ALL)])
    with pytest.raises(Exception) as refused:
        [f.result(timeout=20) for f in futures.values()]
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value) or "Cluster authorization failed" in str(refused.value)
    upsert = UserScramCredentialUpsertion("mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"x")
    with pytest.raises(Exception) as refused:
        [f.result(timeout=20) for f in alice_admin.alter_user_scram_credentials([upsert]).values()]
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value) or "Cluster authorization failed" in str(refused.value)


def test_transactional_ids_need_their_acls(guarded) -> None:
    """TRANSACTIONAL_ID ACLs as Kafka checks them: without WRITE on it a transactional producer
    cannot start (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); with WRITE on a prefix it runs
    transactions; describing one needs DESCRIBE (WRITE implies it), and ListTransactions lists
    only the ids the principal may describe."""
    import asyncio

    from confluent_kafka import KafkaException

    from diskless.client import Admin, ClientSecurity

    broker, admin, port = guarded
    topic = f"tx-acl-{uuid.uuid4().hex[:8]}"
    _topics(admin, topic)
    _create_acls(admin, _acl("frank", ResourceType.TOPIC, topic, AclOperation.WRITE))
    transactional_id = f"frank-{uuid.uuid4().hex[:8]}"
    for granted in (None, AclOperation.DESCRIBE):  # FindCoordinator refuses first, then InitProducerId
        if granted is not None:
            _create_acls(admin, _acl("frank", ResourceType.TRANSACTIONAL_ID, "frank-", granted, pattern=ResourcePatternType.PREFIXED))
        refused = Producer(_as("frank", port, **{"transactional.id": transactional_id}))
        with pytest.raises(KafkaException) as raised:
            refused.init_transactions(DEADLINE_S)
        assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    _create_acls(admin, _acl("frank", ResourceType.TRANSACTIONAL_ID, "frank-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
    producer = Producer(_as("frank", port, **{"transactional.id": transactional_id}))
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(DEADLINE_S) == 0

    def as_user(user: str) -> ClientSecurity:
        return ClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_username=user, sasl_password=f"{user}-pw")

    async def look(user: str) -> tuple[object, list[str]]:
        async with Admin(bootstrap_servers=f"127.0.0.1:{port}", security=as_user(user)) as client:
            listed = [t.transactional_id for t in await client.list_transactions()]
            try:
                described = (await client.describe_transactions(transactional_id))[transactional_id].state
            except Exception as exc:  # refused: the broker's error, by name
                described = getattr(exc, "name", repr(exc))
            return described, listed

    assert asyncio.run(look("frank")) == ("Ongoing", [transactional_id])
    described, listed = asyncio.run(look("erin"))
    assert (described, transactional_id in listed) == ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False)
    producer.abort_transaction(DEADLINE_S)


def test_offsets_sent_to_a_transaction_need_read_on_their_topic_and_group(guarded) -> None:
    """TxnOffsetCommit as Kafka authorizes it: WRITE on the transactional id, READ on the
    group, READ on each topic. The offsets of a topic the principal may not read are refused
    TOPIC_AUTHORIZATION_FAILED and the transaction can only abort; given READ, they are
    committed with the transaction."""
    from confluent_kafka import KafkaException
    from confluent_kafka import ConsumerGroupTopicPartitions

    broker, admin, port = guarded
    source, sink = f"tx-in-{uuid.uuid4().hex[:8]}", f"tx-out-{uuid.uuid4().hex[:8]}"
    group, transactional_id = f"gina-{uuid.uuid4().hex[:8]}", f"gina-{uuid.uuid4().hex[:8]}"
    _topics(admin, source, sink)
    _create_acls(
        admin, _acl("gina", ResourceType.TOPIC, sink, AclOperation.WRITE), _acl("gina", ResourceType.GROUP, group, AclOperation.READ),
        _acl("gina", ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE),
    )  # fmt: skip
    producer = Producer(_as("gina", port, **{"transactional.id": transactional_id}))
    metadata = Consumer(_as("gina", port, **{"group.id": group})).consumer_group_metadata()
    producer.init_transactions(DEADLINE_S)

    def send_offsets(offset: int) -> None:
        producer.begin_transaction()
        producer.produce(sink, b"out-%d" % offset, partition=0)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)], metadata, DEADLINE_S)

    with pytest.raises(KafkaException) as raised:
        send_offsets(5)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    producer.abort_transaction(DEADLINE_S)

    _create_acls(admin, _acl("gina", ResourceType.TOPIC, source, AclOperation.READ))
    send_offsets(7)
    producer.commit_transaction(DEADLINE_S)
    (listed,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(source, 0)])]).values()
    assert [(tp.topic, tp.partition, tp.offset) for tp in listed.result(timeout=20).topic_partitions] == [(source, 0, 7)]
