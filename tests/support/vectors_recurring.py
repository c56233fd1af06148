"""recurring.json (protocol_spec/v2 §3.4, §5.4 `schedule`): config cases (accepted, or the
refusing field), round cases (the round open at a time), and round-header reports (the one-shot
memoised report vectors with flags = 1 and `round:u32` after the header), from the reference
rules in ldpfleet.core.schedule and ldpfleet.core.config."""
import copy
import json
from pathlib import Path

from ldpfleet.core import config as campaign_config
from ldpfleet.core import schedule
from ldpfleet.core.errors import ConfigError

VECTORS = Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"
NB, NA = 1790000000, 1790000000 + 30 * 86400


def base_config() -> dict:
    """A valid recurring config: BiLOLOHA-like loloha, a daily schedule of 30 rounds."""
    return {"type": "config", "protocol": 2, "campaign": "fw-daily", "campaign_id": 305419896,
            "salt": 2882400001, "not_before": NB, "not_after": NA,
            "domain": {"type": "int", "size": 100}, "metric": "fw_version",
            "delivery": {"ack": True, "retry_s": 30, "retry_max_s": 3600, "spread_s": 10},
            "schedule": {"start": NB + 60, "every_s": 86400, "rounds": 29},
            "phases": [{"phase": 1, "mechanism": "loloha", "eps_milli": 2000,
                        "params": {"eps1_milli": 1000, "g": 2}}]}


def _variant(name, edit):
    doc = base_config()
    edit(doc)
    try:
        campaign_config.check_config(doc, now=NB + 100)
        error = None
    except ConfigError as e:
        error = e.field
    return {"name": name, "now": NB + 100, "body": doc, "error": error}


def _set(path, value):
    def edit(doc):
        obj = doc
        for key in path[:-1]:
            obj = obj[key]
        if value is _DELETE:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
    return edit


_DELETE = object()


def config_cases():
    s = ("schedule",)
    cases = [
        ("valid", lambda d: None),
        ("valid-no-rounds", _set(s + ("rounds",), _DELETE)),
        ("valid-losue", lambda d: d["phases"][0].update(mechanism="losue", params={"eps1_milli": 1000})),
        ("valid-lgrr-min-period", lambda d: (d["phases"][0].update(mechanism="lgrr", params={"eps1_milli": 1000}),
                                             d["schedule"].update(every_s=10, rounds=3))),
        ("valid-lbitmean", lambda d: d["phases"][0].update(mechanism="lbitmean", params={"eps1_milli": 1000, "s": 4})),
        ("valid-last-round-just-opens", _set(s + ("rounds",), (NA - NB - 60 - 1) // 86400 + 1)),
        ("memoised-without-schedule", _set(s, _DELETE)),
        ("one-shot-with-schedule", lambda d: d["phases"][0].update(mechanism="olh", params={"g": 4})),
        ("two-phases", lambda d: d["phases"].append({"phase": 2, "mechanism": "loloha", "eps_milli": 2000,
                                                     "params": {"eps1_milli": 1000, "g": 2}})),
        ("not-an-object", _set(s, [NB, 86400])),
        ("unknown-key", _set(s + ("until",), NA)),
        ("missing-start", _set(s + ("start",), _DELETE)),
        ("missing-every", _set(s + ("every_s",), _DELETE)),
        ("start-before-not-before", _set(s + ("start",), NB - 1)),
        ("start-at-not-after", _set(s + ("start",), NA)),
        ("start-bool", _set(s + ("start",), True)),
        ("start-string", _set(s + ("start",), str(NB))),
        ("every-too-short", _set(s + ("every_s",), 9)),
        ("every-too-long", _set(s + ("every_s",), 31536001)),
        ("every-float", _set(s + ("every_s",), 86400.0)),
        ("rounds-zero", _set(s + ("rounds",), 0)),
        ("rounds-too-many", _set(s + ("rounds",), 100001)),
        ("rounds-bool", _set(s + ("rounds",), True)),
        ("rounds-past-not-after", _set(s + ("rounds",), 31)),
        ("no-rounds-too-many", lambda d: (d["schedule"].pop("rounds"), d["schedule"].update(every_s=10),
                                          d.update(not_after=NB + 60 + 10 * 100001))),
    ]
    return [_variant(name, edit) for name, edit in cases]


def round_cases():
    out = []
    doc = base_config()
    shapes = [({"start": NB + 60, "every_s": 86400, "rounds": 29}, NA),
              ({"start": NB + 60, "every_s": 86400}, NA),
              ({"start": NB, "every_s": 10, "rounds": 3}, NB + 35),
              ({"start": NB, "every_s": 7}, NB + 20)]
    for sched, not_after in shapes:
        d = dict(doc, schedule=sched, not_after=not_after)
        start, every = sched["start"], sched["every_s"]
        times = sorted({start - 1, start, start + 1, start + every - 1, start + every,
                        start + 2 * every + 3, not_after - 1, not_after, not_after + 5,
                        start + 28 * every, start + 29 * every})
        for t in times:
            out.append({"schedule": sched, "not_after": not_after, "t": t,
                        "rounds": schedule.round_count(d), "round": schedule.round_at(d, t)})
    return out


def header_reports():
    """Every memoised report vector of phase 1 again as a recurring report of round r: flags 1
    and le32(r) after the header (spec §3.4)."""
    out = []
    for name in sorted(schedule.MEMOISED):
        cases = json.loads((VECTORS / ("reports_%s.json" % name)).read_text())
        for i, case in enumerate(cases[:6]):
            rnd = [1, 2, 365, 100000, 7, 29][i % 6]
            one = bytes.fromhex(case["report_hex"])
            rec = schedule.with_round(one, rnd)
            assert schedule.split_round(rec) == (one, rnd)
            c = copy.deepcopy(case)
            c.update(round=rnd, one_shot_hex=case["report_hex"], report_hex=rec.hex())
            out.append(c)
    return out


def recurring_vectors():
    return {"configs": config_cases(), "rounds": round_cases(), "reports": header_reports()}
