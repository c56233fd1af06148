"""Users' own data for `ldpfleet simulate --data FILE` (aggregator side only).

FILE is a CSV with the header ``device,item`` and one row per device and item. A device holding
no item is one row with an empty item (``dev7,``) and stays a device with an empty set. Items
are non-negative integers when every non-empty item is one, else strings; the domain is the
distinct items, indices 0..d-1 in numeric (ints) or string order, `labels` keeping the items.
Fields are stripped of surrounding blanks; blank lines are skipped. Every problem is a
`DataFileError` naming the file, the line and the field ("header", "row", "device", "item",
"duplicate").

Sets are `KeySets` over item indices (uint32 keys, uint64 offsets), the layout the set-valued
mechanisms read (LDPMiner, Qin et al., CCS 2016, §3: a user holds s distinct items).
"""
import csv
from array import array
from dataclasses import dataclass

import numpy as np

from ..core.errors import DataFileError
from ..core.mechanisms.sh import KeySets, take_sets

HEADER = ["device", "item"]
NO_ITEM = -1


@dataclass(frozen=True)
class ItemData:
    """A loaded FILE: `devices` ids in first-seen order, `sets` (device u holds item indices
    keys[offsets[u]:offsets[u+1]]), `labels` (item of each index), `path`; `device_lines` /
    `item_lines` the line of each device's first row / of each key (for messages)."""

    path: str
    devices: list
    sets: KeySets
    labels: list
    device_lines: np.ndarray
    item_lines: np.ndarray

    @property
    def domain(self) -> int:
        return len(self.labels)

    @property
    def users(self) -> int:
        return len(self.devices)

    def set_sizes(self) -> np.ndarray:
        """Items per device (int64)."""
        return np.diff(self.sets.offsets.astype(np.int64))

    def resample(self, n: int, rng) -> KeySets:
        """`n` devices drawn uniformly with replacement (their sets copied), as KeySets."""
        return take_sets(self.sets, rng.integers(0, self.users, int(n)))

    def single_values(self) -> np.ndarray:
        """Every device's one item index (uint32), for single-item mechanisms; DataFileError
        naming the first device (in file order) with 0 or 2+ items."""
        sizes = self.set_sizes()
        bad = np.flatnonzero(sizes != 1)
        if bad.size:
            lines = np.where(sizes[bad] == 0, self.device_lines[bad],
                             self.item_lines[np.minimum(self.sets.offsets[bad].astype(np.int64) + 1,
                                                        self.item_lines.size - 1)])
            u = int(bad[np.argmin(lines)])
            raise DataFileError("item", "device %r holds %d items; a single-item mechanism needs "
                                "exactly one per device" % (self.devices[u], sizes[u]),
                                self.path, int(lines.min()))
        return np.ascontiguousarray(self.sets.keys, np.uint32)


def load_item_csv(path) -> ItemData:
    """Read FILE (module docstring) in one streaming pass; DataFileError on any problem."""
    name = str(path)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh, strict=True)
        try:
            return _parse(reader, name)
        except csv.Error as exc:
            raise DataFileError("row", "not valid CSV: %s" % exc, name, reader.line_num) from None
        except UnicodeDecodeError as exc:
            raise DataFileError("encoding", "not UTF-8 text (%s) after" % exc.reason, name,
                                reader.line_num) from None


def _parse(reader, name) -> ItemData:
    head = next(reader, None)
    while head == []:
        head = next(reader, None)
    if head is None:
        raise DataFileError("header", "empty file (expected the header 'device,item')", name)
    if [h.strip() for h in head] != HEADER:
        raise DataFileError("header", "expected the header 'device,item', got %r"
                            % ",".join(head), name, reader.line_num)
    rows = _read_rows(reader, name)
    return _build(name, *rows)


