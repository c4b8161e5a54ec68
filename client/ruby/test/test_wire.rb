# frozen_string_literal: true

require_relative "test_helper"

# Golden vectors of client/wire/testdata/golden, read in place.
class TestWireGolden < Minitest::Test
  W = Ticketing::Wire
  SNONCE = (0..31).to_a.pack("C*")
  CNONCE = (0x20..0x3f).to_a.pack("C*")
  TOKEN1 = 0x18bcfe5680000001

  def test_hello
    h = W.parse_hello(golden("hello_flags0"))
    assert_equal 0, h.flags
    refute h.tokens_configured?
    assert_equal SNONCE, h.nonce
    assert_equal golden("hello_flags0"), W.encode_hello(0, SNONCE)
    h1 = W.parse_hello(golden("hello_flags1"))
    assert h1.tokens_configured?
    assert_equal golden("hello_flags1"), W.encode_hello(1, SNONCE)
  end

  def test_auth_every_role
    { "auth_client" => 1, "auth_admin" => 2, "auth_peer" => 3 }.each do |file, role|
      proof = W.client_proof("s3cret", role, SNONCE, CNONCE)
      assert_equal golden(file), W.encode_auth(role, CNONCE, proof), file
      a = W.parse_auth(golden(file))
      assert_equal role, a.role
      assert_equal CNONCE, a.nonce
    end
    proof = W.client_proof("", 1, SNONCE, CNONCE)
    assert_equal golden("auth_client_notoken"), W.encode_auth(1, CNONCE, proof)
  end

  def test_welcome_every_role
    { "welcome_client" => [1, 1024], "welcome_admin" => [2, 1024], "welcome_peer" => [3, 1] }.each do |file, (role, mi)|
      w = W.parse_welcome(golden(file))
      assert w.accepted?, file
      assert_equal mi, w.max_inflight, file
      want = W.server_proof("s3cret", role, CNONCE, SNONCE)
      assert W.proof_equal?(want, w.proof), file
      assert_equal golden(file), W.encode_welcome(0x4B, 0, mi, want), file
    end
    w = W.parse_welcome(golden("welcome_client_notoken"))
    assert W.proof_equal?(W.server_proof("", 1, CNONCE, SNONCE), w.proof)
  end

  def test_rejects
    { "reject_overloaded" => 2, "reject_shutting_down" => 4, "reject_bad_handshake" => 10,
      "reject_auth_failed" => 11 }.each do |file, code|
      w = W.parse_welcome(golden(file))
      refute w.accepted?
      assert_equal code, w.code
      assert_equal 0, w.max_inflight
      assert_equal golden(file), W.encode_welcome(0x45, code, 0, "\0" * 32)
    end
  end

  def test_requests
    assert_equal golden("req_acquire"), W.encode_acquire(1, "orders/42", 30_000, 5000)
    assert_equal golden("req_acquire_try"), W.encode_acquire(2, "job", 3_600_000, 0)
    assert_equal golden("req_acquire_utf8"), W.encode_acquire(0xcafebabe, "clé/🔒", 1000, 900_000)
    assert_equal golden("req_release"), W.encode_release(3, "orders/42", 0x18bcfe5680000005)
    assert_equal golden("req_cancel"), W.encode_cancel(4, "orders/42", 1)
    assert_equal golden("req_ping"), W.encode_ping(5)
    assert_equal golden("req_query"), W.encode_query(6, '{"cmd":"status"}')
    req, n = W.parse_request(golden("req_acquire_utf8"))
    assert_equal 25, n
    assert_equal "clé/🔒".b, req.key
    assert_equal (1000 << 32) | 900_000, req.arg
  end

  RESPONSES = {
    "resp_granted" => [0x47, 0, 0, 1, TOKEN1, nil],
    "resp_granted_queued" => [0x47, 0, 625, 0xcafebabe, 0x18bcfe5680000007, nil],
    "resp_timeout" => [0x54, 0, 0, 2, 0, nil],
    "resp_released" => [0x4F, 0, 0, 3, 0, nil],
    "resp_not_holder" => [0x4E, 0, 0, 4, 0, nil],
    "resp_busy_queue_full" => [0x42, 1, 0, 7, 0, nil],
    "resp_moved" => [0x4D, 0, 0, 1, 13, "10.0.0.2:7001"],
    "resp_moved_empty" => [0x4D, 0, 0, 2, 0, ""],
    "resp_error" => [0x45, 21, 0, 14, 22, "key is not valid UTF-8"],
    "resp_error_empty" => [0x45, 27, 0, 6, 0, ""],
    "resp_pong" => [0x50, 0, 0, 5, 1_700_000_000_123_456, nil],
    "resp_admin" => [0x4A, 0, 0, 6, 28, '{"unix_us":1700000000123456}']
  }.freeze

  def test_responses
    RESPONSES.each do |file, (st, code, queued, id, value, payload)|
      r, n = W.parse_response(golden(file))
      assert_equal golden(file).bytesize, n, file
      assert_equal [st, code, queued, id, value], [r.status, r.code, r.queued, r.req_id, r.value], file
      if payload
        assert_equal payload.b, r.payload, file
      else
        assert_nil r.payload, file
      end
      assert_equal golden(file), W.encode_response(st, code, queued, id, value, payload), file
    end
  end

  def test_busy_and_unknown_codes
    %w[queue_full overloaded clock_unhealthy shutting_down no_quorum].each_with_index do |name, i|
      r, = W.parse_response(golden("resp_busy_#{name}"))
      assert_equal 0x42, r.status
      assert_equal i + 1, r.code
      assert_equal name.upcase.to_sym, W.code_name(r.code)
    end
    r, = W.parse_response(golden("resp_unknown"))
    assert_equal [0x55, 0], [r.status, r.code]
    r, = W.parse_response(golden("resp_unknown_no_quorum"))
    assert_equal [0x55, 5], [r.status, r.code]
  end

  # Every response file concatenated, fed one byte at a time.
  def test_streaming_one_byte_at_a_time
    files = Dir[File.join(GOLDEN_DIR, "resp_*.hex")].map { |f| File.basename(f, ".hex") }.sort
    stream = files.map { |f| golden(f) }.join
    buf = String.new(encoding: Encoding::BINARY)
    got = 0
    stream.each_byte do |b|
      buf << b.chr
      loop do
        r, n = W.parse_response(buf)
        break if n.zero?

        assert r
        buf = buf.byteslice(n..)
        got += 1
      end
    end
    assert_equal files.size, got
    assert_empty buf
  end

  def test_valid_key
    assert W.valid_key?("orders/42")
    assert W.valid_key?("clé/🔒")
    assert W.valid_key?("a" * 250)
    refute W.valid_key?("")
    refute W.valid_key?("a" * 251)
    refute W.valid_key?("a\nb")
    refute W.valid_key?("a\x7fb")
    refute W.valid_key?("a\u0085b")
    refute W.valid_key?("\xff".b)
    refute W.valid_key?("\xed\xa0\x80".b) # surrogate
    refute W.valid_key?("\xc0\xaf".b) # overlong
  end
