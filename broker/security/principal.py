"""Principals: ``KafkaPrincipal`` and how a connection gets one.

Kafka's ``DefaultKafkaPrincipalBuilder`` (KIP-189, KIP-371):

* PLAINTEXT connections are ``User:ANONYMOUS``;
* SASL connections are ``User:<authorization id>`` of the mechanism (PLAIN: the username,
  SCRAM: the username or, with ``tokenauth=true``, the delegation token's owner,
  OAUTHBEARER: the token's principal claim);
* SSL connections without SASL are ``User:<name>`` where the name is the client
  certificate's subject DN (RFC 2253, as Java's ``X500Principal.getName()``) mapped by
  ``ssl.principal.mapping.rules`` (:class:`SslPrincipalMapper`); no client certificate ->
  ``User:ANONYMOUS``.

Principals print and parse as ``Type:name`` (ACLs store them that way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ANONYMOUS", "KafkaPrincipal", "NoMatchingRule", "SslPrincipalMapper",
           "dn_of_certificate", "parse_principal"]

USER_TYPE = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    """``principal_type`` ("User", or "Group" etc. for custom builders) and ``name``.
    ``token_authenticated`` is True for SCRAM logins with a delegation token (it does not take
    part in equality, as in Kafka)."""

    principal_type: str
    name: str
    token_authenticated: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def parse_principal(text: str) -> KafkaPrincipal:
    """``Type:name`` -> KafkaPrincipal (Kafka's ``SecurityUtils.parseKafkaPrincipal``);
    ValueError when there is no ``:`` or either part is empty."""
    if not text:
        raise ValueError("principal must not be empty")
    ptype, sep, name = text.partition(":")
    if not sep or not ptype or not name:
        raise ValueError(f"expected a string in format principalType:principalName but "
                         f"got {text}")
    return KafkaPrincipal(ptype, name)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matched a DN."""


# one rule: DEFAULT, or RULE:pattern/replacement/[LU]; rules are separated by commas
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACKREF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None = DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(self._python_replacement(), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def _python_replacement(self) -> str:
        """Java's replacement syntax (``$n``; a back reference beyond the group count is
        shortened digit by digit, then literal) in Python's ``\\g<n>`` form."""
        groups = self.pattern.groups if self.pattern is not None else 0
        out = []
        pos = 0
        text = self.replacement
        while pos < len(text):
            ch = text[pos]
            if ch == "\\" and pos + 1 < len(text):
                out.append(text[pos + 1].replace("\\", "\\\\"))
                pos += 2
                continue
            m = _BACKREF.match(text, pos) if ch == "$" else None
            if m is None:
                out.append("\\\\" if ch == "\\" else ch)
                pos += 1
                continue
            digits = m.group(1)
            n, used = (0, 1) if digits.startswith("0") else (int(digits), len(digits))
            while n > groups and n >= 10:
                n //= 10
                used -= 1
            if n > groups:  # no such group: a literal "$"
                out.append("$")
                pos += 1
                continue
            out.append(f"\\g<{n}>")
            pos += 1 + used
        return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` (KIP-371): a comma-separated list of ``DEFAULT`` and
    ``RULE:pattern/replacement/[L|U]``, tried in order; the first rule whose pattern matches
    the whole DN gives the name (``$1``... refer to groups; ``L``/``U`` change case).
    ``DEFAULT`` keeps the DN. ValueError for a rule that does not parse (a bad config)."""

    def __init__(self, rules: str | None) -> None:
        text = (rules if rules is not None else "DEFAULT").strip()
        self.rules: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(text):
            rule = m.group(1)
            if not rule:
                continue
            pm = _RULE_PARSER.match(rule)
            if pm is None or pm.end() != len(rule):
                raise ValueError(f"Invalid rule: {rule}")
            if pm.group(1):
                self.rules.append(_Rule(None))
            elif pm.group(2) is not None:
                try:
                    pattern = re.compile(pm.group(2))
                except re.error as e:
                    raise ValueError(f"Invalid rule: {rule}: {e}") from None
                self.rules.append(_Rule(pattern, pm.group(3), pm.group(4) == "L",
                                        pm.group(4) == "U"))
            elif pm.group(5):
                raise ValueError(f"Invalid rule: {rule}")

    def name(self, dn: str) -> str:
        """The principal name for ``dn``; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}")


# X500Principal.getName(RFC2253) keywords; other attribute types print as OID=#hex(DER)
_RFC2253_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST",
                     "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.9": "STREET",
                     "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}


def dn_of_certificate(der: bytes) -> str:
    """The subject DN of a DER certificate as Java's ``X500Principal.getName()`` prints it
    (RFC 2253: most specific RDN first, ``,`` between RDNs, ``+`` inside one)."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    rdns = []
    for rdn in reversed(list(cert.subject.rdns)):
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is not None:
                parts.append(f"{keyword}={_escape(str(attr.value))}")
            else:
                parts.append(f"{oid}=#{_der_string(attr).hex()}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_string(attr) -> bytes:
    """DER of an attribute's string value (tag from its ASN.1 type, as Java prints it)."""
    raw = str(attr.value).encode("utf-8")
    tag = getattr(getattr(attr, "_type", None), "value", 12)  # 12 = UTF8String
    n = len(raw)
    if n < 0x80:
        length = bytes([n])
    else:
        size = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return bytes([tag]) + length + raw
