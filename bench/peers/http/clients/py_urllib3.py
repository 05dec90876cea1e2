"""HTTP client for the client experiment on Python urllib3 (one HTTPConnectionPool of size 1).

    $LOGHAUL_HTTP_PYTHON bench/peers/http/clients/py_urllib3.py download URL OUTFILE
    $LOGHAUL_HTTP_PYTHON bench/peers/http/clients/py_urllib3.py upload URL LISTFILE

download: one GET over HTTP/1.1, the body streamed into OUTFILE in 1MB pieces; exit 0 iff status
  200 and the whole body was written (urllib3 2 enforces Content-Length; the count is checked here
  as well).
upload: POST each file named in LISTFILE (one path per line), in order, as application/x-ndjson,
  through one pool that holds one connection, kept alive for all; stops with a message on stderr
  naming the file at the first non-2xx answer or error. Prints nothing else.

Bodies are open file objects with an explicit Content-Length (without it urllib3 2 would switch to
chunked coding); urllib3 copies the file to the socket in 16KB blocks, never reading it whole.
Retries are off: a failed request is reported, not quietly sent again.
"""

import os
import sys
from urllib.parse import urlsplit

import urllib3

PROG = "py_urllib3.py"


def die(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(1)


def target(parts):
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def download(pool, url, outfile):
    res = pool.request("GET", target(urlsplit(url)), preload_content=False, decode_content=False)
    try:
        if res.status != 200:
            die(f"download of {url} failed: HTTP {res.status} {res.reason}")
        written = 0
        with open(outfile, "wb") as out:
            for chunk in res.stream(1 << 20, decode_content=False):
                written += out.write(chunk)
        length = res.headers.get("Content-Length")
        if length is not None and written != int(length):
            die(f"download of {url} failed: {written} of {length} bytes written")
    finally:
        res.release_conn()


def upload(pool, url, listfile):
    path_qs = target(urlsplit(url))
    with open(listfile, encoding="utf-8") as f:
        files = [line.rstrip("\r\n") for line in f if line.strip()]
    for path in files:
        try:
            with open(path, "rb") as body:
                headers = {
                    "Content-Type": "application/x-ndjson",
                    "Content-Length": str(os.fstat(body.fileno()).st_size),
                }
                res = pool.request("POST", path_qs, body=body, headers=headers)
        except (OSError, urllib3.exceptions.HTTPError) as e:
            die(f"upload of {path} failed: {type(e).__name__}: {e}")
        if not 200 <= res.status < 300:
            die(f"upload of {path} failed: HTTP {res.status} {res.reason}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("download", "upload"):
        print(f"usage: {PROG} download URL OUTFILE | upload URL LISTFILE", file=sys.stderr)
        sys.exit(2)
    mode, url, path = sys.argv[1:]
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        die(f"not an http:// URL: {url}")
    # One pool for one host, one connection (maxsize=1, block=True): every request reuses it.
    pool = urllib3.HTTPConnectionPool(
        parts.hostname, parts.port or 80, maxsize=1, block=True, retries=False
    )
    try:
        if mode == "download":
            download(pool, url, path)
        else:
            upload(pool, url, path)
    except (OSError, urllib3.exceptions.HTTPError) as e:
        die(f"{mode} of {url} failed: {type(e).__name__}: {e}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
