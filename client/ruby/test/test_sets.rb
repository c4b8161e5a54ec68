# frozen_string_literal: true

require_relative "test_helper"

# Protocol 1.1 key sets (protocol.md §12.2) through the Ruby codec and API.
# FIFO across languages, expiry and cancel of sets are testkit scenarios
# (set_fifo_cross_language, set_expiry_cancel); this file tests the client's
# own part: the frames, the argument checks, the scoped form, feature gating.
class TestSetWire < Minitest::Test
  W = Ticketing::Wire

  def test_golden_v1_1_requests
    body = W.keyset_body(%w[acct/17 acct/42])
    assert_equal golden("v1_1/req_acquire_set"), W.encode_acquire_set(0x0a, 2, body, 30_000, 5000)
    assert_equal golden("v1_1/req_release_set"), W.encode_release_set(0x0b, 2, body, 0x18bcfe5680000009)
    assert_equal golden("v1_1/req_acquire_set_try"),
                 W.encode_acquire_set(0x10, 3, W.keyset_body(%w[jobs tables queue1]), 10_000, 0)
    # a queued set is withdrawn by C naming its first key (§12.2)
    assert_equal golden("v1_1/req_cancel_set"), W.encode_cancel(0x0c, "acct/17", 0x0a)
  end

  def test_golden_v1_1_requests_through_the_clients_frame_path
    body = W.keyset_body(%w[acct/17 acct/42])
    c = Ticketing::Call.new(W::OP_ACQUIRE_SET, "acct/17".b, 30_000, 5000, owner: :dropped, body: body, nkeys: 2)
    c.req_id = 0x0a
    assert_equal golden("v1_1/req_acquire_set"), c.write_frame(String.new(encoding: Encoding::BINARY))
    st = Ticketing::Client::RelState.new("acct/17".b, 0x18bcfe5680000009, 0, false, 0, 0, false, body, 2)
    x = st.call(:dropped)
    x.req_id = 0x0b
    assert_equal golden("v1_1/req_release_set"), x.write_frame(String.new(encoding: Encoding::BINARY))
  end

  def test_parse_set_requests
    req, n = W.parse_request(golden("v1_1/req_acquire_set") + "tail".b)
    assert_equal 32, n
    assert_equal [W::OP_ACQUIRE_SET, 2, 0x0a, (30_000 << 32) | 5000], [req.op, req.nkeys, req.req_id, req.arg]
    assert_equal %w[acct/17 acct/42], W.parse_set_body(req.body, req.nkeys)
    req, n = W.parse_request(golden("v1_1/req_acquire_set_try"))
    assert_equal 35, n
    assert_equal %w[jobs tables queue1], W.parse_set_body(req.body, req.nkeys)
    assert_equal [nil, 0], W.parse_request(golden("v1_1/req_release_set").byteslice(0, 31))
  end

  def test_parse_set_body_refuses_bad_shapes
    assert_raises(W::DecodeError) { W.parse_set_body("\x03ab".b, 1) }       # cut short
    assert_raises(W::DecodeError) { W.parse_set_body("\x00".b, 1) }         # empty key
    assert_raises(W::DecodeError) { W.parse_set_body("\x01a\x01b!".b, 2) }  # a byte left over
  end

  V11_RESPONSES = {
    "v1_1/resp_pong_features" => [0x50, 0, 7, 9, nil],
    "v1_1/resp_label_ok" => [0x4F, 0, 0, 0x0d, nil],
    "v1_1/resp_error_bad_keyset" => [0x45, 29, 0, 0x0a, "duplicate key in set"],
    "v1_1/resp_error_bad_label" => [0x45, 30, 0, 0x0d, ""]
  }.freeze

  def test_golden_v1_1_responses
    V11_RESPONSES.each do |file, (st, code, queued, id, payload)|
      r, n = W.parse_response(golden(file))
      assert_equal golden(file).bytesize, n, file
      assert_equal [st, code, queued, id], [r.status, r.code, r.queued, r.req_id], file
      if payload
        assert_equal payload.b, r.payload, file
      else
        assert_nil r.payload, file
      end
      assert_equal golden(file), W.encode_response(r.status, r.code, r.queued, r.req_id, r.value, r.payload), file
    end
    assert_equal :BAD_KEYSET, W.code_name(29)
    # S and X are answered as A and R (§12.2)
    assert_equal W::FITS[W::OP_ACQUIRE], W::FITS[W::OP_ACQUIRE_SET]
    assert_equal W::FITS[W::OP_RELEASE], W::FITS[W::OP_RELEASE_SET]
  end

  def test_check_keys
    assert_equal %w[a b].map(&:b), Ticketing.check_keys(%w[a b])
    [nil, "a", %w[a], Array.new(17) { |i| "k#{i}" }, %w[a b a], %W[a b\n], %w[a] + [""], ["a", 1]].each do |bad|
      assert_raises(Ticketing::InvalidArgument, bad.inspect) { Ticketing.check_keys(bad) }
    end
    assert_equal 16, Ticketing.check_keys(Array.new(16) { |i| "k#{i}" }).size
  end
