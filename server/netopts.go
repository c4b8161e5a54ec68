package server

import (
	"net"
	"time"
)

// Liveness settings of protocol.md §1: keepalive probe after 15 s idle, every
// 5 s, 3 probes; a 30 s TCP user timeout.
var keepAliveConfig = net.KeepAliveConfig{
	Enable:   true,
	Idle:     15 * time.Second,
	Interval: 5 * time.Second,
	Count:    3,
}

const userTimeout = 30 * time.Second
