package deploy

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func printPlan(ios Streams, o *Options, spec *Spec) error {
	sec, err := genSecrets()
	if err != nil {
		return err
	}
	w := ios.Out
	what := "secrets redacted (--show-secrets prints the generated ones)"
	if o.ShowSecrets {
		what = "secrets shown: these tokens are written nowhere; --out writes a fresh set"
	}
	fmt.Fprintf(w, "# Plan: %d node(s), format %s. Nothing written (--out DIR writes it); %s.\n", len(spec.Nodes), spec.Format, what)
	for _, f := range spec.files(sec, "") {
		fmt.Fprintf(w, "\n==> OUT/%s (mode %04o%s) <==\n", f.Name, f.Mode, map[bool]string{true: ", secret", false: ""}[f.Secret])
		if o.ShowSecrets {
			w.Write(f.Content)
		} else {
			w.Write(f.Shown)
		}
	}
	if spec.TLSDir != "" {
		fmt.Fprintf(w, "\n==> OUT/tls/ (generated) <==\nca.crt, ca.key (0600), client.crt, client.key (0600)")
		for _, n := range spec.Nodes {
			fmt.Fprintf(w, ", %s.crt, %s.key (0600)", n.ID, n.ID)
		}
		fmt.Fprintf(w, "\ninstalled on each node under %s\n", spec.TLSDir)
	}
	return nil
}

func writeDeployment(ios Streams, o *Options, spec *Spec) error {
	outAbs, err := filepath.Abs(o.Out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(outAbs, "secrets"), 0o700); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	_ = os.Chmod(filepath.Join(outAbs, "secrets"), 0o700)
	existing, found, err := readSecrets(outAbs)
	if err != nil {
		return usageError("deploy: %v", err)
	}
	fresh, err := genSecrets()
	if err != nil {
		return err
	}
	if (o.Add != "" || o.Remove != "") && (existing.Client == "" || existing.Admin == "" || existing.Peer == "") {
		return usageError("%s/secrets lacks the deployment's tokens (every node shares them)", outAbs)
	}
	sec := fresh
	var kept []string
	if !o.Force {
		if existing.Client != "" {
			sec.Client = existing.Client
		}
		if existing.Admin != "" {
			sec.Admin = existing.Admin
		}
		if existing.Peer != "" {
			sec.Peer = existing.Peer
		}
		kept = found
	}
	files := spec.files(sec, outAbs)
	// Refuse before writing anything: an existing file with a different secret.
	if !o.Force {
		for _, f := range files {
			if !f.Secret {
				continue
			}
			old, err := os.ReadFile(filepath.Join(outAbs, f.Name))
			if err != nil {
				continue
			}
			olds, news := secretLines(old), secretLines(f.Content)
			for _, k := range sortedKeys(olds) {
				if nv, ok := news[k]; ok && nv != olds[k] {
					return usageError("deploy: %s holds a TICKETING_%s that differs from %s/secrets; not overwriting a secret (move the file away, or --force for fresh tokens everywhere)", filepath.Join(outAbs, f.Name), k, outAbs)
				}
			}
		}
	}
	var tlsNotes []string
	if spec.TLSDir != "" {
		tlsNotes, err = ensureTLS(filepath.Join(outAbs, "tls"), spec)
		if err != nil {
			return err
		}
		if spec.Format == FormatCompose {
			more, err := composeTLS(filepath.Join(outAbs, "tls"), spec)
			if err != nil {
				return err
			}
			tlsNotes = append(tlsNotes, more...)
		}
	}
	type result struct{ name, mode, state, note string }
	var res []result
	for _, f := range files {
		state, err := writeDeployFile(filepath.Join(outAbs, f.Name), f.Content, f.Mode, f.Secret)
		if err != nil {
			return err
		}
		if f.Secret && strings.HasPrefix(f.Name, "secrets/") && contains(kept, strings.TrimPrefix(f.Name, "secrets/")) {
			state = "kept"
		}
		res = append(res, result{f.Name, fmt.Sprintf("%04o", f.Mode), state, f.Note})
	}
	w := ios.Out
	fmt.Fprintf(w, "Wrote %s: %d node(s), format %s.\n", outAbs, len(spec.live()), spec.Format)
	for _, r := range res {
		fmt.Fprintf(w, "  %-22s %s  %-9s %s\n", r.name, r.mode, r.state, r.note)
	}
	for _, n := range tlsNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(kept) > 0 && !o.Force {
		fmt.Fprintf(ios.ErrOut, "deploy: kept the existing tokens in %s/secrets (--force replaces them)\n", outAbs)
	}
	if o.Force && len(found) > 0 {
		fmt.Fprintf(ios.ErrOut, "deploy: --force: replaced the tokens in %s/secrets; every node and client needs the new ones\n", outAbs)
	}
	for _, n := range spec.Nodes {
		if !n.Removed {
			continue
		}
		for _, name := range removedFiles(n.ID, spec) {
			path := filepath.Join(outAbs, name)
			if !exists(path) {
				continue
			}
			if n.ID != o.Remove {
				fmt.Fprintf(w, "  %-22s        stale     %s was removed: delete this file\n", name, n.ID)
				continue
			}
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("deploy: --remove %s: %w", n.ID, err)
			}
			fmt.Fprintf(w, "  %-22s        deleted   %s's file\n", name, n.ID)
		}
	}
	fmt.Fprintln(w)
	if o.Remove != "" {
		fmt.Fprintf(w, "Removed %s from the deployment: its files here are deleted and client.env no longer names it.\n", o.Remove)
		fmt.Fprintf(w, "On %s's host, once it is stopped, delete its copy of %s.env and its data directory: it must never start again under its id.\n", o.Remove, o.Remove)
		fmt.Fprintf(w, "`ticketing node remove --id %s` takes it out of the cluster.\n", o.Remove)
		fmt.Fprintf(w, "Reload the CLI settings: set -a; . %s/client.env; set +a\n", outAbs)
	} else {
		nextSteps(w, spec, outAbs, o.Add != "")
	}
	if o.ShowSecrets {
		fmt.Fprintf(w, "\nSecrets (--show-secrets):\n  client token: %s\n  admin token:  %s\n", sec.Client, sec.Admin)
		if spec.cluster() {
			fmt.Fprintf(w, "  peer token:   %s\n", sec.Peer)
		}
	}
	return nil
}

