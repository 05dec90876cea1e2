#!/usr/bin/env python3
"""How fast this machine writes new page-cache pages, depending on how long ago memory was freed.

Writes 768MiB to a file in DIR (default: the current directory) from a buffer already in memory,
deletes it, waits, and does it again, for growing waits. On a VM that hands freed memory back to
its host (virtio-balloon free page reporting), pages freed more than a second or two ago cost a
host fault on their next first touch, and every file-writing subject of `loghaul bench` pays it.

    python3 bench/page-warmth.py [DIR]

Prints the write rate per CPU-second of the writing process (system time), after each wait.
"""

import os
import sys
import time

CHUNK = 256 * 1024
SOURCE = bytearray(os.urandom(1 << 20)) * 256  # 256MiB, touched before any timing


def trial(path: str) -> float:
    view = memoryview(SOURCE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = os.times()
    for _ in range(3):
        for off in range(0, len(SOURCE), CHUNK):
            os.write(fd, view[off : off + CHUNK])
    t1 = os.times()
    os.close(fd)
    os.unlink(path)
    return 3 * len(SOURCE) / max(t1.system - t0.system, 1e-9) / 1e9


def main() -> None:
    path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "page-warmth.tmp")
    trial(path)
    for wait in [0, 0.5, 1, 2, 3, 5, 8]:
        trial(path)  # frees 768MiB of page cache just before the wait
        time.sleep(wait)
        print(f"after {wait:>3}s: {trial(path):5.2f} GB per CPU-second", flush=True)


if __name__ == "__main__":
    main()
