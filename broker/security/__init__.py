"""Security (issue 15): TLS listeners, SASL authentication, ACL authorization, quotas.

Modules: ``ssl_factory`` (SSL contexts from ``ssl.*``), ``tls_transport`` (TLS over accepted
connections, handshake off the loop), ``principal`` (KafkaPrincipal, SSL principal mapping),
``jaas``, ``sasl/`` (PLAIN, SCRAM, OAUTHBEARER: one module each), ``scram`` (credentials),
``authenticator`` (the SASL server state machine), ``listeners`` (per-listener security and
the connection Session), ``manager`` (``SecurityManager``: ``services.security``),
``store``/``znodes``/``acl`` (Kafka's znode layout behind a small store interface),
``inter_broker`` (the client side other brokers use).
"""
