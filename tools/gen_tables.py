"""Generate every mechanism table from protocol_spec/v2/registry.json, the one source of ids.

    python tools/gen_tables.py           rewrite the generated files
    python tools/gen_tables.py --check   exit 1 if any generated file is stale (a test runs it)

What it writes (each says so in its first line, with this command):
- `aggregator/ldpfleet/core/mechanism_table.py`: ids, the aggregator module of each mechanism,
  the report error fields (`ERRORS`, the registry's `errors`), the set-valued / numeric /
  longitudinal / index-valued / candidate-list families (read by
  `core.protocol`, `core.config` and `core.mechanisms`);
- `c_kernels/ldp_mechanism_ids.h`: `LDP_MECHANISM_ID_*`, the names by id and family tests (read by
  `ldp_report.[ch]` and the C client);
- the block between the `generated` marker lines of `device/ldp/report.py` (`MECHANISMS`: one
  string, the k-th name has id k) and `device/ldp/mechanisms.py` (`NAMES` and the families):
  a block in modules the board imports anyway, not one more module on a 16 KB heap.

Registry fields used, per mechanism: `id` (ids run 1..N without gaps: MicroPython finds an id by
its position), `params` (`kc`: phase 2 takes the candidate list), `set_valued`, `numeric`,
`longitudinal`, `input` ("index": the mechanism takes the item's domain index, else its key,
spec §1; "prefix_key": `pem`'s key of its group's prefix of the code, spec §3.5) and `aggregator_module` (when several mechanisms share one module; default: the name).
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = Path("protocol_spec") / "v2" / "registry.json"
COMMAND = "python tools/gen_tables.py"
NOTICE = "Generated from protocol_spec/v2/registry.json by `%s`: do not edit." % COMMAND
BEGIN = "# --- generated: %s ---" % COMMAND
END = "# --- end generated ---"
PY_TABLE = Path("aggregator") / "ldpfleet" / "core" / "mechanism_table.py"
C_HEADER = Path("c_kernels") / "ldp_mechanism_ids.h"
MP_REPORT = Path("device") / "ldp" / "report.py"
MP_MECHANISMS = Path("device") / "ldp" / "mechanisms.py"


class Tables:
    """The registry's mechanisms in id order and their families."""

    def __init__(self, registry: dict):
        mechs = registry["mechanisms"]
        self.names = sorted(mechs, key=lambda n: mechs[n]["id"])
        ids = [mechs[n]["id"] for n in self.names]
        if ids != list(range(1, len(ids) + 1)):
            raise SystemExit("registry.json: mechanism ids must be 1..N without gaps, got %s" % ids)
        if max(ids) > 255:
            raise SystemExit("registry.json: the header's mechanism field is a u8")
        self.version = registry["protocol"]
        self.errors = tuple(registry["errors"])
        self.ids = {n: mechs[n]["id"] for n in self.names}
        self.modules = {n: mechs[n].get("aggregator_module", n) for n in self.names}
        self.set_valued = self._where(mechs, lambda m: m.get("set_valued"))
        self.numeric = self._where(mechs, lambda m: m.get("numeric"))
        self.longitudinal = self._where(mechs, lambda m: "longitudinal" in m)
        self.by_index = self._where(mechs, lambda m: m.get("input") == "index")
        self.listed = self._where(mechs, lambda m: "kc" in m["params"])

    def _where(self, mechs, test):
        return tuple(n for n in self.names if test(mechs[n]))

    def families(self):
        """(NAME, meaning, names) of each family: Python and MicroPython `NAME`, C
        `LDP_MECHANISM_NAME(id)`."""
        return [("SET_VALUED", "the value is a set of items", self.set_valued),
                ("NUMERIC", "numeric domains, spec §1.1 and §3.3", self.numeric),
                ("LONGITUDINAL", "memoised, spec §3.2", self.longitudinal),
                ("BY_INDEX", "takes the item's domain index, not its key", self.by_index),
                ("LISTED", "phase 2 takes the candidate list as its items", self.listed)]


def wrap(prefix: str, items, indent: str, sep: str = ",", width: int = 99) -> list:
    """`prefix` then the items joined by `sep` + space, in lines of at most `width`
    characters, continuation lines starting with `indent`."""
    pieces = [item + (sep if i + 1 < len(items) else "") for i, item in enumerate(items)]
    lines, line = [], prefix + pieces[0]
    for piece in pieces[1:]:
        if len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = indent + piece
        else:
            line += " " + piece
    return lines + [line]


def py_tuple(name: str, names) -> list:
    """`NAME = ("a", "b")` (a one-element tuple keeps its comma)."""
    if not names:
        return ["%s = ()" % name]
    body = wrap("%s = (" % name, ['"%s"' % n for n in names], " " * (len(name) + 4))
    body[-1] += ",)" if len(names) == 1 else ")"
    return body


