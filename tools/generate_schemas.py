"""Generate protocol/schema_gen/ from Kafka's JSON message definitions.

Usage: python tools/generate_schemas.py [SPEC_DIR] [OUT_DIR]

SPEC_DIR defaults to ../shared/kafka-protocol (relative to the repo root) or
/work/shared/kafka-protocol; it must hold messages/*.json and may hold
coordinator-records/*.json. OUT_DIR defaults to protocol/schema_gen.

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


def load_specs(spec_dir: Path) -> list[dict]:
    messages = []
    for sub, forced_kind in (("messages", None), ("coordinator-records", "coordinator")):
        d = spec_dir / sub
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.json")):
            doc = json.loads(strip_comments(path.read_text(encoding="utf-8")))
            messages.append(convert_message(doc, forced_kind or doc["type"]))
    return messages


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
