package client

import "time"

// Unexported options for tests.

// withBackoff scales the reconnect schedule (default 0.1 s doubling to 3.2 s).
func withBackoff(base, ceiling time.Duration) Option {
	return func(c *config) { c.backoffBase, c.backoffCap = base, ceiling }
}

// withReconnectHook records every backoff delay a connection chooses.
func withReconnectHook(f func(cn *conn, attempt int, delay time.Duration)) Option {
	return func(c *config) { c.onReconnect = f }
}

// withBeforeWrite runs f in a connection's writer before it takes a batch.
func withBeforeWrite(f func(cn *conn)) Option {
	return func(c *config) { c.beforeWrite = f }
}

// withReleaseWindow shortens the 5 s release retry window.
func withReleaseWindow(d time.Duration) Option {
	return func(c *config) { c.releaseWindow = d }
}

// withAfterEnqueue runs f right after a request is queued on a connection
// (on the sender's goroutine).
func withAfterEnqueue(f func(c *call)) Option {
	return func(c *config) { c.afterEnqueue = f }
}
