# HTTP client for the client experiment on em-http-request (Debian ruby-em-http-request, on
# EventMachine).
#
#   ruby bench/peers/http/clients/em_http.rb download URL OUTFILE
#   ruby bench/peers/http/clients/em_http.rb upload URL LISTFILE
#
# download: one GET over HTTP/1.1, the body streamed into OUTFILE; exit 0 iff status 200 and the
#   whole body was written (em-http fails a response that ends before its Content-Length).
# upload: POST each file named in LISTFILE (one path per line), in order, as
#   application/x-ndjson, one after another on one HttpConnection with keepalive: true, so all go
#   over one TCP connection; stops with a message on stderr naming the file at the first non-2xx
#   answer or error. Prints nothing else.
#
# Bodies are read whole (File.binread) and sent as a string, in one send_data. em-http's `file:`
# option would stream the file from a memory map over several reactor ticks, but a server may answer
# before it has read the whole body (HTTP/1.1 allows it; the Node.js echo server does): em-http then
# completes the request while its streamer is still sending, and the next request's head lands in
# the middle of the previous body. A string is queued whole before any answer can be read.
require 'em-http'

PROG = 'em_http.rb'

mode, url, path = ARGV
unless ARGV.size == 3 && %w[download upload].include?(mode)
  warn "usage: #{PROG} download URL OUTFILE | upload URL LISTFILE"
  exit 2
end

failure = nil # set by the first failure; reported after the reactor stops
fail_with = lambda do |msg|
  failure ||= msg
  EM.stop
end

begin
  EM.run do
    # No timeouts of em-http's own cut a slow server short: 60s of silence is an error.
    conn = EventMachine::HttpRequest.new(url, connect_timeout: 10, inactivity_timeout: 60)
    if mode == 'download'
      out = File.open(path, 'wb')
      written = 0
      # No Accept-Encoding and no decoding: the experiment moves the bytes as they are.
      req = conn.get(compressed: false, decoding: false)
      req.stream { |chunk| written += out.write(chunk) }
      req.callback do
        out.close
        status = req.response_header.status
        length = req.response_header.content_length
        if status != 200
          fail_with.call("download of #{url} failed: HTTP #{status}")
        elsif length && written != length
          fail_with.call("download of #{url} failed: #{written} of #{length} bytes written")
        else
          EM.stop
        end
      end
      req.errback { fail_with.call("download of #{url} failed: #{req.error || 'connection error'}") }
    else
      files = File.readlines(path, chomp: true).reject(&:empty?)
      head = { 'Content-Type' => 'application/x-ndjson' }
      send_one = lambda do |i|
        if i == files.size
          EM.stop
          next
        end
        file = files[i]
        begin
          body = File.binread(file)
        rescue SystemCallError => e
          fail_with.call("upload of #{file} failed: #{e.class}: #{e.message}")
          next
        end
        req = conn.post(body: body, head: head, keepalive: true)
        req.callback do
          status = req.response_header.status
          if (200..299).cover?(status)
            send_one.call(i + 1)
          else
            fail_with.call("upload of #{file} failed: HTTP #{status}")
          end
        end
        req.errback { fail_with.call("upload of #{file} failed: #{req.error || 'connection error'}") }
      end
      send_one.call(0)
    end
  end
rescue StandardError => e
  failure ||= "#{mode} failed: #{e.class}: #{e.message}"
end

if failure
  warn "#{PROG}: #{failure}"
  exit 1
end
