package tui

import (
	"context"
	"errors"
	"io"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// Run shows the dashboard on the terminal in/out (in the alternate screen)
// until q or ctrl+c is pressed, the process is interrupted, or ctx ends;
// all of these return nil. The terminal is restored on return. A nil in is
// standard input, or the controlling terminal when that is not one.
func Run(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	if cfg.Renderer == nil {
		cfg.Renderer = lipgloss.NewRenderer(out)
		// Ask the terminal for its background (for the adaptive colours)
		// now, before bubbletea owns the input.
		cfg.Renderer.HasDarkBackground()
	}
	cfg.Context = ctx
	m, err := New(cfg)
	if err != nil {
		return err
	}
	opts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithOutput(out), tea.WithAltScreen()}
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
