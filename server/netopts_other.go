//go:build !linux

package server

import (
	"net"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist; keepalive
// still detects dead peers.
func setUserTimeout(*net.TCPConn, time.Duration) {}
