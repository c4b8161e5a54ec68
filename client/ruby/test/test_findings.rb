# frozen_string_literal: true

require_relative "test_helper"
require "json"

# Issue 32 findings 9-11 (Ruby). The edge rules R1-R16 are testkit scenarios
# (client/testkit/edge.go) run against this client's driver.
class TestFindings < Minitest::Test
  def self.server
    @server ||= RealServer.new.tap { |s| Minitest.after_run { s.stop } }
  end

  def setup
    @srv = self.class.server
    @client = Ticketing::Client.new(addresses: [@srv.addr])
  end

  def teardown
    @client&.close
  end

  def key
    "rb/findings/#{name}/#{SecureRandom.hex(4)}"
  end

  # finding 9: wait: nil used to mean "try once" silently; lease: nil said "at least 1 ms (got 0.0s)"
  def test_nil_wait_and_nil_lease_are_refused_naming_the_argument
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: 5, wait: nil) }
    assert_match(/wait must be a number of seconds, got nil/, e.message)
    assert_match(/wait: 0 tries once/, e.message)
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: nil) }
    assert_match(/lease must be a number of seconds, got nil/, e.message)
    assert_raises(Ticketing::InvalidArgument) { @client.lock(key, lease: 5, wait: nil) { flunk "entered" } }
  end

  # finding 10: lock without a block acquired and then raised LocalJumpError with the lock held
  def test_lock_without_a_block_returns_the_lease
    k = key
    l = @client.lock(k, lease: 5)
    assert_kind_of Ticketing::Lease, l
    assert_raises(Ticketing::LockTimeout) { @client.acquire(k, lease: 5) }
    assert l.release
    @client.acquire(k, lease: 5).release
  end

  # finding 11: a missing ca_file named no file; tls: true was refused; no ping; AuthenticationError had no #code
  def test_missing_ca_file_is_named
    path = File.join(Dir.tmpdir, "no-such-ca-#{SecureRandom.hex(4)}.pem")
    e = assert_raises(Ticketing::InvalidArgument) do
      Ticketing::Client.new(addresses: [@srv.addr], tls: { ca_file: path })
    end
    assert_includes e.message, path
    e = assert_raises(Ticketing::InvalidArgument) do
      Ticketing::Client.new(addresses: [@srv.addr], tls: { verify: false, cert_file: path, key_file: path })
    end
    assert_includes e.message, "cert_file"
  end

  def test_tls_true_means_verified_tls_with_the_system_cas
    # against a plaintext server the handshake fails: a TLS error, not a refused argument
    assert_raises(Ticketing::TLSError, Ticketing::ConnectionError) do
      Ticketing::Client.new(addresses: [@srv.addr], tls: true, connect_timeout: 2)
    end
  end

  def test_ping
    server_us, rtt = @client.ping
    assert_in_delta Time.now.to_f, server_us / 1e6, 60
    assert_operator rtt, :>=, 0
    @client.close
    assert_raises(Ticketing::ClosedError) { @client.ping } # R7 for ping (the testkit has no ping command)
  end

  def test_authentication_error_has_a_code
    srv = RealServer.new(token: "right")
    e = assert_raises(Ticketing::AuthenticationError) do
      Ticketing::Client.new(addresses: [srv.addr], token: "wrong", connect_timeout: 3)
    end
    assert_equal :AUTH_FAILED, e.code
    assert_equal 11, e.code_number
  ensure
    srv&.stop
  end

  def test_gemspec_has_a_homepage
    spec = Gem::Specification.load(File.expand_path("../ticketing-client.gemspec", __dir__))
    assert_equal "ticketing-client", spec.name
    refute_empty spec.homepage.to_s
  end

  def test_an_address_with_a_scheme_is_refused_at_once
    %w[http://127.0.0.1:7470 127.0.0.1:7470/ tcp://[::1]:7470].each do |a|
      assert_raises(Ticketing::InvalidArgument) { Ticketing::Client.new(addresses: [a], connect_timeout: 30) }
    end
  end

  # protocol 1.1: the feature ping and the label, through the codec and against the server
  def test_label_golden_vectors_and_visible_in_locks
    assert_equal golden("v1_1/req_ping_features"), Ticketing::Wire.encode_ping(9, Ticketing::Wire::PING_FEATURES)
    assert_equal golden("v1_1/req_label"), Ticketing::Wire.encode_label(0x0d, "web-1/4242 go/1.1.0")
    assert_equal ("é" * 32).b, Ticketing::Wire.cut_label("é" * 40)
    k = key
    c = Ticketing::Client.new(addresses: [@srv.addr], app_name: "billing")
    c.lock(k, lease: 5) do
      adm = Ticketing::Client.new(addresses: [@srv.addr], admin: true)
      row = adm.admin("locks", prefix: k)["locks"].first
      adm.close
      label = row.dig("holder", "label").to_s
      assert label.start_with?("billing "), row.inspect
      assert_includes label, "/#{Process.pid} ruby/"
    end
  ensure
    c&.close
  end
end
