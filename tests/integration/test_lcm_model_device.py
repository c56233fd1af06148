"""The device's LDPLCM model evaluator (device/ldp/lcm_model.py), run by the real `micropython`
binary from the .py sources and from .mpy files, gives bit-identical g(x) and high/low
decisions to the aggregator's `evaluate_int` / `is_high` for every item of a 3000-item domain,
allocates nothing per evaluation, and accepts and refuses exactly the models the aggregator's
`check_model` does."""
import json
import shutil
import subprocess

import numpy as np
import pytest

from ldpfleet.eval import datasets
from ldpfleet.provision import device_runner
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.protocols import ldplcm as L

from support.ldplcm_docs import BAD_DOCS, small_doc

D = 3000
DEVICE_MODULES = ["__init__.py", "errors.py", "lcm_model.py"]

SCRIPT = r'''
import gc
import json
import sys

import ldp.lcm_model
from ldp.errors import ConfigError
from ldp.lcm_model import LcmModel


def evaluate_all(model, d, values, high):
    for x in range(d):
        values[x] = model.evaluate(x)
        high[x] = 1 if model.is_high(x) else 0


def allocated(model, d, values, high):
    gc.collect()
    gc.disable()
    before = gc.mem_alloc()
    evaluate_all(model, d, values, high)
    after = gc.mem_alloc()
    gc.enable()
    return after - before


with open(sys.argv[1]) as f:
    job = json.load(f)
out = {"module_file": ldp.lcm_model.__file__, "models": [], "checks": []}
for doc in job["models"]:
    model = LcmModel(doc)
    d = job["d"]
    values = [0] * d
    high = bytearray(d)
    one = allocated(model, 1, values, high)
    many = allocated(model, d, values, high)
    out["models"].append({"values": values, "high": list(high), "alloc_one": one,
                          "alloc_many": many})
for doc in job["checks"]:
    try:
        LcmModel(doc)
        out["checks"].append("ok")
    except ConfigError as exc:
        out["checks"].append(exc.field)
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
'''


def trained_model(dist, theta, seed, gbr_params=None):
    rng = np.random.default_rng(seed)
    values = datasets.draw_values(60000, D, dist, rng)
    mech = make_mechanism("cms", 3000, D, salt=seed, campaign_id=1, k=16, m=256)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(values, rng))
    return L.train_model(sketch, np.arange(D), theta=theta, seed=seed,
                         gbr_params=gbr_params).model


@pytest.fixture(scope="module")
def models():
    return [trained_model("zipf:1.1", 0.5, 1),
            trained_model("laplace:1500,40", 0.3, 2, {"n_estimators": 60, "max_depth": 5,
                                                       "learning_rate": 0.05}),
            L.check_model(small_doc()),
            L.check_model(small_doc(boundary=-(1 << 30), init=-(1 << 29)))]


@pytest.fixture(scope="module")
def lib_dirs(tmp_path_factory):
    """The device package's model modules as sources and as .mpy (mpy-cross -march=x64)."""
    src = device_runner.DEVICE_DIR / "ldp"
    mpy = tmp_path_factory.mktemp("mpy")
    (mpy / "ldp").mkdir()
    for name in DEVICE_MODULES:
        subprocess.run([device_runner.mpy_cross_binary(), "-march=x64", "-s", "ldp/" + name,
                        "-o", str(mpy / "ldp" / name.replace(".py", ".mpy")), str(src / name)],
                       check=True, capture_output=True, text=True)
    py = tmp_path_factory.mktemp("py")
    (py / "ldp").mkdir()
    for name in DEVICE_MODULES:
        shutil.copyfile(src / name, py / "ldp" / name)
    return {"py": py, "mpy": mpy}


@pytest.fixture(scope="module", params=["py", "mpy"])
def device(request, models, lib_dirs, tmp_path_factory):
    work = tmp_path_factory.mktemp("run")
    script = work / "evaluate_models.py"
    script.write_text(SCRIPT)
    job = work / "job.json"
    job.write_text(json.dumps({"d": D, "models": [L.model_to_doc(m) for m in models],
                               "checks": [doc for _, doc in BAD_DOCS] + [small_doc()]}))
    out = work / "out.json"
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(job), str(out)],
                          env=device_runner.micropython_env(lib_dirs[request.param]), cwd=work,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["module_file"].endswith(".mpy" if request.param == "mpy" else ".py")
    return result


def test_models_exercise_both_decisions(models):
    for model in models[:2]:
        high = L.high_mask(model, np.arange(D))
        assert 0 < high.sum() < D
    assert any(v < 0 for m in models[:2] for v, r in zip(m.split, m.right) if r == -1)


@pytest.mark.parametrize("which", range(4))
def test_device_values_and_decisions_are_bit_identical(device, models, which):
    model = models[which]
    got = device["models"][which]
    want = [L.evaluate_int(model, x) for x in range(D)]
    assert got["values"] == want
    assert got["high"] == [1 if L.is_high(model, x) else 0 for x in range(D)]
    assert want == L.evaluate_int_array(model, np.arange(D)).tolist()


def test_evaluation_allocates_nothing_per_item(device):
    for got in device["models"]:
        assert got["alloc_many"] == got["alloc_one"], got


def test_device_refuses_exactly_what_the_aggregator_refuses(device):
    docs = [doc for _, doc in BAD_DOCS] + [small_doc()]
    want = []
    for doc in docs:
        try:
            L.check_model(doc)
            want.append("ok")
        except ConfigError as exc:
            want.append(exc.field)
    assert want[-1] == "ok" and set(want[:-1]) == {"model"}
    assert device["checks"] == want
