"""glibc's heap in a long run that loads several models: large blocks go back to the system when freed.

glibc serves an allocation from its heap unless it is at least the mmap threshold, and it raises that threshold
(up to 32 MiB) each time such a block is freed. In a run that scores with several models one after the other
(`pacs-pp evaluate-captions`), the activations of one model's batches (tensors of 8 to 40 MiB for ViT-B/32 batches
of 64) then end up in the heap, where freed blocks are kept: the next model's activations come on top of them.
Measured with ViT-B/32-size models (`benchmarks/benchmark_evaluate_captions.py --size b32`), a fixed threshold of
8 MiB keeps the run's peak resident memory about 200 MiB lower: such a tensor's pages are returned when it is freed.
Smaller blocks (tiny models' activations, Python objects) stay in the heap, where reuse is cheap: a 1 MiB threshold
saved no more memory and cost more system time (page faults on every batch). Trimming the heap after each model
(`malloc_trim`) saved less: the peak is within one model's batches.

These are process-wide settings: the command that owns the process sets them (a library call does not), and they
cost page faults (every such batch's pages are mapped anew): `pacs-pp evaluate-captions --low-memory` opts in (about
8% lower peak, 10% slower at ViT-B/32 size; docs/guides/evaluating-captions.md#speed-and-memory).

Example:

```python
>>> from modeling_pacs.heap import glibc
>>> glibc() is None or hasattr(glibc(), "mallopt")  # None where the C library is not glibc (macOS, musl)
True
```
"""

import ctypes
import ctypes.util
import functools
import sys

# mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
# Blocks of this size or more are mapped on their own and unmapped when freed: a ViT-B/32 batch's activations are
# as large or larger; Python's objects, token lists and small tensors stay in the heap.
LARGE_BLOCK_BYTES = 8 << 20


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process' C library when it is glibc (it has `mallopt`), else None (macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        library = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        library.mallopt  # noqa: B018 (a C library without it is not glibc)
    except (OSError, AttributeError):
        return None
    return library


def return_large_blocks(threshold: int = LARGE_BLOCK_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes (which also stops its dynamic growth), so that blocks of that
    size or more are returned to the system when freed. Process-wide and lasting. False where not glibc."""
    library = glibc()
    return library is not None and library.mallopt(M_MMAP_THRESHOLD, int(threshold)) == 1


__all__ = ["LARGE_BLOCK_BYTES", "glibc", "return_large_blocks"]
