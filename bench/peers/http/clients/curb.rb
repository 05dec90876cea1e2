# HTTP client for the client experiment on curb (Debian ruby-curb: Ruby bindings to libcurl).
#
#   ruby bench/peers/http/clients/curb.rb download URL OUTFILE
#   ruby bench/peers/http/clients/curb.rb upload URL LISTFILE
#
# download: one GET over HTTP/1.1, the body written into OUTFILE as libcurl delivers it; exit 0 iff
#   status 200 and the whole body was written (libcurl itself fails a body shorter than its
#   Content-Length).
# upload: POST each file named in LISTFILE (one path per line), in order, as
#   application/x-ndjson, with one Curl::Easy reused for all, so libcurl keeps one connection alive;
#   stops with a message on stderr naming the file at the first non-2xx answer or error. Prints
#   nothing else.
#
# Bodies are read whole (File.binread) and handed to libcurl as the POST body: curb has no
# streaming POST from a file (its IO reader serves PUT uploads only), and a 200KB batch is one read.
require 'curb'

PROG = 'curb.rb'

def die(msg)
  warn "#{PROG}: #{msg}"
  exit 1
end

mode, url, path = ARGV
unless ARGV.size == 3 && %w[download upload].include?(mode)
  warn "usage: #{PROG} download URL OUTFILE | upload URL LISTFILE"
  exit 2
end

current = url # what a failure message names: the URL, or the file being uploaded
begin
  easy = Curl::Easy.new(url)
  easy.version = Curl::HTTP_1_1
  if mode == 'download'
    File.open(path, 'wb') do |f|
      # on_body must return the number of bytes it took, or libcurl aborts the transfer.
      easy.on_body { |chunk| f.write(chunk) }
      easy.http_get
    end
    die "download of #{url} failed: HTTP #{easy.response_code}" unless easy.response_code == 200
  else
    easy.headers['Content-Type'] = 'application/x-ndjson'
    # libcurl 7.88 sends "Expect: 100-continue" for a POST body over 1MB and then waits for the
    # server's 100; the other clients send the body at once, so this one does too.
    easy.headers['Expect'] = ''
    files = File.readlines(path, chomp: true).reject(&:empty?)
    files.each do |file|
      current = file
      easy.http_post(File.binread(file))
      code = easy.response_code
      die "upload of #{file} failed: HTTP #{code}" unless (200..299).cover?(code)
    end
  end
rescue StandardError => e
  die "#{mode} of #{current} failed: #{e.class}: #{e.message}"
end
