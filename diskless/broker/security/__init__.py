"""Authentication and authorisation: listeners' security protocols and TLS, SASL (PLAIN,
SCRAM-SHA-256/512), and Kafka's ACLs.

    config.py      SecurityConfig and ListenerSecurity: parsed once by the CLI
    tls.py         the ssl.SSLContext of a TLS listener, from PEM files
    session.py     what one connection knows of its peer (principal, SASL state)
    sasl.py        the SASL exchanges, sans-IO (SCRAM itself is diskless.wire.scram)
    authorizer.py  ACL decisions, sans-IO: bindings + request in, allowed or not out
    shell.py       BrokerSecurity: the async shell over the store that handlers ask
"""
