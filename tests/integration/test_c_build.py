"""The C kernels build warning-free as strict C99 and run clean under ASan/UBSan."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "c_kernels"


def c_sources():
    return sorted(KERNELS.glob("*.c"))


def test_kernels_compile_strict_c99(tmp_path):
    for src in c_sources():
        out = tmp_path / (src.stem + ".o")
        proc = subprocess.run(
            ["gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2",
             "-I", str(KERNELS), "-c", str(src), "-o", str(out)],
            capture_output=True, text=True)
        assert proc.returncode == 0, "%s:\n%s" % (src.name, proc.stderr)
    # the portable path of the longitudinal fold (compilers without GCC vector extensions)
    src = KERNELS / "ldp_long_fold.c"
    proc = subprocess.run(
        ["gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2",
         "-DLDP_NO_VECTOR_EXT", "-I", str(KERNELS), "-c", str(src), "-o",
         str(tmp_path / "ldp_long_fold_portable.o")], capture_output=True, text=True)
    assert proc.returncode == 0, "%s -DLDP_NO_VECTOR_EXT:\n%s" % (src.name, proc.stderr)


EXERCISE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    import ldpfleet._kernels as k
    # the sanitized copy next to this script, not the installed extension
    so = Path(k.__file__).resolve()
    assert so.parent == Path(__file__).resolve().parent / "ldpfleet", so
    blob = so.read_bytes()
    assert b"__asan_" in blob and b"__ubsan_handle" in blob, "extension built without sanitizers"
    from ldpfleet.core.mechanisms import MODULES, make_mechanism, mechanism_from_description
    vectors = Path(sys.argv[1])
    done = []
    for name in sorted(MODULES):
        path = vectors / ("reports_%s.json" % name)
        if not path.exists():
            continue
        for case in json.loads(path.read_text()):
            mech = mechanism_from_description(case)
            assert mech.c_report(case["value"], case["words"], case["nonce"]) == bytes.fromhex(case["report_hex"])
        case = json.loads(path.read_text())[0]
        mech = mechanism_from_description(case)
        rng = np.random.default_rng(1)
        if mech.set_valued:
            values = [list(rng.choice(mech.domain_size, size=2, replace=False)) for _ in range(300)]
        else:
            values = rng.integers(0, mech.domain_size, size=300).astype(np.uint32)
        try:
            reports = mech.perturb_batch(values, rng)
        except TypeError:
            continue
        sketch = mech.new_sketch()
        if name == "pem":  # per-group FLH sketch, groups from device ids (spec §3.5)
            sketch.update(reports, devices=["d%d" % i for i in range(len(reports))])
            sketch.estimate(1, np.arange(1000, dtype=np.uint32))
            done.append(name)
            continue
        sketch.update(reports)
        if hasattr(sketch, "mean"):  # a mean, not item counts (lbitmean)
            sketch.mean()
        else:
            sketch.estimate(np.arange(mech.domain_size, dtype=np.uint32))
        done.append(name)
    print(json.dumps(done))
""")


@pytest.mark.slow
def test_kernels_under_asan_ubsan(tmp_path):
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    if not os.path.isabs(libasan):
        pytest.fail("gcc has no libasan runtime")
    pkg = tmp_path / "ldpfleet"
    shutil.copytree(ROOT / "aggregator" / "ldpfleet", pkg,
                    ignore=shutil.ignore_patterns("_kernels*", "__pycache__"))
    env = dict(os.environ, LDPFLEET_SANITIZE="1", LDPFLEET_ABS_SOURCES="1")
    build = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import build_ffi
        build_ffi.ffibuilder.compile(tmpdir=%r)
    """ % (str(KERNELS), str(tmp_path / "build")))
    proc = subprocess.run([sys.executable, "-c", build], cwd=str(ROOT), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = list((tmp_path / "build" / "ldpfleet").glob("_kernels*.so"))
    assert built, "no sanitized extension produced"
    shutil.copy(built[0], pkg / built[0].name)
    script = tmp_path / "exercise.py"
    script.write_text(EXERCISE)
    run_env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1", PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, str(script), str(ROOT / "protocol_spec" / "v2" / "vectors")],
                          cwd=str(tmp_path), env=run_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "runtime error" not in proc.stderr, proc.stderr[-4000:]
    exercised = proc.stdout.strip().splitlines()[-1]
    assert exercised != "[]", "no mechanism was exercised under the sanitizers"
