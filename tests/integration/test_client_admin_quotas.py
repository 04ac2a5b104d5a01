"""The admin client's describe_client_quotas and alter_client_quotas against a real broker:
entities of every kind set, described with each kind of filter component (exact, default,
any; strict or not) in a stable order, keys removed, validate_only changing nothing, and
refusals raised as InvalidRequestError with Kafka's message, while the entities Kafka accepted
beside them are applied. Each test has a fresh broker (`broker`), so a describe of everything
is exact. No IP default and no IP rate for 127.0.0.1: the broker would throttle the test's
own connections."""

from __future__ import annotations

import pytest

from diskless.client import Admin
from diskless.client.admin_quotas import (
    CLIENT_ID,
    IP,
    USER,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
)
from diskless.client.errors import InvalidRequestError, UnsupportedVersionError

ALICE = ClientQuotaEntity({USER: "alice"})
ALICE_DEFAULT_CLIENT = ClientQuotaEntity({CLIENT_ID: None, USER: "alice"})
APP = ClientQuotaEntity({CLIENT_ID: "app"})
DEFAULT_CLIENT = ClientQuotaEntity({CLIENT_ID: None})
TEST_NET = ClientQuotaEntity({IP: "192.0.2.7"})

of_entity = ClientQuotaFilterComponent.of_entity
of_default = ClientQuotaFilterComponent.of_default_entity
of_type = ClientQuotaFilterComponent.of_entity_type


def test_an_entity_is_a_mapping_equal_whatever_the_order_of_its_pairs() -> None:
    assert ClientQuotaEntity([(USER, "alice"), (CLIENT_ID, None)]) == ALICE_DEFAULT_CLIENT
    assert hash(ClientQuotaEntity([(USER, "alice"), (CLIENT_ID, None)])) == hash(ALICE_DEFAULT_CLIENT)
    assert dict(ALICE_DEFAULT_CLIENT) == {USER: "alice", CLIENT_ID: None} and list(ALICE_DEFAULT_CLIENT) == [USER, CLIENT_ID]
    assert str(ALICE_DEFAULT_CLIENT) == "user=alice,client-id=<default>"
    assert ClientQuotaEntity({USER: "<default>"}) != ClientQuotaEntity({USER: None})
    assert of_entity(USER, None) == of_default(USER)
    assert ClientQuotaAlteration({USER: "alice"}, {"producer_byte_rate": 1, "consumer_byte_rate": None}) == ClientQuotaAlteration(
        ALICE, (("producer_byte_rate", 1.0), ("consumer_byte_rate", None)))


async def test_quotas_are_altered_and_described_with_filters(broker) -> None:
    async with Admin(broker.bootstrap) as admin:
        assert await admin.describe_client_quotas() == {}
        await admin.alter_client_quotas([
            ClientQuotaAlteration(TEST_NET, {"connection_creation_rate": 100}),
            ClientQuotaAlteration(APP, {"producer_byte_rate": 1048576}),
            ClientQuotaAlteration(ALICE_DEFAULT_CLIENT, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}),
            ClientQuotaAlteration(DEFAULT_CLIENT, {"consumer_byte_rate": 4096}),
            ClientQuotaAlteration(ALICE, {"request_percentage": 12.5, "controller_mutation_rate": 5}),
        ])  # fmt: skip
        everything = {
            ALICE: {"request_percentage": 12.5, "controller_mutation_rate": 5.0},
            ALICE_DEFAULT_CLIENT: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
            DEFAULT_CLIENT: {"consumer_byte_rate": 4096.0},
            APP: {"producer_byte_rate": 1048576.0},
            TEST_NET: {"connection_creation_rate": 100.0},
        }

        async def described(*components: ClientQuotaFilterComponent, strict: bool = False) -> list:
            found = await admin.describe_client_quotas(components, strict=strict)
            return [(entity, list(values.items())) for entity, values in found.items()]  # in their order

        def expected(*entities: ClientQuotaEntity) -> list:
            return [(entity, list(everything[entity].items())) for entity in entities]

        assert await described() == expected(ALICE, ALICE_DEFAULT_CLIENT, DEFAULT_CLIENT, APP, TEST_NET)
        assert await described(of_entity(USER, "alice")) == expected(ALICE, ALICE_DEFAULT_CLIENT)
        assert await described(of_entity(USER, "alice"), strict=True) == expected(ALICE)
        assert await described(of_default(CLIENT_ID)) == expected(ALICE_DEFAULT_CLIENT, DEFAULT_CLIENT)
        assert await described(of_default(CLIENT_ID), strict=True) == expected(DEFAULT_CLIENT)
        assert await described(of_type(CLIENT_ID)) == expected(ALICE_DEFAULT_CLIENT, DEFAULT_CLIENT, APP)
        assert await described(of_type(USER), of_type(CLIENT_ID), strict=True) == expected(ALICE_DEFAULT_CLIENT)
        assert await described(of_entity(CLIENT_ID, "app")) == expected(APP)
        assert await described(of_type(IP)) == expected(TEST_NET)
        assert await described(of_entity(IP, "192.0.2.7")) == expected(TEST_NET)
        assert await described(of_entity(USER, "bob")) == []
        assert await described(of_default(USER)) == []

        # validate_only: accepted, nothing changes
        await admin.alter_client_quotas([ClientQuotaAlteration({USER: "bob"}, {"producer_byte_rate": 1}),
                                         ClientQuotaAlteration(ALICE, {"request_percentage": None})], validate_only=True)  # fmt: skip
        assert await admin.describe_client_quotas() == everything

        # Removing one key keeps the others; removing the last removes the entity.
        await admin.alter_client_quotas([
            ClientQuotaAlteration(ALICE, {"request_percentage": None}),
            ClientQuotaAlteration(APP, {"producer_byte_rate": None}),
            ClientQuotaAlteration(ALICE_DEFAULT_CLIENT, {"producer_byte_rate": 2048, "consumer_byte_rate": None}),
        ])  # fmt: skip
        assert await admin.describe_client_quotas() == {
            ALICE: {"controller_mutation_rate": 5.0},
            ALICE_DEFAULT_CLIENT: {"producer_byte_rate": 2048.0},
            DEFAULT_CLIENT: {"consumer_byte_rate": 4096.0},
            TEST_NET: {"connection_creation_rate": 100.0},
        }