end

# Randomized decoder test: no input makes the decoder raise anything but
# DecodeError, consume more than it has, or return a frame it cannot encode back.
class TestWireRandom < Minitest::Test
  W = Ticketing::Wire

  def test_random_bytes
    rng = Random.new(ENV.fetch("SEED", 1234).to_i)
    5000.times do
      len = rng.rand(0..64)
      b = rng.bytes(len)
      b.setbyte(0, W::STATUSES.sample(random: rng)) if len.positive? && rng.rand < 0.7
      begin
        r, n = W.parse_response(b)
      rescue W::DecodeError
        next
      end
      assert_operator n, :<=, b.bytesize
      next if n.zero?

      assert_equal b.byteslice(0, n), W.encode_response(r.status, r.code, r.queued, r.req_id, r.value, r.payload)
    end
  end

  def test_huge_payload_length_is_refused_without_buffering
    b = [0x4A, 0, 0, 1, (16 << 20) + 1].pack("CCnNQ>")
    assert_raises(W::DecodeError) { W.parse_response(b) }
    b = [0x4D, 0, 0, 1, 256].pack("CCnNQ>")
    assert_raises(W::DecodeError) { W.parse_response(b) }
    assert_raises(W::DecodeError) { W.parse_response("Z".b + ("\0" * 15)) }
  end
end
