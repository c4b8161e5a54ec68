package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// systemd readiness and watchdog (sd_notify(3)), without libsystemd: one
// datagram per state change to the unix socket named by $NOTIFY_SOCKET.
// Outside systemd (no NOTIFY_SOCKET) every call is a no-op.

// sdNotify sends state (e.g. "READY=1") to the service manager. It returns
// false when there is no manager to tell or the datagram could not be sent.
func sdNotify(state string) bool {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return false
	}
	if sock[0] == '@' { // abstract namespace
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err = c.Write([]byte(state))
	return err == nil
}

// sdWatchdogInterval is the watchdog timeout systemd expects pings within
// (WatchdogSec=, passed as WATCHDOG_USEC), 0 when the watchdog is off or
// meant for another process (WATCHDOG_PID).
func sdWatchdogInterval() time.Duration {
	us, err := strconv.ParseInt(strings.TrimSpace(os.Getenv("WATCHDOG_USEC")), 10, 64)
	if err != nil || us <= 0 {
		return 0
	}
	if p := strings.TrimSpace(os.Getenv("WATCHDOG_PID")); p != "" {
		if pid, err := strconv.Atoi(p); err != nil || pid != os.Getpid() {
			return 0
		}
	}
	return time.Duration(us) * time.Microsecond
}

// systemdReady tells the service manager that serve is ready (READY=1 with
// a STATUS line) and, when the watchdog is on, pings it (WATCHDOG=1) at half
// the timeout until done is called (pings go on through the shutdown, which
// may take the hand-over budget). stopping sends STOPPING=1.
func systemdReady(log *slog.Logger, status string) (stopping, done func()) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return func() {}, func() {}
	}
	if !sdNotify("READY=1\nSTATUS=" + status + "\nMAINPID=" + strconv.Itoa(os.Getpid())) {
		log.Warn("sd_notify: could not tell the service manager that we are ready", "socket", os.Getenv("NOTIFY_SOCKET"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	if iv := sdWatchdogInterval(); iv > 0 {
		log.Info("systemd watchdog on", "timeout", iv, "ping_every", iv/2)
		go func() {
			t := time.NewTicker(iv / 2)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					sdNotify("WATCHDOG=1")
				}
			}
		}()
	}
	return func() { sdNotify("STOPPING=1\nSTATUS=shutting down") }, cancel
}
