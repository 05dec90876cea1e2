"""HTTP echo server on Tornado: the Tornado peer of the HTTP echo-server experiment.

    $LOGHAUL_HTTP_PYTHON bench/peers/http/echo/tornado_echo.py PORT

Listens on 127.0.0.1:PORT and answers every request (any method, any path) with 200, text/plain,
body "<request target> <UTC time, RFC 3339 with milliseconds>\\n". One process, one asyncio loop.

Written against Tornado's HTTP-server interface (HTTPServerConnectionDelegate / HTTPMessageDelegate)
rather than tornado.web: a RequestHandler answers methods outside its SUPPORTED_METHODS with 405
and would buffer every request body, while the echo must answer any method and only discard bodies.
It is also the lightest path through Tornado, so the figures are Tornado's HTTP/1.1 stack and
IOLoop, not its routing.
"""

import asyncio
import resource
import sys
import time

from tornado import httputil
from tornado.httpserver import HTTPServer

OK = httputil.ResponseStartLine("HTTP/1.1", 200, "OK")


def now_rfc3339():
    # Fixed width (24 characters): ab counts an answer whose length differs from the first one as
    # a failed request, so the time must not drop trailing zeros.
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


class Echo(httputil.HTTPMessageDelegate):
    """One request: remember its target, drop its body, answer when it is complete."""

    def __init__(self, connection):
        self.connection = connection
        self.target = "/"

    def headers_received(self, start_line, headers):
        self.target = start_line.path  # the request target as sent, query included
        return None

    def data_received(self, chunk):
        return None  # the body is read (Tornado must, to find the next request) and dropped

    def finish(self):
        body = ("%s %s\n" % (self.target, now_rfc3339())).encode()
        headers = httputil.HTTPHeaders()
        headers["Content-Type"] = "text/plain"
        headers["Content-Length"] = str(len(body))
        # HTTP1Connection adds "Connection: Keep-Alive" for an HTTP/1.0 keep-alive request (ab -k)
        # and closes after answering a request that asked for close.
        self.connection.write_headers(OK, headers, body)
        self.connection.finish()

    def on_connection_close(self):
        pass


class EchoServer(httputil.HTTPServerConnectionDelegate):
    def start_request(self, server_conn, request_conn):
        return Echo(request_conn)


async def main(port):
    server = HTTPServer(EchoServer())
    # Backlog 4096 (Tornado's default is 128): 2000 clients connecting at once must not overflow the
    # accept queue, or SYN retries would show up as latency that is not the server's.
    server.listen(port, address="127.0.0.1", backlog=4096)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: tornado_echo.py PORT")
    # Use the whole hard limit on descriptors: the 10,000-connection wrk run needs more than the
    # usual soft limit of 1024. SIGTERM keeps its default action (the process ends at once).
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main(int(sys.argv[1])))
