"""Glue between numpy arrays and the cffi C kernels: pointers, chunking, threads.

One cffi crossing per chunk; cffi releases the GIL, so chunks run on `threads` cores.
"""
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._kernels import ffi, lib  # noqa: F401  (this glue is where the mechanisms get them)

CHUNK_WORDS = 1 << 24
THREADS = max(1, min(4, os.cpu_count() or 1))

_CTYPES = {
    np.dtype(np.uint8): "uint8_t *", np.dtype(np.uint16): "uint16_t *",
    np.dtype(np.uint32): "uint32_t *", np.dtype(np.int32): "int32_t *",
    np.dtype(np.int64): "int64_t *", np.dtype(np.uint64): "uint64_t *",
    np.dtype(np.float64): "double *", np.dtype(np.int8): "int8_t *",
}


def ptr(arr: np.ndarray, offset_bytes: int = 0):
    """A typed C pointer into a numpy array (which must stay alive during the call).

    Rows of a 2-D array may be strided; the pointer is to its first element + offset."""
    ctype = _CTYPES[arr.dtype]
    base = ffi.cast("uint8_t *", arr.ctypes.data) + offset_bytes
    return ffi.cast(ctype, base)


def byte_ptr(arr: np.ndarray, offset_bytes: int = 0):
    return ffi.cast("uint8_t *", arr.ctypes.data) + offset_bytes


def random_words(rng: np.random.Generator, rows: int, per_row: int) -> np.ndarray:
    """(rows, per_row) uniform u32 words from a seeded Generator (simulation only).

    Raw bit-generator output (~1 ns/word) rather than rng.integers (~10-25 ns/word)."""
    count = rows * per_row
    raw = rng.bit_generator.random_raw((count + 1) // 2).view(np.uint32)
    return raw[:count].reshape(rows, per_row)


def chunk_rows(per_row_words: int) -> int:
    """Rows per chunk so that one chunk's random words stay within CHUNK_WORDS."""
    return max(1, CHUNK_WORDS // max(1, per_row_words))


def spans(n: int, chunk: int):
    """[(start, stop)] covering range(n) in pieces of at most `chunk`."""
    return [(s, min(n, s + chunk)) for s in range(0, n, chunk)]


_POOLS = {}
_POOLS_LOCK = threading.Lock()


POOL_PREFIX = "ldp-kernels"


def _forget_pools():
    """In a forked child: the parent's pool threads do not exist there, and the lock may have
    been held by one of them at the fork."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of `threads` workers, made once (starting threads for every batch
    cost serve a tenth of its time); a forked child makes its own."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix=POOL_PREFIX)
        return pool


def parallel_map(fn, items, threads: int = THREADS):
    """Run fn over items on a thread pool (for GIL-free C calls); returns results in order.
    Called from one of the pool's own threads it runs inline (waiting on the pool from inside
    it could deadlock once every worker waits)."""
    items = list(items)
    if threads <= 1 or len(items) <= 1 or threading.current_thread().name.startswith(POOL_PREFIX):
        return [fn(x) for x in items]
    return list(_pool(threads).map(fn, items))
