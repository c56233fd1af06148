"""Two-phase protocols built from the mechanisms (protocol_spec/v2 §3, §5).

* `ldpminer` — LDPMiner (Qin et al., CCS'16): set-valued heavy hitters, phase 1 sampling SH over
  the domain -> k_max candidates, phase 2 sampling RAPPOR or sampling SH over the candidates;
  single-phase sampling RAPPOR / sampling SH baselines.
* `ldplcm` — LDPLCM (Zhang, Lin, Yin): a sampled share of devices reports with Apple CMS, the
  aggregator trains a frequency model g and boundary P, exported as an integer-only model that
  the other devices evaluate to encode high-frequent items as the all -1 vector (`lcm`).

Both modules hold the aggregator-side steps (usable by the service and by the in-process
simulation) and `simulate_*` drivers; MQTT orchestration lives in the service.
"""
