"""Generate protocol/schema_gen/ from Kafka's JSON message definitions.

Usage: python tools/generate_schemas.py [SPEC_DIR] [OUT_DIR]

SPEC_DIR defaults to ../shared/kafka-protocol (relative to the repo root) or
/work/shared/kafka-protocol; it must hold messages/*.json (Kafka 4.0-SNAPSHOT, with every
version Kafka 3.9 speaks) and may hold messages-4.2/*.json (Kafka 4.2.0-SNAPSHOT, which
dropped the oldest versions, KIP-896), coordinator-records/ and coordinator-records-4.2/.
OUT_DIR defaults to protocol/schema_gen.

Each message's table is the union of both sets: versions below the 4.2 file's lowest one come
from `messages/`, the rest from `messages-4.2/` (`merge_message`); fields are clipped to the
versions each set contributes and joined by name, and `check_union` proves every version of
the result reads exactly as its source spec (a MergeError stops the run otherwise). APIs only
in 4.2 (share groups, streams groups, ListConfigResources which renamed key 74) are taken as
they are. 4.2's coordinator keys number their versions from 0 with the record type in
`apiKey`; they are moved to the older model that Josef writes (key version = record type).

The JSON files carry `//` line comments; they are stripped (outside strings) before
parsing. The output is plain Python data, no prose: each message is a dict

    {"name", "kind" (request/response/header/data/coordinator), "api_key" (or None),
     "valid": (lo, hi), "flexible": (lo, hi) | None, "deprecated": (lo, hi) | None,
     "unstable": bool, "fields": (FIELD, ...), "common": {struct_name: (FIELD, ...)}}

and each FIELD a tuple

    (name, type, versions, nullable_versions, tagged_versions, tag, default,
     ignorable, map_key, flexible_versions, fields)

Version ranges are (lo, hi) tuples with hi = 32767 for "N+", or None for "none"/absent.
`flexible_versions` is None (inherit the message's), False ("none") or a range.
`fields` is the nested struct's field tuple, or None. Defaults are kept as the JSON gives
them (string or number) and interpreted by protocol.messages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MAX_VERSION = 0x7FFF
REPO_ROOT = Path(__file__).resolve().parent.parent

# Output module name -> which message kinds it holds.
MODULES = {
    "requests": ("request",),
    "responses": ("response",),
    "headers_data": ("header", "data"),
    "coordinator": ("coordinator",),
}


def default_spec_dir() -> Path | None:
    for cand in (REPO_ROOT.parent / "shared" / "kafka-protocol", Path("/work/shared/kafka-protocol")):
        if (cand / "messages").is_dir():
            return cand
    return None


def strip_comments(text: str) -> str:
    """Remove `//` comments that are not inside JSON strings."""
    out = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    spec = str(spec).strip()
    if spec == "none" or spec == "":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), MAX_VERSION)
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def _field_flexible(f: dict):
    """None: inherit the message's flexibleVersions; False: never flexible; else (lo, hi)."""
    if "flexibleVersions" not in f:
        return None
    return parse_versions(f["flexibleVersions"]) or False


def convert_field(f: dict) -> tuple:
    versions = parse_versions(f.get("versions"))
    tagged = parse_versions(f.get("taggedVersions"))
    if versions is None and tagged is not None:
        versions = tagged
    nested = None
    if "fields" in f:
        nested = tuple(convert_field(x) for x in f["fields"])
    return (
        f["name"],
        f["type"],
        versions,
        parse_versions(f.get("nullableVersions")),
        tagged,
        f.get("tag"),
        f.get("default"),
        bool(f.get("ignorable", False)),
        bool(f.get("mapKey", False)),
        _field_flexible(f),
        nested,
    )


