// Package servekit wires a nodeconfig service process: gRPC on TCP and an
// optional unix socket with grpc.health.v1 and reflection, Prometheus
// /metrics and /healthz on a separate HTTP address, structured logs, and a
// graceful stop on SIGTERM/SIGINT. Every service binary uses it so that the
// three behave the same way for operators and for grpcurl.
package servekit

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"nodeconfig.io/services/servekit/authn"
)

// MaxMessageBytes bounds every gRPC message sent: a ConfigMap is at most
// 1 MiB, so 4 MiB leaves room for framing and a few records.
const MaxMessageBytes = 4 << 20

// MaxRequestBytes bounds every message received. No request carries more
// than one ConfigMap's data; a larger one is refused from its length
// prefix, before its body is buffered.
const MaxRequestBytes = 2 << 20

// MaxHeaderListBytes bounds the headers of a gRPC call and of a metrics
// request: a bearer token (authn.MaxTokenBytes at most) and the
// protocol's own.
const MaxHeaderListBytes = 8 << 10

// The bounds on the TCP port (with those of conns.go) keep memory below the
// agent's limit whoever connects (the NetworkPolicy keeps other callers out
// where the network enforces it); a connection that does not finish its
// handshake in time is dropped, and an idle one gives its place back.
const (
	maxStreamsPerConn = 32
	// A frame header or a small message; larger reads go around it.
	readBufferBytes = 4 << 10
	// The metrics port serves a scraper or two and the kubelet's probes
	// (a new connection each, two at a time at most).
	maxMetricsConns        = 16
	maxMetricsConnsPerHost = 4
	reservedMetricsConns   = 8
	handshakeTimeout       = 10 * time.Second
	maxConnectionIdle      = 2 * time.Minute
)

// commonFlags are the listening flags every service has.
type commonFlags struct {
	Listen string
	Socket string
	// SocketGroup, a numeric group id, may connect to Socket too.
	SocketGroup string
	MetricsAddr string
	LogFormat   string
	LogLevel    string
	Profiling   bool
	allowSet    bool

	// Auth is "none" (only loopback TCP allowed) or "token" (TLS and a
	// ServiceAccount token checked by TokenReview on TCP).
	Auth        string
	TLSCertFile string
	TLSKeyFile  string
	Audience    string
	Allowed     []string
	// TokenReviews is set by Process.UseCluster.
	TokenReviews authenticationv1client.TokenReviewInterface
	// MetricsAuth is "none" or "token" (/metrics and /debug/pprof over TLS
	// for users the cluster allows to get them).
	MetricsAuth string
	// MetricsClients is set by Process.UseCluster.
	MetricsClients MetricsClients
	// SigningKeys, when set with TokenReviews, reads the cluster's
	// ServiceAccount signing keys (the API server's /openid/v1/jwks): a
	// token they do not verify is refused before any review.
	SigningKeys func(context.Context) ([]byte, error)
}

// ReconcilerIdentity is who drives the agents in the shipped manifests.
const ReconcilerIdentity = "system:serviceaccount:nodeconfig-system:nodeconfig-reconciler"

