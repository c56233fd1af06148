"""The load generator (`ldpfleet fleet`) and the one-machine demo (`ldpfleet demo`).

The generator reads a campaign's retained signed config from the broker and verifies it with
the campaign's public key (spec §5), then publishes one report per device and phase (spec §4,
`ldp/<campaign>/r/<device-id>`, QoS 1) from three kinds of device:

* simulated CPython devices: true items drawn aggregator-side from a seeded distribution,
  reports produced in batches by the mechanism's C kernels (`perturb_batch`), all published
  over one MQTT connection with a bounded number of un-acknowledged messages (paho-mqtt hangs
  past 65,535 outstanding QoS 1 publishes: the 16-bit message ids wrap);
* real MicroPython device processes (`ldpfleet.provision.device_runner`), which perturb with their own
  OS RNG and keep their own ledger;
* C client processes (`device/c_client/`), when built.

Simulated devices follow the device ledger's rule of one report per phase: device `i` sends
exactly one report in a phase, with `seq = phase - 1`. The seed (`--seed`, by default the
campaign's id) fixes the device ids and the words, so re-running the same fleet re-sends
byte-identical reports, the way a device re-sends its memoised report: the aggregator counts
them as duplicates, and a fleet never grows by being run again. Each simulated device publishes
on its own schedule, as a device does (schedule.py): after its own share of the campaign's
first-publish spread, and re-sends on its own timer until acknowledged.

Two-phase campaigns: every true item (set) is drawn before any perturbation word, so the same
`--seed` (and device counts) gives every device the same item or set in phase 2 as in phase 1.
Set-valued phases default to phase 1's set length l (the devices' data does not change between
phases). In LDPMiner's phase 2 a simulated device trims its set to the candidates
(`ldpminer.trim_sets`, §4.4) before the mechanism pads it to the phase-2 l; in LDPLCM's phase
2 it evaluates the model on its item; LDPLCM's public sampling rule decides which devices
report in which phase.

A recurring campaign (a config with a `schedule`, spec §3.4) runs `recurring` instead: the
simulated devices enrol once and report every round that opens while the run lasts, their
values evolving between rounds (`fleet --change-rate`, `--rounds-to-run`, `--truth`).

Modules, in the order a run uses them: `campaign` (the verified campaign view), `items` (true
items), `simulated` (C-kernel devices), `schedule` (when each publishes), `acks` (their
acknowledgements), `devices` (real device processes), `recurring` (recurring campaigns), `fleet`
(`run_fleet`, `FleetOptions`, `FleetResult`), `serve_process` and `demo` (`run_demo`,
`DemoOptions`). MQTT goes through `ldpfleet.mqtt.client` (`QosPublisher`).
"""
from .demo import DemoOptions, run_demo
from .fleet import FleetOptions, FleetResult, run_fleet

__all__ = ["DemoOptions", "FleetOptions", "FleetResult", "run_demo", "run_fleet"]
