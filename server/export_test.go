package server

// SetDraining flips the draining flag alone (without the rest of Shutdown),
// so tests can check how a draining server answers new requests and
// handshakes.
func SetDraining(s *Server, v bool) { s.draining.Store(v) }

// RaceEnabled tells the external tests whether the race detector is on.
const RaceEnabled = raceEnabled

// HandshakeEvictions is how many handshaking connections were closed to
// admit newer ones (the metric handshake_evictions_total).
func HandshakeEvictions(s *Server) uint64 { return s.handshakeEvictions.Load() }
