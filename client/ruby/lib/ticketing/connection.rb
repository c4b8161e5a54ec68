# frozen_string_literal: true

require "socket"
require "openssl"
require "securerandom"

module Ticketing
  # A thread's (fiber's) wait slot, reused by every call it makes: the reader
  # wakes only the caller whose answer came, and no call allocates a Mutex and
  # a ConditionVariable of its own. A stale signal (from a call given up
  # earlier) is harmless: every wait re-checks its own call's flag.
  class Waiter
    attr_reader :mutex, :cv

    def initialize
      @mutex = Mutex.new
      @cv = ConditionVariable.new
    end

    def self.current
      Thread.current[:__ticketing_waiter] ||= new
    end
  end

  # One request in flight. Owned by its sender until enqueued, then by its
  # connection's pending table until answered or lost, then by its owner:
  # :caller (a thread waits on it), :abandoned (nobody: a grant is
  # compensated), :releaser (the background releaser), :dropped (nothing to do).
  class Call
    # key: the key (binary); of a set op (S, X) the set's first key, which a
    # cancel names (protocol.md §12.2), with body the set's body of nkeys keys.
    attr_accessor :op, :key, :arg1, :arg2, :counts, :conn, :req_id, :seq, :sent_at, :pending,
                  :owner, :job, :response, :fail, :fail_err, :body, :nkeys

    def initialize(op, key, arg1 = 0, arg2 = 0, counts: false, owner: :caller, body: nil, nkeys: 0)
      @op = op
      @key = key
      @body = body
      @nkeys = nkeys
      @arg1 = arg1
      @arg2 = arg2
      @counts = counts
      @owner = owner
      @pending = false
      @fail = nil
      @done = false
      @waiter = owner == :caller ? Waiter.current : nil
    end

    def frame
      case @op
      when Wire::OP_ACQUIRE then Wire.encode_acquire(@req_id, @key, @arg1, @arg2)
      when Wire::OP_RELEASE then Wire.encode_release(@req_id, @key, @arg1)
      when Wire::OP_CANCEL then Wire.encode_cancel(@req_id, @key, @arg1)
      when Wire::OP_PING then Wire.encode_ping(@req_id, @arg1)
      when Wire::OP_LABEL then Wire.encode_label(@req_id, @key)
      when Wire::OP_QUERY then Wire.encode_query(@req_id, @key) # the key field holds the JSON body
      when Wire::OP_ACQUIRE_SET then Wire.encode_acquire_set(@req_id, @nkeys, @body, @arg1, @arg2)
      when Wire::OP_RELEASE_SET then Wire.encode_release_set(@req_id, @nkeys, @body, @arg1)
      end
    end

    # Appends the frame to buf (a binary String).
    def write_frame(buf)
      case @op
      when Wire::OP_ACQUIRE then Wire.append_request(buf, @op, @req_id, (@arg1 << 32) | @arg2, @key)
      when Wire::OP_RELEASE then Wire.append_request(buf, @op, @req_id, @arg1, @key)
      when Wire::OP_CANCEL then Wire.append_request(buf, @op, @req_id, @arg1 << 32, @key)
      else buf << frame
      end
    end

    # An acquire of one key or of a set (S): it waits, and is withdrawn by C.
    def acquire?
      @op == Wire::OP_ACQUIRE || @op == Wire::OP_ACQUIRE_SET
    end

    def finish!
      w = @waiter
      w.mutex.synchronize do
        @done = true
        w.cv.signal
      end
    end

    def done?
      @waiter.mutex.synchronize { @done }
    end

    # Waits until answered (or lost); with a timeout in seconds, false when it
    # ran out. Only the thread (fiber) that made the call waits on it.
    def wait_done(timeout = nil)
      w = @waiter
      w.mutex.synchronize do
        if timeout
          limit = Ticketing.now + timeout
          until @done
            left = limit - Ticketing.now
            return false if left <= 0

            w.cv.wait(w.mutex, left)
          end
        else
          w.cv.wait(w.mutex) until @done
        end
        true
      end
    end
  end

  # One persistent connection to one address, kept by a supervisor thread
  # (connect, handshake, read loop, back off, again) until the client closes.
  # Senders append frames to wbuf under @mu and flush under @wmu: whoever
  # flushes writes every frame queued so far in one write, so concurrent
  # callers share syscalls. The write is write_nonblock, which keeps the GVL
  # (no thread switch per frame); only a full socket buffer falls back to a
  # blocking write of the rest, during which other callers just queue (a
  # failed try_lock) and the writer takes their frames before it lets go.
  #
  # Corking: when a read completes several callers at once, the client corks
  # every connection: those callers (about to run one after another under the
  # GVL) only append their next frames, and each connection's writer thread,
  # signalled once, sends them all in one write when it gets the GVL behind
  # them. One caller alone never waits for the writer. A call whose frame was taken for writing (seq <
  # @taken) may have reached the server ("lost" when the connection dies);
  # any other was never sent ("unsent": safe to retry).
  #
  # Lock order: @wmu -> @mu -> Call's lock; the client's lock is never taken
  # while @mu is held.
  class Connection
    READ_SIZE = 64 * 1024
    MAX_WRITE_BUFFER = 4 << 20

    attr_reader :addr

    def initialize(client, addr)
      @client = client
      @addr = addr
      @host, @port = Ticketing.split_addr(addr)
      @mu = Mutex.new
      @wmu = Mutex.new
      @state = :down
      @sock = nil
      @ever_up = false
      @failures = 0
      @max_inflight = 1
      @inflight = 0
      @pending = {}
      @next_id = 0
      @wbuf = String.new(encoding: Encoding::BINARY)
      @spare = String.new(encoding: Encoding::BINARY) # the flusher's (@wmu) buffer, swapped with @wbuf
      @done_buf = [] # the reader's, reused per read
      @wcv = ConditionVariable.new # the writer thread waits on it (with @mu)
      @corked = false              # callers only append; the writer flushes (@mu)
      @flush_wanted = false
      @writer_idle = false
      @seq = 0
      @taken = 0
      @thread = nil
    end

    def start
      @thread = Thread.new { run }
      @thread.name = "ticketing #{@addr}" if @thread.respond_to?(:name=)
      @thread.report_on_exception = false
      @writer = Thread.new { write_loop }
      @writer.name = "ticketing writer #{@addr}" if @writer.respond_to?(:name=)
      @writer.report_on_exception = false
      self
    end

    def join(limit = 5)
      @thread&.join(limit)
      @writer&.join(limit)
    end

    # Several callers are about to send: let them queue and flush once.
    def cork
      @mu.synchronize do
        return if @state != :up

        @corked = true
        want_flush_locked
      end
    end

    def up?
      @mu.synchronize { @state == :up }
    end

    # The last connect attempt failed authentication or TLS (a configuration
    # error: waiting calls fail at once, edge rule R4), else nil.
    attr_reader :cfg_err

    # Protocol 1.1 feature bits the server announced (protocol.md §12.1);
    # nil until the feature pong of this connection was read.
    attr_accessor :features

    def failures
      @mu.synchronize { @failures }
    end

    # Still on its first attempt: never up, never failed.
    def connecting?
      @mu.synchronize { @state == :down && !@ever_up && @failures.zero? }
    end

    # Queues call's frame; :ok, :down (not connected or too much unsent),
    # :early (a set op before the feature pong), :unsupported (a set op the
    # server does not announce, §12.1) or :full (every max_inflight slot in use).
    def enqueue(call)
      @mu.synchronize do
        return :down if @state != :up || @wbuf.bytesize > MAX_WRITE_BUFFER

        if call.body
          f = @features
          return :early if f.nil? # up, the feature pong not read yet

          return :unsupported unless f.anybits?(Wire::FEATURE_KEY_SETS)
        end
        return :full if call.counts && @inflight >= @max_inflight

        enqueue_locked(call)
        if @corked
          # The writer sends it: a flush it starts after this append either
          # takes the frame or fails try_lock to a holder that re-checks.
          want_flush_locked
          return :ok
        end
      end
      flush
      :ok
    end

    # Leaves a pending call to the connection: a queued acquire is withdrawn
    # with C and a grant that wins the race is compensated. False when the
    # call was already answered (its result is on the call).
    def abandon(call, withdraw: false)
      @mu.synchronize do
        return false unless call.pending

        call.owner = :abandoned
        if call.acquire? && (call.counts || withdraw) && @state == :up
          enqueue_locked(Call.new(Wire::OP_CANCEL, call.key, call.req_id, owner: :dropped))
        end
      end
      flush
      true
    end

    # Gives a pending call to new_owner (with job); false when already answered.
    def reown(call, new_owner, job = nil)
      @mu.synchronize do
        return false unless call.pending

        call.owner = new_owner
        call.job = job
        true
      end
    end

    def shutdown
      sock = @mu.synchronize { @sock }
      kill(sock, ClosedError.new("client closed")) if sock
      @mu.synchronize { @wcv.signal }
    end

    # After fork: forget the parent's socket without a TLS close_notify or a
    # shutdown that would disturb the parent's stream.
    def abandon_after_fork
      @mu.synchronize do
        s = @sock
        @sock = nil
        @state = :down
        @pending.clear
        begin
          (s.respond_to?(:to_io) ? s.to_io : s)&.close
        rescue StandardError
          nil
        end
      end
    end

    private

    def want_flush_locked
      return if @flush_wanted

      @flush_wanted = true
      @wcv.signal if @writer_idle
    end

    def enqueue_locked(call)
      id = alloc_id
      call.conn = self
      call.req_id = id
      call.seq = @seq
      call.pending = true
      @seq += 1
      @pending[id] = call
      @inflight += 1 if call.counts
      call.sent_at = Ticketing.now if call.acquire? # t_send (protocol.md §5)
      call.write_frame(@wbuf)
    end

    # The next req_id no outstanding request of this connection uses; 0 skipped.
    def alloc_id
      loop do
        @next_id = (@next_id + 1) & Wire::MAX_U32
        next if @next_id.zero?
        return @next_id unless @pending.key?(@next_id)
      end
    end

    def flush
      loop do
        return unless @wmu.try_lock # the holder takes our frames before it lets go

        begin
          write_queued
        ensure
          @wmu.unlock
        end
        # A frame queued between the holder's last look and its unlock is ours to send.
        return if @mu.synchronize { @state != :up || @wbuf.empty? }
      end
    end

    IOERROR_IMMEDIATE = { IOError => :immediate }.freeze
    private_constant :IOERROR_IMMEDIATE

    # Writes every queued frame (@wmu held).
    def write_queued
      loop do
        sock = nil
        data = nil
        @mu.synchronize do
          return if @state != :up || @wbuf.empty?

          sock = @sock
          data = @wbuf
          @wbuf = @spare
          @taken = @seq
          @corked = false
        end
        write_all(sock, data)
        data.clear
        @spare = data
      end
    end

    def write_all(sock, data)
      n = sock.write_nonblock(data, exception: false)
      return if n == data.bytesize

      rest = n.is_a?(Integer) ? data.byteslice(n..) : data
      # A close by another thread interrupts this write with an IOError;
      # take it here (callers mask interrupts until they wait).
      Thread.handle_interrupt(IOERROR_IMMEDIATE) { sock.write(rest) }
    rescue StandardError => e
      kill(sock, e)
    end

    # The writer thread: flushes what corked callers queued.
    def write_loop
      until @client.closed?
        @mu.synchronize do
          @writer_idle = true
          @wcv.wait(@mu) until @flush_wanted || @client.closed?
          @writer_idle = false
          @flush_wanted = false
        end
        flush
      end
    rescue StandardError => e
      @client.log(:error, "ticketing: writer of #{@addr} stopped: #{e.class}: #{e.message}")
    end

    def run
      attempt = 0
      until @client.closed?
        if attempt.positive?
          d = @client.backoff_delay(attempt)
          @client.on_reconnect&.call(@addr, attempt, d)
          break unless @client.sleep_unless_closed(d)
        end
        begin
          sock, welcome = connect
        rescue StandardError => e
          break if @client.closed?

          failed(e)
          attempt += 1
          next
        end
        unless up(sock, welcome)
          close_quietly(sock)
          break
        end
        read_loop(sock)
        attempt = 1
      end
    end

    def connect
      deadline = Ticketing.now + @client.connect_timeout
      raw = begin
        Socket.tcp(@host, @port, connect_timeout: @client.connect_timeout)
      rescue SocketError => e
        raise ConnectionError, "cannot resolve #{@addr}: #{e.message}"
      rescue SystemCallError, IOError => e
        raise ConnectionError, "connect #{@addr}: #{e.message}"
      end
      begin
        tune(raw)
        sock = raw
        sock = tls_connect(raw, deadline) if @client.tls_context
        welcome = handshake(sock, deadline)
        [sock, welcome]
      rescue StandardError
        close_quietly(raw)
        raise
      end
    end

    def tune(raw)
      raw.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
      raw.setsockopt(Socket::SOL_SOCKET, Socket::SO_KEEPALIVE, true)
      if defined?(Socket::TCP_KEEPIDLE)
        raw.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_KEEPIDLE, 15)
        raw.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_KEEPINTVL, 5)
        raw.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_KEEPCNT, 3)
      end
    rescue SystemCallError
      nil
    end

    def tls_connect(raw, deadline)
      ssl = OpenSSL::SSL::SSLSocket.new(raw, @client.tls_context)
      ssl.sync_close = true
      ssl.hostname = @client.tls_server_name || @host
      loop do
        case ssl.connect_nonblock(exception: false)
        when :wait_readable then wait_io(raw, :r, deadline, "TLS handshake")
        when :wait_writable then wait_io(raw, :w, deadline, "TLS handshake")
        else break
        end
      end
      ssl.post_connection_check(ssl.hostname) if @client.tls_context.verify_mode != OpenSSL::SSL::VERIFY_NONE
      ssl
    rescue OpenSSL::SSL::SSLError => e
      if e.message.match?(/wrong version number|record layer|packet length too long|unknown protocol/i)
        raise TLSError, "TLS handshake with #{@addr}: the server does not speak TLS (its first bytes are not a TLS record)"
      end

      raise TLSError, "TLS handshake with #{@addr}: #{e.message}"
    end

    def wait_io(io, dir, deadline, what)
      left = deadline - Ticketing.now
      ready = left.positive? && (dir == :r ? IO.select([io], nil, nil, left) : IO.select(nil, [io], nil, left))
      raise ConnectionError, "#{what} with #{@addr}: no answer within #{@client.connect_timeout}s" unless ready
    end

    def read_full(sock, n, deadline, what)
      buf = String.new(encoding: Encoding::BINARY)
      while buf.bytesize < n
        r = sock.read_nonblock(n - buf.bytesize, exception: false)
        case r
        when :wait_readable then wait_io(sock.respond_to?(:to_io) ? sock.to_io : sock, :r, deadline, what)
        when :wait_writable then wait_io(sock.respond_to?(:to_io) ? sock.to_io : sock, :w, deadline, what)
        when nil then raise ConnectionError, "#{what} from #{@addr}: connection closed"
        else buf << r
        end
      end
      buf
    rescue OpenSSL::SSL::SSLError => e
      raise TLSError, "#{what} from #{@addr}: #{e.message}"
    rescue SystemCallError, IOError => e
      raise ConnectionError, "#{what} from #{@addr}: #{e.message}"
    end

    def handshake(sock, deadline)
      first = read_full(sock, Wire::HELLO_LEN, deadline, "reading HELLO")
      if first.getbyte(0) == 0x45 && first.getbyte(1) == 12 # REJECT TLS_REQUIRED (protocol.md §12.4)
        raise TLSError, "#{@addr}: the server requires TLS (it answered REJECT TLS_REQUIRED): connect with tls:"
      end

      hello = begin
        Wire.parse_hello(first)
      rescue Wire::DecodeError => e
        raise ProtocolError, "#{@addr} is not a ticketing v1 server: #{e.message}"
      end
      token = @client.auth_token
      role = @client.role
      nonce = SecureRandom.random_bytes(Wire::NONCE_LEN)
      proof = Wire.client_proof(token, role, hello.nonce, nonce)
      begin
        sock.write(Wire.encode_auth(role, nonce, proof))
      rescue SystemCallError, IOError, OpenSSL::SSL::SSLError => e
        raise ConnectionError, "sending AUTH to #{@addr}: #{e.message}"
      end
      w = begin
        Wire.parse_welcome(read_full(sock, Wire::WELCOME_LEN, deadline, "reading WELCOME"))
      rescue Wire::DecodeError => e
        raise ProtocolError, "bad WELCOME from #{@addr}: #{e.message}"
      end
      unless w.accepted?
        name = Wire.code_name(w.code)
        if [10, 11].include?(w.code)
          hint = w.code == 11 && token.empty? && hello.tokens_configured? ? " (the server requires a token and none is configured)" : ""
          raise AuthenticationError.new("#{@addr} rejected the handshake: #{name}#{hint}", w.code)
        end
        raise ConnectionError, "#{@addr} rejected the connection: #{name}"
      end
      if !token.empty? && !Wire.proof_equal?(Wire.server_proof(token, role, nonce, hello.nonce), w.proof)
        raise AuthenticationError, "#{@addr} did not prove the token (an impostor, or a server without this token)"
      end

      w.max_inflight = 1 if w.max_inflight.zero?
      w
    end

    def failed(err)
      @cfg_err = err.is_a?(AuthenticationError) || err.is_a?(TLSError) ? err : nil
      n = @mu.synchronize { @failures += 1 }
      @client.connection_failed(self, err, n)
    end

    def up(sock, welcome)
      @mu.synchronize do
        return false if @client.closed?

        @cfg_err = nil
        @features = nil
        @state = :up
        @sock = sock
        @ever_up = true
        @failures = 0
        @max_inflight = [welcome.max_inflight, 1 << 30].min
        @inflight = 0
        @next_id = 0
        @seq = 0
        @taken = 0
        @wbuf = String.new(encoding: Encoding::BINARY)
        @corked = false
      end
      @client.changed
      # ask for the server's features; the answer sends the label (§12.1, §12.3)
      enqueue(Call.new(Wire::OP_PING, "".b, Wire::PING_FEATURES, owner: :setup))
      true
    end

    # Reads into one reused buffer and dispatches every complete answer of
    # each read; only a frame cut by the read boundary is copied.
    def read_loop(sock)
      chunk = String.new(capacity: READ_SIZE, encoding: Encoding::BINARY)
      rest = String.new(encoding: Encoding::BINARY)
      loop do
        sock.readpartial(READ_SIZE, chunk)
        if rest.empty?
          off = dispatch(chunk)
          rest << chunk.byteslice(off..) if off < chunk.bytesize
        else
          rest << chunk
          off = dispatch(rest)
          rest = off == rest.bytesize ? rest.clear : rest.byteslice(off..)
        end
      end
    rescue Wire::DecodeError => e
      kill(sock, ProtocolError.new("#{@addr} broke the protocol: #{e.message}"))
    rescue ProtocolError => e
      kill(sock, e)
    rescue StandardError => e
      kill(sock, e)
    end

    # Matches every complete response in buf to its pending call and
    # completes them after unlocking; returns the bytes consumed.
    def dispatch(buf)
      done = @done_buf
      off = 0
      freed = false
      err = nil
      @mu.synchronize do
        loop do
          resp, n = Wire.parse_response(buf, off)
          break if n.zero?

          off += n
          call = @pending[resp.req_id]
          next if call.nil? # not ours (e.g. a duplicate after a withdrawn call)
          next if resp.status == Wire::STATUS_ERROR && resp.code == Wire::CODE_DUPLICATE_REQ_ID # §2.1

          unless Wire::FITS.fetch(call.op).include?(resp.status)
            err = ProtocolError.new("#{@addr} answered #{call.op.chr} with #{resp.status.chr}")
            break
          end
          @pending.delete(resp.req_id)
          call.pending = false
          if call.counts
            @inflight -= 1
            freed = true
          end
          call.response = resp
          done << call
        end
      end
      done.each { |c| @client.complete(c) }
      # After the wake-ups, so the writer queues for the GVL behind those callers.
      @client.cork if done.size > 1
      done.clear
      @client.changed if freed
      raise err if err

      off
    end

    # Takes sock down (once) and completes every pending call as unsent or lost.
    def kill(sock, cause)
      calls = nil
      @mu.synchronize do
        return if @state != :up || !@sock.equal?(sock)

        @state = :down
        @sock = nil
        calls = @pending.values
        @pending = {}
        calls.each do |c|
          c.pending = false
          c.fail = c.seq < @taken ? :lost : :unsent
          c.fail_err = cause
        end
        @inflight = 0
        @wbuf = String.new(encoding: Encoding::BINARY)
        @corked = false
      end
      close_quietly(sock)
      @client.connection_lost(self, cause, calls.size) unless cause.is_a?(ClosedError)
      calls.each { |c| @client.complete(c) }
      @client.changed
    end

    def close_quietly(sock)
      sock&.close
    rescue StandardError
      nil
    end
  end
end
