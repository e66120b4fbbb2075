package servekit

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Command is one service binary. Its Main parses the flags every service
// has and the service's own, builds the process logger and hands both to
// the service, so that a binary's main declares only what is its own.
type Command struct {
	// Name names the binary in --help and in every log line.
	Name string
	// Usage says what the service does, for --help.
	Usage string
	// Listen and MetricsAddr are the defaults of --listen and --metrics-addr.
	Listen, MetricsAddr string
}

// Service is what a binary adds to the kit: its own flags, and the
// service they describe.
type Service interface {
	// Register adds the service's own flags to fs.
	Register(fs *flag.FlagSet)
	// Run builds the service once the flags are parsed and serves it
	// until it stops.
	Run(p *Process) error
}

// Process is a service binary whose flags are parsed.
type Process struct {
	Log   *slog.Logger
	flags commonFlags
}

// Main runs s as the command and exits non-zero with its error; --help
// prints the usage and exits 0.
func (c Command) Main(s Service) {
	if err := c.run(s); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func (c Command) run(s Service) error {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n%s\n\nFlags:\n", c.Name, c.Usage)
		fs.PrintDefaults()
	}
	p := &Process{}
	p.flags.Register(fs, c.Listen, c.MetricsAddr)
	s.Register(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := p.flags.Logger(c.Name)
	if err != nil {
		return err
	}
	p.Log = log
	return s.Run(p)
}

// NeedsCluster reports whether --auth or --metrics-auth asks for token
// reviews, which only the API server answers.
func (p *Process) NeedsCluster() bool {
	return p.flags.Auth == "token" || p.flags.MetricsAuth == "token"
}

// UseCluster has the API server behind cfg review callers' tokens
// (--auth=token) and readers of /metrics (--metrics-auth=token). Each
// side gets a client of its own, with its own client-side limit: a flood
// at the metrics port waits neither in front of the rollout's reviews nor
// in front of the service's own requests (statusd's Node patches).
func (p *Process) UseCluster(cfg *rest.Config) error {
	reviews, metrics, err := clusterClients(cfg)
	if err != nil {
		return err
	}
	p.flags.TokenReviews = reviews.TokenReviews()
	p.flags.SigningKeys = signingKeys(reviews.RESTClient())
	p.flags.MetricsClients = metrics
	return nil
}

// clusterClients are the gRPC guard's client and the metrics guard's, each
// with a limiter of its own.
func clusterClients(cfg *rest.Config) (authenticationv1client.AuthenticationV1Interface, MetricsClients, error) {
	reviews, err := authenticationv1client.NewForConfig(ownLimit(cfg, grpcReviewQPS, grpcReviewBurst, ""))
	if err != nil {
		return nil, MetricsClients{}, err
	}
	metricsCfg := ownLimit(cfg, metricsClientQPS, metricsClientBurst, " metrics-auth")
	authn, err := authenticationv1client.NewForConfig(metricsCfg)
	if err != nil {
		return nil, MetricsClients{}, err
	}
	authz, err := authorizationv1client.NewForConfig(metricsCfg)
	if err != nil {
		return nil, MetricsClients{}, err
	}
	return reviews, MetricsClients{Authentication: authn, Authorization: authz}, nil
}

// The clients' limits sit above the guards' budgets (authn's two of 5 a
// second, burst 10; metricsReviewRate and metricsReviewBurst), so that
// what a guard lets through is sent at once.
const (
	grpcReviewQPS      = 10
	grpcReviewBurst    = 20
	metricsClientQPS   = 2 * metricsReviewRate
	metricsClientBurst = 2 * metricsReviewBurst
)

// ownLimit is cfg with a client-side limiter of its own, and a user agent
// that says which side asks.
func ownLimit(cfg *rest.Config, qps float32, burst int, userAgentSuffix string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = qps, burst
	c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c.UserAgent += userAgentSuffix
	return c
}

// NewServer builds the server the common flags describe: extra options
// (interceptors, credentials) are appended to the defaults.
func (p *Process) NewServer(extra ...grpc.ServerOption) (*Server, error) {
	return newServer(p.flags, p.Log, extra...)
}
