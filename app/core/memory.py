"""Give the operating system back the memory a large request freed.

An upload of a million rows allocates a few hundred MiB in Arrow's pool (mimalloc) and in the C
heap (NumPy). Both allocators keep freed pages for reuse, so without this the API process's
resident size stays at its peak after every large upload, and the next one starts from there.
"""

import ctypes
import ctypes.util
from functools import cache

import pyarrow as pa


@cache
def _malloc_trim() -> "ctypes._NamedFuncPointer | None":
    """glibc's ``malloc_trim`` (absent on other C libraries: then nothing is trimmed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the free pages of Arrow's pool and of the C heap to the operating system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
