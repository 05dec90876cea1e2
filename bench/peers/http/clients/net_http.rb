# HTTP client for the client experiment on Ruby's standard library Net::HTTP.
#
#   ruby bench/peers/http/clients/net_http.rb download URL OUTFILE
#   ruby bench/peers/http/clients/net_http.rb upload URL LISTFILE
#
# download: one GET over HTTP/1.1, the body streamed into OUTFILE; exit 0 iff status 200 and the
#   whole body (Content-Length, when given) was written.
# upload: POST each file named in LISTFILE (one path per line), in order, as
#   application/x-ndjson, over one keep-alive connection (one Net::HTTP.start); stops with a message
#   on stderr naming the file at the first non-2xx answer or error. Prints nothing else.
#
# Bodies are streamed from the file (body_stream + an explicit Content-Length): Net::HTTP then
# writes the head and copies the file to the socket with IO.copy_stream in 16KB pieces, without
# chunked coding and without holding the whole file in memory, so this is honest streaming.
require 'net/http'
require 'uri'

PROG = 'net_http.rb'

def die(msg)
  warn "#{PROG}: #{msg}"
  exit 1
end

mode, url, path = ARGV
unless ARGV.size == 3 && %w[download upload].include?(mode)
  warn "usage: #{PROG} download URL OUTFILE | upload URL LISTFILE"
  exit 2
end

uri = URI(url)
current = url # what a failure message names: the URL, or the file being uploaded
begin
  Net::HTTP.start(uri.host, uri.port, use_ssl: uri.scheme == 'https') do |http|
    if mode == 'download'
      req = Net::HTTP::Get.new(uri)
      # Net::HTTP asks for gzip and inflates by default; the experiment moves the bytes as they are.
      req['Accept-Encoding'] = 'identity'
      http.request(req) do |res|
        die "download of #{url} failed: HTTP #{res.code} #{res.message}" unless res.code == '200'
        written = 0
        File.open(path, 'wb') do |f|
          res.read_body { |chunk| written += f.write(chunk) }
        end
        length = res['Content-Length']
        if length && written != length.to_i
          die "download of #{url} failed: #{written} of #{length} bytes written"
        end
      end
    else
      files = File.readlines(path, chomp: true).reject(&:empty?)
      files.each do |file|
        current = file
        File.open(file, 'rb') do |io|
          req = Net::HTTP::Post.new(uri)
          req['Content-Type'] = 'application/x-ndjson'
          req['Content-Length'] = io.size.to_s
          req.body_stream = io
          res = http.request(req)
          unless res.is_a?(Net::HTTPSuccess)
            die "upload of #{file} failed: HTTP #{res.code} #{res.message}"
          end
        end
      end
    end
  end
rescue StandardError => e
  die "#{mode} of #{current} failed: #{e.class}: #{e.message}"
end
