package main

import (
	"fmt"
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
		return 0, fmt.Errorf("empty duration")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f*float64(time.Second) > math.MaxInt64 {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want Go syntax (1m30s, 250ms) or seconds (2.5)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
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

// getDuration reads a duration flag (or its TICKETING_* variable) from v.
// The variable is checked here, since only the flag is checked at parse time.
func getDuration(v *viper.Viper, name string) (time.Duration, error) {
	d, err := parseDuration(v.GetString(name))
	if err != nil {
		return 0, usageError("--%s: %v", name, err)
	}
	return d, nil
}