def convert_message(doc: dict, kind: str) -> dict:
    return {
        "name": doc["name"],
        "kind": kind,
        "api_key": doc.get("apiKey"),
        "valid": parse_versions(doc["validVersions"]),
        "flexible": parse_versions(doc.get("flexibleVersions", "none")),
        "deprecated": parse_versions(doc.get("deprecatedVersions")),
        "unstable": bool(doc.get("latestVersionUnstable", False)),
        "fields": tuple(convert_field(x) for x in doc.get("fields", [])),
        "common": {c["name"]: tuple(convert_field(x) for x in c["fields"])
                   for c in doc.get("commonStructs", [])},
    }


def _read(path: Path) -> dict:
    return json.loads(strip_comments(path.read_text(encoding="utf-8")))


def _shift(rng, k: int):
    return None if rng is None or rng is False else (rng[0] + k, min(rng[1] + k, MAX_VERSION))


def _shift_field(f: tuple, k: int) -> tuple:
    nested = None if f[10] is None else tuple(_shift_field(x, k) for x in f[10])
    return (f[0], f[1], _shift(f[2], k), _shift(f[3], k), _shift(f[4], k), *f[5:10], nested)


def key_as_record_type(m: dict, record_type: int) -> dict:
    """A 4.2 `coordinator-key` (versions from 0, record type in apiKey) in the older model
    that Josef uses: the key version IS the record type (OffsetCommitKey 0-1,
    GroupMetadataKey 2, ...), so every range moves up by the record type."""
    m = dict(m, valid=_shift(m["valid"], record_type))
    m["fields"] = tuple(_shift_field(f, record_type) for f in m["fields"])
    return m


def load_dir(d: Path, coordinator: bool) -> dict:
    """{key: converted message} for one spec directory. Requests and responses are keyed by
    (kind, api key), so a renamed API (ListClientMetricsResources -> ListConfigResources,
    key 74) merges with its successor; everything else by name."""
    out = {}
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.json")):
        doc = _read(path)
        if coordinator:
            m = convert_message(doc, "coordinator")
            if doc["type"] == "coordinator-key" and doc.get("apiKey") is not None:
                m = key_as_record_type(m, doc["apiKey"])
            else:  # a value's api_key: the record type of the key it pairs with
                m["api_key"] = doc.get("apiKey")
            out[m["name"]] = m
            continue
        m = convert_message(doc, doc["type"])
        key = (m["kind"], m["api_key"]) if m["kind"] in ("request", "response") else m["name"]
        out[key] = m
    return out


# ---------------------------------------------------------------- the union of two sets

class MergeError(ValueError):
    """The two spec sets cannot be joined into one table (a conflict the format can't hold)."""


def clip(rng, lo: int, hi: int):
    """rng ∩ [lo, hi], None when empty (or when rng is None)."""
    if rng is None:
        return None
    a, b = max(rng[0], lo), min(rng[1], hi)
    return (a, b) if a <= b else None


def union(a, b, what: str):
    """Two ranges joined into one; MergeError when they leave a gap."""
    if a is None:
        return b
    if b is None:
        return a
    if a[1] + 1 < b[0] or b[1] + 1 < a[0]:
        raise MergeError(f"{what}: {a} and {b} leave a gap")
    return (min(a[0], b[0]), max(a[1], b[1]))


def _restrict(fields: tuple, lo: int, hi: int) -> tuple:
    """Only what versions lo..hi use: fields outside are dropped, ranges clipped."""
    out = []
    for f in fields:
        versions = clip(f[2], lo, hi)
        if versions is None:
            continue
        nested = None if f[10] is None else _restrict(f[10], lo, hi)
        out.append((f[0], f[1], versions, clip(f[3], lo, hi), clip(f[4], lo, hi), *f[5:10],
                    nested))
    return tuple(out)


def _order(old: list, new: list) -> list:
    """Names of both lists in one order that keeps each list's own order (new wins ties)."""
    pos = {n: i for i, n in enumerate(new)}
    out, j = [], 0
    for n in old:
        if n in pos:
            while j <= pos[n]:
                out.append(new[j])
                j += 1
        elif n not in out:
            out.append(n)
    return out + new[j:]