def _read_rows(reader, name):
    """(device ids, item strings, per-row device idx, item idx, line) with NO_ITEM for ''."""
    dev_index, item_index = {}, {}
    devs, items, lines = array("q"), array("q"), array("q")
    for row in reader:
        if not row:
            continue
        line = reader.line_num
        if len(row) != 2:
            raise DataFileError("row", "expected 2 columns (device,item), got %d" % len(row),
                                name, line)
        dev, item = row[0].strip(), row[1].strip()
        if "\0" in dev or "\0" in item:
            raise DataFileError("row", "a NUL byte in a field", name, line)
        if not dev:
            raise DataFileError("device", "empty device id", name, line)
        d = dev_index.get(dev)
        if d is None:
            d = dev_index[dev] = len(dev_index)
        if item:
            i = item_index.get(item)
            if i is None:
                i = item_index[item] = len(item_index)
        else:
            i = NO_ITEM
        devs.append(d)
        items.append(i)
        lines.append(line)
    if not dev_index:
        raise DataFileError("row", "no rows after the header", name)
    return (list(dev_index), list(item_index), np.frombuffer(devs, np.int64),
            np.frombuffer(items, np.int64), np.frombuffer(lines, np.int64))


def _labels(items):
    """(sorted labels, map from first-seen item number to index)."""
    if all(s.isascii() and s.isdigit() and s == str(int(s)) for s in items):
        values = np.array([int(s) for s in items], dtype=object)
        labels = sorted(set(values.tolist()))
        pos = {v: j for j, v in enumerate(labels)}
        return labels, np.array([pos[v] for v in values.tolist()], np.int64)
    order = sorted(range(len(items)), key=items.__getitem__)
    remap = np.empty(len(items), np.int64)
    remap[order] = np.arange(len(items))
    return [items[j] for j in order], remap


def _build(name, devices, items, dev, item, line) -> ItemData:
    labels, remap = _labels(items)
    idx = np.where(item == NO_ITEM, NO_ITEM, remap[np.maximum(item, 0)]) if items else item
    _check_duplicates(name, devices, labels, dev, idx, line)
    _check_empty_marks(name, devices, dev, idx, line)
    if len(labels) < 2:
        raise DataFileError("item", "the domain needs at least 2 distinct items, found %d"
                            % len(labels), name)
    keep = idx != NO_ITEM
    order = np.argsort(dev[keep], kind="stable")
    sizes = np.bincount(dev[keep], minlength=len(devices))
    offsets = np.zeros(len(devices) + 1, np.uint64)
    np.cumsum(sizes, out=offsets[1:])
    first = np.full(len(devices), np.iinfo(np.int64).max)
    np.minimum.at(first, dev, line)
    return ItemData(name, devices, KeySets(idx[keep][order].astype(np.uint32), offsets), labels,
                    first, line[keep][order])


def _check_duplicates(name, devices, labels, dev, idx, line):
    """The first (in file order) row repeating an earlier (device, item) row."""
    code = dev * (len(labels) + 1) + (idx + 1)
    order = np.argsort(code, kind="stable")
    same = np.flatnonzero(code[order][1:] == code[order][:-1]) + 1
    if not same.size:
        return
    starts = np.searchsorted(code[order], code[order][same], side="left")
    j = int(np.argmin(line[order][same]))
    row, earlier = order[same[j]], order[starts[j]]
    item = "" if idx[row] == NO_ITEM else labels[idx[row]]
    raise DataFileError("duplicate", "duplicate row (%s, %s): line %d repeats line %d"
                        % (devices[dev[row]], item, line[row], line[earlier]), name,
                        int(line[row]))


def _check_empty_marks(name, devices, dev, idx, line):
    """A device marked as holding no item ('dev,') must have no item rows."""
    empty = np.zeros(len(devices), bool)
    empty[dev[idx == NO_ITEM]] = True
    clash = np.flatnonzero(empty[dev] & (idx != NO_ITEM))
    if clash.size:
        r = int(clash[np.argmin(line[clash])])
        mark = int(line[(dev == dev[r]) & (idx == NO_ITEM)].min())
        raise DataFileError("row", "device %r has items but line %d says it holds none"
                            % (devices[dev[r]], mark), name, int(line[r]))