// removedFiles are the files of node id that a deployment in --out holds
// and that --remove deletes: its env file, its start script (shell format)
// and, with TLS, its key pair.
func removedFiles(id string, spec *Spec) []string {
	names := []string{id + ".env"}
	if spec.Format == FormatShell {
		names = append(names, id+".sh")
	}
	if spec.TLSDir != "" {
		names = append(names, filepath.Join("tls", id+".crt"), filepath.Join("tls", id+".key"))
	}
	return names
}

// writeDeployFile writes content with mode, atomically (a temp file in the
// same directory, renamed). It reports "new", "updated" or "unchanged".
func writeDeployFile(path string, content []byte, mode fs.FileMode, secret bool) (string, error) {
	state := "new"
	if old, err := os.ReadFile(path); err == nil {
		if bytes.Equal(old, content) {
			if err := os.Chmod(path, mode); err != nil {
				return "", err
			}
			return "unchanged", nil
		}
		state = "updated"
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil { // before any byte is written
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return "", err
	}
	if secret {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return "", err
		}
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return state, nil
}

func nextSteps(w io.Writer, s *Spec, out string, added bool) {
	fmt.Fprintln(w, "Next:")
	var nodes []Node
	for _, n := range s.live() {
		if !added || n.Join && n.ID == s.Nodes[len(s.Nodes)-1].ID {
			nodes = append(nodes, n)
		}
	}
	if s.TLSDir != "" && s.Format == FormatCompose {
		fmt.Fprintf(w, "  - nothing to copy for TLS: compose.yaml mounts %s/tls/ID (ca.crt, ID.crt, ID.key; never ca.key) read-only at %s in each node's container\n", out, containerTLSDir)
	} else if s.TLSDir != "" {
		fmt.Fprintf(w, "  - copy %s/tls/{ca.crt,ID.crt,ID.key} to %s on each node (keys mode 0600", out, s.TLSDir)
		if s.Format == FormatDocker {
			fmt.Fprintf(w, ", owned by uid %d for the container", containerUID)
		}
		fmt.Fprintln(w, ")")
	}
	switch s.Format {
	case FormatEnv:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: (set -a; . ./%s.env; set +a; exec %s serve)\n", n.Host, n.ID, s.binary())
		}
	case FormatShell:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: %s/%s.sh   (with %s.env next to it)\n", n.Host, out, n.ID, n.ID)
		}
	case FormatDocker:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: %s/%s.docker.sh   (with %s.env next to it; image %s)\n", n.Host, out, n.ID, n.ID, s.Image)
		}
	case FormatCompose:
		if added {
			fmt.Fprintf(w, "  - docker-compose -f %s/compose.yaml up -d %s\n", out, nodes[0].ID)
		} else {
			fmt.Fprintf(w, "  - docker-compose -f %s/compose.yaml up -d   (image %s: make image)\n", out, s.Image)
		}
	case FormatSystemd:
		fmt.Fprintf(w, "  - on every node: install -m 0644 %s/ticketing@.service /etc/systemd/system/ && systemctl daemon-reload\n", out)
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: install -D -m 0600 %s/%s.env /etc/ticketing/%s.env && systemctl enable --now ticketing@%s\n", n.Host, out, n.ID, n.ID, n.ID)
		}
	}
	fmt.Fprintf(w, "  - then, here: set -a; . %s/client.env; set +a; ticketing status\n", out)
	if added {
		n := nodes[0]
		fmt.Fprintf(w, "  - once %s runs, add it (admin): ticketing node add --id %s --peer-addr %s --client-addr %s --voter\n",
			n.ID, n.ID, s.peerAdvertise(n), s.advertise(n))
	}
}

// sortedKeys is for deterministic messages.
func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
