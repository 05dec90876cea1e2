// HTTP echo server on Node.js's built-in `http` module: the Node.js peer of the HTTP echo-server
// experiment (`ab -c 2000 -n 8000` against Node.js, Tornado, EventMachine and Finagle).
//
//   node bench/peers/http/echo/node_echo.js PORT
//
// Listens on 127.0.0.1:PORT and answers every request (any method, any path) with 200, text/plain,
// body "<request target> <UTC time, RFC 3339 with milliseconds>\n". One process, no cluster: the
// original ran a single Node.js process and the experiment compares event loops, not core counts.
'use strict';

const http = require('http');

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    console.error('usage: node node_echo.js PORT');
    process.exit(2);
}

const server = http.createServer((req, res) => {
    // toISOString() is fixed-width (24 chars), so every answer to the same path has the same length:
    // ab counts a response whose length differs from the first one as a failed request.
    const body = `${req.url} ${new Date().toISOString()}\n`;
    res.writeHead(200, {
        'Content-Type': 'text/plain',
        'Content-Length': Buffer.byteLength(body),
    });
    res.end(body);
    // Discard any request body; Node only parses the next keep-alive request once this one's body
    // has been consumed.
    req.resume();
});

// Node would refuse connections past maxConnections; the 10,000-connection wrk run needs no limit.
server.maxConnections = Infinity;
// No per-request cap on a keep-alive connection (0 = unlimited), stated so a Node upgrade cannot
// change it quietly.
server.maxRequestsPerSocket = 0;
server.on('error', (err) => {
    console.error(`node_echo: ${err.message}`);
    process.exit(1);
});
// Backlog 4096 (Node's default is 511): 2000 clients connecting at once must not overflow the
// accept queue, or SYN retries (1 s, 3 s) would show up as latency that is not the server's.
server.listen({ host: '127.0.0.1', port, backlog: 4096 });

// SIGTERM: stop at once (the default action would too; this handler makes the exit status 0).
process.on('SIGTERM', () => process.exit(0));
