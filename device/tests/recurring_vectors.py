"""Reproduce vectors/recurring.json on MicroPython (run by tests/integration/test_device_recurring.py).

  micropython recurring_vectors.py VECTORS_DIR OUT_JSON

Writes {"configs": [refusing field or null per `configs` case (ldp.config.check_config at the
case's `now`)], "rounds": [[R, round or null] per `rounds` case (ldp.schedule)], "reports":
[report hex per `reports` case: the memoised mechanism's report from the case's state, words and
nonce, then ldp.schedule.with_round | "error: ..."]}.
"""
import json
import sys
from binascii import unhexlify

from ldp.config import check_config
from ldp.errors import ConfigError
from ldp.mechanisms import make
from ldp import schedule
from word_source import WordSource


def config_field(doc, now):
    try:
        check_config(doc, now)
    except ConfigError as exc:
        return exc.field
    return None


def round_results(cases):
    out = []
    for c in cases:
        doc = {"schedule": c["schedule"], "not_after": c["not_after"]}
        out.append([schedule.round_count(doc), schedule.round_at(doc, c["t"])])
    return out


def report_results(cases):
    out = []
    for c in cases:
        try:
            mech = make(c["mechanism"], c["eps_milli"], c["domain_size"], c["salt"],
                        c["campaign_id"], c["phase"], c["params"])
            src = WordSource(c["words"])
            value = {"value": c["value"]["value"], "state": unhexlify(c["value"]["state"])}
            report = schedule.with_round(mech.report(value, c["nonce"], src), c["round"])
            if src.pos != len(src.data):
                raise ValueError("consumed %d of %d random words" % (src.pos // 4, len(c["words"])))
            out.append("".join("%02x" % b for b in report))
        except Exception as exc:
            out.append("error: %r" % (exc,))
    return out


def main(argv):
    with open(argv[0] + "/recurring.json") as f:
        vec = json.load(f)
    out = {"configs": [config_field(c["body"], c["now"]) for c in vec["configs"]],
           "rounds": round_results(vec["rounds"]), "reports": report_results(vec["reports"])}
    with open(argv[1], "w") as f:
        json.dump(out, f)


main(sys.argv[1:])
