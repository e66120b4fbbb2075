package authn

import (
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
)

// BenchmarkTapReviewedToken is what the tap costs a call whose token is
// already reviewed, as are all of a rollout's calls to an agent after its
// first: the token signed the way a kube-apiserver signs by default, the
// cluster's keys known.
func BenchmarkTapReviewedToken(b *testing.B) {
	cluster := newRSAClusterKey(b, "cluster-1")
	g, reviews := guardKnowing(b, cluster)
	const method = "/nodeconfig.v1.CheckpointService/Activate"
	token := cluster.sign(b, reconciler)
	if err := g.check(over("tcp", token), method); err != nil {
		b.Fatal(err)
	}
	ctx := over("tcp", token)
	md, _ := metadata.FromIncomingContext(ctx)
	info := &tap.Info{FullMethodName: method, Header: md}
	handle := g.Tap()
	for b.Loop() {
		if _, err := handle(ctx, info); err != nil {
			b.Fatal(err)
		}
	}
	if n := reviews.Load(); n != 1 {
		b.Fatalf("%d TokenReviews, want the first call's only", n)
	}
}
