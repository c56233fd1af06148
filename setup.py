"""setuptools shim: builds the cffi C kernels (API mode) at install time."""
from setuptools import setup

setup(cffi_modules=["c_kernels/build_ffi.py:ffibuilder"])
