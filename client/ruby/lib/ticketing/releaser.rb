# frozen_string_literal: true

module Ticketing
  # Retries releases in the background: compensations (grants that won the
  # race against a withdrawn acquire) and releases whose caller was
  # interrupted. A bounded queue; each job retried until 5 s after it was
  # requested, never longer (past that the lease is the safety net); attempts
  # are pipelined over the client's connections.
  class Releaser
    Job = Struct.new(:st, :call, :next_at, :done)

    def initialize(client)
      @client = client
      @mu = Mutex.new
      @cv = ConditionVariable.new
      @jobs = []
      @completed = []
      @count = 0
      @stopped = false
      @poked = false
      @thread = Thread.new { run }
      @thread.report_on_exception = false
    end

    # Queues a release; false when the queue is full or stopped.
    def submit(st)
      @mu.synchronize do
        return false if @stopped || @count >= Client::RELEASE_QUEUE

        @count += 1
        @jobs << Job.new(st, nil, Ticketing.now, false)
        @cv.signal
      end
      true
    end

    # Takes over an attempt in flight whose caller stopped waiting.
    def adopt(call, st)
      job = Job.new(st, call, nil, false)
      @mu.synchronize do
        if @stopped || @count >= Client::RELEASE_QUEUE
          call.conn&.reown(call, :dropped)
          return
        end
        return unless call.conn&.reown(call, :releaser, job)

        @count += 1
        @jobs << job
        @cv.signal
      end
    end

    def completed(call)
      @mu.synchronize do
        @completed << call
        @cv.signal
      end
    end

    def poke
      @mu.synchronize do
        @poked = true
        @cv.signal
      end
    end

    def stop
      @mu.synchronize do
        @stopped = true
        @cv.signal
      end
      @thread.join(2)
    end

    def size
      @mu.synchronize { @count }
    end

    private

    def run
      loop do
        completed, jobs, poked = @mu.synchronize do
          return if @stopped

          c = @completed
          @completed = []
          p = @poked
          @poked = false
          [c, @jobs.dup, p]
        end
        now = Ticketing.now
        wake_idle_jobs(jobs, now) if poked
        completed.each do |call|
          j = call.job
          j.call = nil
          next if j.done

          final, wait, err = @client.release_outcome(j.st, call)
          if final
            finish(j, err)
          else
            j.next_at = now + [wait, j.st.deadline - now - 0.01].min
          end
        end
        wake_at = nil
        jobs.each do |j|
          next if j.done

          if now >= j.st.deadline
            j.call&.conn&.reown(j.call, :dropped)
            finish(j, Indeterminate.new("release #{j.st.key.inspect}: not confirmed within #{Client::RELEASE_WINDOW}s"))
            next
          end
          if j.call.nil? && now >= j.next_at
            call = j.st.call(:releaser)
            call.job = j
            j.call = call
            if @client.try_enqueue(call) != :ok
              j.call = nil
              j.next_at = now + 0.05
            end
          end
          t = j.call.nil? && j.next_at < j.st.deadline ? j.next_at : j.st.deadline
          wake_at = t if wake_at.nil? || t < wake_at
        end
        @mu.synchronize do
          @jobs.reject!(&:done)
          next if @stopped || !@completed.empty? || @poked || @jobs.size > jobs.size

          left = wake_at ? wake_at - Ticketing.now : nil
          @cv.wait(@mu, left) if left.nil? || left.positive?
        end
      end
    end

    # A new leader is known: each job waiting out a back-off tries again now,
    # once per job (a leader that keeps changing cannot keep it busy).
    def wake_idle_jobs(jobs, now)
      jobs.each do |j|
        next unless j.call.nil? && !j.st.woken

        j.st.woken = true
        j.next_at = now
      end
    end

    def finish(job, err)
      job.done = true
      @mu.synchronize { @count -= 1 }
      if err
        @client.log(:warn, "ticketing: background release of #{job.st.key.inspect} failed: #{err.message}")
      else
        @client.log(:info, "ticketing: released #{job.st.key.inspect} in the background")
      end
    end
  end
end
