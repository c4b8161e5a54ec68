# frozen_string_literal: true

require "openssl"

module Ticketing
  # The v1 wire codec (docs/protocol.md): fixed-width big-endian frames.
  # Pure functions over binary Strings; no I/O.
  module Wire
    HELLO_LEN = 40
    AUTH_LEN = 72
    WELCOME_LEN = 40
    HEADER_LEN = 16
    NONCE_LEN = 32
    MAX_KEY_LEN = 250
    MAX_U32 = 0xFFFF_FFFF
    QUEUED_UNIT_MS = 16 # protocol.md §3: the G header's queued field counts 16 ms units

    ROLE_CLIENT = 1
    ROLE_ADMIN = 2
    ROLE_PEER = 3

    OP_ACQUIRE = 0x41 # A
    OP_RELEASE = 0x52 # R
    OP_CANCEL = 0x43  # C
    OP_PING = 0x50    # P
    OP_QUERY = 0x51   # Q
    OP_LABEL = 0x4C   # L (protocol 1.1, §12.3)
    OP_ACQUIRE_SET = 0x53 # S (protocol 1.1, §12.2)
    OP_RELEASE_SET = 0x58 # X

    # Protocol 1.1 feature discovery (protocol.md §12.1).
    PING_FEATURES = 1 # a ping's arg asking for the feature bits
    FEATURE_KEY_SETS = 0x0001
    FEATURE_LABELS = 0x0002
    MAX_LABEL = 64
    MAX_SET_KEYS = 16 # a key set is 2..16 distinct keys (protocol.md §12.2)

    # Response statuses (protocol.md §3) and the most payload each may carry.
    STATUS_GRANTED = 0x47  # G
    STATUS_TIMEOUT = 0x54  # T
    STATUS_BUSY = 0x42     # B
    STATUS_RELEASED = 0x4F # O
    STATUS_NOT_HOLDER = 0x4E # N
    STATUS_MOVED = 0x4D    # M
    STATUS_UNKNOWN = 0x55  # U
    STATUS_ERROR = 0x45    # E
    STATUS_PONG = 0x50     # P
    STATUS_ADMIN = 0x4A    # J

    PAYLOAD_LIMIT = {
      STATUS_MOVED => 255,
      STATUS_ERROR => 1024,
      STATUS_ADMIN => 16 << 20
    }.freeze
    STATUSES = [STATUS_GRANTED, STATUS_TIMEOUT, STATUS_BUSY, STATUS_RELEASED, STATUS_NOT_HOLDER,
                STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR, STATUS_PONG, STATUS_ADMIN].freeze

    # protocol.md §4
    CODES = {
      0 => :NONE, 1 => :QUEUE_FULL, 2 => :OVERLOADED, 3 => :CLOCK_UNHEALTHY, 4 => :SHUTTING_DOWN,
      5 => :NO_QUORUM, 10 => :BAD_HANDSHAKE, 11 => :AUTH_FAILED, 20 => :BAD_OP, 21 => :BAD_KEY,
      22 => :BAD_LEASE, 23 => :BAD_WAIT, 24 => :BAD_FLAGS, 25 => :DUPLICATE_REQ_ID,
      26 => :BAD_ADMIN, 27 => :NOT_PERMITTED, 28 => :INTERNAL, 12 => :TLS_REQUIRED, 29 => :BAD_KEYSET,
      30 => :BAD_LABEL
    }.freeze
    CODE_DUPLICATE_REQ_ID = 25
    CODE_AUTH_FAILED = 11

    # Which statuses may answer which op (anything else is a protocol violation).
    FITS = {
      OP_ACQUIRE => [STATUS_GRANTED, STATUS_TIMEOUT, STATUS_BUSY, STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR],
      OP_RELEASE => [STATUS_RELEASED, STATUS_NOT_HOLDER, STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR],
      OP_CANCEL => [STATUS_RELEASED, STATUS_NOT_HOLDER, STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR],
      OP_PING => [STATUS_PONG, STATUS_ERROR],
      OP_QUERY => [STATUS_ADMIN, STATUS_MOVED, STATUS_ERROR],
      OP_LABEL => [STATUS_RELEASED, STATUS_ERROR],
      OP_ACQUIRE_SET => [STATUS_GRANTED, STATUS_TIMEOUT, STATUS_BUSY, STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR],
      OP_RELEASE_SET => [STATUS_RELEASED, STATUS_NOT_HOLDER, STATUS_MOVED, STATUS_UNKNOWN, STATUS_ERROR]
    }.freeze

    # Raised by the decoders: the peer broke the protocol; the stream is unreadable.
    class DecodeError < StandardError; end

    Hello = Struct.new(:flags, :nonce, keyword_init: true) do
      def tokens_configured?
        flags.anybits?(1)
      end
    end
    Auth = Struct.new(:role, :nonce, :proof, keyword_init: true)
    Welcome = Struct.new(:status, :code, :max_inflight, :proof, keyword_init: true) do
      def accepted?
        status == 0x4B
      end
    end
    # A decoded response. value: the token (G), server µs (P), payload length (M E J).
    Response = Struct.new(:status, :code, :queued, :req_id, :value, :payload) # positional: no Hash per answer
    Request = Struct.new(:op, :key, :flags, :req_id, :arg, :body, :nkeys, keyword_init: true) # nkeys: of S/X

    module_function

    def code_name(code)
      CODES.fetch(code) { :"CODE_#{code}" }
    end

    # protocol.md §2.1 step 5: 1..250 bytes of RFC 3629 UTF-8 without a control
    # character (U+0000-U+001F, U+007F-U+009F).
    ASCII_CONTROL = /[\x00-\x1F\x7F]/
    private_constant :ASCII_CONTROL

    def valid_key?(key)
      return false unless key.is_a?(String)

      n = key.bytesize
      return false if n.zero? || n > MAX_KEY_LEN
      # 7-bit keys (the usual ones): valid unless a control character is in them.
      return !key.match?(ASCII_CONTROL) if key.ascii_only?

      s = key.b.force_encoding(Encoding::UTF_8)
      return false unless s.valid_encoding?

      s.each_codepoint { |c| return false if c < 0x20 || (c >= 0x7F && c <= 0x9F) }
      true
    end

    def parse_hello(b)
      raise DecodeError, "HELLO is #{HELLO_LEN} bytes" unless b.bytesize == HELLO_LEN
      raise DecodeError, "not a ticketing v1 server (bad magic)" unless b.byteslice(0, 4) == "TKTS".b
      raise DecodeError, "unsupported protocol version #{b.getbyte(4)}" unless b.getbyte(4) == 1

      flags = b.getbyte(5)
      raise DecodeError, "unknown HELLO flags #{flags}" if flags & ~1 != 0

      Hello.new(flags: flags, nonce: b.byteslice(8, NONCE_LEN))
    end

    def encode_hello(flags, nonce)
      ["TKTS", 1, flags, 0].pack("a4CCn") + nonce.b
    end

    def parse_auth(b)
      raise DecodeError, "AUTH is #{AUTH_LEN} bytes" unless b.bytesize == AUTH_LEN
      raise DecodeError, "bad AUTH magic" unless b.byteslice(0, 4) == "TKTC".b

      Auth.new(role: b.getbyte(5), nonce: b.byteslice(8, NONCE_LEN), proof: b.byteslice(40, 32))
    end

    def encode_auth(role, nonce, proof)
      ["TKTC", 1, role, 0].pack("a4CCn") + nonce.b + proof.b
    end

    def parse_welcome(b)
      raise DecodeError, "WELCOME is #{WELCOME_LEN} bytes" unless b.bytesize == WELCOME_LEN

      status, code, _rsv, max_inflight = b.unpack("CCnN")
      raise DecodeError, "bad WELCOME status #{status}" unless [0x4B, 0x45].include?(status)

      Welcome.new(status: status, code: code, max_inflight: max_inflight, proof: b.byteslice(8, 32))
    end

    def encode_welcome(status, code, max_inflight, proof)
      [status, code, 0, max_inflight].pack("CCnN") + proof.b
    end

    # HMAC-SHA256(token, "ticketing-v1-client" ‖ role ‖ server_nonce ‖ client_nonce)
    def client_proof(token, role, server_nonce, client_nonce)
      OpenSSL::HMAC.digest("SHA256", token.to_s.b, "ticketing-v1-client".b + role.chr + server_nonce.b + client_nonce.b)
    end

    # HMAC-SHA256(token, "ticketing-v1-server" ‖ role ‖ client_nonce ‖ server_nonce)
    def server_proof(token, role, client_nonce, server_nonce)
      OpenSSL::HMAC.digest("SHA256", token.to_s.b, "ticketing-v1-server".b + role.chr + client_nonce.b + server_nonce.b)
    end

    # Constant-time comparison of two proofs.
    def proof_equal?(a, b)
      return false unless a.bytesize == b.bytesize

      OpenSSL.fixed_length_secure_compare(a, b)
    end

    def encode_acquire(req_id, key, lease_ms, wait_ms)
      k = key.b
      [OP_ACQUIRE, k.bytesize, 0, req_id, lease_ms, wait_ms].pack("CCnNNN") + k
    end

    def encode_release(req_id, key, token)
      k = key.b
      [OP_RELEASE, k.bytesize, 0, req_id, token].pack("CCnNQ>") + k
    end

    def encode_cancel(req_id, key, target)
      k = key.b
      [OP_CANCEL, k.bytesize, 0, req_id, target, 0].pack("CCnNNN") + k
    end

    # Appends a request header (op, key length, req_id, the 8-byte argument)
    # and the key to buf without intermediate Strings; returns buf.
    def append_request(buf, op, req_id, arg, key)
      [op, key.bytesize, 0, req_id, arg, key].pack("CCnNQ>a*", buffer: buf)
    end

    # The body of S and X: count times (key_len u8 ‖ key bytes), keys binary
    # and already checked (protocol.md §12.2).
    def keyset_body(keys)
      keys.each_with_object(String.new(encoding: Encoding::BINARY)) { |k, b| b << k.bytesize.chr << k }
    end

    # S: acquire the set whose body is body (keyset_body) of count keys.
    def encode_acquire_set(req_id, count, body, lease_ms, wait_ms)
      [OP_ACQUIRE_SET, count, body.bytesize, req_id, lease_ms, wait_ms].pack("CCnNNN") + body
    end

    # X: release the set acquired under token.
    def encode_release_set(req_id, count, body, token)
      [OP_RELEASE_SET, count, body.bytesize, req_id, token].pack("CCnNQ>") + body
    end

    # The keys of a set body; raises DecodeError when it is not count
    # entries of 1..250 bytes with nothing left over.
    def parse_set_body(body, count)
      keys = []
      off = 0
      count.times do
        n = body.getbyte(off)
        raise DecodeError, "set body cut short" if n.nil? || n.zero? || n > MAX_KEY_LEN || off + 1 + n > body.bytesize

        keys << body.byteslice(off + 1, n)
        off += 1 + n
      end
      raise DecodeError, "#{body.bytesize - off} bytes after the last key of a set" unless off == body.bytesize

      keys
    end

    def encode_ping(req_id, arg = 0)
      [OP_PING, 0, 0, req_id, arg].pack("CCnNQ>")
    end

    # L: the connection's label, 0..64 bytes of UTF-8 (protocol.md §12.3).
    def encode_label(req_id, label)
      l = label.b
      [OP_LABEL, l.bytesize, 0, req_id, 0].pack("CCnNQ>") + l
    end

    # label as UTF-8 cut at a character boundary to at most MAX_LABEL bytes,
    # control characters replaced by "?" (never sent invalid).
    def cut_label(label)
      s = label.to_s.encode(Encoding::UTF_8, invalid: :replace, undef: :replace).gsub(/[\x00-\x1f\x7f]/, "?")
      return s.b if s.bytesize <= MAX_LABEL

      s.byteslice(0, MAX_LABEL).scrub("").b
    end

    def encode_query(req_id, body)
      bb = body.b
      [OP_QUERY, 0, 0, req_id, bb.bytesize, 0].pack("CCnNNN") + bb
    end

    # Decodes one request at offset off of b: [Request, bytes used], or [nil, 0]
    # while incomplete. Used by the test fake server.
    def parse_request(b, off = 0)
      return [nil, 0] if b.bytesize - off < HEADER_LEN

      op, klen, flags, req_id, arg = b.byteslice(off, HEADER_LEN).unpack("CCnNQ>")
      set = [OP_ACQUIRE_SET, OP_RELEASE_SET].include?(op) # offset 1 count, offsets 2-3 body_len
      len = HEADER_LEN + if op == OP_QUERY
                           arg >> 32
                         else
                           set ? flags : klen
                         end
      return [nil, 0] if b.bytesize - off < len

      rest = b.byteslice(off + HEADER_LEN, len - HEADER_LEN)
      keyed = op != OP_QUERY && !set
      req = Request.new(op: op, key: keyed ? rest : "".b, flags: flags, req_id: req_id, arg: arg,
                        body: keyed ? nil : rest, nkeys: set ? klen : nil)
      [req, len]
    end

    # The length of the response starting at off as far as its header tells;
    # HEADER_LEN while the header is incomplete.
    def response_frame_len(b, off = 0)
      return HEADER_LEN if b.bytesize - off < HEADER_LEN

      st = b.getbyte(off)
      limit = PAYLOAD_LIMIT[st]
      return HEADER_LEN unless limit

      v = b.byteslice(off + 8, 8).unpack1("Q>")
      return HEADER_LEN if v > limit # parse_response reports it

      HEADER_LEN + v
    end

    # Decodes one response at offset off of b: [Response, bytes used], or
    # [nil, 0] while the frame is incomplete. Raises DecodeError on an unknown
    # status or a payload over its status's limit.
    def parse_response(b, off = 0)
      return [nil, 0] if b.bytesize - off < HEADER_LEN

      st, code, queued, req_id, value = b.unpack("CCnNQ>", offset: off)
      raise DecodeError, format("unknown response status 0x%02x", st) unless STATUSES.include?(st)

      limit = PAYLOAD_LIMIT[st]
      payload = nil
      len = HEADER_LEN
      if limit
        raise DecodeError, "payload of #{value} bytes over the #{limit}-byte limit of #{st.chr}" if value > limit

        len += value
        return [nil, 0] if b.bytesize - off < len

        payload = b.byteslice(off + HEADER_LEN, value)
      end
      [Response.new(st, code, queued, req_id, value, payload), len]
    end

    def encode_response(status, code, queued, req_id, value, payload = nil)
      if payload
        p = payload.b
        [status, code, queued, req_id, p.bytesize].pack("CCnNQ>") + p
      else
        [status, code, queued, req_id, value].pack("CCnNQ>")
      end
    end
  end
end
