package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// `ticketing completion bash|zsh|fish` and the hidden `ticketing man`: both
// generated from the cobra tree, so they never drift from the commands.
// A command named "completion" replaces cobra's default (hidden) one.

func newCmdCompletion(fac *Factory) *cobra.Command {
	ios := fac.IO
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script",
		Long: `Print the completion script for bash, zsh or fish on stdout.

  bash:  ticketing completion bash > /etc/bash_completion.d/ticketing
         (needs the bash-completion package), or for this shell:
         source <(ticketing completion bash)
  zsh:   ticketing completion zsh > "${fpath[1]}/_ticketing"
         (with "autoload -U compinit; compinit" in ~/.zshrc)
  fish:  ticketing completion fish > ~/.config/fish/completions/ticketing.fish`,
		ValidArgs:             []string{"bash", "zsh", "fish"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(ios.Out, true)
			case "zsh":
				return root.GenZshCompletion(ios.Out)
			case "fish":
				return root.GenFishCompletion(ios.Out, true)
			}
			return usageError("completion: want bash, zsh or fish, got %q", args[0])
		},
	}
}

func newCmdMan(fac *Factory) *cobra.Command {
	ios := fac.IO
	cmd := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write the man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := fac.Config(cmd)
			if err != nil {
				return err
			}
			st := newSettings(cmd, v)
			dir := st.str("dir")
			if st.err != nil {
				return st.err
			}
			if dir == "" {
				return usageError("man: --dir is required")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // reproducible: no "Auto generated … on DATE"
			hdr := &doc.GenManHeader{
				Title:   "TICKETING",
				Section: "1",
				Source:  "Ticketing " + version,
				Manual:  "Ticketing Manual",
			}
			// The stamped build date (else SOURCE_DATE_EPOCH, else now), so a
			// release's pages do not change from one build to the next.
			if t, err := time.Parse(time.RFC3339, date); err == nil {
				hdr.Date = &t
			}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return err
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			n := 0
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".1") {
					n++
				}
			}
			fmt.Fprintf(ios.Out, "wrote %d man pages to %s\n", n, dir)
			return nil
		},
	}
	cmd.Flags().String("dir", "", "output directory")
	return cmd
}
