"""How a client tool reaches a broker: `--bootstrap-server` and `--command-config FILE`, one
implementation for `diskless topics|produce|consume` (tools.py) and `diskless users|acls`
(security_tools.py).

`--command-config` names a Kafka client properties file, as kafka-topics.sh and kafka-acls.sh
take it (security.protocol, sasl.mechanism, sasl.username / sasl.password or sasl.jaas.config,
ssl.truststore.location or ssl.ca.location, ...; `diskless.client.security` reads it). It is read,
and the certificate files it names are loaded, before anything is sent: a file that cannot be
read, a setting Kafka's clients do not take, or a CA that does not load is a SecurityConfigError
(a ValueError) naming the file, which the tools print as one line. Without it: PLAINTEXT.

Light to import: `diskless produce` starts with it.
"""

from __future__ import annotations

import argparse
import os
import ssl

from diskless.client.security import ClientSecurity, SecurityConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_HELP = f"broker address HOST:PORT (default {DEFAULT_BOOTSTRAP}; env DISKLESS_BOOTSTRAP_SERVERS)"
COMMAND_CONFIG_HELP = "Kafka client properties for SASL/TLS (security.protocol, sasl.*, ssl.*)"


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default=None, help=BOOTSTRAP_HELP)
    parser.add_argument("--command-config", default=None, metavar="FILE", help=COMMAND_CONFIG_HELP)


def bootstrap_servers(args: argparse.Namespace) -> str:
    return args.bootstrap_server or os.environ.get("DISKLESS_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)


def client_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The security settings of `--command-config`, checked; None without it (PLAINTEXT)."""
    path = args.command_config
    if path is None:
        return None
    try:
        security = ClientSecurity.from_file(path)
    except SecurityConfigError as exc:
        raise SecurityConfigError(f"--command-config {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityConfigError(f"cannot read --command-config {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        security.ssl_context()  # every connection makes its own; this one only proves the files load
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f for f in (security.ssl_cafile, security.ssl_certfile, security.ssl_keyfile) if f)
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise SecurityConfigError(f"--command-config {path}: cannot load the TLS files it names ({files}): {reason}") from None
    return security
