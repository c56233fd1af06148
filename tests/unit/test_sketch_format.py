"""Serialized sketches carry a format version: the unversioned sketches of existing state files
still read, a newer format is refused with a typed error."""
import gzip
import json
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from ldpfleet.core.errors import LdpError, SketchMismatch
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import SKETCH_FORMAT, SKETCH_MAGIC, Sketch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state_v5" / "state.db.gz"


def sketch_with_reports():
    mech = make_mechanism("olh", 2000, 20, salt=7, campaign_id=5, phase=1, g=6)
    sketch = mech.new_sketch()
    rng = np.random.default_rng(3)
    sketch.update(mech.perturb_batch(rng.integers(0, 20, 300), rng))
    return sketch


def split(blob):
    (hlen,) = struct.unpack_from("<I", blob, 4)
    return json.loads(blob[8:8 + hlen]), blob[8 + hlen:]


def join(meta, arrays):
    head = json.dumps(meta, sort_keys=True).encode()
    return SKETCH_MAGIC + struct.pack("<I", len(head)) + head + arrays


def same(a, b):
    return a.n == b.n and all(np.array_equal(a._state()[k], b._state()[k]) for k in a._state())


def test_serialized_sketches_name_their_format():
    meta, _ = split(sketch_with_reports().serialize())
    assert meta["format"] == SKETCH_FORMAT == 1


def test_an_unversioned_sketch_still_reads():
    sketch = sketch_with_reports()
    meta, arrays = split(sketch.serialize())
    del meta["format"]
    assert same(Sketch.deserialize(join(meta, arrays)), sketch)


def test_the_sketches_of_a_committed_state_file_read(tmp_path):
    """tests/fixtures/state_v5 was written before sketches had a format."""
    db = tmp_path / "state.db"
    db.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute("SELECT n, blob FROM sketches").fetchall()
    finally:
        conn.close()
    assert rows
    for n, blob in rows:
        assert "format" not in split(bytes(blob))[0]
        old = Sketch.deserialize(bytes(blob))
        assert old.n == n
        again = old.serialize()
        assert split(again)[0]["format"] == SKETCH_FORMAT and same(Sketch.deserialize(again), old)


@pytest.mark.parametrize("fmt", [SKETCH_FORMAT + 1, 99, -1, "1", None])
def test_a_newer_or_unknown_format_is_refused(fmt):
    meta, arrays = split(sketch_with_reports().serialize())
    meta["format"] = fmt
    with pytest.raises(SketchMismatch) as err:
        Sketch.deserialize(join(meta, arrays))
    assert err.value.field == "format" and isinstance(err.value, LdpError)


def test_bytes_that_are_no_sketch_are_refused_typed():
    blob = sketch_with_reports().serialize()
    for bad, field in ((b"JUNK" + blob[4:], "magic"), (blob[:6], "magic"),
                       (blob + b"\x00", "arrays"), (blob[:-8], None)):
        with pytest.raises(SketchMismatch) as err:
            Sketch.deserialize(bad)
        assert field is None or err.value.field == field
