"""HTTP client for the client experiment on Python requests (one requests.Session).

    $LOGHAUL_HTTP_PYTHON bench/peers/http/clients/py_requests.py download URL OUTFILE
    $LOGHAUL_HTTP_PYTHON bench/peers/http/clients/py_requests.py upload URL LISTFILE

download: one GET over HTTP/1.1, the body streamed into OUTFILE in 1MB pieces; exit 0 iff status
  200 and the whole body was written (urllib3 underneath fails a body shorter than its
  Content-Length; the count is checked here as well).
upload: POST each file named in LISTFILE (one path per line), in order, as application/x-ndjson,
  through one Session, whose pool keeps one connection alive for all; stops with a message on
  stderr naming the file at the first non-2xx answer or error. Prints nothing else.

Bodies are open file objects: requests takes Content-Length from the file's size (no chunked
coding) and urllib3 underneath copies the file to the socket in 16KB blocks, never reading it whole.
"""

import sys

import requests

PROG = "py_requests.py"


def die(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(1)


def download(session, url, outfile):
    # requests asks for gzip and inflates by default; the experiment moves the bytes as they are.
    with session.get(url, stream=True, headers={"Accept-Encoding": "identity"}) as res:
        if res.status_code != 200:
            die(f"download of {url} failed: HTTP {res.status_code} {res.reason}")
        written = 0
        with open(outfile, "wb") as out:
            for chunk in res.iter_content(chunk_size=1 << 20):
                written += out.write(chunk)
        length = res.headers.get("Content-Length")
        if length is not None and written != int(length):
            die(f"download of {url} failed: {written} of {length} bytes written")


def upload(session, url, listfile):
    with open(listfile, encoding="utf-8") as f:
        files = [line.rstrip("\r\n") for line in f if line.strip()]
    headers = {"Content-Type": "application/x-ndjson"}
    for path in files:
        try:
            with open(path, "rb") as body:
                res = session.post(url, data=body, headers=headers)
            res.close()
        except (OSError, requests.RequestException) as e:
            die(f"upload of {path} failed: {type(e).__name__}: {e}")
        if not 200 <= res.status_code < 300:
            die(f"upload of {path} failed: HTTP {res.status_code} {res.reason}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("download", "upload"):
        print(f"usage: {PROG} download URL OUTFILE | upload URL LISTFILE", file=sys.stderr)
        sys.exit(2)
    mode, url, path = sys.argv[1:]
    with requests.Session() as session:
        try:
            if mode == "download":
                download(session, url, path)
            else:
                upload(session, url, path)
        except (OSError, requests.RequestException) as e:
            die(f"{mode} of {url} failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
