"""Java properties syntax: the cases java.util.Properties.load documents."""

import pytest

from common.properties import PropertiesError, format_properties, load_properties, parse_properties


def test_separators_and_whitespace():
    text = "a=1\nb: 2\nc 3\n  d   =   4  \ne\n f=\t g\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "", "f": "g"}


def test_comments_and_blank_lines():
    text = "# comment\n! also comment\n\n   \n  # indented comment\nkey=value # not a comment\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_line_continuation_drops_leading_whitespace():
    text = "fruits   apple, banana, \\\n         pear, \\\n   cantaloupe\n"
    assert parse_properties(text) == {"fruits": "apple, banana, pear, cantaloupe"}


def test_even_backslashes_do_not_continue():
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_comment_line_never_continues():
    assert parse_properties("# comment \\\nkey=v\n") == {"key": "v"}


def test_continuation_at_end_of_input():
    assert parse_properties("a=b\\") == {"a": "b"}


def test_escapes_in_keys_and_values():
    text = "key\\ with\\ spaces=a\\=b\nk\\:c=\\u00e9\\t\\n\\x\n"
    assert parse_properties(text) == {"key with spaces": "a=b", "k:c": "\u00e9\t\nx"}


def test_crlf_and_cr_line_endings():
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_last_duplicate_wins():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_malformed_unicode_escape_is_an_error():
    with pytest.raises(PropertiesError, match="line 2"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_round_trip_through_format(tmp_path):
    props = {"a key": "=value", "x:y": " leading space", "tab": "a\tb", "back": "c:\\dir", "e": ""}
    path = tmp_path / "p.properties"
    path.write_text(format_properties(props, header="written by a test"))
    assert load_properties(path) == props


def test_invalid_utf8_file(tmp_path):
    path = tmp_path / "bad.properties"
    path.write_bytes(b"a=\xff\xfe\n")
    with pytest.raises(PropertiesError, match="UTF-8"):
        load_properties(path)
