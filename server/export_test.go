package server

// SetDraining flips the draining flag alone (without the rest of Shutdown),
// so tests can check how a draining server answers new requests and
// handshakes.
func SetDraining(s *Server, v bool) { s.draining.Store(v) }

// RaceEnabled tells the external tests whether the race detector is on.
const RaceEnabled = raceEnabled
