"""Set-valued work timed per value on both device clients (spec §7.1 "constant work").

`cases()` lists set-valued campaign phases (LDPMiner's sampling SH / sampling RAPPOR / SH,
`shc` phase 1, SVIM's padding-and-sampling GRR / OLH over the integer domain and over a
candidate list, a string domain) with, for each, the device values to compare: sets of every
size 0..capacity, all out of the domain, repeats, longer than the capacity, wrong types, and
for a phase-2 candidate list every overlap (none, some, all, a subset, a superset).

Each client runs the trigger's value-dependent work — from the device's value to the report
bytes — in one process, many times per value, the values interleaved in a shuffled order that
changes every round, so that machine load and drift fall on every value alike:
  MicroPython   phase 1: `mech.report(dev._input(doc, mech), nonce, os.urandom)`;
                phase 2: `mech, v = dev.phase2_input(doc, p2); mech.report(v, nonce, os.urandom)`
                (`Device` built once per value, as at start; wall clock, ticks_us); also the
                heap allocated by one trigger (gc.mem_alloc() delta after gc.collect()).
  C client      a driver linked with the client's own objects (everything but ldp_client.o):
                the value prepared as at start (`ldpc_value_init`, where the client has it),
                then `ldpc_phase1_input` / `ldpc_phase2_input` and `ldpc_mech_report` (words
                from a xorshift stream, as the OS RNG's would be); the thread's CPU time.
A sample times `batch` triggers of one value (batch sized once per case so that a sample
takes about `sample_us`); a value's figure is a low quantile (LOW) of its samples: a busy
machine only ever adds time to a sample. `device_dir` selects the client code (default the
repository's device/; the C client's c_client/ and ../c_kernels beside it), so the same
measurement runs on another checkout's code (tools/bench_set_timing.py --device-dir).
"""
import json
import subprocess
import tempfile
from pathlib import Path

from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner

from .devices import SIGNING_KEY

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = 64  # identity set_capacity default (spec §7.1); both clients' slots
INT_DOMAIN = 4096
CANDIDATES = list(range(0, 2 * CAPACITY, 2))  # 64 even keys: the phase-2 candidate list
STR_ITEMS = ["item-%03d" % i for i in range(256)]


def _sizes(pool):
    """(label, set) for every size 0..CAPACITY: the first k keys of `pool`."""
    return [("size%d" % k, pool[:k]) for k in range(CAPACITY + 1)]


