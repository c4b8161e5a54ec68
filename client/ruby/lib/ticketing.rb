# frozen_string_literal: true

require_relative "ticketing/version"
require_relative "ticketing/wire"
require_relative "ticketing/errors"
require_relative "ticketing/lease"
require_relative "ticketing/connection"
require_relative "ticketing/releaser"
require_relative "ticketing/client"

# The official Ruby client of the Ticketing lock server. See Ticketing::Client.
module Ticketing
  module_function

  # Monotonic seconds (the clock of Lease#deadline).
  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Seconds (Numeric, or anything with #to_f such as ActiveSupport::Duration)
  # to whole milliseconds, rounded up; InvalidArgument when negative, not
  # finite, below min_ms or above the protocol's u32 milliseconds.
  def millis(value, name, min_ms:)
    if value.nil?
      hint = name == "wait" ? " (wait: 0 tries once; there is no wait forever: give the longest wait you accept)" : ""
      raise InvalidArgument, "#{name} must be a number of seconds, got nil#{hint}"
    end
    if value.is_a?(Integer) && value >= 0 && value <= MAX_INT_SECONDS # the common case, exact
      ms = value * 1000
      return ms if ms >= min_ms
    end
    unless value.is_a?(Numeric) || (value.respond_to?(:to_f) && !value.is_a?(String))
      raise InvalidArgument,
            "#{name} must be a number of seconds, got #{value.class}"
    end

    f = value.to_f
    raise InvalidArgument, "#{name} must be a finite number of seconds" unless f.finite?
    raise InvalidArgument, "#{name} must not be negative (got #{f}s)" if f.negative?

    ms = (f * 1000).ceil
    max = Wire::MAX_U32
    raise InvalidArgument, "#{name} #{f}s is over the protocol's #{max} ms" if ms > max
    raise InvalidArgument, "#{name} must be at least #{min_ms} ms (got #{f}s)" if ms < min_ms

    ms
  end

  MAX_INT_SECONDS = Wire::MAX_U32 / 1000
  private_constant :MAX_INT_SECONDS

  def seconds(value, name, min_ms:)
    millis(value, name, min_ms: min_ms) / 1000.0
  end

  # A key as the server checks it (protocol.md §2.1 step 5); a frozen copy.
  def check_key(key)
    raise InvalidArgument, "key must be a String, got #{key.class}" unless key.is_a?(String)

    unless Wire.valid_key?(key)
      shown = key.bytesize > 40 ? "#{key.byteslice(0, 40).inspect}… (#{key.bytesize} bytes)" : key.inspect
      raise InvalidArgument, "key #{shown} must be 1..250 bytes of UTF-8 without control characters"
    end

    key.frozen? ? key : key.dup.freeze
  end

  # The keys of a set (protocol.md §12.2): an Array of 2..16 distinct valid
  # keys; frozen binary copies in the caller's order.
  def check_keys(keys)
    raise InvalidArgument, "keys must be an Array of 2..#{Wire::MAX_SET_KEYS} keys, got #{keys.class}" unless keys.is_a?(Array)
    raise InvalidArgument, "keys must be 2..#{Wire::MAX_SET_KEYS} keys (got #{keys.size})" unless keys.size.between?(2, Wire::MAX_SET_KEYS)

    out = keys.map { |k| check_key(k).b.freeze }
    raise InvalidArgument, "keys must be distinct (#{keys.size - out.uniq.size} of #{keys.size} repeat another)" if out.uniq.size != out.size

    out.freeze
  end

  def check_token(token)
    t = token.is_a?(String) && token.match?(/\A\d+\z/) ? token.to_i : token
    raise InvalidArgument, "token must be an Integer 1..2**64-1 (got #{token.inspect})" unless t.is_a?(Integer) && t.positive? && t < 2**64

    t
  end

  # "host:port" or "[v6]:port" -> [host, port].
  def split_addr(addr)
    s = addr.to_s
    if s.include?("/")
      raise InvalidArgument, "address #{s.inspect} must be host:port without a scheme or path, e.g. \"127.0.0.1:7470\" " \
                             "(Ticketing speaks its own protocol, not HTTP)"
    end
    host, sep, port = s.rpartition(":")
    raise InvalidArgument, "address #{s.inspect} must be host:port" if sep.empty? || host.empty? || !port.match?(/\A\d+\z/)

    host = host[1..-2] if host.start_with?("[") && host.end_with?("]")
    raise InvalidArgument, "address #{s.inspect} must be host:port" if host.include?(":") && !s.start_with?("[")

    p = port.to_i
    raise InvalidArgument, "address #{s.inspect}: port must be 1..65535" unless p.between?(1, 65_535)

    [host, p]
  end
end
