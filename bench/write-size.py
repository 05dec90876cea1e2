#!/usr/bin/env python3
"""What a page-cache write costs on this machine, depending on the size of each write() call.

The kernel sizes the new page-cache folios of a buffered write by the call's length and by the
alignment of its file offset (ext4 has large folios since Linux 6.16). For each size given, this
writes 768MiB to a new file in DIR in calls of that size, after freeing as much page cache and
waiting WAIT seconds, and prints the bytes written per CPU-second of the writer (user + system).
A size given as `N+` starts the file with 1234 bytes, so every call is unaligned; loghaul's file
sink writes whole batches wherever the last one ended, which is this case.

    python3 bench/write-size.py [--wait SECONDS] [--dir DIR] SIZE...
    python3 bench/write-size.py --wait 5 65536 262144 524288 1048576 1048576+
"""

import argparse
import os
import time

TOTAL = 768 << 20
SOURCE = bytearray(os.urandom(1 << 20)) * 64  # 64MiB, touched before any timing


def write(path: str, size: int, unaligned: bool) -> float:
    view = memoryview(SOURCE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if unaligned:
        os.write(fd, b"x" * 1234)
    t0 = os.times()
    written, off = 0, 0
    while written < TOTAL:
        if off + size > len(SOURCE):
            off = 0
        written += os.write(fd, view[off : off + size])
        off += size
    t1 = os.times()
    os.close(fd)
    os.unlink(path)
    cpu = (t1.system - t0.system) + (t1.user - t0.user)
    return written / max(cpu, 1e-9) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=float, default=5.0)
    ap.add_argument("--dir", default=".")
    ap.add_argument("sizes", nargs="+")
    a = ap.parse_args()
    path = os.path.join(a.dir, "write-size.tmp")
    for arg in a.sizes:
        unaligned = arg.endswith("+")
        size = int(arg.rstrip("+"))
        write(path, 229_406, True)  # frees 768MiB of page cache just before the wait
        time.sleep(a.wait)
        rate = write(path, size, unaligned)
        kind = "unaligned" if unaligned else "aligned"
        print(f"{size:>9} bytes per call, {kind:>9}: {rate:5.2f} GB per CPU-second", flush=True)


if __name__ == "__main__":
    main()
