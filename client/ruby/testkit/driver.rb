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
    @leases = {} # token (String) => Lease: release_lease, lease_ending
    @exiting = false # stdin ended: open scopes end (R10)
    @exit_cv = ConditionVariable.new
  end

  def run
    $stdin.each_line do |line|
      line = line.strip
      next if line.empty?

      msg = parse(line)
      next unless msg

      dispatch(msg)
    end
    # EOF ends the program: open scopes end (their leases are released,
    # R10), pending acquires are withdrawn, then the client closes
    @mu.synchronize do
      @exiting = true
      @exit_cv.broadcast
      @pending.each_value { |t| t.raise(DriverCancelled, "the program exits") unless t[:scope] }
    end
    @threads.each { |t| t.join(10) }
    @mu.synchronize { @client }&.close
  end

  # A JSON line; a lone UTF-16 surrogate escape (which Ruby's JSON refuses)
  # becomes its three generalized-UTF-8 bytes, an invalid String the client
  # must refuse (R8), as a program's broken input would be.
  def parse(line)
    JSON.parse(line)
  rescue JSON::ParserError => e
    fixed = line.gsub(/\\u(d[89a-f]\h\h)/i) { "@@SURR#{Regexp.last_match(1)}@@" }
    begin
      unsurrogate(JSON.parse(fixed))
    rescue JSON::ParserError
      warn "driver: bad line: #{e.message}"
      nil
    end
  end

  def unsurrogate(obj)
    case obj
    when Hash then obj.transform_values { |v| unsurrogate(v) }
    when String
      obj.gsub(/@@SURR(\h{4})@@/) do
        cp = Regexp.last_match(1).to_i(16)
        [0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)].pack("C*").force_encoding(Encoding::UTF_8)
      end
    else obj
    end
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
      t[:scope] = msg["cmd"] == "with_lock"
      @mu.synchronize { @pending[id] = t if %w[acquire acquire_set try_acquire with_lock].include?(msg["cmd"]) }
      @threads << t
    end
  end

  # Runs one command and answers it exactly once: a cancel (or the exit)
  # raised into the thread counts only while the command runs.
  def execute(id, msg)
    Thread.handle_interrupt(DriverCancelled => :never) do
      outcome = begin
        [:ok, Thread.handle_interrupt(DriverCancelled => :immediate) { perform(msg) }]
      rescue Exception => e # -- every command answers once
        [:err, e]
      end
      @mu.synchronize { @pending.delete(id) }
      answer(id, *outcome)
    end
  end

  def answer(id, how, value)
    return reply(id, value) if how == :ok
    return error(id, "cancelled", value.message) if value.is_a?(DriverCancelled)

    kind, code = classify(value)
    error(id, kind, "#{value.class}: #{value.message}", code)
  end

  def client
    @mu.synchronize { @client } || raise(Ticketing::ClosedError, "no client: connect first")
  end

  def perform(msg)
    case msg["cmd"]
    when "connect" then connect(msg)
    when "acquire"
      mr = msg["min_remaining_ms"]
      lease = client.acquire(key(msg), lease: secs(msg.fetch("lease_ms")), wait: secs(msg.fetch("wait_ms", 0)),
                                       min_remaining: mr && secs(mr))
      keep(lease)
      { "token" => lease.token.to_s, "deadline_in_ms" => (lease.remaining * 1000).floor }
    when "try_acquire"
      lease = client.try_acquire(key(msg), lease: secs(msg.fetch("lease_ms")), wait: secs(msg.fetch("wait_ms", 0)))
      next_lease(lease)
    when "release_lease"
      l = lease_of(msg)
      client
      { "already" => !l.release }
    when "lease_ending"
      q = Queue.new
      l = lease_of(msg)
      l.on_ending(secs(msg.fetch("margin_ms", 0))) { |rem| q << rem }
      { "remaining_ms" => (q.pop * 1000).floor }
    when "acquire_set"
      lease = client.acquire_set(msg.fetch("keys"), lease: secs(msg.fetch("lease_ms")), wait: secs(msg.fetch("wait_ms", 0)))
      keep(lease)
      { "token" => lease.token.to_s, "deadline_in_ms" => (lease.remaining * 1000).floor }
    when "release_set"
      client.release_set(msg.fetch("keys"), Integer(msg.fetch("token"), 10))
      {}
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

  def keep(lease)
    @mu.synchronize { @leases[lease.token.to_s] = lease }
  end

  def next_lease(lease)
    return { "acquired" => false } unless lease

    keep(lease)
    { "acquired" => true, "token" => lease.token.to_s, "deadline_in_ms" => (lease.remaining * 1000).floor }
  end

  def lease_of(msg)
    @mu.synchronize { @leases[msg.fetch("token").to_s] } ||
      raise(Ticketing::InvalidArgument, "no lease with token #{msg['token']} acquired by this driver")
  end

  def secs(ms)
    ms.is_a?(Numeric) ? ms / 1000.0 : ms
  end

  # Sleeps up to s seconds; the program's exit (stdin EOF) ends it early (R10).
  def hold(s)
    limit = Ticketing.now + s
    @mu.synchronize do
      until @exiting
        left = limit - Ticketing.now
        break if left <= 0

        @exit_cv.wait(@mu, left)
      end
    end
  end

  def with_lock(msg)
    token = nil
    begin
      client.lock(key(msg), lease: secs(msg.fetch("lease_ms")), wait: secs(msg.fetch("wait_ms", 0))) do |lease|
        token = lease.token
        hold(msg.fetch("hold_ms", 0) / 1000.0)
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
    allowance = (msg["answer_allowance_ms"] || 3000) / 1000.0
    c = Ticketing::Client.new(addresses: msg.fetch("addrs"), token: msg["token"], tls: tls, connect_timeout: timeout,
                              answer_allowance: allowance, label: msg["label"])
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
    when Ticketing::InsufficientLease then ["insufficient_lease", nil]
    when Ticketing::NotSupported then ["unsupported", nil]
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