end

# Key sets against a real server.
class TestSetIntegration < Minitest::Test
  def self.server
    @server ||= RealServer.new.tap { |s| Minitest.after_run { s.stop } }
  end

  def setup
    @client = Ticketing::Client.new(addresses: [self.class.server.addr])
  end

  def teardown
    @client&.close
  end

  def keys(n = 2)
    base = "rbset/#{name}/#{SecureRandom.hex(4)}"
    Array.new(n) { |i| "#{base}/#{i}" }
  end

  def test_lock_with_an_array_holds_every_key_and_releases_them_after_the_block
    ks = keys(3)
    seen = @client.lock(ks, lease: 10, wait: 2) do |lease|
      assert lease.set?
      assert_equal ks, lease.keys
      assert_equal ks[0], lease.key
      ks.each { |k| assert_nil @client.try_acquire(k, lease: 1), "#{k} is held by the set" }
      lease.token
    end
    assert_kind_of Integer, seen
    ks.each { |k| @client.acquire(k, lease: 1).release } # all free again
  end

  def test_lock_with_an_array_releases_after_a_failing_block
    ks = keys
    assert_raises(RuntimeError) { @client.lock(ks, lease: 10) { raise "boom" } }
    @client.acquire_set(ks.reverse, lease: 1).release
  end

  def test_release_set_needs_exactly_the_keys_and_any_process_may_release
    ks = keys(3)
    l = @client.acquire_set(ks, lease: 10)
    assert_raises(Ticketing::NotHolder) { @client.release_set(ks.first(2), l.token) }
    assert_raises(Ticketing::NotHolder) { @client.release(ks[0], l.token) } # a set is released whole (§12.2)
    other = Ticketing::Client.new(addresses: [self.class.server.addr])
    begin
      assert other.release(l) # another client's handle of the set: X with its keys
    ensure
      other.close
    end
    assert_raises(Ticketing::NotHolder) { @client.release_set(ks.rotate, l.token) }
  end

  def test_try_acquire_with_an_array_is_nil_when_a_key_is_held
    ks = keys
    one = @client.acquire(ks[1], lease: 10)
    assert_nil @client.try_acquire(ks, lease: 5)
    one.release
    l = @client.try_acquire(ks, lease: 5)
    assert_equal ks, l.keys
    assert l.release
    refute l.release, "a second release of the set's lease is a no-op (R6)"
  end
end

# A 1.0 server (the FakeServer answers the feature ping with no features):
# a set call fails at once and sends nothing (protocol.md §12.1).
class TestSetUnsupported < Minitest::Test
  def test_a_set_against_a_1_0_server_is_not_supported_and_sends_nothing
    fake = FakeServer.new do |s, req, _|
      respond(s, Ticketing::Wire::STATUS_PONG, req, value: 1) if req.op == Ticketing::Wire::OP_PING
    end
    client = Ticketing::Client.new(addresses: [fake.addr])
    t0 = Ticketing.now
    assert_raises(Ticketing::NotSupported) { client.acquire_set(%w[a b], lease: 1, wait: 30) }
    assert_raises(Ticketing::NotSupported) { client.release_set(%w[a b], 1) }
    assert_operator Ticketing.now - t0, :<, 20, "refused at once, not after the 30 s wait"
    client.ping # the connection still works
    ops = []
    ops << fake.requests.pop until fake.requests.empty?
    assert_equal [Ticketing::Wire::OP_PING], ops.map(&:op).uniq
  ensure
    client&.close
    fake&.close
  end
end
