package testkit

// SetPeerPort makes f the source of cluster nodes' peer ports until the
// returned restore is called (TestClusterStartRetriesATakenPeerPort).
func SetPeerPort(f func() (string, error)) (restore func()) {
	peerPort = f
	return func() { peerPort = freePort }
}

// FreePort is the default source of peer ports.
var FreePort = freePort
