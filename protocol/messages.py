"""Kafka message classes built from the generated schema tables (protocol/schema_gen).

One class per JSON message (`ProduceRequest`, `FetchResponse`, `GroupMetadataValue`, ...),
with every nested struct attached under its JSON type name (`ProduceRequest.TopicProduceData`,
`ProduceRequest.PartitionProduceData`). Attributes are the snake_case JSON field names plus
`unknown_tagged_fields` ({tag: raw bytes} or None): tagged fields this code does not know are
kept so a decode/encode round trip is lossless (KIP-482).

Wire encoding follows docs/protocol.html: in flexible versions strings, bytes, records and
arrays use the compact forms (unsigned varint length + 1, 0 = null) and every struct ends
with a tagged-field section; a tagged field is written only when it differs from its
default. A nullable struct (not array) is prefixed with int8 -1 (null) or 1.

Per (struct, version) the encoder and decoder are Python source generated from the tables
at first use and compiled with exec: runs of fixed-width fields become one struct.pack /
unpack_from call, strings and lengths are inlined. Decoders read a memoryview; `records`
fields become zero-copy memoryview slices of the input, `bytes` fields become `bytes`.

Decoding errors (all `protocol.errors.ProtocolError`): TruncatedError (input too short),
InvalidLengthError (negative length where not nullable, array count larger than the remaining
bytes), InvalidStringError (bad UTF-8), UnsupportedVersionError (version out of range).
Encoding a None in a version where the field is not nullable writes the empty value.
"""

from __future__ import annotations

import keyword
import operator
import re
import struct
import uuid

from protocol.errors import (
    InvalidLengthError,
    InvalidStringError,
    TruncatedError,
    UnsupportedVersionError,
)
from protocol.schema_gen import SCHEMAS
from protocol.types import _UVARINT_CACHE, ZERO_UUID, decode_unsigned_varint, encode_unsigned_varint

_FIXED = {
    "int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8),
    "uint16": ("H", 2), "uint32": ("I", 4), "float64": ("d", 8), "bool": ("?", 1),
    "uuid": ("16s", 16),
}
_BYTESLIKE = (bytes, bytearray, memoryview)
_MISSING = object()


def snake_case(name: str) -> str:
    """JSON field name -> attribute name (`TransactionalId` -> `transactional_id`)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


def _in(rng, v: int) -> bool:
    return rng is not None and rng is not False and rng[0] <= v <= rng[1]


class FieldSpec:
    """One field of a struct as read from the schema table."""

    __slots__ = ("name", "attr", "type", "is_array", "elem", "versions", "nullable", "tagged",
                 "tag", "raw_default", "struct", "flexible", "ignorable", "map_key")

    def __init__(self, row: tuple, struct_schema: StructSchema | None) -> None:
        (self.name, typ, self.versions, self.nullable, self.tagged, self.tag,
         self.raw_default, self.ignorable, self.map_key, self.flexible, _) = row
        self.attr = snake_case(self.name)
        self.type = typ
        self.is_array = typ.startswith("[]")
        self.elem = typ[2:] if self.is_array else typ
        self.struct = struct_schema

    def default_value(self):
        """The field's default per the spec (a fresh list/struct each call)."""
        d = self.raw_default
        if d == "null" or (d is None and self.nullable is not None):
            return None
        if self.is_array:
            return []
        t = self.elem
        if self.struct is not None:
            return self.struct.cls()
        if t in ("string",):
            return "" if d is None else str(d)
        if t == "bool":
            return d is True or d == "true"
        if t == "float64":
            return float(d) if d is not None else 0.0
        if t == "uuid":
            return ZERO_UUID
        if t == "bytes":
            return b""
        if t == "records":
            return None
        if d is None or d == "":
            return 0
        return int(d, 0) if isinstance(d, str) else int(d)

    def immutable_default(self) -> bool:
        return not self.is_array and self.struct is None or self.default_value() is None


