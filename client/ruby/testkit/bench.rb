# frozen_string_literal: true

# acquire+release pairs through one Ticketing::Client: 64 threads, then 1.
# Env: TICKETING_ADDR (host:port), TICKETING_TOKEN (may be empty), BENCH_SECONDS (default 5),
# BENCH_CALLERS (comma-separated caller counts, default 64,1).
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "json"
require "ticketing"

addr = ENV.fetch("TICKETING_ADDR")
token = ENV["TICKETING_TOKEN"].to_s
secs = Float(ENV.fetch("BENCH_SECONDS", "5"))
client = Ticketing::Client.new(addresses: addr.split(","), token: token.empty? ? nil : token)

ENV.fetch("BENCH_CALLERS", "64,1").split(",").map { |c| Integer(c) }.each do |callers|
  stop_at = Ticketing.now + secs
  counts = Array.new(callers, 0)
  t0 = Ticketing.now
  threads = callers.times.map do |i|
    Thread.new do
      key = "bench/ruby/#{i}"
      while Ticketing.now < stop_at
        client.acquire(key, lease: 10).release
        counts[i] += 1
      end
    end
  end
  threads.each(&:join)
  took = Ticketing.now - t0
  pairs = counts.sum
  puts "BENCH #{JSON.generate(lang: 'ruby', api: 'blocking', callers: callers, pairs: pairs, seconds: took.round(3),
                              pairs_per_sec: (pairs / took).round(1))}"
  $stdout.flush
end
client.close