// Register adds the common flags to fs with the service's defaults.
func (f *commonFlags) Register(fs *flag.FlagSet, defaultListen, defaultMetrics string) {
	fs.StringVar(&f.Listen, "listen", defaultListen, "TCP address for gRPC; empty disables TCP")
	fs.StringVar(&f.Socket, "socket", "", "unix socket path for gRPC (created with mode 0600); empty disables it")
	fs.StringVar(&f.SocketGroup, "socket-group", "", "numeric group id that may connect to --socket too (mode 0660, that group): the process must be in it (a pod's supplementalGroups) or hold CAP_CHOWN; empty: its owner alone")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", defaultMetrics, "HTTP address for /metrics and /healthz; empty disables it")
	fs.StringVar(&f.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.MetricsAuth, "metrics-auth", "none", "who may read /metrics and /debug/pprof: none, or token (over TLS with --tls-cert-file, for a ServiceAccount's bearer token whose user RBAC allows to get the path, as for the kubelet's /metrics; a token the cluster did not sign is refused unreviewed); /healthz stays open")
	fs.BoolVar(&f.Profiling, "profiling", false, "serve Go's pprof profiles under /debug/pprof/ on --metrics-addr")
	fs.StringVar(&f.Auth, "auth", "none", "who may call over TCP: none (only allowed on a loopback --listen) or token (TLS plus a ServiceAccount token verified by TokenReview); the unix socket is always trusted")
	fs.StringVar(&f.TLSCertFile, "tls-cert-file", "", "serving certificate (PEM) for TCP; reread every minute")
	fs.StringVar(&f.TLSKeyFile, "tls-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&f.Audience, "auth-audience", "nodeconfig-agent", "audience callers' tokens must be minted for (--auth=token)")
	f.Allowed = []string{ReconcilerIdentity}
	fs.Func("auth-allow", "user allowed to call over TCP with --auth=token, e.g. "+ReconcilerIdentity+" (repeatable; default that one)", func(v string) error {
		if v == "" {
			return errors.New("empty user")
		}
		if !f.allowSet {
			f.Allowed, f.allowSet = nil, true
		}
		f.Allowed = append(f.Allowed, v)
		return nil
	})
}

// Check refuses flag combinations that would serve unauthenticated callers
// from other hosts or cannot work.
func (f *commonFlags) Check() error {
	switch f.Auth {
	case "none":
		if f.Listen != "" && !loopback(f.Listen) {
			return fmt.Errorf("--listen %s is reachable from other hosts: use --auth=token with --tls-cert-file and --tls-key-file, or listen on 127.0.0.1", f.Listen)
		}
	case "token":
		if f.Listen != "" && (f.TLSCertFile == "" || f.TLSKeyFile == "") {
			return errors.New("--auth=token needs --tls-cert-file and --tls-key-file: tokens must not cross the network in clear text")
		}
		if f.Audience == "" || len(f.Allowed) == 0 {
			return errors.New("--auth=token needs --auth-audience and at least one --auth-allow")
		}
		if f.TokenReviews == nil {
			return errors.New("--auth=token needs a Kubernetes client for TokenReview (--kubeconfig or in-cluster)")
		}
	default:
		return fmt.Errorf("--auth %q: want none or token", f.Auth)
	}
	switch f.MetricsAuth {
	case "none":
	case "token":
		if f.TLSCertFile == "" || f.MetricsClients.Authentication == nil || f.MetricsClients.Authorization == nil {
			return errors.New("--metrics-auth=token needs --tls-cert-file and --tls-key-file (tokens must not cross the network in clear text) and a Kubernetes client")
		}
	default:
		return fmt.Errorf("--metrics-auth %q: want none or token", f.MetricsAuth)
	}
	if (f.TLSCertFile == "") != (f.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if f.SocketGroup != "" {
		if f.Socket == "" {
			return errors.New("--socket-group needs --socket")
		}
		if _, err := socketGID(f.SocketGroup); err != nil {
			return err
		}
	}
	return nil
}

// socketGID parses --socket-group. Only a number: the images have no
// group database to look a name up in.
func socketGID(group string) (int, error) {
	gid, err := strconv.Atoi(group)
	if err != nil || gid < 0 {
		return 0, fmt.Errorf("--socket-group %q: want a numeric group id", group)
	}
	return gid, nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Logger builds the process logger from the flags.
func (f *commonFlags) Logger(service string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", f.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch f.LogFormat {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f.LogFormat)
	}
	log := slog.New(h).With("service", service)
	// client-go logs through klog: one structured log, not two formats.
	klog.SetSlogLogger(log)
	return log, nil
}

// Server is a gRPC server with health, reflection and metrics, ready to have
// a service registered on it.
type Server struct {
	GRPC     *grpc.Server
	Health   *health.Server
	Registry *prometheus.Registry
	flags    commonFlags
	log      *slog.Logger
	keys     *authn.KeySet
	// conns bounds the TCP port's connections; calls that pass the
	// guard prove theirs.
	conns *connLimits
}

// newServer builds a server. Extra options (interceptors, credentials) are
// appended to the defaults.
func newServer(flags commonFlags, log *slog.Logger, extra ...grpc.ServerOption) (*Server, error) {
	if err := flags.Check(); err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	conns := newConnLimits(maxTCPConns, maxConnsPerHost, reservedConns)
	var guard *authn.Guard
	var keys *authn.KeySet
	if flags.SigningKeys != nil && (flags.Auth == "token" || flags.MetricsAuth == "token") {
		// One set for the gRPC and the metrics port: a token of an
		// unknown key costs one read of the keys, whichever port it hits.
		keys = authn.NewKeySet(flags.SigningKeys, log)
	}
	if flags.Auth == "token" {
		guard = authn.New(flags.TokenReviews, flags.Audience, flags.Allowed, registry).WithKeys(keys).
			OnAuthenticated(func(ctx context.Context) {
				if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
					conns.prove(p.Addr.String())
				}
			})
	}
	grpcMetrics := newGRPCMetrics()
	opts := append([]grpc.ServerOption{
		grpc.InTapHandle(guard.Tap()),
		// The metrics first: a call the guard refuses is counted with its code.
		grpc.ChainUnaryInterceptor(grpcMetrics.UnaryServerInterceptor(), guard.Unary()),
		grpc.ChainStreamInterceptor(grpcMetrics.StreamServerInterceptor(), guard.Stream()),
		// Headers are decoded before any check of the caller: a few KiB
		// hold a bearer token and gRPC's own, where grpc-go's default
		// lets a caller make the server decode 16 MiB.
		grpc.MaxHeaderListSize(MaxHeaderListBytes),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		// A connection's buffers are its own only while it reads or
		// writes: idle ones (most of them, and every one a caller holds
		// open to cost memory) keep a few KiB instead of 64.
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(readBufferBytes),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// An idle connection gives its slot back (the reconciler's pool
		// closes its own after 30 s; this bounds everyone else's).
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: maxConnectionIdle}),
	}, extra...)
	s := &Server{
		GRPC:     grpc.NewServer(opts...),
		Health:   health.NewServer(),
		Registry: registry,
		flags:    flags,
		log:      log,
		keys:     keys,
		conns:    conns,
	}
	healthpb.RegisterHealthServer(s.GRPC, s.Health)
	reflection.Register(s.GRPC)
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(), grpcMetrics)
	s.Registry.MustRegister(kubeCollectors()...)
	return s, nil
}

