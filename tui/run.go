package tui

import (
	"context"
	"errors"
	"io"

	tea "charm.land/bubbletea/v2"
)

// Run shows the dashboard on the terminal in/out (in the alternate screen)
// until q or ctrl+c is pressed, the process is interrupted, or ctx ends;
// all of these return nil. The terminal is restored on return. A nil in is
// standard input, or the controlling terminal when that is not one.
//
// The terminal is asked for its background colour (for the adaptive
// colours) by the model's Init, once bubbletea owns the input: the answer
// is a message like any other, and nothing waits for it. Colours are
// downsampled by bubbletea to what out supports.
func Run(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	cfg.Context = ctx
	m, err := New(cfg)
	if err != nil {
		return err
	}
	opts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithOutput(out),
		// The size when out is not a terminal (a terminal's own size wins).
		tea.WithWindowSize(defaultWidth, defaultHeight)}
	if in != nil {
		opts = append(opts, tea.WithInput(in))
	}
	p := tea.NewProgram(m, opts...)
	_, err = p.Run()
	switch {
	case err == nil, errors.Is(err, tea.ErrInterrupted):
		return nil
	case errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil && !errors.Is(err, tea.ErrProgramPanic):
		return nil
	}
	return err
}
