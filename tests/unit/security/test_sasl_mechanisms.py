"""SASL mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), JAAS parsing, SCRAM credential
strings, SSL principal mapping and DNs."""

from __future__ import annotations

import base64

import pytest

from broker.security.principal import (
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
    dn_of_certificate,
    parse_principal,
)
from broker.security.sasl import IllegalSaslStateError, SaslCredentialError
from broker.security.sasl.oauthbearer import OAuthBearerSaslServer
from broker.security.sasl.plain import PlainSaslServer
from broker.security.sasl.scram import ScramSaslServer
from common.security.errors import SaslAuthenticationError
from common.security.jaas import JaasConfigError, parse_jaas_config
from common.security.oauthbearer_client import client_initial_response, unsecured_token
from common.security.scram import MECHANISMS, ScramCredential, credential_from_password
from common.security.scram_client import ScramClient


class Creds:
    def __init__(self):
        self.scram = {}
        self.tokens = {}

    def plain_password_ok(self, listener, user, password):
        return (user, password) == ("alice", "alice-secret")

    def scram_credential(self, mech, user):
        return self.scram.get((mech, user))

    def token_credential(self, mech, token_id):
        return self.tokens.get((mech, token_id))


def test_plain():
    s = PlainSaslServer("L", Creds())
    assert s.evaluate(b"\x00alice\x00alice-secret") == b""
    assert s.complete and s.authorization_id == "alice"
    with pytest.raises(IllegalSaslStateError):
        s.evaluate(b"\x00alice\x00alice-secret")
    cases = [(b"\x00alice\x00wrong", "Invalid username or password"),
             (b"\x00\x00pw", "username not specified"),
             (b"\x00alice\x00", "password not specified"),
             (b"alice", "expected 3 tokens, got 1"),
             (b"bob\x00alice\x00alice-secret", "authorization id that is different"),
             (b"\xff\x00a\x00b", "not UTF-8")]
    for token, text in cases:
        with pytest.raises(SaslAuthenticationError, match=text):
            PlainSaslServer("L", Creds()).evaluate(token)


@pytest.mark.parametrize("mech", sorted(MECHANISMS))
def test_scram_round_trip_and_failures(mech):
    creds = Creds()
    creds.scram[(mech, "a,b=c")] = credential_from_password(MECHANISMS[mech], "pw", 4096)
    server, client = ScramSaslServer(mech, creds), ScramClient(mech, "a,b=c", "pw")
    first = server.evaluate(client.first())
    assert first.startswith(b"r=" + client.nonce.encode())
    final = server.evaluate(client.final(first))
    client.verify(final)
    assert server.complete and server.authorization_id == "a,b=c"
    # wrong password: the generic credential error
    server, client = ScramSaslServer(mech, creds), ScramClient(mech, "a,b=c", "nope")
    with pytest.raises(SaslCredentialError, match="Invalid client credentials"):
        server.evaluate(client.final(server.evaluate(client.first())))
    # unknown user, malformed messages, a nonce that does not end with ours
    with pytest.raises(SaslCredentialError, match="Invalid user credentials"):
        ScramSaslServer(mech, creds).evaluate(ScramClient(mech, "x", "pw").first())
    with pytest.raises(SaslCredentialError, match="client first message format"):
        ScramSaslServer(mech, creds).evaluate(b"y,,n=a,r=1")
    server, client = ScramSaslServer(mech, creds), ScramClient(mech, "a,b=c", "pw")
    server.evaluate(client.first())
    with pytest.raises(SaslCredentialError, match="nonce"):
        server.evaluate(b"c=biws,r=abc,p=AAAA")
    # authzid other than the user
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        ScramSaslServer(mech, creds).evaluate(b"n,a=zed,n=a=2Cb=3Dc,r=abc")


def test_scram_accepts_a_repeated_client_nonce_as_kafka_does():
    """librdkafka 2.0 sends r=<client nonce><client nonce><server nonce> (its proof covers
    that text); Kafka only checks that the nonce ends with the server-first nonce."""
    import re

    from common.security.scram import salted_password

    mech = MECHANISMS["SCRAM-SHA-256"]
    creds = Creds()
    creds.scram[(mech.name, "u")] = credential_from_password(mech, "pw")
    server, client = ScramSaslServer(mech.name, creds), ScramClient(mech.name, "u", "pw")
    first = server.evaluate(client.first()).decode()
    m = re.fullmatch(r"r=([^,]*),s=([^,]*),i=(\d+)", first)
    salted = salted_password(mech, "pw", base64.b64decode(m[2]), int(m[3]))
    client_key = mech.hmac(salted, b"Client Key")
    without = f"c=biws,r={client.nonce}{m[1]}"
    auth = f"{client.client_first_bare},{first},{without}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, mech.hmac(mech.h(client_key), auth),
                                        strict=True))
    final = f"{without},p={base64.b64encode(proof).decode()}".encode()
    assert server.evaluate(final).startswith(b"v=")


