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

Per (struct, version) the encoder and decoder are generated at first use by
protocol.codegen. Decoders read a memoryview; `records`
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

from protocol.codegen import FIXED as _FIXED
from protocol.codegen import compile_struct
from protocol.errors import InvalidStringError, TruncatedError, UnsupportedVersionError
from protocol.schema_gen import SCHEMAS
from protocol.types import ZERO_UUID

_MISSING = object()


def snake_case(name: str) -> str:
    """JSON field name -> attribute name (`TransactionalId` -> `transactional_id`)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


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
            c = self._codecs[version] = compile_struct(self, version)
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
            # a fresh list / struct per instance; built directly (no default_value() call),
            # as these run for every response message a handler builds
            if f.is_array:
                fresh = "[]"
            else:
                ns[f"_f{i}"] = f.struct.cls
                fresh = f"_f{i}()"
            args.append(f"{f.attr}=_M")
            body.append(f"    self.{f.attr} = {fresh} if {f.attr} is _M else {f.attr}")
    args.append("unknown_tagged_fields=None")
    body.append("    self.unknown_tagged_fields = unknown_tagged_fields")
    return f"def __init__(self, *, {', '.join(args)}):\n" + "\n".join(body) + "\n", ns


def _finish_class(schema: StructSchema) -> None:
    src, ns = _init_source(schema)
    exec(src, ns)  # noqa: S102 - source built from the schema tables only
    cls = schema.cls
    cls.__init__ = ns["__init__"]
    attrs = [f.attr for f in schema.fields] + ["unknown_tagged_fields"]
    cls._key = operator.attrgetter(*attrs) if len(attrs) > 1 else staticmethod(lambda o: (o.unknown_tagged_fields,))


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