class StructSchema:
    """A struct (message root, nested or common struct) with its class and codecs."""

    __slots__ = ("name", "fields", "cls", "flexible", "_codecs")

    def __init__(self, name: str, flexible) -> None:
        self.name = name
        self.fields: list[FieldSpec] = []
        self.cls: type | None = None
        self.flexible = flexible
        self._codecs: dict[int, tuple] = {}

    def codec(self, version: int) -> tuple:
        """(encode(o, out, parts), decode(buf, pos) -> (o, pos)) for a version."""
        c = self._codecs.get(version)
        if c is None:
            c = self._codecs[version] = _compile(self, version)
        return c


# ---------------------------------------------------------------- classes


class Struct:
    """Base of all generated struct and message classes."""

    __slots__ = ()
    _schema: StructSchema
    _key = None

    def __eq__(self, other: object):
        if type(other) is not type(self):
            return NotImplemented
        return self._key(self) == other._key(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = []
        for f in self._schema.fields:
            v = getattr(self, f.attr)
            if isinstance(v, memoryview):
                parts.append(f"{f.attr}=<memoryview {v.nbytes} bytes>")
            else:
                parts.append(f"{f.attr}={v!r}")
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"


class Message(Struct):
    """Base of top-level message classes (requests, responses, data, coordinator records)."""

    __slots__ = ()
    message_name: str
    kind: str
    api_key: int | None
    min_version: int
    max_version: int
    flexible_min_version: int | None

    @classmethod
    def _check(cls, version: int) -> None:
        if not cls.min_version <= version <= cls.max_version:
            raise UnsupportedVersionError(
                f"{cls.message_name} version {version} not in {cls.min_version}-{cls.max_version}")

    def encode(self, version: int) -> bytes:
        """Encode the body at `version` (records values must be bytes-like)."""
        self._check(version)
        out = bytearray()
        self._schema.codec(version)[0](self, out, None)
        return bytes(out)

    def encode_parts(self, version: int) -> list:
        """Body as bytes segments alternating with non-bytes-like records objects."""
        self._check(version)
        out = bytearray()
        parts: list = []
        self._schema.codec(version)[0](self, out, parts)
        parts.append(bytes(out))
        return parts

    @classmethod
    def decode_from(cls, buf, version: int, offset: int = 0):
        """Decode at buf[offset:] -> (message, end offset). Trailing bytes are left alone."""
        cls._check(version)
        if not isinstance(buf, memoryview):
            buf = memoryview(buf)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        dec = cls._schema.codec(version)[1]
        try:
            return dec(buf, offset)
        except (struct.error, IndexError) as exc:
            raise TruncatedError(f"{cls.message_name} v{version}: input too short ({exc})") from None
        except UnicodeDecodeError as exc:
            raise InvalidStringError(f"{cls.message_name} v{version}: invalid UTF-8 ({exc.reason})") \
                from None

    @classmethod
    def decode(cls, buf, version: int, offset: int = 0):
        """Decode one message at buf[offset:] (trailing bytes ignored)."""
        return cls.decode_from(buf, version, offset)[0]


def _init_source(schema: StructSchema) -> tuple[str, dict]:
    ns: dict = {"_M": _MISSING}
    args, body = [], []
    for i, f in enumerate(schema.fields):
        if f.immutable_default():
            ns[f"_d{i}"] = f.default_value()
            args.append(f"{f.attr}=_d{i}")
            body.append(f"    self.{f.attr} = {f.attr}")
        else:
            ns[f"_f{i}"] = f.default_value
            args.append(f"{f.attr}=_M")
            body.append(f"    self.{f.attr} = _f{i}() if {f.attr} is _M else {f.attr}")
    args.append("unknown_tagged_fields=None")
    body.append("    self.unknown_tagged_fields = unknown_tagged_fields")
    return f"def __init__(self, *, {', '.join(args)}):\n" + "\n".join(body) + "\n", ns


def _finish_class(schema: StructSchema) -> None:
    src, ns = _init_source(schema)
    exec(src, ns)  # noqa: S102 - source built from the schema tables only
    cls = schema.cls
    cls.__init__ = ns["__init__"]
    attrs = [f.attr for f in schema.fields] + ["unknown_tagged_fields"]
    cls._key = operator.attrgetter(*attrs) if len(attrs) > 1 else (lambda o: (o.unknown_tagged_fields,))


def _build_message(spec: dict) -> type:
    flexible = spec["flexible"]
    common: dict[str, StructSchema] = {}
    structs: dict[str, StructSchema] = {}
    all_structs: list[StructSchema] = []
    module = __name__

    def make_struct(name: str, rows: tuple, base: type, qual: str) -> StructSchema:
        s = StructSchema(name, flexible)
        slots = tuple(snake_case(r[0]) for r in rows) + ("unknown_tagged_fields",)
        s.cls = type(name, (base,), {"__slots__": slots, "_schema": s, "__module__": module,
                                     "__qualname__": qual})
        all_structs.append(s)
        for row in rows:
            typ = row[1]
            elem = typ[2:] if typ.startswith("[]") else typ
            sub = None
            if elem not in _FIXED and elem not in ("string", "bytes", "records"):
                if row[10] is not None:
                    sub = make_struct(elem, row[10], Struct, f"{spec['name']}.{elem}")
                    structs[elem] = sub
                else:
                    sub = structs.get(elem) or common[elem]
            s.fields.append(FieldSpec(row, sub))
        return s

    # Common structs may reference each other; build them in order of dependency.
    pending = dict(spec["common"])
    while pending:
        progress = False
        for cname, rows in list(pending.items()):
            deps = {r[1].removeprefix("[]") for r in rows if r[10] is None}
            deps = {d for d in deps if d in spec["common"] and d not in common}
            if deps - {cname}:
                continue
            common[cname] = make_struct(cname, rows, Struct, f"{spec['name']}.{cname}")
            structs[cname] = common[cname]
            del pending[cname]
            progress = True
        if not progress:
            raise ValueError(f"cyclic common structs in {spec['name']}")
    root = make_struct(spec["name"], spec["fields"], Message, spec["name"])
    cls = root.cls
    cls.message_name = spec["name"]
    cls.kind = spec["kind"]
    cls.api_key = spec["api_key"]
    cls.min_version, cls.max_version = spec["valid"]
    cls.flexible_min_version = flexible[0] if flexible else None
    cls.deprecated_versions = spec["deprecated"]
    cls.latest_version_unstable = spec["unstable"]
    for s in all_structs:
        if s is not root:
            setattr(cls, s.name, s.cls)
    for s in reversed(all_structs):
        _finish_class(s)
    return cls


# ---------------------------------------------------------------- code generation

_HELPERS = {
    "_uvd": decode_unsigned_varint, "_uve": encode_unsigned_varint, "_UV": _UVARINT_CACHE,
    "_BL": _BYTESLIKE, "_UUID": uuid.UUID, "_pack": struct.pack, "_unpack_from": struct.unpack_from,
    "_H": struct.Struct(">h"), "_I": struct.Struct(">i"), "_new": object.__new__,
    "_InvalidLength": InvalidLengthError, "_Truncated": TruncatedError,
}


def _not_bytes(v) -> TypeError:
    return TypeError(f"records value {type(v).__name__} is not bytes-like; use encode_parts")


def _write_tags(out: bytearray, known: list | None, unknown: dict | None) -> None:
    tags = dict(unknown) if unknown else {}
    if known:
        for tag, data in known:
            tags[tag] = bytes(data)
    out += encode_unsigned_varint(len(tags))
    for tag in sorted(tags):
        data = tags[tag]
        out += encode_unsigned_varint(tag)
        out += encode_unsigned_varint(len(data))
        out += data


_HELPERS["_not_bytes"] = _not_bytes
_HELPERS["_write_tags"] = _write_tags


class _Gen:
    """Emits the source of one struct's encoder and decoder for one version."""

    def __init__(self, schema: StructSchema, version: int) -> None:
        self.s = schema
        self.v = version
        self.flex = _in(schema.flexible, version)
        self.ns = dict(_HELPERS)
        self.n = 0

    def name(self, prefix: str, value) -> str:
        self.n += 1
        key = f"{prefix}{self.n}"
        self.ns[key] = value
        return key

    def tmp(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def field_flex(self, f: FieldSpec) -> bool:
        if f.flexible is None:
            return self.flex
        return _in(f.flexible, self.v)

    # ---- encoding

    def enc_len(self, L, ind, n_expr, flex, out):
        if flex:
            t = self.tmp()
            L.append(f"{ind}{t} = {n_expr} + 1")
            L.append(f"{ind}{out} += _UV[{t}] if {t} < 16384 else _uve({t})")
        else:
            L.append(f"{ind}{out} += _I.pack({n_expr})")

    def enc_null(self, L, ind, flex, kind, out):
        if flex:
            L.append(f"{ind}{out}.append(0)")
        elif kind == "string":
            L.append(f"{ind}{out} += b'\\xff\\xff'")
        else:
            L.append(f"{ind}{out} += b'\\xff\\xff\\xff\\xff'")

    def enc_empty(self, L, ind, flex, kind, out):
        if flex:
            L.append(f"{ind}{out}.append(1)")
        elif kind == "string":
            L.append(f"{ind}{out} += b'\\x00\\x00'")
        else:
            L.append(f"{ind}{out} += b'\\x00\\x00\\x00\\x00'")

    def enc_string_value(self, L, ind, v, flex, out):
        b = self.tmp()
        L.append(f"{ind}{b} = {v}.encode()")
        if flex:
            self.enc_len(L, ind, f"len({b})", True, out)
        else:
            L.append(f"{ind}{out} += _H.pack(len({b}))")
        L.append(f"{ind}{out} += {b}")

    def enc_field(self, L, ind, f: FieldSpec, v: str, out: str, parts: str):
        flex = self.field_flex(f)
        nullable = _in(f.nullable, self.v)
        t = f.elem
        if f.is_array:
            kind = "array"
        elif f.struct is not None:
            enc = self.name("_e", f.struct.codec(self.v)[0])
            if nullable:
                L.append(f"{ind}if {v} is None:")
                L.append(f"{ind}    {out}.append(255)")
                L.append(f"{ind}else:")
                L.append(f"{ind}    {out}.append(1)")
                L.append(f"{ind}    {enc}({v}, {out}, {parts})")
            else:
                L.append(f"{ind}{enc}({v}, {out}, {parts})")
            return
        elif t in _FIXED:
            fmt = _FIXED[t][0]
            if t == "uuid":
                L.append(f"{ind}{out} += {v}.bytes")
            else:
                L.append(f"{ind}{out} += _pack('>{fmt}', {v})")
            return
        else:
            kind = "string" if t == "string" else "bytes"
        L.append(f"{ind}if {v} is None:")
        if nullable:
            self.enc_null(L, ind + "    ", flex, kind, out)
        else:
            self.enc_empty(L, ind + "    ", flex, kind, out)
        L.append(f"{ind}else:")
        ind2 = ind + "    "
        if kind == "string":
            self.enc_string_value(L, ind2, v, flex, out)
        elif kind == "bytes":
            if t == "records":
                L.append(f"{ind2}if not isinstance({v}, _BL):")
                L.append(f"{ind2}    if {parts} is None:")
                L.append(f"{ind2}        raise _not_bytes({v})")
                self.enc_len(L, ind2 + "    ", f"len({v})", flex, out)
                L.append(f"{ind2}    {parts}.append(bytes({out}))")
                L.append(f"{ind2}    {out}.clear()")
                L.append(f"{ind2}    {parts}.append({v})")
                L.append(f"{ind2}else:")
                ind2 += "    "
            self.enc_len(L, ind2, f"len({v})", flex, out)
            L.append(f"{ind2}{out} += {v}")
        else:
            self.enc_len(L, ind2, f"len({v})", flex, out)
            e = self.tmp()
            if f.struct is not None:
                enc = self.name("_e", f.struct.codec(self.v)[0])
                L.append(f"{ind2}for {e} in {v}:")
                L.append(f"{ind2}    {enc}({e}, {out}, {parts})")
            elif t == "uuid":
                L.append(f"{ind2}for {e} in {v}:")
                L.append(f"{ind2}    {out} += {e}.bytes")
            elif t in _FIXED:
                L.append(f"{ind2}{out} += _pack('>%d{_FIXED[t][0]}' % len({v}), *{v})")
            elif t == "string":
                L.append(f"{ind2}for {e} in {v}:")
                self.enc_string_value(L, ind2 + "    ", e, flex, out)
            else:
                L.append(f"{ind2}for {e} in {v}:")
                self.enc_len(L, ind2 + "    ", f"len({e})", flex, out)
                L.append(f"{ind2}    {out} += {e}")

    def encoder(self) -> list[str]:
        L = ["def enc(o, out, parts):"]
        group: list[FieldSpec] = []

        def flush():
            if not group:
                return
            fmt = ">" + "".join(_FIXED[f.elem][0] for f in group)
            S = self.name("_S", struct.Struct(fmt))
            vals = ", ".join(f"o.{f.attr}.bytes" if f.elem == "uuid" else f"o.{f.attr}"
                             for f in group)
            L.append(f"    out += {S}.pack({vals})")
            group.clear()

        tagged = []
        for f in self.s.fields:
            if not _in(f.versions, self.v):
                continue
            if self.flex and _in(f.tagged, self.v):
                tagged.append(f)
                continue
            if not f.is_array and f.struct is None and f.elem in _FIXED:
                group.append(f)
                continue
            flush()
            self.enc_field(L, "    ", f, f"o.{f.attr}", "out", "parts")
        flush()
        if self.flex:
            if tagged:
                L.append("    tg = []")
                for f in sorted(tagged, key=lambda f: f.tag):
                    d = self.name("_D", f.default_value())
                    L.append(f"    if o.{f.attr} != {d}:")
                    L.append("        tb = bytearray()")
                    self.enc_field(L, "        ", f, f"o.{f.attr}", "tb", "None")
                    L.append(f"        tg.append(({f.tag}, tb))")
                L.append("    if tg or o.unknown_tagged_fields:")
                L.append("        _write_tags(out, tg, o.unknown_tagged_fields)")
            else:
                L.append("    if o.unknown_tagged_fields:")
                L.append("        _write_tags(out, None, o.unknown_tagged_fields)")
            L.append("    else:")
            L.append("        out.append(0)")
        if len(L) == 1:
            L.append("    pass")
        return L

    # ---- decoding

    def dec_len(self, L, ind, n, flex):
        """Read a length/count into n: -1 means null."""
        if flex:
            L.append(f"{ind}{n} = buf[pos]")
            L.append(f"{ind}if {n} < 128:")
            L.append(f"{ind}    pos += 1")
            L.append(f"{ind}else:")
            L.append(f"{ind}    {n}, pos = _uvd(buf, pos)")
            L.append(f"{ind}{n} -= 1")

    def dec_string_value(self, L, ind, target, flex, nullable, kind):
        n = self.tmp()
        if flex:
            self.dec_len(L, ind, n, True)
        elif kind == "string":
            L.append(f"{ind}{n}, = _H.unpack_from(buf, pos)")
            L.append(f"{ind}pos += 2")
        else:
            L.append(f"{ind}{n}, = _I.unpack_from(buf, pos)")
            L.append(f"{ind}pos += 4")
        L.append(f"{ind}if {n} < 0:")
        if nullable:
            L.append(f"{ind}    if {n} != -1:")
            L.append(f"{ind}        raise _InvalidLength('negative length %d' % {n})")
            L.append(f"{ind}    {target} = None")
        else:
            L.append(f"{ind}    raise _InvalidLength('null or negative length %d in a "
                     f"non-nullable field' % {n})")
        L.append(f"{ind}else:")
        e = self.tmp()
        L.append(f"{ind}    {e} = pos + {n}")
        L.append(f"{ind}    if {e} > len(buf):")
        L.append(f"{ind}        raise _Truncated('length %d runs past the end of the input' % {n})")
        if kind == "string":
            L.append(f"{ind}    {target} = str(buf[pos:{e}], 'utf-8')")
        elif kind == "records":
            L.append(f"{ind}    {target} = buf[pos:{e}]")
        else:
            L.append(f"{ind}    {target} = bytes(buf[pos:{e}])")
        L.append(f"{ind}    pos = {e}")

    def dec_field(self, L, ind, f: FieldSpec, target: str):
        flex = self.field_flex(f)
        nullable = _in(f.nullable, self.v)
        t = f.elem
        if f.is_array:
            n = self.tmp()
            if flex:
                self.dec_len(L, ind, n, True)
            else:
                L.append(f"{ind}{n}, = _I.unpack_from(buf, pos)")
                L.append(f"{ind}pos += 4")
            L.append(f"{ind}if {n} < 0:")
            if nullable:
                L.append(f"{ind}    if {n} != -1:")
                L.append(f"{ind}        raise _InvalidLength('negative array count %d' % {n})")
                L.append(f"{ind}    {target} = None")
            else:
                L.append(f"{ind}    raise _InvalidLength('null or negative array count %d in a "
                         f"non-nullable field' % {n})")
            L.append(f"{ind}else:")
            i2 = ind + "    "
            size = _FIXED[t][1] if t in _FIXED and f.struct is None else 1
            mult = f" * {size}" if size > 1 else ""
            L.append(f"{i2}if {n}{mult} > len(buf) - pos:")
            L.append(f"{i2}    raise _InvalidLength('array count %d exceeds the remaining bytes' "
                     f"% {n})")
            if f.struct is not None:
                dec = self.name("_d", f.struct.codec(self.v)[1])
                lst, e = self.tmp(), self.tmp()
                L.append(f"{i2}{lst} = []")
                L.append(f"{i2}for _ in range({n}):")
                L.append(f"{i2}    {e}, pos = {dec}(buf, pos)")
                L.append(f"{i2}    {lst}.append({e})")
                L.append(f"{i2}{target} = {lst}")
            elif t == "uuid":
                L.append(f"{i2}{target} = [_UUID(bytes=bytes(buf[pos + 16 * i:pos + 16 * i + 16]))"
                         f" for i in range({n})]")
                L.append(f"{i2}pos += 16 * {n}")
            elif t in _FIXED:
                fmt, sz = _FIXED[t]
                L.append(f"{i2}{target} = list(_unpack_from('>%d{fmt}' % {n}, buf, pos))")
                L.append(f"{i2}pos += {sz} * {n}")
            else:
                lst, e = self.tmp(), self.tmp()
                L.append(f"{i2}{lst} = []")
                L.append(f"{i2}for _ in range({n}):")
                self.dec_string_value(L, i2 + "    ", e, flex, False, t)
                L.append(f"{i2}    {lst}.append({e})")
                L.append(f"{i2}{target} = {lst}")
        elif f.struct is not None:
            dec = self.name("_d", f.struct.codec(self.v)[1])
            if nullable:
                L.append(f"{ind}if buf[pos] == 255:")
                L.append(f"{ind}    pos += 1")
                L.append(f"{ind}    {target} = None")
                L.append(f"{ind}else:")
                L.append(f"{ind}    {target}, pos = {dec}(buf, pos + 1)")
            else:
                L.append(f"{ind}{target}, pos = {dec}(buf, pos)")
        elif t in _FIXED:
            fmt, sz = _FIXED[t]
            if t == "uuid":
                L.append(f"{ind}{target} = _UUID(bytes=_unpack_from('16s', buf, pos)[0])")
            else:
                L.append(f"{ind}{target}, = _unpack_from('>{fmt}', buf, pos)")
            L.append(f"{ind}pos += {sz}")
        else:
            self.dec_string_value(L, ind, target, flex, nullable, t)

    def decoder(self) -> list[str]:
        cls = self.name("_C", self.s.cls)
        L = ["def dec(buf, pos):", f"    o = _new({cls})"]
        group: list[FieldSpec] = []

        def flush():
            if not group:
                return
            fmt = ">" + "".join(_FIXED[f.elem][0] for f in group)
            S = self.name("_S", struct.Struct(fmt))
            names = []
            post = []
            for f in group:
                if f.elem == "uuid":
                    t = self.tmp()
                    names.append(t)
                    post.append(f"    o.{f.attr} = _UUID(bytes={t})")
                else:
                    names.append(f"o.{f.attr}")
            L.append(f"    ({', '.join(names)},) = {S}.unpack_from(buf, pos)")
            L.append(f"    pos += {struct.calcsize(fmt)}")
            L.extend(post)
            group.clear()

        tagged = []
        for f in self.s.fields:
            present = _in(f.versions, self.v)
            if present and self.flex and _in(f.tagged, self.v):
                tagged.append(f)
                present = False
            if not present:
                flush()
                self.dec_default(L, f)
                continue
            if not f.is_array and f.struct is None and f.elem in _FIXED:
                group.append(f)
                continue
            flush()
            self.dec_field(L, "    ", f, f"o.{f.attr}")
        flush()
        if self.flex:
            self.dec_len(L, "    ", "nt", True)
            L.append("    nt += 1")
            L.append("    u = None")
            L.append("    if nt:")
            L.append("        if nt > len(buf) - pos:")
            L.append("            raise _InvalidLength('tagged field count %d exceeds the "
                     "remaining bytes' % nt)")
            L.append("        for _ in range(nt):")
            L.append("            tag, pos = _uvd(buf, pos)")
            L.append("            sz, pos = _uvd(buf, pos)")
            L.append("            end = pos + sz")
            L.append("            if end > len(buf):")
            L.append("                raise _Truncated('tagged field %d runs past the end' % tag)")
            kw = "if"
            for f in tagged:
                L.append(f"            {kw} tag == {f.tag}:")
                self.dec_field(L, "                ", f, f"o.{f.attr}")
                kw = "elif"
            if tagged:
                L.append("            else:")
                L.append("                if u is None:")
                L.append("                    u = {}")
                L.append("                u[tag] = bytes(buf[pos:end])")
            else:
                L.append("            if u is None:")
                L.append("                u = {}")
                L.append("            u[tag] = bytes(buf[pos:end])")
            L.append("            pos = end")
            L.append("    o.unknown_tagged_fields = u")
        else:
            L.append("    o.unknown_tagged_fields = None")
        L.append("    return o, pos")
        return L

    def dec_default(self, L, f: FieldSpec):
        if f.immutable_default():
            d = self.name("_D", f.default_value())
            L.append(f"    o.{f.attr} = {d}")
        else:
            d = self.name("_F", f.default_value)
            L.append(f"    o.{f.attr} = {d}()")


def _compile(schema: StructSchema, version: int) -> tuple:
    g = _Gen(schema, version)
    dec_lines = g.decoder()
    enc_lines = g.encoder()
    src = "\n".join(enc_lines) + "\n\n" + "\n".join(dec_lines) + "\n"
    ns = g.ns
    code = compile(src, f"<codec {schema.name} v{version}>", "exec")
    exec(code, ns)  # noqa: S102 - source built from the schema tables only
    ns["enc"].source = src
    return ns["enc"], ns["dec"]


# ---------------------------------------------------------------- registry

MESSAGES: dict[str, type] = {}
for _name, _spec in SCHEMAS.items():
    MESSAGES[_name] = _build_message(_spec)
globals().update(MESSAGES)
del _name, _spec


def message_class(name: str) -> type:
    """The class for a JSON message name (KeyError when unknown)."""
    return MESSAGES[name]


__all__ = ["MESSAGES", "Message", "Struct", "message_class", "snake_case", *MESSAGES]
