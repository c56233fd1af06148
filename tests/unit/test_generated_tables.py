"""The mechanism tables generated from protocol_spec/v2/registry.json (tools/gen_tables.py) are
current, say they are generated and how to regenerate them, and follow a registry change."""
import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("gen_tables", ROOT / "tools" / "gen_tables.py")
gen_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gen_tables)
TARGETS = (gen_tables.PY_TABLE, gen_tables.C_HEADER, gen_tables.MP_REPORT, gen_tables.MP_MECHANISMS)


def test_generated_tables_are_current():
    assert gen_tables.stale(ROOT) == []
    assert gen_tables.main(["--check"]) == 0


def test_generated_files_say_how_to_regenerate():
    for path in (gen_tables.PY_TABLE, gen_tables.C_HEADER):
        first = (ROOT / path).read_text().split("\n")[0]
        assert "Generated from protocol_spec/v2/registry.json" in first
        assert "`python tools/gen_tables.py`" in first
    for path in (gen_tables.MP_REPORT, gen_tables.MP_MECHANISMS):
        lines = (ROOT / path).read_text().split("\n")
        assert lines.index(gen_tables.BEGIN) < lines.index(gen_tables.END)
        assert "python tools/gen_tables.py" in gen_tables.BEGIN


def copy_checkout(tmp_path):
    for rel in (gen_tables.REGISTRY,) + TARGETS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_a_registry_change_makes_every_table_stale_until_regenerated(tmp_path, capsys):
    root = copy_checkout(tmp_path)
    registry = json.loads((root / gen_tables.REGISTRY).read_text())
    registry["mechanisms"]["newmech"] = {"id": len(registry["mechanisms"]) + 1, "params": ["kc"],
                                         "set_valued": True, "input": "index"}
    (root / gen_tables.REGISTRY).write_text(json.dumps(registry, indent=2))
    assert sorted(gen_tables.stale(root)) == sorted(TARGETS)
    assert gen_tables.main(["--check", "--root", str(root)]) == 1
    assert "stale: " in capsys.readouterr().err
    assert gen_tables.main(["--root", str(root)]) == 0
    assert gen_tables.main(["--check", "--root", str(root)]) == 0
    table = {}
    exec((root / gen_tables.PY_TABLE).read_text(), table)  # noqa: S102 - the file just generated
    assert table["MECHANISM_IDS"]["newmech"] == len(registry["mechanisms"])
    assert "newmech" in table["SET_VALUED"] and "newmech" in table["LISTED"]
    assert "newmech" in table["BY_INDEX"] and "newmech" not in table["NUMERIC"]
    header = (root / gen_tables.C_HEADER).read_text()
    assert "#define LDP_MECHANISM_ID_NEWMECH %d" % len(registry["mechanisms"]) in header
    report = (root / gen_tables.MP_REPORT).read_text()
    assert "pem newmech" in report


def test_ids_with_a_gap_are_refused(tmp_path):
    root = copy_checkout(tmp_path)
    registry = json.loads((root / gen_tables.REGISTRY).read_text())
    registry["mechanisms"]["newmech"] = {"id": len(registry["mechanisms"]) + 2, "params": []}
    (root / gen_tables.REGISTRY).write_text(json.dumps(registry))
    try:
        gen_tables.main(["--check", "--root", str(root)])
    except SystemExit as exc:
        assert "without gaps" in str(exc)
    else:
        raise AssertionError("a gap in the ids was accepted")
