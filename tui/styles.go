package tui

import "charm.land/lipgloss/v2"

// styles are the dashboard's lipgloss styles. They render full colour;
// bubbletea downsamples it to the terminal's colour profile (and tests strip
// it for plain-text golden files).
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

// newStyles returns the styles for a dark or a light terminal background
// (dark until the terminal says otherwise: tea.BackgroundColorMsg).
func newStyles(dark bool) styles {
	lightDark := lipgloss.LightDark(dark)
	fg := func(onLight, onDark string) lipgloss.Style {
		return lipgloss.NewStyle().Foreground(lightDark(lipgloss.Color(onLight), lipgloss.Color(onDark)))
	}
	red := fg("#C00000", "#FF5F5F")
	green := fg("#007F00", "#5FD75F")
	yellow := fg("#8A6D00", "#FFD75F")
	magenta := fg("#8700AF", "#D787FF")
	cyan := fg("#005F87", "#5FD7FF")
	return styles{
		title:    lipgloss.NewStyle().Bold(true).Reverse(true),
		section:  cyan,
		header:   lipgloss.NewStyle().Bold(true).Faint(true),
		up:       green,
		down:     red.Bold(true),
		warn:     yellow.Bold(true),
		faint:    lipgloss.NewStyle().Faint(true),
		spark:    cyan,
		evDown:   red,
		evUp:     green,
		evSpike:  yellow,
		evLeader: magenta,
		evInfo:   lipgloss.NewStyle(),
		prompt:   lipgloss.NewStyle().Bold(true),
	}
}
