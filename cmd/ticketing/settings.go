package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
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

// settingProbeKey is the context key of a settingProbe (tests only).
type settingProbeKey struct{}

// settingProbe, found in the command's context, is told of every setting
// the command reads and where its value came from; an error it returns is
// recorded as the setting's error. TestEverySettingReadFromEverySource uses
// it to prove that a setting is read from each of its sources.
type settingProbe func(name, source string) error

// setting is the one place a setting's value is parsed. A value that parse
// refuses records the error (the first one) and returns the zero value.
func setting[T any](s *settings, name string, parse func(string) (T, error)) T {
	raw := s.v.GetString(name)
	if p, ok := s.probe(); ok {
		if err := p(name, s.source(name)); err != nil && s.err == nil {
			s.err = err
		}
	}
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

func (s *settings) probe() (settingProbe, bool) {
	var ctx context.Context
	if s.cmd != nil {
		ctx = s.cmd.Context()
	}
	if ctx == nil {
		return nil, false
	}
	p, ok := ctx.Value(settingProbeKey{}).(settingProbe)
	return p, ok && p != nil
}

// str is a setting any string is valid for (a path, a name, a secret).
func (s *settings) str(name string) string {
	return setting(s, name, func(v string) (string, error) { return v, nil })
}

// secret is the value of setting name, or the trimmed contents of the file
// named by setting fileName when that is set (so secrets stay out of ps).
// A file that cannot be read or holds no token is an invalid setting
// naming fileName's source. Nothing is read once an earlier setting failed.
func (s *settings) secret(name, fileName string) string {
	val := s.str(name)
	file := s.str(fileName)
	if s.err != nil || file == "" {
		return val
	}
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		s.failf(fileName, "%v", err)
		return ""
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		s.failf(fileName, "the file is empty (or only whitespace): no token")
	}
	return tok
}

// existing is a setting naming a file that must exist ("" = not set).
func (s *settings) existingFile(name string) string {
	p := s.str(name)
	if s.err == nil && p != "" {
		if _, err := os.Stat(p); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			s.failf(name, "%v", err)
		}
	}
	return p
}

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
