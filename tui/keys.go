package tui

import "charm.land/bubbles/v2/key"

// keyMap holds the dashboard's key bindings; it is also the help's source.
type keyMap struct {
	Quit     key.Binding
	Filter   key.Binding
	Sort     key.Binding
	Pause    key.Binding
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding
	Help     key.Binding
	Scroll   key.Binding // for the footer only: all the scrolling keys
}

func defaultKeys() keyMap {
	return keyMap{
		Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Filter:   key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Sort:     key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sort")),
		Pause:    key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause")),
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "scroll up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "scroll down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "space"), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("home/g", "first key")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("end/G", "last key")),
		Help:     key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Scroll:   key.NewBinding(key.WithKeys("up", "down", "pgup", "pgdown"), key.WithHelp("↑↓ pgup pgdn", "scroll")),
	}
}

// ShortHelp is the footer (help.KeyMap).
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Quit, k.Filter, k.Sort, k.Pause, k.Scroll, k.Help}
}

// FullHelp is the `?` screen (help.KeyMap).
func (k keyMap) FullHelp() [][]key.Binding {
	with := func(b key.Binding, desc string) key.Binding {
		b.SetHelp(b.Help().Key, desc)
		return b
	}
	return [][]key.Binding{
		{k.Quit, with(k.Filter, "filter by key prefix"), with(k.Sort, "cycle the sort order"), with(k.Pause, "pause/resume"), with(k.Help, "this help")},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom},
	}
}

// Keys while the filter prompt is open (matched by string, not bindings,
// since every printable key is text there).
const (
	keyEnter     = "enter"
	keyEsc       = "esc"
	keyBackspace = "backspace"
	keyCtrlU     = "ctrl+u"
	keyCtrlC     = "ctrl+c"
)
