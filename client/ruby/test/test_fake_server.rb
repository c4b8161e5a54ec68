# frozen_string_literal: true

require_relative "test_helper"

# Failure paths against a scripted server.
class TestFakeServer < Minitest::Test
  W = Ticketing::Wire

  def teardown
    @client&.close
    @fake&.close
  end

  def client(fake, **opts)
    @fake = fake
    @client = Ticketing::Client.new(addresses: [fake.addr], connect_timeout: 2, **opts)
  end

  def acquires(fake)
    reqs = []
    reqs << fake.requests.pop until fake.requests.empty?
    reqs.select { |r| r.op == W::OP_ACQUIRE }
  end

  def test_impostor_without_the_token_is_refused
    fake = FakeServer.new(token: "other", prove: false)
    e = assert_raises(Ticketing::AuthenticationError) { client(fake, token: "s3cret") }
    assert_match(/did not prove the token/, e.message)
    refute_match(/s3cret/, e.message)
  end

  def test_reject_auth_failed
    fake = FakeServer.new(token: "s3cret", reject: 11)
    assert_raises(Ticketing::AuthenticationError) { client(fake, token: "wrong") }
  end

  def test_garbage_hello_is_a_protocol_error
    srv = TCPServer.new("127.0.0.1", 0)
    t = Thread.new do
      loop do
        s = srv.accept
        s.write("HTTP/1.1 400 Bad Request\r\n\r\n#{'x' * 20}")
      end
    rescue IOError
      nil
    end
    assert_raises(Ticketing::ProtocolError) do
      Ticketing::Client.new(addresses: ["127.0.0.1:#{srv.addr[1]}"], connect_timeout: 1)
    end
  ensure
    srv&.close
    t&.kill
  end

  def test_nothing_listening_is_connection_error
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    assert_raises(Ticketing::ConnectionError) do
      Ticketing::Client.new(addresses: ["127.0.0.1:#{port}"], connect_timeout: 0.5)
    end
  end

  def test_dropped_reply_is_indeterminate_and_never_resent
    fake = FakeServer.new { |s, req, _| s.close if req.op == W::OP_ACQUIRE }
    c = client(fake)
    assert_raises(Ticketing::Indeterminate) { c.acquire("k", lease: 5, wait: 2) }
    sleep 0.3
    assert_equal 1, acquires(fake).size
  end

  def test_busy_is_returned_at_once_never_retried
    fake = FakeServer.new { |s, req, _| respond(s, W::STATUS_BUSY, req, code: 1) }
    c = client(fake)
    e = assert_raises(Ticketing::Busy) { c.acquire("k", lease: 5, wait: 10) }
    assert_equal :QUEUE_FULL, e.code
    assert_equal 1, e.code_number
    assert_equal 1, acquires(fake).size
  end

  def test_unknown_outcome_is_indeterminate
    fake = FakeServer.new { |s, req, _| respond(s, W::STATUS_UNKNOWN, req, code: 5) }
    assert_raises(Ticketing::Indeterminate) { client(fake).acquire("k", lease: 5) }
  end

  def test_endless_moved_gives_no_leader_with_a_hop_limit
    fake = FakeServer.new { |s, req, _| respond(s, W::STATUS_MOVED, req, payload: "") }
    c = client(fake)
    e = assert_raises(Ticketing::NoLeader) { c.acquire("k", lease: 5, wait: 0) }
    assert_match(/no leader/, e.message)
    assert_operator acquires(fake).size, :<=, Ticketing::Client::MAX_MOVES + 1
  end

  def test_moved_is_followed_to_the_leader
    leader = FakeServer.new { |s, req, _| respond(s, W::STATUS_GRANTED, req, value: 42) }
    follower = FakeServer.new { |s, req, _| respond(s, W::STATUS_MOVED, req, payload: leader.addr) }
    c = Ticketing::Client.new(addresses: [follower.addr], connect_timeout: 2)
    l = c.acquire("k", lease: 5)
    assert_equal 42, l.token
  ensure
    c&.close
    leader&.close
    follower&.close
  end

  def test_release_never_reports_success_without_o
    fake = FakeServer.new { |s, req, _| respond(s, W::STATUS_NOT_HOLDER, req) if req.op == W::OP_RELEASE }
    c = client(fake)
    assert_raises(Ticketing::NotHolder) { c.release("k", 7) }
  end

  def test_release_retried_after_unknown_then_indeterminate
    fake = FakeServer.new do |s, req, st|
      st[:n] = (st[:n] || 0) + 1
      respond(s, st[:n] == 1 ? W::STATUS_UNKNOWN : W::STATUS_NOT_HOLDER, req)
    end
    e = assert_raises(Ticketing::Indeterminate) { client(fake).release("k", 7) }
    assert_match(/earlier unconfirmed attempt/, e.message)
  end

  def test_release_given_up_after_the_window
    fake = FakeServer.new { |_s, _req, _| nil } # never answers
    c = client(fake)
    t0 = Ticketing.now
    assert_raises(Ticketing::Indeterminate) { c.release("k", 7) }
    took = Ticketing.now - t0
    assert_operator took, :>=, 4.5
    assert_operator took, :<, 15
  end

  def test_huge_payload_kills_the_connection_not_the_client
    n = 0
    fake = FakeServer.new do |s, req, _st|
      n += 1
      if n == 1
        s.write([W::STATUS_ADMIN, 0, 0, req.req_id, 1 << 40].pack("CCnNQ>"))
      else
        respond(s, W::STATUS_GRANTED, req, value: 9)
      end
    end
    c = client(fake)
    assert_raises(Ticketing::Indeterminate) { c.acquire("k", lease: 1) }
    wait_until { c.connected_count.positive? }
    assert_equal 9, c.acquire("k", lease: 1, wait: 5).token
  end

  def test_two_connections_for_a_single_address
    fake = FakeServer.new
    c = client(fake)
    assert_equal 2, c.connection_count
    wait_until { fake.accepts.size >= 2 }
  end

  def test_interrupt_withdraws_the_queued_acquire_with_cancel
    cancels = Queue.new
    fake = FakeServer.new do |s, req, st|
      case req.op
      when W::OP_ACQUIRE then st[:acq] = req # queue it: answer later
      when W::OP_CANCEL
        cancels << req
        respond(s, W::STATUS_TIMEOUT, st[:acq])
        respond(s, W::STATUS_RELEASED, req)
      end
    end
    c = client(fake)
    t = Thread.new { c.acquire("k", lease: 5, wait: 30) }
    t.report_on_exception = false
    wait_until { !fake.requests.empty? }
    t.raise(Interrupt)
    assert_raises(Interrupt) { t.join }
    cancel = cancels.pop
    assert_equal "k".b, cancel.key
  end

  def test_grant_that_won_the_race_is_compensated
    releases = Queue.new
    fake = FakeServer.new do |s, req, st|
      case req.op
      when W::OP_ACQUIRE then st[:acq] = req
      when W::OP_CANCEL
        respond(s, W::STATUS_GRANTED, st[:acq], value: 77) # the grant wins
        respond(s, W::STATUS_NOT_HOLDER, req)
      when W::OP_RELEASE
        releases << req.arg
        respond(s, W::STATUS_RELEASED, req)
      end
    end
    c = client(fake)
    t = Thread.new { c.acquire("k", lease: 5, wait: 30) }
    t.report_on_exception = false
    wait_until { !fake.requests.empty? }
    t.raise(Interrupt)
    assert_raises(Interrupt) { t.join }
    assert_equal 77, releases.pop
  end

  def test_reconnect_backoff_doubles_to_the_cap
    srv = TCPServer.new("127.0.0.1", 0)
    times = Queue.new
    t = Thread.new do
      snonce = "\0" * 32
      first = true
      loop do
        s = srv.accept
        times << Ticketing.now
        if first
          s.write(Ticketing::Wire.encode_hello(0, snonce))
          s.read(72)
          s.write(Ticketing::Wire.encode_welcome(0x4B, 0, 1, "\0" * 32))
          first = false
          sleep 0.5 # let the client see it up, then drop it: every later attempt fails
        end
        s.close
      end
    rescue IOError
      nil
    end
    c = Ticketing::Client.new(addresses: ["127.0.0.1:#{srv.addr[1]}", "127.0.0.1:1"], connect_timeout: 2)
    wait_until(30) { times.size >= 8 }
    ts = []
    ts << times.pop until times.empty?
    # ts[0] is the connection that came up; attempt n >= 1 waits step(n)
    # after the previous failure: 0.1, 0.2, ... capped at 3.2 s, full jitter [0, step] (R16).
    gaps = ts.drop(1).each_cons(2).map { |a, b| b - a }.first(6)
    steps = [0.2, 0.4, 0.8, 1.6, 3.2, 3.2]
    gaps.each_with_index do |g, i|
      assert_operator g, :<=, (steps[i] * 1.5) + 0.3, "gap #{i}: #{g}"
    end
    assert_operator gaps.sum, :>=, 0.5, "no hot reconnect loop: #{gaps}"
  ensure
    c&.close
    srv&.close
    t&.kill
  end

  def test_bad_input_before_anything_is_sent
    fake = FakeServer.new
    c = client(fake)
    [
      -> { c.acquire("", lease: 1) },
      -> { c.acquire("a" * 251, lease: 1) },
      -> { c.acquire("a\tb", lease: 1) },
      -> { c.acquire("k", lease: 0) },
      -> { c.acquire("k", lease: -1) },
      -> { c.acquire("k", lease: 5_000_000) },
      -> { c.acquire("k", lease: 1, wait: -1) },
      -> { c.acquire("k", lease: "5") },
      -> { c.acquire("k", lease: Float::NAN) },
      -> { c.release("k", -1) },
      -> { c.release("k", 2**64) }
    ].each { |f| assert_raises(Ticketing::InvalidArgument, &f) }
    sleep 0.1
    assert_empty fake.requests
  end
end
