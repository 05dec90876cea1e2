# HTTP echo server on plain EventMachine: the EventMachine peer of the HTTP echo-server experiment.
#
#   ruby bench/peers/http/echo/em_echo.rb PORT
#
# Listens on 127.0.0.1:PORT and answers every request (any method, any path) with 200, text/plain,
# body "<request target> <UTC time, RFC 3339 with milliseconds>\n". One process, one reactor.
#
# Why plain EventMachine with a hand-written parser rather than thin + Rack: the experiment measures
# the reactor, and thin adds a Rack env hash, middleware and a response array per request; see
# README.md for both measured. The parser below is minimal but complete for what load tools and
# HTTP clients send: keep-alive (HTTP/1.1 by default, HTTP/1.0 with "Connection: keep-alive", as ab
# -k sends), pipelined requests, "Connection: close", and request bodies with Content-Length or
# chunked transfer coding, which are read and dropped.
require 'eventmachine'
require 'socket'

module EchoServer
  # Largest request head accepted; a longer one is answered 431 and the connection closed.
  MAX_HEAD = 64 * 1024
  CRLF = "\r\n".b
  HEAD_END = "\r\n\r\n".b

  # A connection is a small state machine over its input buffer:
  #   :head        waiting for "\r\n\r\n"
  #   :body        dropping @remaining bytes of a Content-Length body (or of a chunk and its CRLF)
  #   :chunk_size  waiting for a chunk-size line
  #   :trailer     waiting for the empty line that ends a chunked body's trailer
  # @next_state is where :body goes when @remaining reaches 0. A complete request's answer is queued
  # in @out; all answers found in one read go out in one send_data, so pipelined requests cost one
  # write. Answers wait for the whole body, so a "Connection: close" never cuts off an upload.
  class Connection < EM::Connection
    def post_init
      @buf = String.new(encoding: Encoding::BINARY)
      @state = :head
      @remaining = 0
      @next_state = :head
      @closing = false
    end

    def receive_data(data)
      return if @closing
      # EventMachine hands over a fresh binary string: adopt it when nothing is buffered (the usual
      # case) instead of copying it.
      if @buf.empty? then @buf = data else @buf << data end
      @out = nil
      until @closing
        case @state
        when :head
          i = @buf.index(HEAD_END)
          if i.nil?
            reject(431, 'Request Header Fields Too Large') if @buf.bytesize > MAX_HEAD
            break
          end
          head = @buf.byteslice(0, i)
          @buf = @buf.byteslice(i + 4, @buf.bytesize - i - 4)
          parse_head(head)
        when :body
          if @remaining.positive?
            n = @buf.bytesize
            if n <= @remaining
              @remaining -= n
              @buf.clear
              break if @remaining.positive?
            else
              @buf = @buf.byteslice(@remaining, n - @remaining)
              @remaining = 0
            end
          end
          @state = @next_state
          complete if @state == :head
        when :chunk_size
          i = @buf.index(CRLF) or break
          size = @buf.byteslice(0, i).split(';', 2)[0].strip
          @buf = @buf.byteslice(i + 2, @buf.bytesize - i - 2)
          unless size.match?(/\A\h+\z/)
            reject(400, 'Bad Request')
            break
          end
          size = size.to_i(16)
          if size.zero?
            @state = :trailer
          else
            @remaining = size + 2 # the chunk and the CRLF after it
            @state = :body
            @next_state = :chunk_size
          end
        when :trailer
          i = @buf.index(CRLF) or break
          @buf = @buf.byteslice(i + 2, @buf.bytesize - i - 2)
          if i.zero?
            @state = :head
            complete
          end
        end
        # Answered, nothing left to parse: the common keep-alive case.
        break if @state == :head && @buf.empty?
      end
      send_data(@out) if @out
      close_connection_after_writing if @closing
    end

    private

    # Reads the request line and the three headers that matter, prepares the answer and sets the
    # state for the body, if any.
    def parse_head(head)
      lines = head.split(CRLF)
      method, target, version = lines[0].to_s.split(' ', 3)
      unless method && target && version&.start_with?('HTTP/1.')
        reject(400, 'Bad Request')
        return
      end
      length = 0
      chunked = false
      connection = nil
      lines.each_with_index do |line, n|
        next if n.zero?
        name, value = line.split(':', 2)
        next unless value
        case name.strip.downcase
        when 'content-length' then length = Integer(value.strip, 10, exception: false) || -1
        when 'transfer-encoding' then chunked = value.downcase.include?('chunked')
        when 'connection' then connection = value.downcase
        end
      end
      if length.negative?
        reject(400, 'Bad Request')
        return
      end
      @keep_alive =
        if version == 'HTTP/1.0'
          connection&.include?('keep-alive') || false
        else
          !connection&.include?('close')
        end
      @answer = answer(target, version)
      if chunked
        @state = :chunk_size
      else
        # Without a body (@remaining 0) the :body step completes the request at once.
        @remaining = length
        @state = :body
        @next_state = :head
      end
    end

    # The request and its body have been read: queue its answer, and stop reading after a close.
    def complete
      (@out ||= String.new(encoding: Encoding::BINARY)) << @answer
      @closing = !@keep_alive
    end

    def answer(target, version)
      body = "#{target} #{Time.now.utc.strftime('%Y-%m-%dT%H:%M:%S.%LZ')}\n"
      conn =
        if !@keep_alive then "Connection: close\r\n"
        elsif version == 'HTTP/1.0' then "Connection: keep-alive\r\n" # ab -k counts on it
        else ''
        end
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: #{body.bytesize}\r\n" \
        "#{conn}\r\n#{body}".b
    end

    # Answers a request that cannot be parsed and closes; queued after the answers before it.
    def reject(code, reason)
      (@out ||= String.new(encoding: Encoding::BINARY)) <<
        "HTTP/1.1 #{code} #{reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
      @closing = true
    end
  end
end

port = Integer(ARGV[0] || '', exception: false)
abort 'usage: ruby em_echo.rb PORT' if ARGV.size != 1 || port.nil? || !(1..65_535).cover?(port)

# epoll, and a descriptor limit raised to the hard limit: EventMachine's default table is 1024
# (select), and the 10,000-connection wrk run needs far more.
EM.epoll
EM.set_descriptor_table_size(Process.getrlimit(:NOFILE)[1])

# The listening socket is made here rather than with EM.start_server, which listens with a backlog
# of 100: 2000 clients connecting at once would overflow it and wait out SYN retries (1 s, 3 s).
listener = TCPServer.new('127.0.0.1', port)
listener.listen(4096)

# SIGTERM: leave the reactor and exit 0.
trap('TERM') { EM.stop }
EM.run do
  EM.attach_server(listener, EchoServer::Connection)
end
