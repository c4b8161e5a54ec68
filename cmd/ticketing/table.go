package main

import (
	"bytes"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// renderTable writes rows under header as a borderless, left-aligned table
// (columns separated by spaces, like kubectl), so it reads well and still
// splits with awk. This is the only file that imports tablewriter: commands
// build (header, rows) apart from it, and tests check those.
func renderTable(w io.Writer, header []string, rows [][]string) error {
	var buf bytes.Buffer
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{ShowHeader: tw.Off, ShowFooter: tw.Off, BetweenRows: tw.Off, BetweenColumns: tw.Off},
				Lines:      tw.Lines{ShowTop: tw.Off, ShowBottom: tw.Off, ShowHeaderLine: tw.Off, ShowFooterLine: tw.Off},
			},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
		tablewriter.WithPadding(tw.Padding{Left: "", Right: "  ", Overwrite: true}),
	)
	if len(header) > 0 {
		hdr := make([]any, len(header))
		for i, h := range header {
			hdr[i] = h
		}
		t.Header(hdr...)
	}
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	// The padding leaves trailing blanks; drop them.
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(buf.Bytes(), []byte("\n")) {
		nl := bytes.HasSuffix(line, []byte("\n"))
		out.Write(bytes.TrimRight(line, " \n"))
		if nl {
			out.WriteByte('\n')
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}
