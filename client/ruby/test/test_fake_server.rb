# frozen_string_literal: true

require_relative "test_helper"

# Failure paths against a scripted server, only those a real server does not
# produce and no testkit scenario covers (U answers, a payload over its
# limit). The others (impostor, REJECT, garbage, drop, B, M, release retry,
# two connections, cancel and its race, backoff, bad input) are testkit
# scenarios run against this client's driver (client/testkit/fakes.go, edge.go).
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

  def test_unknown_outcome_is_indeterminate
    fake = FakeServer.new { |s, req, _| respond(s, W::STATUS_UNKNOWN, req, code: 5) }
    assert_raises(Ticketing::Indeterminate) { client(fake).acquire("k", lease: 5) }
  end

  def test_release_retried_after_unknown_then_indeterminate
    fake = FakeServer.new do |s, req, st|
      st[:n] = (st[:n] || 0) + 1
      respond(s, st[:n] == 1 ? W::STATUS_UNKNOWN : W::STATUS_NOT_HOLDER, req)
    end
    e = assert_raises(Ticketing::Indeterminate) { client(fake).release("k", 7) }
    assert_match(/earlier unconfirmed attempt/, e.message)
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
end
