package lifecycle

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// WatchRecords streams the current records, then every change.
func (s *Service) WatchRecords(_ *nodeconfigv1.WatchRecordsRequest, stream nodeconfigv1.CheckpointService_WatchRecordsServer) error {
	w, ok, err := s.store.Watch(s.maxWatchers)
	if err != nil {
		return storeError(err)
	}
	if !ok {
		return status.Errorf(codes.ResourceExhausted, "too many watchers (at most %d); retry later", s.maxWatchers)
	}
	defer w.Stop()
	s.metrics.watchers.Inc()
	defer s.metrics.watchers.Dec()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-w.Done():
			return status.Error(codes.Unavailable, "checkpointd is stopping")
		case recs := <-w.C:
			if err := stream.Send(&nodeconfigv1.WatchRecordsResponse{Records: recs}); err != nil {
				return err
			}
		}
	}
}
