// Command ticketing is the Ticketing lock server and its operations toolkit:
// `serve` runs a node; `acquire`, `release` and `run` take locks from the
// shell; `status`, `locks`, `health`, `ping` and `top` watch a running
// service. See `ticketing --help` and README.md.
package main

import "os"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
