# loghaul bench: EventMachine line counter (the 2011 basic.rb experiment).
# usage: ruby basic.rb PORT COUNT_FILE
require 'eventmachine'

port = Integer(ARGV[0])
count_file = ARGV[1]
$count = 0

module Counter
  def post_init
    @tok = BufferedTokenizer.new("\n")
  end

  def receive_data(data)
    $count += @tok.extract(data).size
  end
end

def publish(path)
  tmp = path + '.tmp'
  File.write(tmp, $count.to_s)
  File.rename(tmp, path)
end

EM.run do
  EM.start_server('127.0.0.1', port, Counter)
  EM.add_periodic_timer(0.01) { publish(count_file) }
  Signal.trap('TERM') { EM.stop }
  Signal.trap('INT') { EM.stop }
end
publish(count_file)
