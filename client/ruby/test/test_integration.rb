# frozen_string_literal: true

require_relative "test_helper"
require "openssl"
require "timeout"

# Against the real `ticketing serve` ($TICKETING_BIN).
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

  def test_acquire_release_and_fencing_tokens_increase
    k = key
    l1 = @client.acquire(k, lease: 10)
    assert_kind_of Integer, l1.token
    assert_operator l1.token, :>, 2**53, "tokens exceed 2^53 and stay exact"
    assert_in_delta 10, l1.remaining, 1
    assert l1.release
    assert l1.released?
    refute l1.release, "a second release of the lease object is a no-op that says so (R6)"
    l2 = @client.acquire(k, lease: 10)
    assert_operator l2.token, :>, l1.token
    l2.release
  end

  def test_wait_zero_tries_once
    k = key
    l = @client.acquire(k, lease: 10)
    t0 = Ticketing.now
    assert_raises(Ticketing::LockTimeout) { @client.acquire(k, lease: 10, wait: 0) }
    assert_operator Ticketing.now - t0, :<, 2
    l.release
  end

  def test_fifo_handoff_between_threads_with_queued_deadline
    k = key
    holder = @client.acquire(k, lease: 30)
    order = Queue.new
    threads = 5.times.map do |i|
      t = Thread.new do
        l = @client.acquire(k, lease: 30, wait: 20)
        order << [i, l.token, l.remaining]
        l.release
      end
      wait_until { t.status == "sleep" }
      sleep 0.05 # queued in this order on the server
      t
    end
    sleep 0.2
    holder.release
    threads.each(&:join)
    got = 5.times.map { order.pop }
    assert_equal (0..4).to_a, got.map(&:first)
    tokens = [holder.token] + got.map { |g| g[1] }
    assert_equal tokens.sort, tokens
    assert_equal tokens.uniq, tokens
  end

  def test_lease_expiry_hands_off
    k = key
    @client.acquire(k, lease: 0.3)
    l = @client.acquire(k, lease: 5, wait: 10)
    assert l.token
    l.release
  end

  def test_lock_block_releases_on_normal_and_failing_exit
    k = key
    v = @client.lock(k, lease: 10) { |l| [l.key, l.token.class] }
    assert_equal [k, Integer], v
    assert_raises(RuntimeError) { @client.lock(k, lease: 10) { raise "boom" } }
    l = @client.acquire(k, lease: 10, wait: 0) # free again
    l.release
  end

  def test_release_from_another_thread_and_another_client
    k = key
    l = @client.acquire(k, lease: 10)
    other = Ticketing::Client.new(addresses: [@srv.addr], token: @srv.token)
    Thread.new { assert other.release(k, l.token) }.join
    assert_raises(Ticketing::NotHolder) { l.release }
  ensure
    other&.close
  end

  def test_interrupt_withdraws_queued_acquire_server_side
    k = key
    holder = @client.acquire(k, lease: 30)
    t = Thread.new { @client.acquire(k, lease: 30, wait: 20) }
    t.report_on_exception = false
    wait_until { t.status == "sleep" }
    sleep 0.1
    t.raise(Interrupt)
    assert_raises(Interrupt) { t.join }
    holder.release
    # The withdrawn waiter was not handed the lock: the key is free at once.
    l = @client.acquire(k, lease: 5, wait: 0)
    l.release
  end

  def test_timeout_timeout_in_user_code_withdraws
    k = key
    holder = @client.acquire(k, lease: 30)
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { @client.acquire(k, lease: 30, wait: 20) } }
    holder.release
    @client.acquire(k, lease: 5, wait: 0).release
  end

  def test_hundred_acquires_in_flight_through_one_client
    threads = 100.times.map { |i| Thread.new { @client.acquire("rb/many/#{i}/#{SecureRandom.hex(2)}", lease: 10, wait: 5) } }
    leases = threads.map(&:value)
    assert_equal 100, leases.map(&:token).uniq.size
    leases.each(&:release)
  end

  def test_server_limits_come_back_typed_with_their_code
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: 7200) }
    assert_equal :BAD_LEASE, e.code
    e = assert_raises(Ticketing::InvalidArgument) { @client.acquire(key, lease: 1, wait: 3600) }
    assert_equal :BAD_WAIT, e.code
  end

  def test_wrong_token_is_authentication_error
    assert_raises(Ticketing::AuthenticationError) do
      Ticketing::Client.new(addresses: [@srv.addr], token: "wrong", connect_timeout: 2)
    end
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

