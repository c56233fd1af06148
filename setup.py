"""setuptools shim: builds the cffi C kernels (API mode) at install time, and ships inside the
package what a source checkout keeps beside it: the protocol registry
(`ldpfleet/spec_v2/registry.json`, the machine-readable protocol reference; the tables the code
uses are generated from it by tools/gen_tables.py) and the MicroPython device
client (`ldpfleet/device_client/ldp/*.py` and `main.py`, what `ldpfleet flash` and `provision`
compile onto boards; `device_runner.DEVICE_DIR`). A source checkout reads protocol_spec/v2 and
device/ directly."""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = [
    ("spec_v2", [os.path.join("protocol_spec", "v2", "registry.json")]),
    ("device_client", [os.path.join("device", "main.py")]),
    (os.path.join("device_client", "ldp"), sorted(glob.glob(os.path.join(HERE, "device", "ldp", "*.py")))),
]
"""(directory inside the package, files of the checkout copied there) of a non-editable build."""


class BuildPyWithShippedFiles(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for target, files in SHIPPED:
            target = os.path.join(self.build_lib, "ldpfleet", target)
            os.makedirs(target, exist_ok=True)
            for path in files:
                shutil.copy2(os.path.join(HERE, path), target)


setup(cffi_modules=["c_kernels/build_ffi.py:ffibuilder"],
      cmdclass={"build_py": BuildPyWithShippedFiles})
