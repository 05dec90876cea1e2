#!/usr/bin/env python3
"""Sends COUNT numbered events with PyPI fluent-logger's FluentSender (forward protocol, Message mode).

    send.py --port P --tag T --count N --run R [--nanosecond] [--host H] [--timeout-ms MS]

Exits 0 only if every emit succeeded; otherwise prints the client's own error on stderr and exits 1.
The last stdout line is a JSON summary. This client has no acks and no handshake: "succeeded" means
the bytes were written to the socket.
"""
import argparse
import json
import sys
from importlib.metadata import version

from fluent import sender as fluent_sender


def record(i, run):
    return {
        "n": i,
        "message": f"event {i}",
        "run": run,
        "nested": {"list": [1, "two", 3.5, True, None], "map": {"k": "v"}},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--nanosecond", action="store_true", help="send EventTime instead of integer seconds")
    p.add_argument("--timeout-ms", type=int, default=5000, help="connect and send timeout")
    args = p.parse_args()

    # FluentSender buffers a failed packet and retries it on the next emit or on close; whatever
    # close() still cannot send goes to buffer_overflow_handler, so count that as a failure too.
    dropped = []
    sender = fluent_sender.FluentSender(
        args.tag,
        host=args.host,
        port=args.port,
        timeout=args.timeout_ms / 1000,
        nanosecond_precision=args.nanosecond,
        buffer_overflow_handler=dropped.append,
    )
    for i in range(args.count):
        # emit(None, ...) uses the sender's tag as is (a label would be appended as "tag.label").
        if not sender.emit(None, record(i, args.run)):
            print(f"send.py: event {i} failed: {sender.last_error!r}", file=sys.stderr)
            sender.close()
            return 1
    sender.close()
    if dropped or sender.last_error is not None:
        print(f"send.py: close failed: {sender.last_error!r}", file=sys.stderr)
        return 1
    print(json.dumps({"sent": args.count, "client": "python-fluent-logger", "version": version("fluent-logger"),
                      "mode": "Message", "nanosecond": args.nanosecond}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
