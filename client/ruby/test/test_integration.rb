# frozen_string_literal: true

require_relative "test_helper"
require "timeout"

# Against the real `ticketing serve` ($TICKETING_BIN): what is Ruby's own
# (Timeout.timeout, fork, the limits' codes, the no-token hint). Acquire,
# FIFO, expiry, scoped form, cancel, 100 in flight and TLS are testkit
# scenarios (client/testkit/scenarios.go) run against this client's driver.
class TestIntegration < Minitest::Test
  def self.server
    @server ||= RealServer.new(token: "s3cret-#{SecureRandom.hex(4)}").tap do |s|
      Minitest.after_run { s.stop }
    end
  end

  def setup
    @srv = self.class.server
    @client = Ticketing::Client.new(addresses: [@srv.addr], token: @srv.token)
  end

  def teardown
    @client&.close
  end

  def key
    "rb/#{name}/#{SecureRandom.hex(4)}"
  end

  def test_timeout_timeout_in_user_code_withdraws
    k = key
    holder = @client.acquire(k, lease: 30)
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { @client.acquire(k, lease: 30, wait: 20) } }
    holder.release
    # Withdrawn (C), or, when the release's handoff beat the C, granted and
    # compensated at once: either way free within seconds, not held for the
    # abandoned acquire's 30 s lease. (wait 0 here raced the compensation.)
    @client.acquire(k, lease: 5, wait: 5).release
  end

  def test_server_limits_come_back_typed_with_their_code
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: 7200) }
    assert_equal :BAD_LEASE, e.code
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: 1, wait: 3600) }
    assert_equal :BAD_WAIT, e.code
  end

  # (a wrong token is the testkit's handshake_token and r4_wrong_token_fast)
  def test_no_token_says_the_server_requires_one
    e = assert_raises(Ticketing::AuthenticationError) do
      Ticketing::Client.new(addresses: [@srv.addr], connect_timeout: 2)
    end
    assert_match(/requires a token/, e.message)
  end

  def test_fork_reconnects_in_the_child
    skip "fork not available" unless Process.respond_to?(:fork)

    k = key
    @client.acquire(k, lease: 10).release
    r, w = IO.pipe
    pid = fork do
      r.close
      begin
        l = @client.acquire(k, lease: 10, wait: 5)
        l.release
        w.write("ok #{l.token}")
      rescue Exception => e
        w.write("error #{e.class}: #{e.message}")
      end
      w.close
      exit!(0)
    end
    w.close
    Process.wait(pid)
    assert_match(/\Aok \d+\z/, r.read)
    # The parent's client is untouched by the child.
    @client.acquire(k, lease: 10, wait: 5).release
  end

  def test_survives_a_server_restart
    srv = RealServer.new
    c = Ticketing::Client.new(addresses: [srv.addr], connect_timeout: 2)
    c.acquire("rb/restart", lease: 5).release
    srv.stop
    assert_raises(Ticketing::ConnectionError, Ticketing::Indeterminate) { c.acquire("rb/restart", lease: 5) }
  ensure
    c&.close
    srv&.stop
  end
end