// Serve listens on the configured addresses and blocks until ctx is done or
// SIGTERM/SIGINT arrives, then stops gracefully. The service must be
// registered before calling it; its health is set to SERVING here.
func (s *Server) Serve(ctx context.Context, serviceName string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if s.keys != nil {
		go s.keys.Run(ctx)
	}

	// One watch of the serving certificate for the gRPC and metrics ports.
	var certs certprovider.Provider
	if s.flags.TLSCertFile != "" {
		var err error
		if certs, err = watchKeyPair(s.flags.TLSCertFile, s.flags.TLSKeyFile); err != nil {
			return err
		}
		defer certs.Close()
	}

	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	if s.flags.Listen != "" {
		l, err := net.Listen("tcp", s.flags.Listen)
		if err != nil {
			return fmt.Errorf("listen on --listen %s: %w", s.flags.Listen, err)
		}
		// Streams (health watches included) cost memory before any
		// authentication: bound the connections as well as their streams.
		l = s.conns.listen(l)
		if certs != nil {
			l = tls.NewListener(l, tlsFrom(certs, "h2"))
		}
		listeners = append(listeners, l)
	}
	if s.flags.Socket != "" {
		l, err := listenUnix(s.flags.Socket, s.flags.SocketGroup)
		if err != nil {
			closeAll()
			return err
		}
		listeners = append(listeners, l)
	}
	if len(listeners) == 0 {
		return errors.New("nothing to serve on: set --listen or --socket")
	}

	var metricsSrv *http.Server
	if s.flags.MetricsAddr != "" {
		ml, err := net.Listen("tcp", s.flags.MetricsAddr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listen on --metrics-addr %s: %w", s.flags.MetricsAddr, err)
		}
		// Like the gRPC port's: a request that passed the guard proves its
		// connection, and the rest (probes, scrapes refused, a header
		// bomb) share what is left.
		conns := newConnLimits(maxMetricsConns, maxMetricsConnsPerHost, reservedMetricsConns)
		ml = conns.listen(ml)
		var guard *metricsGuard
		if s.flags.MetricsAuth == "token" {
			// Bearer tokens must not cross the network in clear text
			// (Check makes sure the certificate is there).
			prove := func(r *http.Request) { conns.prove(r.RemoteAddr) }
			if guard, err = newMetricsGuard(s.flags.MetricsClients, s.keys, s.Registry, prove); err != nil {
				_ = ml.Close()
				closeAll()
				return err
			}
			ml = tls.NewListener(ml, tlsFrom(certs))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", guard.wrap(promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})))
		// /healthz mirrors gRPC health: kubelet gRPC probes cannot speak TLS,
		// so probes of a TLS port use this instead.
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			resp, err := s.Health.Check(r.Context(), &healthpb.HealthCheckRequest{})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				http.Error(w, "not serving", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		if s.flags.Profiling {
			mux.Handle("/debug/pprof/", guard.wrap(http.HandlerFunc(pprof.Index)))
			mux.Handle("/debug/pprof/profile", guard.wrap(http.HandlerFunc(pprof.Profile)))
			mux.Handle("/debug/pprof/symbol", guard.wrap(http.HandlerFunc(pprof.Symbol)))
			mux.Handle("/debug/pprof/trace", guard.wrap(http.HandlerFunc(pprof.Trace)))
		}
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
			// An idle scraper gives its connection back, and a request's
			// headers stay within what a bearer token needs.
			IdleTimeout: maxConnectionIdle, MaxHeaderBytes: MaxHeaderListBytes}
		go func() { _ = metricsSrv.Serve(ml) }()
		s.log.Info("serving metrics", "addr", ml.Addr().String())
	}

	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.Health.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)

	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		s.log.Info("serving gRPC", "network", l.Addr().Network(), "addr", l.Addr().String())
		go func(l net.Listener) { errc <- s.GRPC.Serve(l) }(l)
	}

	var err error
	select {
	case <-ctx.Done():
		s.log.Info("stopping")
	case err = <-errc:
	}
	s.Health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		// Watch streams never end by themselves; do not hang the process on them.
		s.GRPC.Stop()
	}
	if metricsSrv != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = metricsSrv.Shutdown(shutdownCtx)
	}
	if s.flags.Socket != "" {
		_ = os.Remove(s.flags.Socket)
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// listenUnix listens on path with mode 0600, replacing a stale socket left
// by a killed process but never a file of another kind. With a group (a
// numeric id, or empty for none) the socket is given to that group and
// then made 0660, in that order, so that nobody else may connect at any
// moment.
func listenUnix(path, group string) (net.Listener, error) {
	// sun_path holds 108 bytes including the terminating NUL.
	if len(path) > 107 {
		return nil, fmt.Errorf("--socket %s is %d bytes long; unix socket paths must be at most 107", path, len(path))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--socket %s exists and is not a socket; refusing to replace it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// The umask makes the socket 0600 from the first instant; a chmod after
	// listen would leave a window in which anyone could connect.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on --socket %s: %w", path, err)
	}
	if group == "" {
		return l, nil
	}
	gid, err := socketGID(group)
	if err == nil {
		// The owner may give a file to a group it is in without CAP_CHOWN.
		if err = os.Lchown(path, -1, gid); err != nil {
			err = fmt.Errorf("--socket-group %d: give %s to the group (the process must be in it, e.g. through the pod's supplementalGroups): %w", gid, path, err)
		} else if err = os.Chmod(path, 0o660); err != nil {
			err = fmt.Errorf("--socket-group %d: open %s to the group: %w", gid, path, err)
		}
	}
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// signingKeys reads the cluster's ServiceAccount signing keys through the
// API server's issuer discovery (readable by every ServiceAccount through
// the default binding system:service-account-issuer-discovery).
func signingKeys(c rest.Interface) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		return c.Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	}
}
