package tui

import "github.com/charmbracelet/lipgloss"

// styles are the dashboard's lipgloss styles, all from one renderer so that
// the colour profile is that of the output (and tests can force plain text).
type styles struct {
	title    lipgloss.Style // the top bar
	section  lipgloss.Style // section rules ("── keys ──")
	header   lipgloss.Style // table headers
	up       lipgloss.Style
	down     lipgloss.Style
	warn     lipgloss.Style // deep queues, cannot-grant, spikes
	faint    lipgloss.Style
	spark    lipgloss.Style
	evDown   lipgloss.Style
	evUp     lipgloss.Style
	evSpike  lipgloss.Style
	evLeader lipgloss.Style
	evInfo   lipgloss.Style
	prompt   lipgloss.Style
}

func newStyles(r *lipgloss.Renderer) styles {
	red := lipgloss.AdaptiveColor{Light: "#C00000", Dark: "#FF5F5F"}
	green := lipgloss.AdaptiveColor{Light: "#007F00", Dark: "#5FD75F"}
	yellow := lipgloss.AdaptiveColor{Light: "#8A6D00", Dark: "#FFD75F"}
	magenta := lipgloss.AdaptiveColor{Light: "#8700AF", Dark: "#D787FF"}
	cyan := lipgloss.AdaptiveColor{Light: "#005F87", Dark: "#5FD7FF"}
	return styles{
		title:    r.NewStyle().Bold(true).Reverse(true),
		section:  r.NewStyle().Foreground(cyan),
		header:   r.NewStyle().Bold(true).Faint(true),
		up:       r.NewStyle().Foreground(green),
		down:     r.NewStyle().Foreground(red).Bold(true),
		warn:     r.NewStyle().Foreground(yellow).Bold(true),
		faint:    r.NewStyle().Faint(true),
		spark:    r.NewStyle().Foreground(cyan),
		evDown:   r.NewStyle().Foreground(red),
		evUp:     r.NewStyle().Foreground(green),
		evSpike:  r.NewStyle().Foreground(yellow),
		evLeader: r.NewStyle().Foreground(magenta),
		evInfo:   r.NewStyle(),
		prompt:   r.NewStyle().Bold(true),
	}
}