async def test_refusals_raise_kafkas_message_and_accepted_entities_are_applied(broker) -> None:
    async with Admin(broker.bootstrap) as admin:
        with pytest.raises(InvalidRequestError) as info:
            await admin.alter_client_quotas([
                ClientQuotaAlteration(ALICE, {"producer_byte_rate": 1024}),
                ClientQuotaAlteration(APP, {"producer_byte_rate": 1.5}),
                ClientQuotaAlteration({IP: "not-an-address"}, {"connection_creation_rate": 1}),
            ])  # fmt: skip
        assert info.value.message == "Configuration producer_byte_rate must be a Long value"
        assert info.value.context == {"entity": "client-id=app"}
        assert str(info.value) == "INVALID_REQUEST (entity=client-id=app): Configuration producer_byte_rate must be a Long value"
        # As in Kafka, the entity it accepted is altered.
        assert await admin.describe_client_quotas() == {ALICE: {"producer_byte_rate": 1024.0}}

        refusals = [
            (ClientQuotaAlteration(TEST_NET, {"producer_byte_rate": 1}), "Invalid configuration key producer_byte_rate"),
            (ClientQuotaAlteration(ALICE, {"connection_creation_rate": 1}), "Invalid configuration key connection_creation_rate"),
            (ClientQuotaAlteration(ALICE, {"consumer_byte_rate": 0}), "Configuration consumer_byte_rate must be greater than 0, not 0"),
            (ClientQuotaAlteration({USER: "alice", IP: "192.0.2.7"}, {"producer_byte_rate": 1}),
             "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
            (ClientQuotaAlteration({"group": "g"}, {"producer_byte_rate": 1}), "Unhandled client quota entity type: group"),
            (ClientQuotaAlteration({}, {"producer_byte_rate": 1}), "Invalid empty client quota entity"),
        ]  # fmt: skip
        for alteration, message in refusals:
            with pytest.raises(InvalidRequestError) as info:
                await admin.alter_client_quotas([alteration])
            assert (info.value.message, info.value.context) == (message, {"entity": str(alteration.entity)})

        filters = [
            ([of_type(IP), of_entity(USER, "alice")],
             "Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component."),
            ([of_type(USER), of_default(USER)], "Entity type user cannot appear more than once in the filter."),
        ]  # fmt: skip
        for components, message in filters:
            with pytest.raises(InvalidRequestError) as info:
                await admin.describe_client_quotas(components)
            assert (info.value.message, info.value.context) == (message, {})
        with pytest.raises(UnsupportedVersionError) as unsupported:  # an entity type Kafka does not know
            await admin.describe_client_quotas([of_type("group")])
        assert unsupported.value.message == "Custom entity type group not supported"
        assert await admin.describe_client_quotas() == {ALICE: {"producer_byte_rate": 1024.0}}