def python_table(t: Tables) -> str:
    out = ["# " + NOTICE,
           '"""Mechanism tables of protocol_spec/v2/registry.json (ids, modules, families)."""',
           "", "PROTOCOL_VERSION = %d" % t.version, "", "MECHANISM_IDS = {"]
    out += ['    "%s": %d,' % (n, i) for n, i in t.ids.items()]
    out += ["}", '"""Registry id of each mechanism (the report header\'s `mechanism` byte)."""',
            "MECHANISM_NAMES = {i: n for n, i in MECHANISM_IDS.items()}", "", "MODULES = {"]
    out += ['    "%s": "%s",' % (n, m) for n, m in t.modules.items()]
    out += ["}", '"""The module of `ldpfleet.core.mechanisms` that implements each mechanism."""']
    out += [""] + py_tuple("ERRORS", t.errors) + [
        '"""ReportFormatError fields, the header\'s in its checking order (spec §3)."""']
    for name, meaning, names in t.families():
        out += [""] + py_tuple(name, names) + ['"""%s."""' % (meaning[0].upper() + meaning[1:])]
    return "\n".join(out) + "\n"


def c_header(t: Tables) -> str:
    out = ["/* " + NOTICE + " */",
           "/* Mechanism ids of protocol v2 (spec §3), their names by id and their families. */",
           "#ifndef LDP_MECHANISM_IDS_H", "#define LDP_MECHANISM_IDS_H", ""]
    out += ["#define LDP_MECHANISM_ID_%s %d" % (n.upper(), i) for n, i in t.ids.items()]
    out += ["#define LDP_MECHANISM_COUNT %d" % len(t.names), "",
            "/* Initializer of a names-by-id array: index 0 is \"\" (no mechanism). */"]
    names = wrap("    {", ['""'] + ['"%s"' % n for n in t.names], "     ", width=97)
    names[-1] += "}"
    out += ["#define LDP_MECHANISM_NAMES_INIT \\"] + [ln + " \\" for ln in names[:-1]] + [names[-1]]
    for macro, meaning, names in t.families():
        tests = ["(id) == LDP_MECHANISM_ID_%s" % n.upper() for n in names] or ["0"]
        lines = wrap("    (", tests, "     ", sep=" ||", width=97)
        lines[-1] += ")"
        out += ["", "/* %s */" % meaning, "#define LDP_MECHANISM_%s(id) \\" % macro]
        out += [ln + " \\" for ln in lines[:-1]] + [lines[-1]]
    out += ["", "#endif"]
    return "\n".join(out) + "\n"


def mp_report_block(t: Tables) -> list:
    """`MECHANISMS = ("grr olh ...")`: one string, the k-th name has id k."""
    chunks, line = [], ""
    for w in t.names:
        if line and len(line) + len(w) + 1 > 70:
            chunks.append(line + " ")
            line = w
        else:
            line = (line + " " + w) if line else w
    chunks.append(line)
    out = ['MECHANISMS = ("%s"' % chunks[0]] + ['              "%s"' % c for c in chunks[1:]]
    out[-1] += ")"
    return out


def mp_mechanisms_block(t: Tables) -> list:
    out = py_tuple("NAMES", t.names)
    for name, meaning, names in t.families():
        out += py_tuple(name, names)
        out[-1] += "  # " + meaning
    return out


def replace_block(text: str, block: list, path: Path) -> str:
    """`text` with the lines between BEGIN and END replaced by `block`."""
    lines = text.split("\n")
    try:
        start, end = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise SystemExit("%s: no '%s' ... '%s' block" % (path, BEGIN, END)) from None
    return "\n".join(lines[:start + 1] + block + lines[end:])


def outputs(root: Path) -> dict:
    """{path relative to root: the content it must have}."""
    t = Tables(json.loads((root / REGISTRY).read_text()))
    return {PY_TABLE: python_table(t), C_HEADER: c_header(t),
            MP_REPORT: replace_block((root / MP_REPORT).read_text(), mp_report_block(t), MP_REPORT),
            MP_MECHANISMS: replace_block((root / MP_MECHANISMS).read_text(),
                                         mp_mechanisms_block(t), MP_MECHANISMS)}


def stale(root: Path) -> list:
    """The generated files whose content differs from what the registry gives."""
    return [p for p, text in outputs(root).items()
            if not (root / p).is_file() or (root / p).read_text() != text]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = ap.parse_args(argv)
    if args.check:
        old = stale(args.root)
        for p in old:
            print("stale: %s (run: %s)" % (p, COMMAND), file=sys.stderr)
        return 1 if old else 0
    for p, text in outputs(args.root).items():
        if not (args.root / p).is_file() or (args.root / p).read_text() != text:
            (args.root / p).write_text(text)
            print("wrote %s" % p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
