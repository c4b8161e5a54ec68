# frozen_string_literal: true

require "openssl"
require "logger"
require "json"

module Ticketing
  # A connection pool to one Ticketing server or cluster, safe to share between
  # threads (create one per process). It keeps one connection per address in
  # the background (two when given a single address), reconnects them with
  # backoff (0.1 s doubling to 3.2 s, full jitter) forever, pipelines every
  # request and matches answers by req_id.
  #
  #   client = Ticketing::Client.new(addresses: ["locks1:7470"], token: ENV["TICKETING_TOKEN"])
  #   client.lock("order-1234", lease: 30, wait: 10) do |lease|
  #     write(order, fence: lease.token)
  #   end
  #
  # Durations are seconds (Integer or Float), rounded up to whole milliseconds.
  class Client
    BACKOFF_BASE = 0.1
    BACKOFF_CAP = 3.2
    REDIRECT_BASE = 0.025
    REDIRECT_CAP = 0.2
    RELEASE_WINDOW = 5.0   # releases are retried for at most this long after they were requested
    RELEASE_QUEUE = 4096   # bound of the background release queue
    MAX_MOVES = 3          # consecutive M answers followed before backing off (protocol.md §7)
    MAX_EXTRA = 32         # addresses learned from M answers beyond those given
    ANSWER_ALLOWANCE = 3.0 # R2: a written acquire unanswered by its wait + this ends Indeterminate (the Go client's default)
    FIRST_CONNECT_GRACE = 1.0 # R1: a first connection may be waited for this long past a shorter wait
    FORK_LOCK = Mutex.new
    DEFER = { Object => :never }.freeze # Thread.handle_interrupt masks, allocated once
    IMMEDIATE = { Object => :immediate }.freeze
    private_constant :DEFER, :IMMEDIATE

    attr_reader :connect_timeout, :tls_context, :tls_server_name, :role, :on_reconnect

    # addresses: ["host:port", …] (any subset of a cluster's nodes).
    # token: the client token (String) or nil; never logged.
    # tls: nil, or a Hash with :ca_file, :cert_file, :key_file, :server_name,
    #   :verify (default true); or an OpenSSL::SSL::SSLContext.
    # connect_timeout: seconds to wait for the first connection (and per attempt).
    # logger: a Logger (default: none).
    #
    # Waits for the first connection: raises ConnectionError when none is up
    # within connect_timeout, AuthenticationError when every address refused
    # the token, TLSError when every TLS handshake failed.
    def initialize(addresses:, token: nil, tls: nil, connect_timeout: 5, logger: nil, admin: false,
                   on_reconnect: nil, answer_allowance: ANSWER_ALLOWANCE, label: nil, app_name: nil)
      addrs = Array(addresses).map(&:to_s).uniq
      raise InvalidArgument, "no server address" if addrs.empty?

      addrs.each { |a| Ticketing.split_addr(a) }
      @connect_timeout = Ticketing.seconds(connect_timeout, "connect_timeout", min_ms: 1)
      @answer_allowance = Ticketing.seconds(answer_allowance, "answer_allowance", min_ms: 1)
      raise InvalidArgument, "label must be a String of at most #{Wire::MAX_LABEL} bytes" unless label.nil? || label.is_a?(String)

      @label = label
      @app_name = app_name&.to_s
      raise InvalidArgument, "token must be a String" unless token.nil? || token.is_a?(String)

      @token = token.to_s.b.freeze
      @role = admin ? Wire::ROLE_ADMIN : Wire::ROLE_CLIENT
      @logger = logger
      @on_reconnect = on_reconnect
      @tls_context, @tls_server_name = build_tls(tls)
      @addresses = addrs
      @mu = Mutex.new
      @cv = ConditionVariable.new
      @gen = 0
      @closed = false
      @last_err = nil
      @rr = 0
      start_pool
      wait_first
    rescue StandardError
      close if @pool
      raise
    end

    # The token for the handshake (internal).
    def auth_token
      @token
    end

    def closed?
      @closed
    end

    # Waits up to wait seconds for the lock on key and returns a Lease of lease
    # seconds. wait 0 tries once. Raises LockTimeout (not acquired within wait),
    # Busy (refused at once; #code), Indeterminate (sent, no definite answer:
    # the lock may have been granted; do NOT enter the critical section),
    # ConnectionError (nothing could be sent), InvalidArgument (before
    # sending, or the server's limits with #code), ClosedError.
    #
    # Interrupting the calling thread (Thread#raise, Thread#kill,
    # Timeout.timeout in your code) withdraws a queued acquire (C) and
    # releases a grant that won the race; the connection stays in sync.
    def acquire(key, lease:, wait: 0, min_remaining: nil)
      key = Ticketing.check_key(key)
      acquire_checked(key, key.inspect, *durations(lease, wait, min_remaining), nil, nil)
    end

    # Acquires 2..16 distinct keys at once (protocol 1.1 key sets,
    # protocol.md §12.2): one lease, one wait and one fencing token for all
    # of them, granted when all are free, never a deadlock whatever the order.
    # Returns a Lease whose #keys lists them; Lease#release (or release_set)
    # frees them all. Raises as acquire, and NotSupported (nothing sent) when
    # the server does not announce key sets.
    #
    #   client.lock(["acct/17", "acct/42"], lease: 30, wait: 5) { |l| transfer(fence: l.token) }
    def acquire_set(keys, lease:, wait: 0, min_remaining: nil)
      ks = Ticketing.check_keys(keys)
      acquire_checked(ks[0], "set #{keys.inspect}", *durations(lease, wait, min_remaining), ks, Wire.keyset_body(ks).freeze)
    end

    # The checked durations of an acquire: [lease_ms, wait_ms, min_remaining seconds or nil].
    def durations(lease, wait, min_remaining)
      [Ticketing.millis(lease, "lease", min_ms: 1), Ticketing.millis(wait, "wait", min_ms: 0),
       min_remaining.nil? ? nil : Ticketing.seconds(min_remaining, "min_remaining", min_ms: 0)]
    end
    private :durations

    # Releases the set of keys acquired under token (X), from any process
    # that knows both: true after O. Raises NotHolder when token does not
    # hold exactly these keys (any order), else as release.
    def release_set(keys, token)
      ks = Ticketing.check_keys(keys)
      release_token(ks[0], Ticketing.check_token(token), Wire.keyset_body(ks).freeze, ks.size)
    end

    # acquire (a set: acquire_set) after the arguments' checks (internal).
    def acquire_checked(key, name, lease_ms, wait_ms, min_rem, keys, body)
      check_fork
      raise ClosedError, "acquire #{name}: client closed" if @closed

      op = body ? Wire::OP_ACQUIRE_SET : Wire::OP_ACQUIRE
      nkeys = keys ? keys.size : 0
      start = Ticketing.now
      budget_end = start + (wait_ms / 1000.0)
      conn_give_up = budget_end # R1: the wait bounds the whole call, connecting included
      moves = 0
      rounds = 0
      woken = [false]
      loop do
        call = Call.new(op, key, lease_ms, wait_ms, counts: wait_ms.positive?, body: body, nkeys: nkeys)
        lease_obj = Thread.handle_interrupt(DEFER) do
          attempt_acquire(call, name, lease_ms, conn_give_up, budget_end, keys)
        end
        return check_remaining(lease_obj, min_rem) if lease_obj

        resp = call.response
        if call.fail.nil? && resp.status == Wire::STATUS_MOVED
          addr = resp.payload.to_s
          follow(addr)
          moves += 1
          if moves > MAX_MOVES
            rounds += 1
            d = redirect_delay(rounds)
            if wait_ms.zero? || budget_end - Ticketing.now <= d
              raise NoLeader,
                    "acquire #{name}: no leader: #{moves} consecutive redirects#{addr.empty? ? ' (no leader elected)' : " (last to #{addr})"}"
            end

            sleep_redirect(d, current_leader, woken)
            moves = 0
          end
        end
        next unless wait_ms.positive?

        rem = budget_end - Ticketing.now
        raise LockTimeout, "acquire #{name}: timed out, not acquired" if rem < 0.001

        wait_ms = (rem * 1000).floor
      end
    end

    # acquire, but "not acquired within wait" is nil instead of LockTimeout
    # (edge rule R13); wait 0 tries once.
    # An Array of keys tries to acquire them as one set (acquire_set).
    def try_acquire(key, lease:, wait: 0, min_remaining: nil)
      return acquire_set(key, lease: lease, wait: wait, min_remaining: min_remaining) if key.is_a?(Array)

      acquire(key, lease: lease, wait: wait, min_remaining: min_remaining)
    rescue LockTimeout
      nil
    end

    # Acquires key, yields the Lease, and releases it when the block ends,
    # normally or by an exception (the release runs even if the thread is
    # being interrupted). Returns the block's value. Raises what acquire
    # raises; a failed release raises only when the block itself succeeded.
    # Without a block it is acquire: it returns the Lease (release it yourself).
    # An Array of 2..16 keys locks them as one set (acquire_set).
    def lock(key, lease:, wait: 0, &block)
      l = key.is_a?(Array) ? acquire_set(key, lease: lease, wait: wait) : acquire(key, lease: lease, wait: wait)
      return l unless block

      ok = false
      begin
        result = yield l
        ok = true
        result
      ensure
        Thread.handle_interrupt(DEFER) do
          l.release
        rescue Error
          raise if ok
        end
      end
    end

    # One round trip to a server: [its wall clock in microseconds since the
    # epoch, the round-trip time in seconds]. Raises ConnectionError when no
    # connection comes within connect_timeout, ClosedError.
    def ping
      check_fork
      raise ClosedError, "client closed" if @closed

      give_up = Ticketing.now + @connect_timeout
      loop do
        call = Call.new(Wire::OP_PING, "".b)
        t0 = Ticketing.now
        send_call(call, give_up, give_up)
        call.wait_done
        if call.fail
          raise ClosedError, "client closed" if @closed
          raise ConnectionError, "ping: #{call.fail_err.message}" if Ticketing.now > give_up

          next
        end
        r = call.response
        return [r.value, Ticketing.now - t0] if r.status == Wire::STATUS_PONG

        raise server_error(r, "ping")
      end
    end

    # An admin query (protocol.md §8), e.g. admin("locks", prefix: "jobs/"):
    # the reply as a Hash. Most need a client made with admin: true.
    def admin(cmd, **args)
      body = JSON.generate(args.merge(cmd: cmd.to_s)).b
      check_fork
      raise ClosedError, "client closed" if @closed

      give_up = Ticketing.now + @connect_timeout
      moves = 0
      loop do
        call = Call.new(Wire::OP_QUERY, body)
        send_call(call, give_up, give_up)
        call.wait_done
        if call.fail
          raise ClosedError, "client closed" if @closed
          raise ConnectionError, "admin #{cmd}: #{call.fail_err.message}" if Ticketing.now > give_up

          next
        end
        r = call.response
        return JSON.parse(r.payload) if r.status == Wire::STATUS_ADMIN

        if r.status == Wire::STATUS_MOVED
          follow(r.payload.to_s)
          raise NoLeader, "admin #{cmd}: #{moves} consecutive redirects" if (moves += 1) > MAX_MOVES

          next
        end
        raise server_error(r, "admin #{cmd}")
      end
    end

    # Releases a lock: release(lease) or release(key, token) — any process
    # that knows the token may release (protocol.md §5). Returns true only
    # when the server answered O. Raises NotHolder (the key is free or held
    # under another token: the lease had ended), Indeterminate (not confirmed
    # within 5 s; attempts that may have reached the server are repeated
    # meanwhile), InvalidArgument, ClosedError (as Indeterminate).
    def release(lease_or_key, token = nil)
      if lease_or_key.is_a?(Lease)
        return lease_or_key.release if lease_or_key.client.equal?(self)
        return release_set(lease_or_key.keys, lease_or_key.token) if lease_or_key.set?

        key = lease_or_key.key
        token = lease_or_key.token
      else
        key = lease_or_key
      end
      release_token(Ticketing.check_key(key), Ticketing.check_token(token))
    end

    # release for a Lease of this client (internal): its key was checked at
    # the acquire and its token came from the server, so neither is checked again.
    def release_checked(key, token, body = nil, nkeys = 0)
      release_token(key, token, body, nkeys)
    end

    # Closes every connection and stops the background threads. Calls in
    # progress raise ClosedError (or Indeterminate for a request already
    # written). Idempotent.
    def close
      conns = @mu.synchronize do
        return nil if @closed

        @closed = true
        @cv.broadcast
        @pool.conns.dup
      end
      conns.each(&:shutdown)
      @releaser&.stop
      conns.each { |c| c.join(2) }
      nil
    end

    # Connection statistics for tests and diagnostics.
    def connected_count
      @pool.conns.count(&:up?)
    end

    def connection_count
      @pool.conns.size
    end

    # --- internal, called by Connection and Releaser ---------------------

    def changed
      @mu.synchronize do
        @gen += 1
        @cv.broadcast
      end
    end

    def connection_failed(conn, err, attempt)
      @mu.synchronize { @last_err = err }
      log(attempt == 1 || err.is_a?(AuthenticationError) ? :warn : :debug,
          "ticketing: connect #{conn.addr} failed (attempt #{attempt}): #{err.message}")
      changed
    end

    def connection_lost(conn, err, pending)
      @mu.synchronize { @last_err = err }
      log(:warn, "ticketing: connection to #{conn.addr} lost (#{pending} pending): #{err.class}: #{err.message}")
    end

    # A read completed several callers: their next frames go out together.
    def cork
      @pool.conns.each(&:cork)
    end

    # Hands a finished call to its owner (never with a connection lock held).
    def complete(call)
      case call.owner
      when :caller then call.finish!
      when :abandoned
        r = call.response
        compensate(call, r.value) if call.fail.nil? && r.status == Wire::STATUS_GRANTED
      when :releaser then @releaser.completed(call)
      when :setup then setup_answered(call)
      end
    end

    # The connection label (protocol.md §12.3): the user's, or
    # "[<app> ]<host>/<pid> ruby/<version>" (the pid of now).
    def label_bytes
      return Wire.cut_label(@label) if @label

      text = "#{Socket.gethostname}/#{Process.pid} ruby/#{VERSION}"
      text = "#{@app_name} #{text}" if @app_name && !@app_name.empty?
      Wire.cut_label(text)
    end

    # The feature pong sends the label when the server takes labels.
    def setup_answered(call)
      return if call.fail

      r = call.response
      if call.op == Wire::OP_PING
        features = r.status == Wire::STATUS_PONG ? r.queued : 0
        lb = label_bytes
        call.conn.enqueue(Call.new(Wire::OP_LABEL, lb, owner: :setup)) if features.anybits?(Wire::FEATURE_LABELS) && !lb.empty?
        call.conn.features = features
        changed # set calls waiting for the features go on
      elsif call.op == Wire::OP_LABEL && r.status == Wire::STATUS_ERROR
        log(:warn, "ticketing: #{call.conn.addr} refused the connection label: #{r.payload}")
      end
    end

    def backoff_delay(attempt)
      jitter(step(BACKOFF_BASE, BACKOFF_CAP, attempt))
    end

    def redirect_delay(n)
      jitter(step(REDIRECT_BASE, REDIRECT_CAP, n))
    end

    # Sleeps d seconds; false when the client closed meanwhile.
    def sleep_unless_closed(d)
      limit = Ticketing.now + d
      @mu.synchronize do
        until @closed
          left = limit - Ticketing.now
          return true if left <= 0

          @cv.wait(@mu, left)
        end
      end
      false
    end

    # Queues call on a connection without waiting: the known leader first,
    # then round robin. :ok, :down or :full.
    def try_enqueue(call)
      pool = @pool
      r = (@rr += 1)
      res = :down
      if (ep = @leader)
        n = ep.conns.size
        n.times do |i|
          case (r2 = ep.conns[(r + i) % n].enqueue(call))
          when :ok then return :ok
          when :full then res = :full
          when :unsupported, :early then res = worse(res, r2)
          end
        end
        return res if res == :full || ep.conns.any?(&:connecting?)
      end
      n = pool.conns.size
      n.times do |i|
        case (r2 = pool.conns[(r + i) % n].enqueue(call))
        when :ok then return :ok
        when :full then res = :full
        when :unsupported, :early then res = worse(res, r2)
        end
      end
      res
    end

    ENQ_RANK = { down: 0, early: 1, unsupported: 2, full: 3 }.freeze

    # Of two enqueue results the one that says most.
    def worse(a, b)
      ENQ_RANK.fetch(a) >= ENQ_RANK.fetch(b) ? a : b
    end

    # Remembers the leader named by an M answer; an unknown address gets a
    # connection of its own (at most MAX_EXTRA); empty forgets the leader.
    def follow(addr)
      if addr.empty?
        @leader = nil
        return
      end
      ep = @pool.by_addr[addr]
      unless ep
        begin
          Ticketing.split_addr(addr)
        rescue InvalidArgument
          log(:warn, "ticketing: ignoring malformed leader address #{addr.inspect}")
          @leader = nil
          return
        end
        @mu.synchronize do
          ep = @pool.by_addr[addr]
          if ep.nil?
            if @closed || @pool.extra >= MAX_EXTRA
              @leader = nil
              return
            end
            ep = Endpoint.new(addr, [Connection.new(self, addr)])
            old = @pool
            @pool = Pool.new(old.eps + [ep], old.conns + ep.conns, old.by_addr.merge(addr => ep), old.extra + 1)
            ep.conns.each(&:start)
          end
        end
      end
      make_leader(ep)
    end

    def current_leader
      @leader
    end

    def log(level, msg)
      @logger&.send(level, msg)
    end

    Endpoint = Struct.new(:addr, :conns)
    Pool = Struct.new(:eps, :conns, :by_addr, :extra)
    # body, nkeys: of a set (X), else nil, 0.
    RelState = Struct.new(:key, :token, :deadline, :maybe, :moves, :retries, :woken, :body, :nkeys) do
      def call(owner = :caller)
        return Call.new(Wire::OP_RELEASE, key, token, owner: owner) unless body

        Call.new(Wire::OP_RELEASE_SET, key, token, owner: owner, body: body, nkeys: nkeys)
      end
    end

    # Interprets one release attempt: [final, wait, error].
    def release_outcome(st, call)
      if call.fail
        if @closed
          if call.fail == :unsent && !st.maybe
            return [true, 0, ClosedError.new("release #{st.key.inspect}: the client was closed (nothing was sent)")]
          end

          return [true, 0, Indeterminate.new("release #{st.key.inspect}: not confirmed: the client closed")]
        end
        return [false, 0, nil] if call.fail == :unsent

        st.maybe = true
        st.retries += 1
        return [false, redirect_delay(st.retries), nil]
      end
      r = call.response
      at = "release #{st.key.inspect} on #{call.conn&.addr}"
      case r.status
      when Wire::STATUS_RELEASED then [true, 0, nil]
      when Wire::STATUS_NOT_HOLDER
        if st.maybe
          [true, 0,
           Indeterminate.new("#{at}: the token no longer holds the key; an earlier unconfirmed attempt may have released it")]
        else
          [true, 0, NotHolder.new("#{at}: not the holder (the key is free or held under another token)")]
        end
      when Wire::STATUS_MOVED
        follow(r.payload.to_s)
        st.moves += 1
        if st.moves > MAX_MOVES
          st.moves = 0
          st.retries += 1
          [false, redirect_delay(st.retries), nil]
        else
          [false, 0, nil]
        end
      when Wire::STATUS_UNKNOWN
        st.maybe = true
        st.retries += 1
        [false, redirect_delay(st.retries), nil]
      else
        [true, 0, server_error(r, at)]
      end
    end

    # Background release of a grant whose acquire call was abandoned.
    def compensate(call, token)
      st = RelState.new(call.key, token, Ticketing.now + RELEASE_WINDOW, false, 0, 0, false, call.body, call.nkeys)
      return if @releaser.submit(st)

      log(:warn, "ticketing: release queue full; an abandoned grant of #{call.key.inspect} stays held until its lease ends")
    end

    # Sleeps d seconds, returning early the first time (per call) the client
    # learns a leader other than known.
    def sleep_redirect(d, known, woken)
      return if d <= 0

      limit = Ticketing.now + d
      @mu.synchronize do
        loop do
          raise ClosedError, "client closed" if @closed

          if !woken[0] && @leader && !@leader.equal?(known)
            woken[0] = true
            return
          end
          left = limit - Ticketing.now
          return if left <= 0

          @cv.wait(@mu, left)
        end
      end
    end

    private

    def check_remaining(lease, min_rem)
      return lease if min_rem.nil? || lease.remaining >= min_rem

      left = lease.remaining
      begin
        lease.release
      rescue Error => e
        log(:warn, "ticketing: release of an insufficient lease of #{lease.key.inspect} failed: #{e.message}")
      end
      raise InsufficientLease, "acquire #{lease.key.inspect}: granted with #{(left * 1000).round} ms of the lease left, " \
                               "below min_remaining #{(min_rem * 1000).round} ms; released"
    end

    def attempt_acquire(call, name, lease_ms, conn_give_up, budget_end, keys)
      res = send_call(call, conn_give_up, budget_end)
      raise LockTimeout, "acquire #{name}: timed out waiting for a free max_inflight slot, not acquired" if res == :noslot

      # ensure, not rescue: Timeout.timeout unwinds with throw, which no rescue sees.
      answered = false
      begin
        # R2: no answer within its wait + the answer allowance, counted from its write
        allowance = (call.arg2 / 1000.0) + @answer_allowance
        unless Thread.handle_interrupt(IMMEDIATE) { call.wait_done(call.sent_at + allowance - Ticketing.now) }
          if call.conn.abandon(call, withdraw: true)
            answered = true
            raise Indeterminate, "acquire #{name} on #{call.conn.addr}: no answer within #{allowance.round(3)} s of the " \
                                 "request's write (its wait #{call.arg2 / 1000.0} s + the answer allowance #{@answer_allowance} s); withdrawn"
          end
          call.wait_done # answered meanwhile
        end
        answered = true
      ensure
        # interrupted: withdraw; if it was answered meanwhile, a grant is released
        if !answered && !call.conn.abandon(call) && call.fail.nil? && call.response.status == Wire::STATUS_GRANTED
          compensate(call, call.response.value)
        end
      end
      outcome = acquire_outcome(call, name, lease_ms, keys)
      if outcome.is_a?(Lease) && Thread.pending_interrupt?
        compensate(call, outcome.token) # the thread is being interrupted: nobody will take this lease
      end
      outcome
    end

    # A Lease, nil to retry (unsent, M), or raises.
    def acquire_outcome(call, name, lease_ms, keys)
      at = "acquire #{name} on #{call.conn&.addr}"
      if call.fail
        if call.fail == :lost
          raise Indeterminate, "#{at}: client closed after the request was written" if call.fail_err.is_a?(ClosedError)

          raise Indeterminate, "#{at}: connection lost after the request was written: #{call.fail_err.message}"
        end
        raise ClosedError, "client closed" if @closed

        return nil
      end
      r = call.response
      case r.status
      when Wire::STATUS_GRANTED
        deadline = call.sent_at + (r.queued * Wire::QUEUED_UNIT_MS / 1000.0) + (lease_ms / 1000.0)
        Lease.new(self, call.key, r.value, deadline, keys, call.body)
      when Wire::STATUS_TIMEOUT then raise LockTimeout, "#{at}: timed out, not acquired"
      when Wire::STATUS_BUSY then raise Busy.new(r.code, "#{at}: busy (#{Wire.code_name(r.code)}), not acquired")
      when Wire::STATUS_UNKNOWN then raise Indeterminate, "#{at}: the cluster could not confirm the commit"
      when Wire::STATUS_MOVED then nil
      else raise server_error(r, at)
      end
    end

    def server_error(resp, what)
      msg = resp.payload.to_s.dup.force_encoding(Encoding::UTF_8).scrub
      if [21, 22, 23, 24].include?(resp.code)
        InvalidArgument.new("#{what}: server refused: #{Wire.code_name(resp.code)}: #{msg}", resp.code)
      else
        ServerError.new(resp.code, "#{what}: #{msg}")
      end
    end

    def release_token(key, token, body = nil, nkeys = 0)
      check_fork
      raise ClosedError, "release #{key.inspect}: the client was closed (nothing was sent)" if @closed

      st = RelState.new(key, token, Ticketing.now + RELEASE_WINDOW, false, 0, 0, false, body, nkeys)
      cause = nil
      woken = [false]
      loop do
        raise Indeterminate, give_up_msg(st, cause) if Ticketing.now >= st.deadline

        call = st.call
        outcome = Thread.handle_interrupt(DEFER) { attempt_release(call, st) }
        return true if outcome == :released
        raise Indeterminate, give_up_msg(st, cause) if outcome == :gave_up

        cause = call.fail_err if call.fail
        final, wait, err = release_outcome(st, call)
        raise err if final && err
        return true if final

        sleep_redirect([wait, st.deadline - Ticketing.now - 0.01].min, current_leader, woken)
      end
    rescue ClosedError
      raise ClosedError, "release #{key.inspect}: the client was closed (nothing was sent)" unless st&.maybe

      raise Indeterminate, "release #{key.inspect}: not confirmed: the client closed"
    end

    def give_up_msg(st, cause)
      "release #{st.key.inspect}: not confirmed within #{RELEASE_WINDOW}s#{cause ? ": #{cause.message}" : ''}"
    end

    # :released, :gave_up, or :answered (the outcome is on call).
    def attempt_release(call, st)
      res = send_call(call, st.deadline, st.deadline)
      return :gave_up if res == :noslot

      answered = nil
      begin
        answered = Thread.handle_interrupt(IMMEDIATE) { call.wait_done(st.deadline - Ticketing.now) }
      ensure
        @releaser.adopt(call, st) if answered.nil? # interrupted: the releaser carries on
      end
      return :gave_up if !answered && call.conn.reown(call, :dropped)

      call.wait_done
      call.fail.nil? && call.response.status == Wire::STATUS_RELEASED ? :released : :answered
    rescue ConnectionError
      :gave_up
    end

    # Queues call, waiting for a connection until give_up or for a free
    # max_inflight slot until slot_give_up. Returns :ok or :noslot; raises
    # ConnectionError or ClosedError.
    def send_call(call, give_up, slot_give_up)
      waited = false
      early_until = nil
      loop do
        gen = @mu.synchronize { @gen }
        raise ClosedError, "client closed" if @closed

        if waited && call.acquire? && call.counts
          # Time spent waiting for a connection or a slot comes out of the
          # wait the request carries: wait bounds the whole call.
          rem = [((slot_give_up - Ticketing.now) * 1000).floor, 0].max
          call.arg2 = rem if rem < call.arg2
        end
        r = try_enqueue(call)
        return :ok if r == :ok
        raise NotSupported, "the server does not support key sets (protocol 1.1, KEY_SETS); nothing was sent" if r == :unsupported

        if r != :full
          conns = @pool.conns
          # R4/R5: every connection's last attempt failed auth or TLS: fail at once
          raise connect_error if conns.all?(&:cfg_err)
        end
        limit = r == :full ? slot_give_up : conn_limit(call, give_up)
        # a set op on a connection that is up waits for its feature pong (one round trip)
        limit = [limit, early_until ||= Ticketing.now + @connect_timeout].max if r == :early
        left = limit - Ticketing.now
        if left <= 0
          return :noslot if r == :full

          raise connect_error
        end
        Thread.handle_interrupt(IMMEDIATE) do
          @mu.synchronize { @cv.wait(@mu, left) if @gen == gen && !@closed }
        end
        waited = true
      end
    end

    # How long call may wait for a connection: an acquire until its wait's
    # end (R1), or up to 1 s past it while a connection is being opened for
    # the first time.
    def conn_limit(call, give_up)
      return give_up unless call.acquire? && @pool.conns.any?(&:connecting?)

      give_up + FIRST_CONNECT_GRACE
    end

    def connect_error
      err = @mu.synchronize { @last_err }
      return ConnectionError.new("no connection to #{@addresses.join(', ')} within #{@connect_timeout}s") unless err

      msg = "no connection to #{@addresses.join(', ')}: #{err.message}"
      return AuthenticationError.new(msg, err.code_number) if err.is_a?(AuthenticationError)
      return TLSError.new(msg) if err.is_a?(TLSError)

      ConnectionError.new(msg)
    end

    def make_leader(ep)
      return if @leader.equal?(ep)

      @leader = ep
      changed
      @releaser&.poke
    end

    def start_pool
      @pid = Process.pid
      per = @addresses.size == 1 ? 2 : 1
      eps = @addresses.map { |a| Endpoint.new(a, Array.new(per) { Connection.new(self, a) }) }
      @leader = nil
      @pool = Pool.new(eps, eps.flat_map(&:conns), eps.to_h { |e| [e.addr, e] }, 0)
      @releaser = Releaser.new(self)
      @pool.conns.each(&:start)
    end

    # A client used in a child after fork reconnects instead of sharing the
    # parent's sockets (the parent's threads do not exist in the child).
    def check_fork
      return if Process.pid == @pid

      FORK_LOCK.synchronize do
        return if Process.pid == @pid

        @pool.conns.each(&:abandon_after_fork)
        @mu = Mutex.new
        @cv = ConditionVariable.new
        start_pool
      end
    end

    # Waits until a connection is up; raises when none comes within
    # connect_timeout, or when every connection failed on authentication/TLS.
    def wait_first
      limit = Ticketing.now + @connect_timeout
      loop do
        gen = @mu.synchronize { @gen }
        return if @pool.conns.any?(&:up?)

        err = @mu.synchronize { @last_err }
        if @pool.conns.all? { |c| c.failures.positive? } && (err.is_a?(AuthenticationError) || err.is_a?(TLSError) || err.is_a?(ProtocolError))
          raise err
        end

        left = limit - Ticketing.now
        raise connect_error if left <= 0

        @mu.synchronize { @cv.wait(@mu, left) if @gen == gen }
      end
    end

    def build_tls(tls)
      return [nil, nil] if tls.nil? || tls == false
      return [tls, nil] if tls.is_a?(OpenSSL::SSL::SSLContext)

      tls = {} if tls == true # the system's CAs, verified (as Python's and JS's tls: true)
      raise InvalidArgument, "tls must be nil, true, a Hash or an OpenSSL::SSL::SSLContext" unless tls.is_a?(Hash)

      opts = tls.transform_keys(&:to_sym)
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.min_version = OpenSSL::SSL::TLS1_2_VERSION
      if opts.fetch(:verify, true)
        ctx.verify_mode = OpenSSL::SSL::VERIFY_PEER
        store = OpenSSL::X509::Store.new
        if opts[:ca_file]
          ca = opts[:ca_file].to_s
          raise InvalidArgument, "tls: ca_file #{ca.inspect}: no such readable file" unless File.file?(ca) && File.readable?(ca)

          begin
            store.add_file(ca)
          rescue OpenSSL::X509::StoreError => e
            raise InvalidArgument, "tls: ca_file #{ca.inspect}: not a PEM certificate file (#{e.message})"
          end
        else
          store.set_default_paths
        end
        ctx.cert_store = store
      else
        ctx.verify_mode = OpenSSL::SSL::VERIFY_NONE
      end
      if opts[:cert_file]
        ctx.cert = OpenSSL::X509::Certificate.new(read_tls_file(opts[:cert_file], "cert_file"))
        ctx.key = OpenSSL::PKey.read(read_tls_file(opts.fetch(:key_file), "key_file"))
      end
      [ctx, opts[:server_name]&.to_s]
    rescue OpenSSL::OpenSSLError, SystemCallError, KeyError => e
      raise InvalidArgument, "tls: #{e.message}"
    end

    def read_tls_file(path, what)
      File.read(path.to_s)
    rescue SystemCallError => e
      raise InvalidArgument, "tls: #{what} #{path.to_s.inspect}: #{e.message.sub(/ @ \w+ - .*/, '')}"
    end

    def step(base, cap, n)
      d = base
      (n - 1).times do
        break if d >= cap

        d *= 2
      end
      [d, cap].min
    end

    # Full jitter: uniform in [0, d] (edge rule R16).
    def jitter(d)
      rand * d
    end
  end
end
