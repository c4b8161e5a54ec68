package client

import (
	"os"
	"strconv"

	"github.com/ticketing/ticketing/client/wire"
)

// Connection labels (protocol.md §12.3): every connection of a Client tells
// the server (1.1) a short label, shown to operators in `locks` and `top`
// beside the connection's address. Labels are informational, never used for
// authorization.

// Version is this client's version, in the default label.
const Version = "1.1.0"

// WithLabel sets the whole label of the client's connections (at most 64
// bytes of UTF-8 without control characters; a longer one is cut at a
// character boundary). An empty label sends none.
func WithLabel(label string) Option {
	return func(c *config) { c.label = &label }
}

// WithAppName puts an application name in front of the default label:
// "<app> <host>/<pid> go/<version>".
func WithAppName(name string) Option { return func(c *config) { c.appName = name } }

// DefaultLabel is the label a Client sends without WithLabel:
// "<host>/<pid> go/<version>", with "<app> " in front when app is not empty
// (e.g. "web-1/4242 go/1.1.0"), cut to 64 bytes.
func DefaultLabel(app string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	l := host + "/" + strconv.Itoa(os.Getpid()) + " go/" + Version
	if app != "" {
		l = app + " " + l
	}
	return wire.CutLabel(l)
}

// connLabel is the label the client's connections send ("" for none).
func (c *config) connLabel() string {
	if c.label != nil {
		l := wire.CutLabel(*c.label)
		if !wire.ValidLabel([]byte(l)) {
			return ""
		}
		return l
	}
	return DefaultLabel(c.appName)
}
