# frozen_string_literal: true

module Ticketing
  # A granted lock. Ownership lives in the token, not in a thread: any thread
  # (or any process that knows key and token) may release it.
  class Lease
    # The key (String) and the fencing token (Integer, exact u64).
    attr_reader :key, :token, :client

    # deadline: the conservative local end of the lease, in monotonic seconds
    # (Process.clock_gettime(Process::CLOCK_MONOTONIC)): send time + time
    # queued (from G) + lease (protocol.md §5).
    attr_reader :deadline

    # The keys of a key set (acquire_set), in the order given; [key] for one key.
    attr_reader :keys

    def initialize(client, key, token, deadline, keys = nil, body = nil)
      @client = client
      @key = key
      @keys = keys ? keys.map { |k| k.dup.force_encoding(Encoding::UTF_8).freeze }.freeze : [key].freeze
      @key = @keys[0] if keys
      @body = body
      @token = token
      @deadline = deadline
      @released = false
      @mu = Mutex.new
      @cv = ConditionVariable.new
    end

    # Seconds left before the local deadline (0.0 once passed).
    def remaining
      [@deadline - Ticketing.now, 0.0].max
    end

    # True once the local deadline passed: stop writing under this lock.
    def expired?
      remaining <= 0
    end

    # True when fewer than margin seconds are left (default 10% of nothing:
    # pass the margin your writes need).
    def expiring?(margin)
      remaining <= margin
    end

    # True for a lease of a key set (Client#acquire_set).
    def set?
      !@body.nil?
    end

    # True once the server confirmed the release (O).
    def released?
      @mu.synchronize { @released }
    end

    # Releases the lock: true when the server answered O; false, sending
    # nothing, when this lease was already released (edge rule R6: a second
    # release of a lease object is a no-op). Raises NotHolder or
    # Indeterminate as Client#release does; the handle stays unreleased then.
    def release
      return false if released?

      @client.release_checked(@key, @token, @body, @keys.size)
      @mu.synchronize do
        @released = true
        @cv.broadcast
      end
      true
    end

    # Calls the block with the seconds left (Float) once, margin seconds
    # before the local deadline, or at once when the lease is (or gets)
    # released: stop the work then (edge rule R12). The block runs on a thread
    # of its own; it is never called with an error. Returns the lease.
    def on_ending(margin = 0, &block)
      raise ArgumentError, "on_ending needs a block" unless block

      m = Ticketing.millis(margin, "margin", min_ms: 0) / 1000.0
      t = Thread.new do
        @mu.synchronize do
          until @released
            left = @deadline - m - Ticketing.now
            break if left <= 0

            @cv.wait(@mu, left)
          end
        end
        block.call(remaining)
      end
      t.report_on_exception = false
      self
    end

    def inspect
      what = set? ? "keys=#{@keys.inspect}" : "key=#{@key.inspect}"
      "#<Ticketing::Lease #{what} token=#{@token} remaining=#{format('%.3f', remaining)}s#{released? ? ' released' : ''}>"
    end
    alias to_s inspect
  end
end