def test_scram_token_auth_sets_owner_and_expiry():
    mech = "SCRAM-SHA-512"
    creds = Creds()
    cred = credential_from_password(MECHANISMS[mech], "hmac")
    creds.tokens[(mech, "tok1")] = (cred, KafkaPrincipal("User", "owner"), 123456)
    server = ScramSaslServer(mech, creds)
    client = ScramClient(mech, "tok1", "hmac", token_auth=True)
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.authorization_id == "owner" and server.token_authenticated
    assert server.principal_override.token_authenticated
    assert server.credential_expiry_ms == 123456


def test_scram_credential_string_round_trip():
    cred = ScramCredential(b"salt", b"stored", b"server", 4096)
    text = cred.to_config()
    assert text == (f"salt={base64.b64encode(b'salt').decode()},stored_key="
                    f"{base64.b64encode(b'stored').decode()},server_key="
                    f"{base64.b64encode(b'server').decode()},iterations=4096")
    assert ScramCredential.from_config(text) == cred
    with pytest.raises(ValueError):
        ScramCredential.from_config("salt=x")


def test_oauthbearer_unsecured_validator():
    now_s = 1_000_000
    clock = lambda: now_s * 1000  # noqa: E731
    s = OAuthBearerSaslServer({}, clock)
    token = unsecured_token("alice", 60, now_s=now_s)
    assert s.evaluate(client_initial_response(token, {"ext": "v"})) == b""
    assert s.authorization_id == "alice" and s.credential_expiry_ms == (now_s + 60) * 1000
    assert s.extensions == {"ext": "v"}
    # expired token: Kafka's JSON error challenge, then the client's \x01 fails the exchange
    s = OAuthBearerSaslServer({}, clock)
    challenge = s.evaluate(client_initial_response(unsecured_token("a", 60, now_s=now_s - 61)))
    assert challenge == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        s.evaluate(b"\x01")
    # required scope
    s = OAuthBearerSaslServer({"unsecuredValidatorRequiredScope": "write"}, clock)
    challenge = s.evaluate(client_initial_response(
        unsecured_token("a", 60, scope=["read"], now_s=now_s)))
    assert challenge == b'{"status":"insufficient_scope", "scope":"write"}'
    # a signed token is not an unsecured JWS; garbage is refused
    s = OAuthBearerSaslServer({}, clock)
    assert s.evaluate(client_initial_response(token + "sig")) == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError):
        OAuthBearerSaslServer({}, clock).evaluate(b"garbage")


def test_jaas_parsing():
    (e,) = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                             'username="admin" password="a\\"b" user_admin=x;')
    assert e.flag == "required"
    assert e.options == {"username": "admin", "password": 'a"b', "user_admin": "x"}
    for bad in ("", "Module", "Module required a=b", "Module maybe;", 'Module required a="x;',
                "Module required a=;"):
        with pytest.raises(JaasConfigError):
            parse_jaas_config(bad)


def test_principal_parsing_and_mapping():
    assert parse_principal("User:alice") == KafkaPrincipal("User", "alice")
    assert str(parse_principal("User:CN=a,O=b")) == "User:CN=a,O=b"
    with pytest.raises(ValueError):
        parse_principal("alice")
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                           "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                           "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert m.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun,L=SF,ST=CA,C=US") == "duke@javasoft"
    assert m.name("OU=x,CN=abc,O=y") == "ABC"
    assert m.name("O=only") == "O=only"  # DEFAULT
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:(/x/")


def test_dn_of_certificate_is_rfc2253_most_specific_first(tmp_path):
    from cryptography.hazmat.primitives import serialization

    from tests.tls_certs import make_certs

    certs = make_certs(tmp_path)
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(certs.files["client-cert.pem"].read_bytes())
    dn = dn_of_certificate(cert.public_bytes(serialization.Encoding.DER))
    assert dn == "CN=client,OU=Clients,O=Josef Tests,C=US"
