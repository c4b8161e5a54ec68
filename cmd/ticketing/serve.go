package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/cluster"
)

// ServeOptions is `ticketing serve` after flags, env and config are merged.
type ServeOptions struct {
	Config   server.Config
	LogLevel slog.Level
	// Ready, when set, is called with the bound address once serving (tests).
	Ready func(addr string)
}

const shutdownBudget = 5 * time.Second

// minRaftTimeout is hashicorp/raft's floor for its timeouts (ValidateConfig).
const minRaftTimeout = 5 * time.Millisecond

func newCmdServe(fac *Factory, runF func(context.Context, *IO, *ServeOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runServe
	}
	def := server.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a lock server",
		Long: `Run a single-node lock server.

Every flag is also an environment variable: TICKETING_<FLAG> with dashes as
underscores (e.g. TICKETING_MAX_LEASE=30m), and a key of the --config file.
A non-loopback --listen address without a token is refused unless --insecure.
SIGTERM/SIGINT drain and stop (waiting acquires answered "shutting down");
SIGHUP reloads the TLS certificate files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := serveOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	f := cmd.Flags()
	f.String("config", "", "config file (YAML, JSON or TOML) with the same keys as the flags")
	f.String("listen", def.Listen, "client listen address host:port")
	f.String("token", "", "client token (prefer --token-file or TICKETING_TOKEN)")
	f.String("token-file", "", "file holding the client token")
	f.String("admin-token", "", "admin token (default: the client token)")
	f.String("admin-token-file", "", "file holding the admin token")
	f.Bool("insecure", false, "allow a non-loopback listen address without a token")
	f.String("tls-cert", "", "TLS certificate file (PEM); enables TLS with --tls-key")
	f.String("tls-key", "", "TLS private key file (PEM)")
	f.String("tls-client-ca", "", "CA file (PEM) to require and verify client certificates")
	durationFlag(cmd, "max-lease", "", def.MaxLease.String(), "longest lease accepted")
	durationFlag(cmd, "max-wait", "", def.MaxWait.String(), "longest wait accepted")
	f.Int("max-keys", def.MaxKeys, "keys held or queued on (B OVERLOADED beyond)")
	f.Int("max-waiters-per-key", def.MaxWaitersPerKey, "queued acquires per key (B QUEUE_FULL beyond)")
	f.Int("max-waiters", def.MaxWaiters, "queued acquires in all (B OVERLOADED beyond)")
	f.Int("max-connections", def.MaxConnections, "client connections (REJECT OVERLOADED beyond)")
	f.Int("max-inflight", def.MaxInflight, "queued acquires per connection (B OVERLOADED beyond)")
	durationFlag(cmd, "handshake-timeout", "", def.HandshakeTimeout.String(), "time allowed for TLS and the AUTH frame")
	f.Int("admin-reserve", def.AdminReserve, "admin and peer connections allowed beyond --max-connections")
	f.Int("max-handshakes", def.MaxHandshakes, "connections in the handshake at once (beyond, new ones wait in the listen backlog; one silent for 1 s is closed)")
	f.Int("max-handshakes-per-addr", def.MaxHandshakesPerAddr, "connections in the handshake from one IP address")
	durationFlag(cmd, "frame-timeout", "", def.FrameTimeout.String(), "time a started request frame may take to complete")
	durationFlag(cmd, "write-timeout", "", def.WriteTimeout.String(), "time a connection's output may stay blocked before it is closed")
	f.Int("send-buffer", def.SendBuffer, "kernel send buffer per client connection, bytes (0: the kernel's autotuning)")
	f.String("data-dir", "", "directory for the fencing-token high-water mark (tokens then survive restarts)")
	f.String("metrics-listen", "", "Prometheus /metrics listen address (off when empty)")
	f.String("metrics-token", "", "bearer token /metrics requires (prefer --metrics-token-file)")
	f.String("metrics-token-file", "", "file holding the metrics token")
	f.String("log-level", "info", "debug, info, warn or error")
	f.String("node-id", def.NodeID, "node id (a cluster member's raft id)")
	// cluster (protocol.md §7; docs/operations.md)
	f.String("peers", "", "initial voters of a new cluster: id=peer_host:port,... (3 or 5; enables cluster mode)")
	f.Bool("bootstrap", false, "first start of a new cluster only: bootstrap it from --peers")
	f.Bool("join", false, "cluster mode without --peers: wait to be added with `ticketing node add`")
	f.String("peer-listen", "127.0.0.1:7471", "cluster peer port listen address")
	f.String("peer-advertise", "", "this node's peer address as other nodes dial it (default: its --peers entry)")
	f.String("advertise", "", "this node's client address that other nodes' M answers name (not a wildcard)")
	f.String("peer-token", "", "peer token (default: the admin token)")
	f.String("peer-token-file", "", "file holding the peer token")
	durationFlag(cmd, "max-clock-skew", "", (500 * time.Millisecond).String(), "clock skew bound between nodes; above it new grants fail closed")
	durationFlag(cmd, "raft-heartbeat-timeout", "", cluster.DefaultHeartbeatTimeout.String(), "raft heartbeat timeout: a follower hearing no leader this long starts an election")
	durationFlag(cmd, "raft-election-timeout", "", cluster.DefaultElectionTimeout.String(), "raft election timeout: a candidate without a majority this long tries again")
	durationFlag(cmd, "raft-leader-lease-timeout", "", cluster.DefaultLeaderLeaseTimeout.String(), "raft leader lease timeout: a leader without a quorum's answer this long steps down (at most the heartbeat timeout)")
	durationFlag(cmd, "transfer-timeout", "", (3 * time.Second).String(), "bound of the leadership hand-over on shutdown and transfer-leader")
	f.Duration("test-clock-offset", 0, "shift this node's wall clock (clock-health tests only)")
	_ = f.MarkHidden("test-clock-offset")
	return cmd
}

func serveOptions(fac *Factory, cmd *cobra.Command) (*ServeOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	cfg := server.DefaultConfig()
	st := newSettings(cmd, v)
	cfg.Listen = st.listenAddr("listen", false)
	cfg.ClientToken = st.secret("token", "token-file")
	cfg.AdminToken = st.secret("admin-token", "admin-token-file")
	cfg.Insecure = st.bool("insecure")
	cfg.TLSCertFile = st.str("tls-cert")
	cfg.TLSKeyFile = st.str("tls-key")
	cfg.TLSClientCAFile = st.str("tls-client-ca")
	cfg.MaxLease = st.duration("max-lease")
	cfg.MaxWait = st.duration("max-wait")
	cfg.MaxKeys = st.int("max-keys")
	cfg.MaxWaitersPerKey = st.int("max-waiters-per-key")
	cfg.MaxWaiters = st.int("max-waiters")
	cfg.MaxConnections = st.int("max-connections")
	cfg.MaxInflight = st.int("max-inflight")
	cfg.HandshakeTimeout = st.duration("handshake-timeout")
	cfg.AdminReserve = st.int("admin-reserve")
	cfg.MaxHandshakes = st.int("max-handshakes")
	cfg.MaxHandshakesPerAddr = st.int("max-handshakes-per-addr")
	cfg.FrameTimeout = st.duration("frame-timeout")
	cfg.WriteTimeout = st.duration("write-timeout")
	cfg.SendBuffer = st.int("send-buffer")
	cfg.DataDir = st.str("data-dir")
	cfg.MetricsListen = st.listenAddr("metrics-listen", true)
	cfg.MetricsToken = st.secret("metrics-token", "metrics-token-file")
	cfg.NodeID = st.str("node-id")
	if st.err != nil {
		return nil, st.err
	}
	cfg.PeerToken = st.secret("peer-token", "peer-token-file")
	join, bootstrap := st.bool("join"), st.bool("bootstrap")
	cc := &server.ClusterConfig{
		PeerListen:    st.listenAddr("peer-listen", false),
		PeerAdvertise: st.listenAddr("peer-advertise", true),
		Advertise:     st.listenAddr("advertise", true),
		ClockOffset:   st.signedDuration("test-clock-offset"),
		Settings: cluster.Settings{
			Bootstrap:          bootstrap,
			MaxClockSkew:       st.duration("max-clock-skew"),
			HeartbeatTimeout:   st.duration("raft-heartbeat-timeout"),
			ElectionTimeout:    st.duration("raft-election-timeout"),
			LeaderLeaseTimeout: st.duration("raft-leader-lease-timeout"),
			TransferTimeout:    st.duration("transfer-timeout"),
		},
	}
	if st.err != nil {
		return nil, st.err
	}
	ps := setting(st, "peers", func(v string) ([]cluster.Peer, error) {
		if v == "" {
			return nil, nil
		}
		ps, err := server.ParsePeers(v)
		if err != nil {
			return nil, errors.New(strings.TrimPrefix(err.Error(), server.ErrConfig.Error()+": peers: "))
		}
		return ps, nil
	})
	if st.err != nil {
		return nil, st.err
	}
	if len(ps) > 0 || join || bootstrap {
		if len(ps) == 1 {
			return nil, usageError("--peers: one voter is a single node; omit --peers to run without raft")
		}
		cc.Peers = ps
		cfg.Cluster = cc
		if cc := cfg.Cluster; min(cc.LeaderLeaseTimeout, cc.HeartbeatTimeout, cc.ElectionTimeout) < minRaftTimeout {
			return nil, usageError("raft timings: --raft-heartbeat-timeout, --raft-election-timeout and --raft-leader-lease-timeout must each be at least %v", minRaftTimeout)
		}
		if cc := cfg.Cluster; cc.LeaderLeaseTimeout > cc.HeartbeatTimeout || cc.ElectionTimeout < cc.HeartbeatTimeout {
			return nil, usageError("raft timings: want --raft-leader-lease-timeout (%v) ≤ --raft-heartbeat-timeout (%v) ≤ --raft-election-timeout (%v)",
				cc.LeaderLeaseTimeout, cc.HeartbeatTimeout, cc.ElectionTimeout)
		}
		if cfg.Cluster.Advertise == "" {
			cfg.Cluster.Advertise = cfg.Listen
		}
	}
	cfg.Version = versionString()
	lvl := st.logLevel("log-level")
	if st.err != nil {
		return nil, st.err
	}
	if err := cfg.Validate(); err != nil {
		return nil, withExit(ExitUsage, err)
	}
	return &ServeOptions{Config: cfg, LogLevel: lvl}, nil
}

func runServe(ctx context.Context, ios *IO, opts *ServeOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.New(slog.NewTextHandler(ios.ErrOut, &slog.HandlerOptions{Level: opts.LogLevel}))
	cfg := opts.Config
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		if errors.Is(err, server.ErrConfig) {
			return withExit(ExitUsage, err)
		}
		return err
	}
	log.Info("serving", "addr", srv.Addr(), "tokens", cfg.ClientToken != "", "tls", cfg.TLSCertFile != "",
		"metrics", srv.MetricsAddr(), "data_dir", cfg.DataDir, "version", cfg.Version)
	tuneServeMemory()
	if cfg.Cluster != nil {
		log.Info("cluster member", "node_id", cfg.NodeID, "peer_addr", srv.PeerAddr(), "advertise", cfg.Cluster.Advertise,
			"voters", len(cfg.Cluster.Peers), "bootstrap", cfg.Cluster.Bootstrap)
	}
	if opts.Ready != nil {
		opts.Ready(srv.Addr())
	}
	// systemd Type=notify: READY=1 once serving, watchdog pings (sdnotify.go).
	sdStopping, sdDone := systemdReady(log, "serving on "+srv.Addr())
	defer sdDone()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			if err := srv.ReloadTLS(); err != nil {
				log.Error("tls reload failed; keeping the previous certificate", "err", err)
			} else if cfg.TLSCertFile != "" {
				log.Info("tls certificate reloaded")
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	sdStopping()
	log.Info("shutting down", "budget", shutdownBudget)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