def _merge_fields(old: tuple, new: tuple, split: int, where: str) -> tuple:
    """Fields of `old` below version `split` joined with those of `new` from `split` on."""
    old = _restrict(old, 0, split - 1)
    new = _restrict(new, split, MAX_VERSION)
    by_old = {f[0]: f for f in old}
    by_new = {f[0]: f for f in new}
    out = []
    for name in _order(list(by_old), list(by_new)):
        o, n = by_old.get(name), by_new.get(name)
        if o is None or n is None:
            out.append(o or n)
            continue
        what = f"{where}.{name}"
        # type, tag, default and field flexibility must agree; ignorable and mapKey do not
        # change the bytes and are taken from the newer set
        for i, label in ((1, "type"), (5, "tag"), (6, "default"), (9, "flexibleVersions")):
            if o[i] != n[i]:
                raise MergeError(f"{what}: {label} {o[i]!r} != {n[i]!r}")
        nested = None
        if o[10] is not None or n[10] is not None:
            nested = _merge_fields(o[10] or (), n[10] or (), split, what)
        out.append((name, n[1], union(o[2], n[2], what), union(o[3], n[3], what + " nullable"),
                    union(o[4], n[4], what + " tagged"), n[5], n[6], n[7], n[8], n[9], nested))
    return tuple(out)


def merge_message(old: dict | None, new: dict | None) -> dict:
    """The union of one message's versions: below the newer set's lowest version from
    `old`, the rest from `new` (Kafka 4.0 dropped the oldest versions, KIP-896)."""
    if new is None or new["valid"] is None:
        return old
    if old is None or old["valid"] is None:
        return new
    split = new["valid"][0]
    if split <= old["valid"][0]:
        return new
    name = new["name"]
    common = {}
    for cname in _order(list(old["common"]), list(new["common"])):
        common[cname] = _merge_fields(old["common"].get(cname, ()), new["common"].get(cname, ()),
                                      split, f"{name}.{cname}")
    return {
        "name": name,
        "kind": new["kind"],
        "api_key": new["api_key"],
        "valid": union(clip(old["valid"], 0, split - 1), new["valid"], name),
        "flexible": union(clip(old["flexible"], 0, split - 1), new["flexible"], name + " flexible"),
        "deprecated": union(clip(old["deprecated"], 0, split - 1),
                            clip(new["deprecated"], split, MAX_VERSION), name + " deprecated"),
        "unstable": new["unstable"],
        "fields": _merge_fields(old["fields"], new["fields"], split, name),
        "common": common,
    }


def version_view(m: dict, version: int):
    """What one version of a message means on the wire, for comparing tables: flexibility
    and, per field present in `version` (in order), its type, nullability, tag and nested
    struct, with common structs resolved."""
    def in_rng(r) -> bool:
        return r is not None and r is not False and r[0] <= version <= r[1]

    def fields(rows: tuple, seen: tuple) -> tuple:
        out = []
        for f in rows:
            if not in_rng(f[2]):
                continue
            elem = f[1].removeprefix("[]")
            sub = f[10]
            if sub is None and elem in m["common"] and elem not in seen:
                sub = m["common"][elem]
            nested = None if sub is None else fields(sub, seen + (elem,))
            flex = None if f[9] is None else in_rng(f[9])
            out.append((f[0], f[1], in_rng(f[3]), in_rng(f[4]), f[5] if in_rng(f[4]) else None,
                        f[6], flex, nested))
        return tuple(out)

    return in_rng(m["flexible"]), fields(m["fields"], ())


def check_union(merged: dict, old: dict | None, new: dict | None) -> None:
    """Every version of `merged` reads exactly as the spec set it came from; MergeError
    names the first version that does not."""
    lo, hi = merged["valid"]
    split = new["valid"][0] if new and new["valid"] else hi + 1
    for v in range(lo, hi + 1):
        src = new if v >= split else old
        if src is None or not src["valid"][0] <= v <= src["valid"][1]:
            raise MergeError(f"{merged['name']} v{v}: in neither spec set")
        if version_view(merged, v) != version_view(src, v):
            raise MergeError(f"{merged['name']} v{v} differs from its spec")


