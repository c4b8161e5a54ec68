# frozen_string_literal: true

module Ticketing
  VERSION = "0.1.0"
end
