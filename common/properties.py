"""Java ``.properties`` file syntax, as read by ``java.util.Properties.load``.

Kafka reads ``server.properties`` (and writes ``meta.properties``) in this format, so the
rules below follow the ``Properties.load`` documentation:

- A *natural line* ends at ``\\n``, ``\\r`` or ``\\r\\n``. A *logical line* continues onto the
  next natural line when it ends in an odd number of backslashes; leading whitespace of the
  continuation line is dropped.
- Blank lines and comment lines (first non-blank character ``#`` or ``!``) are skipped. A
  comment line never continues, even if it ends in a backslash.
- The key runs from the first non-blank character to the first unescaped ``=``, ``:`` or
  whitespace. Whitespace, then at most one ``=`` or ``:``, then whitespace separate it from
  the value; the value is the rest of the logical line (trailing whitespace kept).
- Escapes in keys and values: ``\\t \\n \\r \\f``, ``\\uXXXX`` (exactly four hex digits) and
  ``\\`` before any other character, which stands for that character (``\\=``, ``\\:``,
  ``\\ ``, ``\\\\``, ``\\#``). A backslash at the very end of the input is dropped.
- A key given twice keeps its last value.

Differences from Java: input is decoded as UTF-8 (Java's ``load(InputStream)`` uses
ISO-8859-1; ``\\uXXXX`` escapes work in both), and a malformed ``\\u`` escape raises
:class:`PropertiesError` (Java throws ``IllegalArgumentException``).
"""

from __future__ import annotations

import os

__all__ = ["PropertiesError", "parse_properties", "load_properties", "format_properties"]

_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """Malformed properties text; the message names the line number."""


def _natural_lines(text: str) -> list[str]:
    # str.splitlines also splits on \v, \x1c, \u2028 ... which Java does not.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _ends_with_continuation(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str):
    """Yield ``(first_line_number, logical_line)`` with continuations joined."""
    lines = _natural_lines(text)
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        yield start + 1, line


def _unescape(raw: str, lineno: int) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i = 0
    n = len(raw)
    while i < n:
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:  # lone trailing backslash
            break
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"line {lineno}: malformed \\uXXXX escape {raw[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[: min(i, n)]
    j = min(i, n)
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse properties text into an ordered ``{key: value}`` dict (last duplicate wins)."""
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        result[_unescape(raw_key, lineno)] = _unescape(raw_value, lineno)
    return result


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a properties file (UTF-8). Raises ``OSError`` or :class:`PropertiesError`."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PropertiesError(f"{os.fspath(path)}: not valid UTF-8 ({e})") from None
    return parse_properties(text)


def _escape(s: str, is_key: bool) -> str:
    out: list[str] = []
    for idx, ch in enumerate(s):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ch in "=:#!" and (is_key or idx == 0):
            out.append("\\" + ch)
        elif ch == " " and (is_key or idx == 0):
            out.append("\\ ")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: dict[str, str], header: str | None = None) -> str:
    """Render ``props`` as properties text that :func:`parse_properties` reads back unchanged."""
    lines = []
    if header:
        lines.extend("#" + h for h in header.splitlines())
    lines.extend(f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items())
    return "\n".join(lines) + "\n"
