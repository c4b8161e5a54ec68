# frozen_string_literal: true

# The Ruby driver of the client testkit (../../../shared/design/testkit.md):
# JSON lines on stdin, one result line per command on stdout, commands run
# concurrently on one Ticketing::Client. Uses only the gem's public API.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "json"
require "ticketing"

# Raised into an acquiring thread by the `cancel` command (Thread#raise is
# Ruby's native way to interrupt a blocked call).
class DriverCancelled < StandardError; end

class Driver
  def initialize
    @out = Mutex.new
    @mu = Mutex.new
    @client = nil
    @pending = {} # id => thread, for acquires (cancel targets)
    @threads = []
  end

  def run
    $stdin.each_line do |line|
      line = line.strip
      next if line.empty?

      msg = begin
        JSON.parse(line)
      rescue JSON::ParserError => e
        warn "driver: bad line: #{e.message}"
        next
      end
      dispatch(msg)
    end
    @threads.each { |t| t.join(10) }
    @mu.synchronize { @client }&.close
  end

  private

  def dispatch(msg)
    id = msg["id"]
    case msg["cmd"]
    when "cancel"
      target = @mu.synchronize { @pending[msg["target"]] }
      target&.raise(DriverCancelled, "cancelled by the runner")
      reply(id, {})
    when "info"
      reply(id, "language" => "ruby", "client_version" => Ticketing::VERSION, "runtime" => "ruby #{RUBY_VERSION}")
    else
      t = Thread.new { execute(id, msg) }
      t.report_on_exception = false
      @mu.synchronize { @pending[id] = t if msg["cmd"] == "acquire" }
      @threads << t
    end
  end

  def execute(id, msg)
    result = Thread.handle_interrupt(DriverCancelled => :immediate) { perform(msg) }
    reply(id, result)
  rescue DriverCancelled => e
    error(id, "cancelled", e.message)
  rescue Exception => e # -- every command answers once
    kind, code = classify(e)
    error(id, kind, "#{e.class}: #{e.message}", code)
  ensure
    @mu.synchronize { @pending.delete(id) }
  end

  def client
    @mu.synchronize { @client } || raise(Ticketing::ClosedError, "no client: connect first")
  end

  def perform(msg)
    case msg["cmd"]
    when "connect" then connect(msg)
    when "acquire"
      lease = client.acquire(key(msg), lease: msg.fetch("lease_ms") / 1000.0, wait: msg.fetch("wait_ms", 0) / 1000.0)
      { "token" => lease.token.to_s, "deadline_in_ms" => (lease.remaining * 1000).floor }
    when "release"
      client.release(key(msg), Integer(msg.fetch("token"), 10))
      {}
    when "with_lock" then with_lock(msg)
    when "close"
      c = @mu.synchronize { @client }
      c&.close
      {}
    else
      raise Ticketing::InvalidArgument, "unknown command #{msg['cmd'].inspect}"
    end
  end

  def with_lock(msg)
    token = nil
    begin
      client.lock(key(msg), lease: msg.fetch("lease_ms") / 1000.0, wait: msg.fetch("wait_ms", 0) / 1000.0) do |lease|
        token = lease.token
        sleep(msg.fetch("hold_ms", 0) / 1000.0)
        raise "failing inside the lock, as asked" if msg["fail"]
      end
    rescue RuntimeError => e
      raise unless msg["fail"] && token && e.message == "failing inside the lock, as asked"
    end
    { "token" => token.to_s }
  end

  def connect(msg)
    old = @mu.synchronize { @client }
    old&.close
    tls = msg["tls"] && {
      ca_file: msg["tls"]["ca"], cert_file: msg["tls"]["cert"], key_file: msg["tls"]["key"],
      server_name: msg["tls"]["server_name"]
    }.compact
    timeout = (msg["connect_timeout_ms"] || 5000) / 1000.0
    c = Ticketing::Client.new(addresses: msg.fetch("addrs"), token: msg["token"], tls: tls, connect_timeout: timeout)
    @mu.synchronize { @client = c }
    {}
  end

  def key(msg)
    return [msg["key_hex"]].pack("H*") if msg["key_hex"]

    msg.fetch("key")
  end

  def classify(err)
    case err
    when Ticketing::LockTimeout then ["timeout", nil]
    when Ticketing::Busy then ["busy", err.code_number]
    when Ticketing::Indeterminate then ["indeterminate", nil]
    when Ticketing::NotHolder then ["not_holder", nil]
    when Ticketing::InvalidArgument then ["invalid", err.code_number]
    when Ticketing::ServerError then ["invalid", err.code_number]
    when Ticketing::AuthenticationError then ["auth", err.code_number]
    when Ticketing::TLSError then ["tls", nil]
    when Ticketing::ConnectionError then ["connect", nil]
    when Ticketing::ClosedError then ["closed", nil]
    when Ticketing::ProtocolError then ["protocol", nil]
    else ["internal", nil]
    end
  end

  def reply(id, fields)
    write({ "id" => id, "ok" => true }.merge(fields))
  end

  def error(id, kind, message, code = nil)
    line = { "id" => id, "ok" => false, "error" => kind, "message" => message }
    line["code"] = code if code
    write(line)
  end

  def write(obj)
    @out.synchronize do
      $stdout.write("#{JSON.generate(obj)}\n")
      $stdout.flush
    end
  end
end

Driver.new.run
