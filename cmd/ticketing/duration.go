package main

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// parseDuration accepts Go syntax ("1m30s", "250ms") and plain seconds
// ("2.5", "10"), as flock's -w does. Negative values are refused.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty: want a duration such as 30s, 1m30s, 250ms or 2.5 (seconds)")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f*float64(time.Second) > math.MaxInt64 {
			return 0, errors.New("out of range: want a duration such as 30s, 1m30s, 250ms or 2.5 (seconds)")
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 30s, 1m30s, 250ms or 2.5 (seconds)")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// durationValue is a pflag.Value that parses with parseDuration, so flags
// reject bad values at parse time (a usage error) and accept plain seconds.
type durationValue struct{ s string }

func (d *durationValue) String() string { return d.s }
func (d *durationValue) Type() string   { return "duration" }
func (d *durationValue) Set(s string) error {
	if _, err := parseDuration(s); err != nil {
		return err
	}
	d.s = s
	return nil
}

// durationFlag defines a duration flag (default def, "" for none).
func durationFlag(cmd *cobra.Command, name, short, def, usage string) {
	cmd.Flags().VarP(&durationValue{s: def}, name, short, usage)
}

// getDuration reads a duration setting (flag, TICKETING_* variable) strictly.
func getDuration(cmd *cobra.Command, v *viper.Viper, name string) (time.Duration, error) {
	st := newSettings(cmd, v)
	d := st.duration(name)
	return d, st.err
}
