"""Coverage of a campaign: which provisioned devices have an accepted report, and which are
silent.

The provisioned fleet is a file of device ids, one per line (`#` comments), the format of
broker-config's `--devices-file`: `--devices-file` of `serve`, `campaign status` and `devices
silent` (or `devices_file` in ldpfleet.toml). The state never holds device ids, only their
keyed hashes (dedupe.py), so a provisioned id is looked up by its hash (`Store.reported`, the
one place that hashes an id into its dedupe key). Without the file, coverage counts the
distinct devices with an accepted report and knows no denominator.

Whether a device reported does not depend on its value: a device publishes for every campaign
phase it takes part in whatever its value (spec §7.1; a value outside the domain reports
`other`), so a list of silent devices reveals nothing about values. Which devices take part in
which phase is the campaign's public rule (`ldplcm.reports_in_phase`: LDPLCM and svim split
the devices between the phases, LDPMiner asks every device in both).
"""
import os

from ...broker.secured import read_device_ids
from ...core.protocols.ldplcm import reports_in_phase


class ProvisionedFleet:
    """The device ids of a devices file, read again when the file changes (serve runs for
    months while boards are added)."""

    def __init__(self, path: str):
        self.path = path
        self._stamp = None
        self._ids = []
        self.ids()  # a missing or malformed file is an error at start, not at a scrape

    def ids(self) -> list:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            from ...core.errors import ConfigError
            raise ConfigError("devices_file", "cannot read %s: %s"
                              % (self.path, exc.strerror or exc)) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._ids, self._stamp = read_device_ids(self.path, field="devices_file"), stamp
        return self._ids


def fleet_of(path: str = None):
    """The ProvisionedFleet of a `--devices-file`, or None without one."""
    return ProvisionedFleet(path) if path else None


def _reported(store, name: str, phase: int, devices: list) -> set:
    """The devices among `devices` with an accepted report in (campaign, phase): THE lookup of
    provisioned ids by their dedupe keys."""
    return store.reported(name, phase, devices)


def _purged(store, name: str) -> bool:
    from ..state.retention import purge_record
    return purge_record(store, name) is not None


def coverage(store, name: str, fleet: ProvisionedFleet = None):
    """{"reported", "provisioned", "ratio"} of a campaign: provisioned devices with an accepted
    report in any phase (a recurring campaign: any round) over the provisioned devices; without a fleet, the distinct devices
    with an accepted report and no denominator. None once `campaign purge` dropped the dedupe
    keys (who reported is then unknown)."""
    camp = store.require_campaign(name)
    if _purged(store, name):
        return None
    if fleet is None:  # one key per device and slot: one slot needs no distinct count
        reported = (store.seen_count(name) if camp.phases == 1 and not camp.recurring
                    else store.devices_per_campaign().get(name, 0))
        return {"reported": int(reported), "provisioned": None, "ratio": None}
    ids = fleet.ids()
    seen = set()
    # a recurring campaign's slots are its rounds (rounds.py): those with reports
    slots = store.sketch_slots(name) if camp.recurring else range(1, camp.phases + 1)
    for phase in slots:
        seen |= _reported(store, name, phase, ids)
    return {"reported": len(seen), "provisioned": len(ids),
            "ratio": len(seen) / len(ids) if ids else None}


def silent_devices(store, name: str, fleet: ProvisionedFleet) -> dict:
    """The provisioned devices without an accepted report: per open phase, the devices the
    campaign's rule asks to report in it that have not (`phases`), and the devices with no
    accepted report in any phase although a phase asks them (`silent`)."""
    from ...core.errors import ConfigError
    camp = store.require_campaign(name)
    if _purged(store, name):
        raise ConfigError("name", "the dedupe keys of campaign %s were purged: who reported is "
                                  "no longer known" % name)
    ids = fleet.ids()
    if camp.recurring:
        return _silent_recurring(store, camp, ids)
    phases, reported_any, asked_any = [], set(), set()
    for phase in range(1, camp.phases + 1):
        asked = [d for d, yes in zip(ids, reports_in_phase(ids, camp.config, phase)) if yes]
        if phase > camp.phase:
            phases.append({"phase": phase, "open": False, "expected": len(asked),
                           "reported": 0, "silent": None})
            continue
        reported = _reported(store, name, phase, asked)
        reported_any |= reported
        asked_any.update(asked)
        phases.append({"phase": phase, "open": True, "expected": len(asked),
                       "reported": len(reported),
                       "silent": [d for d in asked if d not in reported]})
    return {"campaign": name, "state": camp.state, "phase": camp.phase,
            "provisioned": len(ids), "reported": len(reported_any),
            "silent": [d for d in ids if d in asked_any and d not in reported_any],
            "phases": phases}


def _silent_recurring(store, camp, ids) -> dict:
    """`silent_devices` of a recurring campaign (spec §3.4): every device is asked every round;
    `phases` holds the latest opened round (`round`: who has not reported in it yet),
    `silent` the devices with no report in any round (rounds.py: a round is a slot)."""
    from . import rounds
    reported_any = set()
    for r in store.sketch_slots(camp.name):
        reported_any |= _reported(store, camp.name, r, ids)
    opened = rounds.opened_slots(camp)
    phases = []
    if len(opened):
        reported = _reported(store, camp.name, opened[-1], ids)
        phases.append({"phase": 1, "round": opened[-1], "open": True, "expected": len(ids),
                       "reported": len(reported), "silent": [d for d in ids if d not in reported]})
    return {"campaign": camp.name, "state": camp.state, "phase": camp.phase,
            "provisioned": len(ids), "reported": len(reported_any),
            "silent": [d for d in ids if d not in reported_any], "phases": phases}
