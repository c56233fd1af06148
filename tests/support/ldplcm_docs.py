"""Small LDPLCM model documents: one valid (`small_doc`) and one per validity rule it breaks
(`BAD_DOCS`), shared by the aggregator's model checks (unit/test_ldplcm.py) and the devices'
(integration/test_lcm_model_device.py, integration/test_device_phase2.py), which apply the same
rules."""


def small_doc(**changes):
    doc = {"format": "ldplcm-gbr", "version": 1, "scale_bits": 16, "init": 100, "boundary": 50,
           "roots": [0, 3], "split": [5, 10, -20, 7, 1, 2], "right": [2, -1, -1, 5, -1, -1]}
    doc.update(changes)
    return doc


BAD_DOCS = [
    ("format", small_doc(format="gbr")),
    ("version", small_doc(version=2)),
    ("version bool", small_doc(version=True)),
    ("scale", small_doc(scale_bits=31)),
    ("init", small_doc(init=1.5)),
    ("boundary range", small_doc(boundary=1 << 30)),
    ("roots start", small_doc(roots=[1, 3])),
    ("roots order", small_doc(roots=[0, 3, 3])),
    ("roots range", small_doc(roots=[0, 6])),
    ("lengths", small_doc(right=[2, -1, -1, 5, -1])),
    ("right backwards", small_doc(right=[2, -1, -1, 3, -1, -1])),
    ("right = i + 1", small_doc(right=[1, -1, -1, 5, -1, -1])),
    ("right into next tree", small_doc(right=[4, -1, -1, 5, -1, -1])),
    ("leafless tree", small_doc(roots=[0, 5], right=[2, -1, -1, 5, -1, 7])),
    ("int32", small_doc(split=[5, 10, -20, 1 << 31, 1, 2])),
    ("bool entry", small_doc(split=[5, True, -20, 7, 1, 2])),
    ("sum bound", small_doc(split=[5, (1 << 30) - 100, -20, 7, 1, 2])),
    ("not a list", small_doc(roots="0")),
    ("empty", small_doc(roots=[])),
]
