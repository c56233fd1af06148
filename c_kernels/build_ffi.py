"""cffi API-mode builder for the C kernels (ldpfleet._kernels).

Every `c_kernels/*.h` contributes the prototypes between `/* cdef-begin */` and
`/* cdef-end */`; every `c_kernels/*.c` is compiled in (the C client, device/c_client,
links the same sources with its own Makefile).
"""
import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CDEF_RE = re.compile(r"/\* cdef-begin \*/(.*?)/\* cdef-end \*/", re.S)


def collect():
    headers = sorted(HERE.glob("*.h"))
    sources = sorted(HERE.glob("*.c"))
    cdef = "\n".join(m for h in headers for m in CDEF_RE.findall(h.read_text()))
    return headers, sources, cdef


def _path(p):
    """setuptools wants source paths relative to setup.py; an out-of-tree
    `ffibuilder.compile(tmpdir=...)` (the sanitizer test) needs absolute ones."""
    if os.environ.get("LDPFLEET_ABS_SOURCES"):
        return str(p)
    return os.path.relpath(p, HERE.parent)


headers, sources, cdef = collect()
ffibuilder = FFI()
ffibuilder.cdef(cdef)
extra = ["-O3", "-std=c99", "-Wall", "-Wextra", "-Werror"]
if os.environ.get("LDPFLEET_SANITIZE"):
    extra += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
ffibuilder.set_source(
    "ldpfleet._kernels",
    "\n".join('#include "%s"' % h.name for h in headers),
    sources=[_path(s) for s in sources],
    include_dirs=[_path(HERE)],
    extra_compile_args=extra,
    extra_link_args=["-fsanitize=address,undefined"] if os.environ.get("LDPFLEET_SANITIZE") else [],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
