"""setuptools shim: builds the cffi C kernels (API mode) at install time, and ships the
protocol registry inside the package (`ldpfleet/spec_v2/registry.json`, read by
`protocol.load_registry`; a source checkout reads protocol_spec/v2 directly)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithRegistry(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = os.path.join(self.build_lib, "ldpfleet", "spec_v2")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(os.path.join(HERE, "protocol_spec", "v2", "registry.json"), target)


setup(cffi_modules=["c_kernels/build_ffi.py:ffibuilder"], cmdclass={"build_py": BuildPyWithRegistry})