def _common(pool, domain_size):
    """Sets that are not plain in-domain sets: out of the domain, repeats, long, wrong types."""
    return [("out_of_domain", [domain_size + j for j in range(CAPACITY)]),
            ("one_repeated", [pool[0]] * CAPACITY),
            ("half_repeats", [pool[j // 2] for j in range(CAPACITY)]),
            ("longer_than_capacity", list(pool[:CAPACITY]) + [pool[0]] * 8),
            ("wrong_types", ["x", -1, None, True, 2.5, [1]] * 10 + [pool[0]] * 4),
            ("not_a_list", pool[0])]


def _overlaps():
    """(label, set) for a phase-2 candidate list of the 64 even keys: every overlap."""
    odd = list(range(1, 2 * CAPACITY, 2))
    return [("overlap_none", odd),
            ("overlap_one", odd[:CAPACITY - 1] + [CANDIDATES[5]]),
            ("overlap_half", [k for pair in zip(CANDIDATES[:32], odd[:32]) for k in pair]),
            ("overlap_all", list(CANDIDATES)),
            ("overlap_subset", CANDIDATES[:8]),
            ("overlap_superset", [k for pair in zip(CANDIDATES, odd) for k in pair][:CAPACITY])]


def _config(name, phases, domain):
    from ldpfleet.core import protocol
    return campaign_config.make_config(name, phases, domain, 0x5EED,
                                       campaign_id=protocol.murmur3_32(name.encode(), 0))


def cases():
    """[{"name", "config", "phase2" (or None), "phase", "values": [[label, value], ...]}]."""
    ints = {"type": "int", "size": INT_DOMAIN}
    pool = list(range(7, 7 + 13 * CAPACITY, 13))  # 64 distinct in-domain keys, not candidates' order
    mixed = [k for pair in zip(CANDIDATES, range(1, 2 * CAPACITY, 2)) for k in pair]
    phase1_values = _sizes(pool) + _common(pool, INT_DOMAIN)
    phase2_values = _sizes(mixed) + _common(mixed, INT_DOMAIN) + _overlaps()
    out = []

    def add(name, phases, p2_kwargs, phase, values, domain=ints):
        doc = _config("st-" + name, phases, domain)
        p2 = campaign_config.make_phase2(doc, **p2_kwargs) if p2_kwargs is not None else None
        out.append({"name": name, "config": doc, "phase2": p2, "phase": phase,
                    "values": [[label, v] for label, v in values]})

    sh = {"m": 1024, "l": 4}
    for second, params in (("srappor", {"l": 4}), ("sh", dict(sh))):
        phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": dict(sh)},
                  {"phase": 2, "mechanism": second, "eps_milli": 1000, "params": params}]
        if second == "srappor":
            add("sh-phase1", phases, None, 1, phase1_values)
        add(second + "-phase2", phases, {"candidates": CANDIDATES}, 2, phase2_values)
    phases = [{"phase": 1, "mechanism": "shc", "eps_milli": 1000, "params": dict(sh)},
              {"phase": 2, "mechanism": "shc", "eps_milli": 1000, "params": dict(sh)}]
    add("shc-phase1", phases, None, 1, phase1_values)
    for mech, params in (("psolh", {"g": 8}), ("psgrr", {})):
        add(mech + "-phase1", [{"phase": 1, "mechanism": mech, "eps_milli": 1000,
                                "params": dict(params, l=4)}], None, 1, phase1_values)
        other = "psgrr" if mech == "psolh" else "psolh"
        phases = [{"phase": 1, "mechanism": other, "eps_milli": 1000, "sample_rate_ppm": 500000,
                   "params": dict({"psolh": {"g": 8}, "psgrr": {}}[other], l=1)},
                  {"phase": 2, "mechanism": mech, "eps_milli": 1000, "sample_rate_ppm": 500000,
                   "params": dict(params, l=4),
                   "fallback": {"mechanism": mech, "params": dict(params, l=4)}}]
        add(mech + "-phase2", phases, {"candidates": CANDIDATES}, 2, phase2_values)
        # svim's flat branch (spec §5.4): the fallback over the integer domain, untrimmed
        add(mech + "-fallback", phases, {"fallback": True}, 2, phase1_values)
    strs = {"type": "str", "items": STR_ITEMS}
    spool = STR_ITEMS[::3][:CAPACITY]
    svalues = (_sizes(spool) + [("out_of_domain", ["other-%d" % j for j in range(CAPACITY)]),
                                ("one_repeated", [spool[0]] * CAPACITY),
                                ("long_strings", ["x" * 200 + str(j) for j in range(CAPACITY)]),
                                ("ints_in_str_domain", list(range(CAPACITY)))])
    add("sh-str-phase1", [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": dict(sh)}],
        None, 1, svalues, domain=strs)
    return out


MICROPYTHON_SCRIPT = r'''
import gc, json, sys, time
from os import urandom
from ldp import config as cfg
from ldp.device import Device

job = json.load(open(sys.argv[1]))
identity = {"device_id": "timing", "trusted_keys": job["keys"], "eps_cap_milli": 8000,
            "lifetime_budget_milli": 10 ** 9}
reps = job["reps"]
quiet = lambda *a: None


def trigger(dev, doc, p2, phase):
    if phase == 1:
        mech = dev._mechanism(doc, 1, {})
        def op():
            mech.report(dev._input(doc, mech), 7, urandom)
        return op
    def op():
        m, v = dev.phase2_input(doc, p2)
        m.report(v, 7, urandom)
    return op


result = {}
seed = 12345
for case in job["cases"]:
    doc = cfg.check_config(case["config"])
    p2 = cfg.check_phase2(case["phase2"], doc) if case["phase2"] is not None else None
    ops = []
    for label, value in case["values"]:
        dev = Device(job["state"], identity, doc["campaign"], value, log=quiet)
        ops.append(trigger(dev, doc, p2, case["phase"]))
    alloc = []
    for op in ops:
        op()
        gc.collect()
        a0 = gc.mem_alloc()
        op()
        alloc.append(gc.mem_alloc() - a0)
    per_op = None
    for _ in range(3):  # the quickest of three passes: a busy machine only slows a pass down
        t0 = time.ticks_us()
        for op in ops:
            op()
        dt = max(1, time.ticks_diff(time.ticks_us(), t0) // len(ops))
        per_op = dt if per_op is None else min(per_op, dt)
    batch = max(1, job["sample_us"] // per_op)  # one batch size for every value of the case
    rounds = []
    order = list(range(len(ops)))
    for r in range(reps):
        for j in range(len(order) - 1, 0, -1):  # a new shuffle every round (xorshift32)
            seed ^= (seed << 13) & 0xFFFFFFFF
            seed ^= seed >> 17
            seed ^= (seed << 5) & 0xFFFFFFFF
            k = seed % (j + 1)
            order[j], order[k] = order[k], order[j]
        gc.collect()  # a round allocates far less than the heap: no collection inside it
        seq = []
        for j in order:
            op = ops[j]
            t0 = time.ticks_us()
            for _ in range(batch):
                op()
            seq.append([j, time.ticks_diff(time.ticks_us(), t0) * 1000 // batch])
        rounds.append(seq)
    result[case["name"]] = {"rounds": rounds, "alloc": alloc, "batch": batch}
json.dump(result, open(sys.argv[2], "w"))
'''

C_DRIVER = r'''
/* Times the C client's value-to-report work per value (tests/support/set_timing.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#ifndef LDPC_OLD_CLIENT
#include "device.h"
/* the value prepared once at start (value.h), as the device does */
typedef struct ldpc_value prepared_value;
static void prepare(prepared_value *v, const cJSON *json) { ldpc_value_init(v, json); }
#define AS_INPUT(v, json) (v)
#else
/* a client from before value.h reads the JSON value on every trigger, and its phase-1 steps
 * are device.c's own static functions: the driver compiles device.c in */
#include "device.c"
typedef int prepared_value;
static void prepare(prepared_value *v, const cJSON *json) { (void)v; (void)json; }
#define AS_INPUT(v, json) (json)
static int ldpc_phase1_input(const cJSON *doc, const cJSON *value, int high, struct ldpc_mech *mech,
                             struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    *keys = NULL;
    if (make_mech(doc, 1, NULL, mech, why) != 0)
        return -1;
    if (build_input(value, high, doc, mech, in, keys, why) != 0) {
        ldpc_mech_free(mech);
        return -1;
    }
    return 0;
}
#endif

static uint32_t rng = 12345;
static uint32_t next_word(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: a busy machine's preemptions do not count */
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One trigger: input, report; 0 or -1 (printed) */
static int trigger(const cJSON *doc, const cJSON *p2, int phase, const cJSON *json, const prepared_value *v,
                   uint32_t *words, uint8_t *report)
{
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint32_t *keys = NULL;
    int rc;
    (void)json;
    (void)v;
    if (phase == 1) {
        rc = ldpc_phase1_input(doc, AS_INPUT(v, json), 0, &mech, &in, &keys, &why);
    } else {
        rc = ldpc_phase2_input(doc, p2, AS_INPUT(v, json), 0, &mech, &in, &keys, &why);
    }
    if (rc != 0) {
        printf("{\"error\": \"%s: %s\"}\n", why.field, why.message);
        return -1;
    }
    ldpc_mech_report(&mech, &in, words, 7, report);
    ldpc_mech_free(&mech);
    free(keys);
    return 0;
}

int main(int argc, char **argv)
{
    FILE *f = fopen(argv[1], "rb");
    long size;
    char *text;
    cJSON *job, *cases, *c;
    int reps, batch, first = 1;
    double sample_ns;
    static uint32_t words[4096];
    static uint8_t report[1024];
    if (f == NULL)
        return 1;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, f) != (size_t)size)
        return 1;
    text[size] = 0;
    fclose(f);
    job = cJSON_Parse(text);
    reps = cJSON_GetObjectItem(job, "reps")->valueint;
    sample_ns = 1000.0 * cJSON_GetObjectItem(job, "sample_us")->valueint;
    cases = cJSON_GetObjectItem(job, "cases");
    printf("{");
    cJSON_ArrayForEach(c, cases) {
        const cJSON *doc = cJSON_GetObjectItem(c, "config"), *p2 = cJSON_GetObjectItem(c, "phase2");
        const cJSON *values = cJSON_GetObjectItem(c, "values"), *pair;
        int phase = cJSON_GetObjectItem(c, "phase")->valueint, n = cJSON_GetArraySize(values), i, r, k;
        const cJSON **json = calloc((size_t)n, sizeof *json);
        prepared_value *prepared = calloc((size_t)n, sizeof *prepared);
        int *order = calloc((size_t)n, sizeof *order);
        double *ns = calloc((size_t)n * (size_t)reps, sizeof *ns);
        int *seq = calloc((size_t)n * (size_t)reps, sizeof *seq);
        i = 0;
        cJSON_ArrayForEach(pair, values) {
            json[i] = cJSON_GetArrayItem(pair, 1);
            prepare(&prepared[i], json[i]);
            order[i] = i;
            i++;
        }
        printf("%s\"%s\": ", first ? "" : ", ", cJSON_GetObjectItem(c, "name")->valuestring);
        first = 0;
        for (i = 0; i < n; i++) {
            if (trigger(doc, p2, phase, json[i], &prepared[i], words, report) != 0)
                break;
        }
        if (i == n) {
            double per_op = 0;
            for (r = 0; r < 3; r++) { /* the quickest of three passes */
                double t0 = now_ns();
                for (i = 0; i < n; i++)
                    trigger(doc, p2, phase, json[i], &prepared[i], words, report);
                per_op = r == 0 || (now_ns() - t0) / n < per_op ? (now_ns() - t0) / n : per_op;
            }
            batch = (int)(sample_ns / per_op); /* one batch size for every value */
            batch = batch < 1 ? 1 : batch;
            for (r = 0; r < reps; r++) {
                for (i = n - 1; i > 0; i--) { /* a new shuffle every round */
                    int j = (int)(next_word() % (uint32_t)(i + 1)), t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
                for (i = 0; i < n; i++) {
                    int v = order[i];
                    double t0;
                    for (k = 0; k < 4096; k++)
                        words[k] = next_word();
                    t0 = now_ns();
                    for (k = 0; k < batch; k++)
                        trigger(doc, p2, phase, json[v], &prepared[v], words, report);
                    ns[(size_t)r * (size_t)n + (size_t)i] = (now_ns() - t0) / batch;
                    seq[(size_t)r * (size_t)n + (size_t)i] = v;
                }
            }
            printf("{\"rounds\": [");
            for (r = 0; r < reps; r++) {
                printf("%s[", r ? ", " : "");
                for (i = 0; i < n; i++)
                    printf("%s[%d, %.1f]", i ? ", " : "", seq[(size_t)r * (size_t)n + (size_t)i],
                           ns[(size_t)r * (size_t)n + (size_t)i]);
                printf("]");
            }
            printf("], \"batch\": %d}", batch);
        }
        free(json);
        free(prepared);
        free(order);
        free(ns);
        free(seq);
    }
    printf("}\n");
    cJSON_Delete(job);
    free(text);
    return 0;
}
'''


def _job(work, selected, reps, sample_us):
    job = {"cases": selected, "reps": reps, "sample_us": sample_us,
           "keys": [SIGNING_KEY.public.to_doc()], "state": str(work / "state")}
    (work / "state").mkdir(exist_ok=True)
    device_runner.provision_ledger(work / "state")
    path = work / "job.json"
    path.write_text(json.dumps(job))
    return path


def run_micropython(selected, work, reps=25, sample_us=600, device_dir=None):
    """{case name: {"rounds": [[[value index, ns per trigger], ...] in sample order, ...],
    "alloc": [heap bytes of one trigger, per value], "batch": triggers per sample}}."""
    work = Path(work)
    lib = device_runner.compile_mpy(work / "lib", src_dir=device_dir or ROOT / "device")
    script = work / "set_timing.py"
    script.write_text(MICROPYTHON_SCRIPT)
    out = work / "mpy_out.json"
    proc = subprocess.run([device_runner.micropython_binary(), "-X", "heapsize=8M", str(script),
                           str(_job(work, selected, reps, sample_us)), str(out)],
                          env=device_runner.micropython_env(lib), capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError("MicroPython timing run failed:\n" + proc.stdout + proc.stderr)
    return json.loads(out.read_text())


def build_c_driver(work, device_dir=None):
    """The C timing driver, linked with the client's objects built by its own Makefile."""
    work = Path(work)
    client = Path(device_dir or ROOT / "device") / "c_client"
    build = work / "c_build"
    proc = subprocess.run(["make", "-C", str(client), "BUILD=%s" % build, "-j2"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("C client build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    old = not (client / "value.h").exists()  # before the value was prepared at start
    skip = {"ldp_client.o", "device.o"} if old else {"ldp_client.o"}
    objects = [str(p) for p in sorted((build / "client").glob("*.o")) if p.name not in skip]
    objects += [str(p) for p in sorted((build / "kernels").glob("*.o"))]
    src = work / "set_timing_driver.c"
    src.write_text(C_DRIVER)
    binary = work / "set_timing_driver"
    kernels = client.parent.parent / "c_kernels"
    proc = subprocess.run(["cc", "-std=c99", "-O2", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE"]
                          + (["-DLDPC_OLD_CLIENT"] if old else []) + ["-I", str(client),
                           "-I", str(kernels), str(src)] + objects
                          + ["-o", str(binary), "-lmosquitto", "-lcjson", "-lcrypto", "-lm"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("C timing driver build failed:\n" + proc.stderr[-3000:])
    return binary


def run_c(selected, work, reps=25, sample_us=300, device_dir=None):
    """{case name: {"rounds": [[[value index, ns per trigger], ...], ...], "batch"} or
    {"error": why}}."""
    work = Path(work)
    binary = build_c_driver(work, device_dir)
    proc = subprocess.run([str(binary), str(_job(work, selected, reps, sample_us))],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError("C timing run failed:\n" + proc.stdout + proc.stderr)
    return json.loads(proc.stdout)


def quantile(xs, f):
    s = sorted(xs)
    return s[int(f * (len(s) - 1))]


def spearman(xs, ys):
    """Spearman's rank correlation, ties given their average rank."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else 0.0


LOW = 0.1  # a value's time: the 10th percentile of its samples (preemptions only add time)
NEIGHBOURS = 2  # a sample is compared with the samples up to this far before and after it


def relative_times(measured, n):
    """Per value, its samples each over the median of its neighbours in the same round (the
    samples just before and after it, of other values in a random order): a burst of load
    that lasts a few samples falls on both and cancels."""
    out = [[] for _ in range(n)]
    for seq in measured["rounds"]:
        for p, (j, t) in enumerate(seq):
            near = [u for q, (_, u) in enumerate(seq) if q != p and abs(q - p) <= NEIGHBOURS]
            out[j].append(t / quantile(near, 0.5))
    return out


def summarise(case, measured):
    """Per value: `low_ns` its time (LOW quantile of its samples) and `relative` its median
    time over its neighbours' (relative_times). Over the size sweep 0..capacity: the rank
    correlation of size and relative time, and the median relative time of the large sets
    (sizes >= 3/4 capacity) over that of the small ones (<= 1/4); the value whose relative
    time is farthest from 1 (`worst`); `us` the time at sizes 0, 1, 32, 64."""
    labels = [label for label, _ in case["values"]]
    samples = [[] for _ in labels]
    for seq in measured["rounds"]:
        for j, t in seq:
            samples[j].append(t)
    low = {label: quantile(xs, LOW) for label, xs in zip(labels, samples)}
    rel = {label: quantile(xs, 0.5) for label, xs in zip(labels, relative_times(measured, len(labels)))}
    sizes = list(range(CAPACITY + 1))
    small = quantile([rel["size%d" % k] for k in sizes if 4 * k <= CAPACITY], 0.5)
    large = quantile([rel["size%d" % k] for k in sizes if 4 * k >= 3 * CAPACITY], 0.5)
    worst = max(rel, key=lambda label: max(rel[label], 1 / rel[label]))
    out = {"low_ns": low, "relative": rel, "batch": measured.get("batch"),
           "size_rank_correlation": spearman(sizes, [rel["size%d" % k] for k in sizes]),
           "large_over_small": large / small, "worst": worst, "worst_relative": rel[worst],
           "us": {k: low["size%d" % k] / 1000 for k in (0, 1, 32, 64)}}
    if "alloc" in measured:
        alloc = dict(zip(labels, measured["alloc"]))
        out["alloc_bytes"] = sorted(set(alloc.values()))
        out["alloc_by_value"] = alloc
    return out


def measure(names=None, reps=30, device_dir=None, clients=("micropython", "c")):
    """{client: {case: summary}} for the cases named (all by default), on the client code of
    `device_dir` (the repository's device/ by default)."""
    selected = [c for c in cases() if names is None or c["name"] in names]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "micropython" in clients:
            (work / "mpy").mkdir()
            raw = run_micropython(selected, work / "mpy", reps, device_dir=device_dir)
            out["micropython"] = {c["name"]: summarise(c, raw[c["name"]]) for c in selected}
        if "c" in clients:
            (work / "c").mkdir()
            raw = run_c(selected, work / "c", reps, device_dir=device_dir)
            out["c"] = {c["name"]: (summarise(c, raw[c["name"]]) if "rounds" in raw[c["name"]]
                                    else raw[c["name"]]) for c in selected}
    return out
