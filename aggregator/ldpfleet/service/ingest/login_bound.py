"""A bound on the device ids one load-generator login brings into a campaign phase.

A real device's id is its broker login (one id per login). A load generator's login `L`
publishes `ldp/<campaign>/r/L/<id>` for any `<id>` (spec §4): each new id is one more dedupe
key in serve's memory and state (about 35-70 bytes in the SQLite index, plus the table row), so
without a bound one login could grow them without end. `LoginBound` keeps, per (campaign,
phase, login), how many ids have a claimed report (`login_devices`: one row per worker,
summed; several PostgreSQL workers may overshoot by what their batches in flight admit), and
admits a batch's new ids of a login only while that count stays within `limit`
(`serve --max-devices-per-login`). Reports of ids beyond it are counted as `device_limit`
(acknowledged as rejected); ids already claimed keep being deduplicated as before.
The common batch (device topics without a login part) costs one gather of the device names
and one search for "/" in them (about 10 ns per report): no query.
"""
import numpy as np

DEFAULT_MAX_DEVICES_PER_LOGIN = 1_000_000
"""Well above a pilot fleet's simulated devices (the demo runs 20,000)."""
SLASH = ord("/")


class Admission:
    """Which of a batch's distinct devices (`uniq`) may claim a key, and whose login each is."""

    __slots__ = ("admitted", "logins", "login_of", "refused")

    def __init__(self, admitted, logins, login_of, refused):
        self.admitted = admitted  # bool per distinct device
        self.logins = logins      # login names (str) of the batch
        self.login_of = login_of  # index into logins per distinct device, -1: no login
        self.refused = refused    # {login: (ids already counted, ids refused)}


class LoginBound:
    """`admit` before the claim, `record` after it, inside the batch's transaction."""

    def __init__(self, store, limit: int = DEFAULT_MAX_DEVICES_PER_LOGIN):
        self.store = store
        self.limit = limit or None

    def admit(self, name, phase, batch, first_rows, uniq):
        """None when no device of the batch has a login part (or there is no bound); else an
        Admission. `first_rows`: the batch row of each distinct device, `uniq` its key."""
        if self.limit is None or first_rows.size == 0:
            return None
        _ok, _coff, _clen, doff, dlen = batch.split_topics()
        width = int(dlen[first_rows].max())
        names = batch.gather(doff, dlen, first_rows, width)
        if names.tobytes().find(b"/") < 0:  # one memchr: the usual batch has no login part
            return None
        slash = names == SLASH
        has = slash.any(axis=1)
        idx = np.flatnonzero(has)
        cut = slash[idx].argmax(axis=1)
        login_bytes = names[idx] * (np.arange(width) < cut[:, None])
        raw = np.ascontiguousarray(login_bytes).view("S%d" % width).ravel()
        found, which = np.unique(raw, return_inverse=True)
        logins = [b.decode("ascii") for b in found.tolist()]
        login_of = np.full(first_rows.size, -1, np.int64)
        login_of[idx] = which.ravel()
        admitted = np.ones(first_rows.size, bool)
        refused = {}
        for k, login in enumerate(logins):
            members = idx[which.ravel() == k]
            used = self.store.login_devices(name, phase, login)
            room = self.limit - used
            if room >= members.size:  # even if every one is new
                continue
            fresh = members[~self.store.claimed_keys(name, phase, uniq[members])]
            fresh = fresh[np.argsort(first_rows[fresh], kind="stable")]  # first come, first in
            over = fresh[max(room, 0):]
            if over.size:
                admitted[over] = False
                refused[login] = (used, int(over.size))
        return Admission(admitted, logins, login_of, refused)

    def record(self, name, phase, admission, claimed):
        """Count the ids each login got claimed in this batch (`claimed`: per distinct device)."""
        if admission is None:
            return
        for k, login in enumerate(admission.logins):
            n = int(np.count_nonzero(claimed & (admission.login_of == k)))
            if n:
                self.store.add_login_devices(name, phase, login, n)
