# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "minitest/autorun"
require "socket"
require "tmpdir"
require "securerandom"
require "ticketing"

GOLDEN_DIR = File.expand_path("../../wire/testdata/golden", __dir__)

# One golden frame: '#' comments, then hex digits and white space.
def golden(name)
  text = File.read(File.join(GOLDEN_DIR, "#{name}.hex"))
  hex = text.lines.map { |l| l.sub(/#.*/, "") }.join.gsub(/\s+/, "")
  [hex].pack("H*")
end

def wait_until(timeout = 10)
  limit = Ticketing.now + timeout
  until yield
    raise Minitest::Assertion, "condition not met within #{timeout}s" if Ticketing.now > limit

    sleep 0.01
  end
end

# A real `ticketing serve` on an OS-chosen loopback port.
class RealServer
  attr_reader :addr, :token

  def self.bin
    b = ENV["TICKETING_BIN"] || File.expand_path("../../../bin/ticketing", __dir__)
    raise "TICKETING_BIN #{b} not found: build it with `make build` at the repo root" unless File.executable?(b)

    b
  end

  def initialize(token: nil, args: [])
    @dir = Dir.mktmpdir("ticketing-rb")
    @token = token
    cmd = [self.class.bin, "serve", "--listen", "127.0.0.1:0", *args]
    if token
      File.write(File.join(@dir, "token"), token)
      cmd += ["--token-file", File.join(@dir, "token")]
    end
    @log = File.join(@dir, "server.log")
    @pid = Process.spawn(*cmd, out: File::NULL, err: @log, pgroup: true)
    wait_until(15) { File.read(@log) =~ /msg=serving addr=(\S+)/ }
    @addr = File.read(@log)[/msg=serving addr=(\S+)/, 1]
  end

  def stop
    return unless @pid

    Process.kill("KILL", @pid)
    Process.wait(@pid)
    @pid = nil
    FileUtils.rm_rf(@dir)
  rescue Errno::ESRCH, Errno::ECHILD
    @pid = nil
  end
end

# A scripted server speaking the v1 handshake; each request goes to the
# handler block (conn, request, state) which writes what it wants.
class FakeServer
  attr_reader :addr, :accepts, :requests

  def initialize(token: "", prove: true, reject: nil, &handler)
    @token = token
    @prove = prove
    @reject = reject
    @handler = handler
    @server = TCPServer.new("127.0.0.1", 0)
    @addr = "127.0.0.1:#{@server.addr[1]}"
    @accepts = Queue.new
    @requests = Queue.new
    @conns = []
    @mu = Mutex.new
    @thread = Thread.new { accept_loop }
  end

  def accept_times
    a = []
    a << @accepts.pop until @accepts.empty?
    a
  end

  def drop_all
    @mu.synchronize { @conns.each { |c| c.close rescue nil } }
  end

  def close
    @server.close
    drop_all
    @thread.kill
  end

  private

  def accept_loop
    loop do
      s = @server.accept
      @accepts << Ticketing.now
      @mu.synchronize { @conns << s }
      Thread.new { serve(s) }
    end
  rescue IOError, SystemCallError
    nil
  end

  def serve(s)
    snonce = SecureRandom.random_bytes(32)
    s.write(Wire.encode_hello(@token.empty? ? 0 : 1, snonce))
    auth = Wire.parse_auth(s.read(72) || return)
    if @reject
      s.write(Wire.encode_welcome(0x45, @reject, 0, "\0" * 32))
      s.close
      return
    end
    proof = @prove ? Wire.server_proof(@token, auth.role, auth.nonce, snonce) : SecureRandom.random_bytes(32)
    s.write(Wire.encode_welcome(0x4B, 0, 1024, proof))
    buf = String.new(encoding: Encoding::BINARY)
    state = {}
    loop do
      buf << s.readpartial(4096)
      loop do
        req, n = Wire.parse_request(buf)
        break if n.zero?

        buf = buf.byteslice(n..)
        if req.op == Wire::OP_PING && req.arg == Wire::PING_FEATURES
          s.write(Wire.encode_response(Wire::STATUS_PONG, 0, 0, req.req_id, 1)) # as a 1.0 server: no features
          next
        end
        @requests << req
        @handler&.call(s, req, state)
      end
    end
  rescue IOError, SystemCallError
    nil
  ensure
    s.close rescue nil
  end

  Wire = Ticketing::Wire
end

def respond(sock, status, req, value: 0, code: 0, queued: 0, payload: nil)
  sock.write(Ticketing::Wire.encode_response(status, code, queued, req.req_id, value, payload))
end
