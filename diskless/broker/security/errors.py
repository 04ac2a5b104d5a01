"""Authorisation refusals as exceptions, for handlers that answer errors through the broker's
one table (errors.py): TOPIC_, GROUP_, CLUSTER_ and TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
Kafka's message for all of them is "Authorization failed."; the fields say what was refused."""

from __future__ import annotations


class AuthorizationFailed(Exception):
    def __init__(self, principal: str, operation: str, resource_type: str, resource_name: str) -> None:
        super().__init__("Authorization failed.")
        self.principal = principal
        self.operation = operation
        self.resource_type = resource_type
        self.resource_name = resource_name


class TopicAuthorizationFailed(AuthorizationFailed):
    pass


class GroupAuthorizationFailed(AuthorizationFailed):
    pass


class ClusterAuthorizationFailed(AuthorizationFailed):
    pass


class TransactionalIdAuthorizationFailed(AuthorizationFailed):
    pass
