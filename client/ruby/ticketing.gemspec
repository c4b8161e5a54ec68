# frozen_string_literal: true

require_relative "lib/ticketing/version"

Gem::Specification.new do |s|
  s.name = "ticketing"
  s.version = Ticketing::VERSION
  s.summary = "Official Ruby client of the Ticketing distributed lock server"
  s.description = "Blocking, thread-safe client for Ticketing: FIFO locks with leases and fencing " \
                  "tokens over the v1 binary protocol. Standard library only."
  s.authors = ["The Ticketing authors"]
  s.license = "Apache-2.0"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb"] + %w[README.md CHANGELOG.md]
  s.require_paths = ["lib"]
  s.metadata = { "rubygems_mfa_required" => "true" }
end