def load_specs(spec_dir: Path) -> list[dict]:
    """Every message of `messages/` + `messages-4.2/` (and the coordinator records of both
    sets) as the union of their versions, each version checked against its source."""
    messages = []
    for older, newer, coordinator in (("messages", "messages-4.2", False),
                                      ("coordinator-records", "coordinator-records-4.2", True)):
        old = load_dir(spec_dir / older, coordinator)
        new = load_dir(spec_dir / newer, coordinator)
        keys = list(old) + [k for k in new if k not in old]
        for k in keys:
            merged = merge_message(old.get(k), new.get(k))
            check_union(merged, old.get(k), new.get(k))
            messages.append(merged)
    return sorted(messages, key=lambda m: m["name"])


def _fmt_fields(fields: tuple, indent: int) -> str:
    if not fields:
        return "()"
    pad = " " * indent
    lines = ["("]
    for f in fields:
        head = repr(f[:-1])[1:-1]
        if f[-1] is None:
            lines.append(f"{pad}    ({head}, None),")
        else:
            lines.append(f"{pad}    ({head}, {_fmt_fields(f[-1], indent + 4)}),")
    lines.append(f"{pad})")
    return "\n".join(lines)


def render_module(messages: list[dict], kinds: tuple[str, ...]) -> str:
    out = [
        "# Generated by tools/generate_schemas.py from Apache Kafka's JSON message",
        "# definitions (Apache-2.0). Do not edit; regenerate instead.",
        "# Field tuple: (name, type, versions, nullable_versions, tagged_versions, tag,",
        "#   default, ignorable, map_key, flexible_versions, fields)",
        "",
        "SCHEMAS = {",
    ]
    for m in messages:
        if m["kind"] not in kinds:
            continue
        out.append(f"    {m['name']!r}: {{")
        for key in ("name", "kind", "api_key", "valid", "flexible", "deprecated", "unstable"):
            out.append(f"        {key!r}: {m[key]!r},")
        out.append(f"        'fields': {_fmt_fields(m['fields'], 8)},")
        if m["common"]:
            out.append("        'common': {")
            for cname, cfields in m["common"].items():
                out.append(f"            {cname!r}: {_fmt_fields(cfields, 12)},")
            out.append("        },")
        else:
            out.append("        'common': {},")
        out.append("    },")
    out.append("}")
    return "\n".join(out) + "\n"


INIT = '''"""Generated Kafka message schemas (see tools/generate_schemas.py). Do not edit."""

from .coordinator import SCHEMAS as _coordinator
from .headers_data import SCHEMAS as _headers_data
from .requests import SCHEMAS as _requests
from .responses import SCHEMAS as _responses

SCHEMAS = {**_requests, **_responses, **_headers_data, **_coordinator}
'''


def generate(spec_dir: Path, out_dir: Path) -> list[Path]:
    """Write the schema modules into out_dir; return the paths written."""
    messages = load_specs(spec_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for mod, kinds in MODULES.items():
        p = out_dir / f"{mod}.py"
        p.write_text(render_module(messages, kinds), encoding="utf-8")
        written.append(p)
    p = out_dir / "__init__.py"
    p.write_text(INIT, encoding="utf-8")
    written.append(p)
    return written


def main(argv: list[str]) -> int:
    spec_dir = Path(argv[1]) if len(argv) > 1 else default_spec_dir()
    if spec_dir is None:
        print("kafka-protocol spec directory not found", file=sys.stderr)
        return 2
    out_dir = Path(argv[2]) if len(argv) > 2 else REPO_ROOT / "protocol" / "schema_gen"
    for p in generate(spec_dir, out_dir):
        print(os.path.relpath(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
