# frozen_string_literal: true

module Ticketing
  # Base of every error the client raises. Branch with rescue on the subclasses.
  class Error < StandardError; end

  # The acquire's wait elapsed (or wait was 0 and the key was held): not acquired (T).
  class LockTimeout < Error; end

  # The server refused at once (B): definitely not acquired and not queued.
  # #code is the protocol.md §4 code as a Symbol (:QUEUE_FULL, :OVERLOADED,
  # :CLOCK_UNHEALTHY, :SHUTTING_DOWN, :NO_QUORUM); #code_number the byte.
  class Busy < Error
    attr_reader :code_number

    def initialize(code_number, msg = nil)
      @code_number = code_number
      super(msg || "busy (#{Wire.code_name(code_number)}), not acquired")
    end

    def code
      Wire.code_name(@code_number)
    end
  end

  # The request was sent but no definite answer came (connection lost, or a
  # cluster answered U). For an acquire: the lock MAY have been granted — do
  # not enter the critical section; the lease ends it at the latest. For a
  # release: not confirmed; the lock may stay held until its lease ends.
  class Indeterminate < Error; end

  # The acquire was granted with less than its min_remaining left of the
  # lease (a long queue ate it; edge rule R14): the client released it at once.
  class InsufficientLease < Error; end

  # A release was answered N: the key is free or held under another token.
  class NotHolder < Error; end

  # REJECT AUTH_FAILED / BAD_HANDSHAKE (#code_number 11 / 10), or the server
  # failed to prove the token (#code_number nil).
  class AuthenticationError < Error
    attr_reader :code_number

    def initialize(msg = nil, code_number = nil)
      @code_number = code_number
      super(msg)
    end

    # :AUTH_FAILED or :BAD_HANDSHAKE, or nil when the server failed its proof.
    def code
      @code_number && Wire.code_name(@code_number)
    end
  end

  # TLS handshake or certificate verification failed.
  class TLSError < Error; end

  # No connection to any server within the connect budget; nothing was sent.
  class ConnectionError < Error; end

  # A bad key, lease or wait, refused before anything is sent (code nil), or
  # refused by the server with E (code :BAD_KEY, :BAD_LEASE, :BAD_WAIT, …).
  class InvalidArgument < Error
    attr_reader :code_number

    def initialize(msg, code_number = nil)
      @code_number = code_number
      super(msg)
    end

    def code
      @code_number && Wire.code_name(@code_number)
    end
  end

  # The server answered E for a reason other than the request's arguments
  # (NOT_PERMITTED, INTERNAL, …).
  class ServerError < Error
    attr_reader :code_number

    def initialize(code_number, msg)
      @code_number = code_number
      super("server error #{Wire.code_name(code_number)}#{msg.to_s.empty? ? '' : ": #{msg}"}")
    end

    def code
      Wire.code_name(@code_number)
    end
  end

  # The peer broke the protocol (an impostor, garbage, an answer that does not fit).
  class ProtocolError < Error; end

  # The client was closed.
  class ClosedError < Error; end

  # The server does not announce the feature the call needs (protocol 1.1
  # key sets against a 1.0 server, protocol.md §12.1); nothing was sent.
  class NotSupported < Error; end
end

module Ticketing
  # A cluster kept answering "moved" (no leader elected, or the leader is
  # unreachable) within the wait; nothing was executed.
  class NoLeader < ConnectionError; end
end
