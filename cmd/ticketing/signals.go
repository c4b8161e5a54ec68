package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// signalSource starts delivering SIGINT, SIGTERM, SIGHUP and SIGQUIT (which
// would otherwise make the Go runtime dump and exit, leaving a child
// running) on the returned
// channel until stop is called. Commands take it from their options so
// that tests deliver signals without signalling the test process.
type signalSource func() (sigs <-chan os.Signal, stop func())

func osSignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	return ch, func() { signal.Stop(ch) }
}

// signalExit is the shell convention for "ended by signal s": 128+N
// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
func signalExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return ExitError
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return fmt.Sprint(s)
}

// sigWatch cancels a wait when a signal arrives. Stop it (it returns the
// signal, if one came) before signals must be handled otherwise.
type sigWatch struct {
	done chan struct{}
	got  chan os.Signal
}

func watchSignals(sigs <-chan os.Signal, cancel func()) *sigWatch {
	w := &sigWatch{done: make(chan struct{}), got: make(chan os.Signal, 1)}
	go func() {
		select {
		case s := <-sigs:
			w.got <- s
			cancel()
		case <-w.done:
			close(w.got)
		}
	}()
	return w
}

// stop ends the watch and returns the signal that arrived, or nil.
func (w *sigWatch) stop() os.Signal {
	close(w.done)
	return <-w.got
}

// ignoreSignal ignores s for the rest of the process.
func ignoreSignal(s os.Signal) { signal.Ignore(s) }
