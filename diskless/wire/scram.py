"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84): the
credential a server stores, and both ends of the exchange. Pure: bytes in, bytes out; the
nonces come from `secrets` unless a test passes its own.

The exchange, three messages carried in SaslAuthenticate's auth_bytes:

    client-first  "n,," [a=authzid] "n=" user ",r=" client-nonce [",tokenauth=true" ...]
    server-first  "r=" client-nonce server-nonce ",s=" base64(salt) ",i=" iterations
    client-final  "c=" base64(gs2-header) ",r=" nonce ",p=" base64(ClientProof)
    server-final  "v=" base64(ServerSignature)     or     "e=" error

What a server stores per user and mechanism (never the password):

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

The client proves it knows ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage), whose
hash must be StoredKey; the server proves it knows ServerKey with the signature. Kafka refuses
iteration counts outside 4096..16384 (ScramMechanism.minIterations/maxIterations).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# KIP-554's ScramMechanism enum, as AlterUserScramCredentials and Describe... carry it.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TYPE_OF = {name: number for number, name in MECHANISM_TYPES.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """The peer's SCRAM message is malformed, or its proof is wrong; `reason` is for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of one user's password for one mechanism."""

    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hash_name(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password, salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    name = _hash_name(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    """A fresh credential for `password` (a random 32-byte salt unless one is given)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted_password(mechanism, salted_password(mechanism, password.encode(), salt, iterations), salt, iterations)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (SASL/PLAIN checks with this)."""
    again = make_credential(credential.mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def _escape(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _unescape(text: str) -> str:
    if "=" in text.replace("=3D", "").replace("=2C", ""):
        raise ScramError("invalid escape in user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid SCRAM attribute {part[:20]!r}")
        pairs.append((part[0], part[2:]))
    return pairs


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


# --- the server's side ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientFirst:
    user: str
    client_nonce: str
    bare: str  # client-first-message-bare, part of AuthMessage
    gs2_header: str
    token_auth: bool  # KIP-48 delegation tokens: not supported here, refused by the caller


def parse_client_first(data: bytes) -> ClientFirst:
    text = _decode(data, "client-first message")
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramError("client-first message has no GS2 header")
    cbind, authzid, bare = parts
    if cbind not in ("n", "y"):  # "p=..." asks for channel binding, which Kafka does not offer
        raise ScramError(f"unsupported channel binding flag {cbind!r}")
    if authzid and not authzid.startswith("a="):
        raise ScramError("invalid authorization identity")
    attributes = _attributes(bare)
    if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
        raise ScramError("client-first message must start with n= and r=")
    user = _unescape(attributes[0][1])
    nonce = attributes[1][1]
    if not user or not nonce:
        raise ScramError("empty user name or nonce")
    if authzid and _unescape(authzid[2:]) != user:
        raise ScramError("authorization identity differs from the user name")
    extensions = {key: value for key, value in (item.split("=", 1) for item in bare.split(",")[2:] if "=" in item)}
    return ClientFirst(user, nonce, bare, f"{cbind},{authzid},", extensions.get("tokenauth", "").lower() == "true")


class ScramServer:
    """One server side of one exchange: `start(client_first, credential)` gives server-first,
    `finish(client_final)` checks the proof and gives server-final (or raises ScramError)."""

    def __init__(self, mechanism: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None

    def start(self, first: ClientFirst, credential: ScramCredential) -> bytes:
        self._first = first
        self._credential = credential
        self._server_first = f"r={first.client_nonce}{self._server_nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def finish(self, data: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None, "start() first"
        text = _decode(data, "client-final message")
        attributes = _attributes(text)
        if len(attributes) < 3 or attributes[0][0] != "c" or attributes[1][0] != "r" or attributes[-1][0] != "p":
            raise ScramError("client-final message must be c=, r=, ..., p=")
        if _unb64(attributes[0][1], "channel binding") != first.gs2_header.encode():
            raise ScramError("channel binding does not match the GS2 header")
        nonce = first.client_nonce + self._server_nonce
        # librdkafka 2.0.x (Debian's kcat) sends its own nonce twice before the server's: the
        # exchange is otherwise sound (both nonces are there, the proof covers what it sent).
        if attributes[1][1] not in (nonce, first.client_nonce + nonce):
            raise ScramError("nonce does not match")
        without_proof = text[: text.rindex(",p=")]
        proof = _unb64(attributes[-1][1], "proof")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise ScramError("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ScramError("invalid proof")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return f"v={_b64(server_signature)}".encode()


# --- the client's side ---------------------------------------------------------------------


class ScramClient:
    """One client side: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._password = password.encode()
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._bare = f"n={_escape(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, data: bytes) -> bytes:
        text = _decode(data, "server-first message")
        attributes = dict(_attributes(text))
        if "e" in attributes:
            raise ScramError(f"server refused: {attributes['e']}")
        try:
            nonce, salt_text, iterations = attributes["r"], attributes["s"], int(attributes["i"])
        except (KeyError, ValueError):
            raise ScramError("server-first message lacks r=, s= or i=") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("server nonce does not extend ours")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"server asks for {iterations} iterations")
        salted = salted_password(self.mechanism, self._password, _unb64(salt_text, "salt"), iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        client_signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
        self._server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self._hash), auth_message, self._hash)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, data: bytes) -> None:
        attributes = dict(_attributes(_decode(data, "server-final message")))
        if "e" in attributes:
            raise ScramError(f"server refused: {attributes['e']}")
        if not hmac.compare_digest(_unb64(attributes.get("v", ""), "server signature"), self._server_signature):
            raise ScramError("the server's signature is wrong: it does not know the credential")
