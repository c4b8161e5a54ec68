# frozen_string_literal: true

require_relative "lib/ticketing/version"

Gem::Specification.new do |s|
  s.name = "ticketing-client"
  s.version = Ticketing::VERSION
  s.summary = "Official Ruby client of the Ticketing distributed lock server"
  s.description = "Blocking, thread-safe client for Ticketing: FIFO locks with leases and fencing " \
                  "tokens over the v1 binary protocol. Standard library only. require \"ticketing\"."
  s.authors = ["The Ticketing authors"]
  s.license = "Apache-2.0"
  s.homepage = "https://github.com/ticketing/ticketing"
  s.required_ruby_version = ">= 3.1"
  # The library and its docs only: no tests, testkit driver or CI scripts (issue 32 P2).
  s.files = Dir["lib/**/*.rb"] + %w[README.md CHANGELOG.md]
  s.require_paths = ["lib"]
  s.metadata = {
    "homepage_uri" => "https://github.com/ticketing/ticketing",
    "source_code_uri" => "https://github.com/ticketing/ticketing/tree/main/client/ruby",
    "documentation_uri" => "https://github.com/ticketing/ticketing/tree/main/client/ruby#readme",
    "changelog_uri" => "https://github.com/ticketing/ticketing/blob/main/client/ruby/CHANGELOG.md",
    "bug_tracker_uri" => "https://github.com/ticketing/ticketing/issues",
    "rubygems_mfa_required" => "true"
  }
end
