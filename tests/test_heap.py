"""modeling_pacs.heap: `evaluate-captions --low-memory` fixes glibc's mmap threshold, so that large freed blocks
leave the process."""

import subprocess
import sys

import pytest

from modeling_pacs.heap import LARGE_BLOCK_BYTES, glibc

# A child process (the setting is process-wide): after the threshold is fixed, a freed 64 MiB block of 8 MiB-or-more
# allocations is returned; with glibc's dynamic threshold (24 MiB after such a block was freed) 16 MiB blocks come
# from the heap, and freed between blocks still in use they stay in the process.
PROBE = """
import ctypes, sys
from modeling_pacs.heap import return_large_blocks
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
libc.free(libc.malloc(24 << 20))  # raises glibc's dynamic threshold to 24 MiB
if sys.argv[1] == "fixed":
    assert return_large_blocks() is True
blocks, kept = [], []
for _ in range(4):  # each followed by a small block that stays: the heap cannot shrink from its top
    blocks.append(libc.malloc(16 << 20))
    kept.append(libc.malloc(64))
for block in blocks:
    ctypes.memset(block, 1, 16 << 20)
before = rss()
for block in blocks:
    libc.free(block)
print((before - rss()) >> 20)
"""


@pytest.mark.skipif(glibc() is None, reason="glibc only")
def test_a_fixed_threshold_returns_freed_large_blocks_to_the_system():
    assert LARGE_BLOCK_BYTES == 8 << 20
    returned = {}
    for mode in ("dynamic", "fixed"):
        completed = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60)
        assert completed.returncode == 0, completed.stderr
        returned[mode] = int(completed.stdout)
    assert returned["fixed"] >= 60  # the four 16 MiB blocks left the process when freed
    assert returned["dynamic"] < 16  # kept in the heap
