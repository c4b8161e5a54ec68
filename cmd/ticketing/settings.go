package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// settings reads the typed settings of one command from the merged flags,
// environment (TICKETING_<NAME>) and config file (serve --config), issue
// #28 item 1: every value goes through setting(), which parses it strictly
// and, when it does not parse, records an invalid configuration naming the
// setting, its source and the value (exit 2) — never the zero value that
// viper's GetInt/GetBool/GetDuration would make of it. The first error is
// kept in err; callers check it once after reading.
type settings struct {
	cmd *cobra.Command
	v   *viper.Viper
	err error
}

func newSettings(cmd *cobra.Command, v *viper.Viper) *settings {
	return &settings{cmd: cmd, v: v}
}

// envName is the environment variable of setting name.
func envName(name string) string {
	return "TICKETING_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// source says where name's value comes from (flag > env > config > default).
func (s *settings) source(name string) string {
	if s.cmd.Flags().Changed(name) {
		return "flag --" + name
	}
	if envSet(envName(name)) {
		return "environment " + envName(name)
	}
	if s.v.ConfigFileUsed() != "" && s.v.InConfig(name) {
		return fmt.Sprintf("config file %s key %s", s.v.ConfigFileUsed(), name)
	}
	return "default"
}

// setting is the one place a setting's value is parsed. A value that parse
// refuses records the error (the first one) and returns the zero value.
func setting[T any](s *settings, name string, parse func(string) (T, error)) T {
	raw := s.v.GetString(name)
	val, err := parse(raw)
	if err != nil && s.err == nil {
		s.err = usageError("invalid setting %s: %s %q: %v", name, s.source(name), raw, err)
	}
	return val
}

// failf records a setting that parses but is out of its range.
func (s *settings) failf(name, format string, a ...any) {
	if s.err == nil {
		s.err = usageError("invalid setting %s: %s %q: %s", name, s.source(name), s.v.GetString(name), fmt.Sprintf(format, a...))
	}
}

func (s *settings) str(name string) string { return s.v.GetString(name) }

func (s *settings) int(name string) int { return setting(s, name, parseInt) }

func (s *settings) uint64(name string) uint64 { return setting(s, name, parseUint64) }

func (s *settings) float(name string) float64 { return setting(s, name, parseFloat) }

func (s *settings) bool(name string) bool { return setting(s, name, parseBool) }

// duration is a non-negative duration: Go syntax or plain seconds.
func (s *settings) duration(name string) time.Duration { return setting(s, name, parseDuration) }

// signedDuration is a Go-syntax duration that may be negative.
func (s *settings) signedDuration(name string) time.Duration {
	return setting(s, name, func(v string) (time.Duration, error) {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n == 0 {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, errors.New("want a duration such as -1s or 250ms")
		}
		return d, nil
	})
}

// oneOf is a string setting with a fixed set of values (case-insensitive).
func (s *settings) oneOf(name string, values ...string) string {
	return setting(s, name, func(v string) (string, error) {
		l := strings.ToLower(strings.TrimSpace(v))
		for _, want := range values {
			if l == want {
				return l, nil
			}
		}
		return "", fmt.Errorf("want %s", strings.Join(values, " or "))
	})
}

// listenAddr is a host:port to listen on (host may be empty; port 0..65535).
// optional allows an empty value (the setting is off).
func (s *settings) listenAddr(name string, optional bool) string {
	return setting(s, name, func(v string) (string, error) {
		if v == "" && optional {
			return "", nil
		}
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return "", errors.New("want host:port")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", errors.New("want host:port with a port 0..65535")
		}
		return v, nil
	})
}

func (s *settings) logLevel(name string) slog.Level {
	return setting(s, name, func(v string) (slog.Level, error) {
		var l slog.Level
		switch strings.ToLower(v) {
		case "debug", "info", "warn", "error":
			return l, l.UnmarshalText([]byte(v))
		}
		return l, errors.New("want debug, info, warn or error")
	})
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

func parseUint64(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errors.New("want a whole number ≥ 0")
	}
	return n, nil
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("want a number")
	}
	return f, nil
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}
