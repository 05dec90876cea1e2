// HTTP echo server on Finagle (finagle-http 24.2.0, Netty 4): the Finagle peer of the HTTP
// echo-server experiment.
//
//   /opt/loghaul-peers/bin/finagle-echo PORT
//   (= java FLAGS -cp '/opt/loghaul-peers/finagle/lib/*:/opt/loghaul-peers/finagle/classes'
//      loghaul.peers.FinagleEcho PORT, built by scripts/install-peers.sh)
//
// Listens on 127.0.0.1:PORT and answers every request (any method, any path) with 200, text/plain,
// body "<request target> <UTC time, RFC 3339 with milliseconds>\n". One JVM, Finagle's default
// Netty worker pool; the service itself is a plain Service<Request, Response>, Finagle's hello world.
package loghaul.peers;

import com.twitter.finagle.Http;
import com.twitter.finagle.ListeningServer;
import com.twitter.finagle.Service;
import com.twitter.finagle.http.Request;
import com.twitter.finagle.http.Response;
import com.twitter.finagle.http.Status;
import com.twitter.finagle.server.Listener;
import com.twitter.util.Await;
import com.twitter.util.Future;
import com.twitter.util.StorageUnit;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import scala.Option;

public final class FinagleEcho {
    // A fixed-width pattern, not Instant.toString(), which drops trailing zeros of the fraction: ab
    // counts an answer whose length differs from the first one as a failed request.
    private static final DateTimeFormatter TIME =
            DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    private FinagleEcho() {}

    static final class Echo extends Service<Request, Response> {
        @Override
        public Future<Response> apply(Request req) {
            // The request target as sent, query included (like the other three peers).
            byte[] body = (req.uri() + " " + TIME.format(java.time.Instant.now()) + "\n")
                    .getBytes(StandardCharsets.UTF_8);
            Response rep = Response.apply(req.version(), Status.Ok());
            rep.headerMap().set("Content-Type", "text/plain");
            rep.contentLength(body.length);
            rep.write(body);
            return Future.value(rep);
        }
    }

    public static void main(String[] args) throws Exception {
        int port;
        try {
            port = Integer.parseInt(args.length == 1 ? args[0] : "");
        } catch (NumberFormatException e) {
            System.err.println("usage: FinagleEcho PORT");
            System.exit(2);
            return;
        }
        ListeningServer server = Http.server()
                .withLabel("finagle-echo")
                // Bodies are read whole and dropped; Finagle's default cap (5MB) would answer 413 to
                // a larger upload, so allow what the other peers accept (Tornado: 100MB).
                .withMaxRequestSize(StorageUnit.fromMegabytes(100))
                // Backlog 4096 (Finagle leaves it to the OS default, 128 on older kernels): 2000 clients
                // connecting at once must not wait out SYN retries.
                .configured(new Listener.Backlog(Option.<Object>apply(4096)).mk())
                .serve(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), port), new Echo());
        // SIGTERM: the JVM's default handling (shutdown hooks, then exit) ends the process.
        Await.ready(server);
    }
}
