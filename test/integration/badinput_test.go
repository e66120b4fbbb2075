package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/sim"
)

// Bad requests over real gRPC get a clear error and change nothing: a
// message beyond the server's receive limit, traversal in keys, missing
// fields, and a payload of 10,000 keys over the ConfigMap limit.
func TestCheckpointdRefusesBadRequestsOverTheWire(t *testing.T) {
	_, _, client := sim.LoneCheckpointd(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: "1", Key: "config.yaml"}
	manyKeys := map[string]string{"config.yaml": "a: 1"}
	for i := range 10000 {
		manyKeys[fmt.Sprintf("key-%05d", i)] = strings.Repeat("v", 100)
	}
	for name, tc := range map[string]struct {
		req      *nodeconfigv1.PutCheckpointRequest
		code     codes.Code
		contains string
	}{
		"beyond max receive size": {&nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"config.yaml": strings.Repeat("x", 5<<20)}}, codes.ResourceExhausted, "larger than max"},
		"10,000 keys over 1 MiB":  {&nodeconfigv1.PutCheckpointRequest{Source: src, Data: manyKeys}, codes.InvalidArgument, "1 MiB"},
		"path traversal key":      {&nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"config.yaml": "a", "../../etc/shadow": "x"}}, codes.InvalidArgument, "not a valid ConfigMap key"},
		"missing source":          {&nodeconfigv1.PutCheckpointRequest{Data: map[string]string{"config.yaml": "a"}}, codes.InvalidArgument, "source is required"},
		"NUL in uid":              {&nodeconfigv1.PutCheckpointRequest{Source: &nodeconfigv1.ConfigSource{Uid: "a\x00b", ResourceVersion: "1"}, Data: map[string]string{"k": "v"}}, codes.InvalidArgument, "NUL"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := client.PutCheckpoint(ctx, tc.req, grpc.MaxCallSendMsgSize(64<<20))
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.code, tc.contains)
			}
		})
	}
	_, err := client.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: "1", Key: "../x"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("SetAssigned with a traversal key: %v", err)
	}
	list, err := client.ListCheckpoints(ctx, &nodeconfigv1.ListCheckpointsRequest{})
	if err != nil || len(list.GetCheckpoints()) != 0 {
		t.Fatalf("bad input stored something: %v %v", list, err)
	}
	recs, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
	if err != nil || recs.GetRecords().GetRevision() != 0 {
		t.Fatalf("bad input changed the records: %v %v", recs, err)
	}
}
