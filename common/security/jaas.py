"""``sasl.jaas.config`` values: Kafka's inline JAAS syntax (KIP-85, ``JaasConfig``).

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="pw";

One or more entries ``<LoginModule class> <flag> [key=value ...];`` where the flag is
``required``, ``requisite``, ``sufficient`` or ``optional`` and values are bare words or
double-quoted strings (backslash escapes as in Java's ``StreamTokenizer``). Kafka allows one
login module per mechanism context; so do we (:func:`parse_jaas_config` returns every entry,
callers use the first).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JaasConfigError", "JaasEntry", "parse_jaas_config", "format_jaas_value"]

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class JaasConfigError(ValueError):
    """The text is not valid JAAS configuration syntax."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def _tokens(text: str):
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            yield ch, ch
            i += 1
        elif ch == '"':
            out = []
            i += 1
            while True:
                if i >= n:
                    raise JaasConfigError("unterminated quoted value")
                ch = text[i]
                if ch == '"':
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
                    i += 2
                    continue
                out.append(ch)
                i += 1
            yield "str", "".join(out)
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            yield "word", text[i:j]
            i = j


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Parse ``text``; JaasConfigError (with what was expected) on bad syntax or no entry."""
    if text is None or not text.strip():
        raise JaasConfigError("JAAS config entry not terminated by semi-colon"
                              if text else "empty JAAS config")
    toks = list(_tokens(text))
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        kind, module = toks[i]
        if kind != "word":
            raise JaasConfigError(f"expected a login module class name, got {module!r}")
        if i + 1 >= len(toks) or toks[i + 1][0] != "word" or toks[i + 1][1].lower() not in FLAGS:
            got = toks[i + 1][1] if i + 1 < len(toks) else "end of text"
            raise JaasConfigError(f"Invalid login module control flag '{got}' in JAAS config")
        flag = toks[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError("JAAS config entry not terminated by semi-colon")
            kind, value = toks[i]
            if kind == ";":
                i += 1
                break
            if kind != "word" or i + 2 >= len(toks) or toks[i + 1][0] != "=" \
                    or toks[i + 2][0] not in ("word", "str"):
                raise JaasConfigError(f"Value not specified for key '{value}' in JAAS config")
            options[value] = toks[i + 2][1]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("empty JAAS config")
    return entries


def format_jaas_value(value: str) -> str:
    """``value`` as a double-quoted JAAS string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