# TLS and mutual TLS with certificates made here.
class TestTLS < Minitest::Test
  def self.pki
    @pki ||= begin
      dir = Dir.mktmpdir("ticketing-rb-tls")
      Minitest.after_run { FileUtils.rm_rf(dir) }
      ca_key = OpenSSL::PKey::EC.generate("prime256v1")
      ca = cert("/CN=test-ca", ca_key, ca_key, nil, ca: true)
      files = { dir: dir, ca: File.join(dir, "ca.pem") }
      File.write(files[:ca], ca.to_pem)
      { "server" => ["/CN=localhost", "DNS:localhost,IP:127.0.0.1"], "client" => ["/CN=client", nil] }.each do |n, (cn, san)|
        k = OpenSSL::PKey::EC.generate("prime256v1")
        c = cert(cn, k, ca_key, ca, san: san)
        File.write(files[:"#{n}_cert"] = File.join(dir, "#{n}.pem"), c.to_pem)
        File.write(files[:"#{n}_key"] = File.join(dir, "#{n}.key"), k.to_pem)
      end
      files
    end
  end

  def self.cert(cn, key, signer, issuer, ca: false, san: nil)
    c = OpenSSL::X509::Certificate.new
    c.version = 2
    c.serial = SecureRandom.random_number(2**64)
    c.subject = OpenSSL::X509::Name.parse(cn)
    c.issuer = issuer ? issuer.subject : c.subject
    c.public_key = key
    c.not_before = Time.now - 60
    c.not_after = Time.now + 3600
    ef = OpenSSL::X509::ExtensionFactory.new
    ef.subject_certificate = c
    ef.issuer_certificate = issuer || c
    c.add_extension(ef.create_extension("basicConstraints", ca ? "CA:TRUE" : "CA:FALSE", true))
    c.add_extension(ef.create_extension("subjectAltName", san)) if san
    c.sign(signer, OpenSSL::Digest.new("SHA256"))
    c
  end

  def test_tls_and_mutual_tls
    p = self.class.pki
    srv = RealServer.new(token: "tls-token", args: ["--tls-cert", p[:server_cert], "--tls-key", p[:server_key]])
    c = Ticketing::Client.new(addresses: [srv.addr], token: "tls-token", tls: { ca_file: p[:ca] })
    c.acquire("rb/tls", lease: 5).release
    c.close
    assert_raises(Ticketing::TLSError) do
      Ticketing::Client.new(addresses: [srv.addr], token: "tls-token", tls: { ca_file: p[:client_cert] }, connect_timeout: 2)
    end
    srv.stop

    srv = RealServer.new(token: "tls-token", args: ["--tls-cert", p[:server_cert], "--tls-key", p[:server_key], "--tls-client-ca", p[:ca]])
    c = Ticketing::Client.new(addresses: [srv.addr], token: "tls-token",
                              tls: { ca_file: p[:ca], cert_file: p[:client_cert], key_file: p[:client_key] })
    c.acquire("rb/mtls", lease: 5).release
    c.close
    assert_raises(Ticketing::TLSError, Ticketing::ConnectionError) do
      Ticketing::Client.new(addresses: [srv.addr], token: "tls-token", tls: { ca_file: p[:ca] }, connect_timeout: 2)
    end
  ensure
    c&.close
    srv&.stop
  end
end
