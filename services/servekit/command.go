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

// UseCluster has the API server behind authn and authz review callers'
// tokens (--auth=token) and readers of /metrics (--metrics-auth=token).
func (p *Process) UseCluster(authn authenticationv1client.AuthenticationV1Interface, authz authorizationv1client.AuthorizationV1Interface) {
	p.flags.TokenReviews = authn.TokenReviews()
	p.flags.SigningKeys = signingKeys(authn.RESTClient())
	p.flags.MetricsClients = MetricsClients{Authentication: authn, Authorization: authz}
}

// NewServer builds the server the common flags describe: extra options
// (interceptors, credentials) are appended to the defaults.
func (p *Process) NewServer(extra ...grpc.ServerOption) (*Server, error) {
	return newServer(p.flags, p.Log, extra...)
}
