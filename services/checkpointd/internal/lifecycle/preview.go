package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// PreviewConfig shows what the consumer would run with a payload in the
// place of the node's file, and whether activation would accept it. It
// writes nothing and takes no lock: it reads files the node keeps.
func (s *Service) PreviewConfig(ctx context.Context, req *nodeconfigv1.PreviewConfigRequest) (*nodeconfigv1.PreviewConfigResponse, error) {
	onDisk, err := os.ReadFile(s.target.Path())
	if errors.Is(err, fs.ErrNotExist) {
		onDisk, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.target.Path(), err)
	}
	resp := &nodeconfigv1.PreviewConfigResponse{}
	if req.GetValidator() != nodeconfigv1.Validator_VALIDATOR_KUBELET || s.kubelet == nil {
		resp.Files, resp.Current = []string{s.target.Path()}, string(onDisk)
		if err := s.judge(req.GetValidator(), req.GetPayload()); err != nil {
			resp.Refused = err.Error()
		} else {
			resp.Candidate = string(req.GetPayload())
		}
		return resp, nil
	}
	resp.Merged = true
	if now, err := s.kubelet.Effective(ctx, onDisk); err != nil {
		resp.Current = fmt.Sprintf("# the kubelet would refuse its files as they are: %v\n", err)
	} else if resp.Current, err = effectiveYAML(now.YAML()); err != nil {
		return nil, err
	}
	var candidate []byte // none: the local default, the file removed
	if len(req.GetPayload()) > 0 {
		candidate = req.GetPayload()
	}
	then, err := s.kubelet.Effective(ctx, candidate)
	if err != nil {
		resp.Refused = err.Error()
		return resp, nil
	}
	resp.Files = then.Files
	if resp.Candidate, err = effectiveYAML(then.YAML()); err != nil {
		return nil, err
	}
	return resp, nil
}

func effectiveYAML(b []byte, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("render the effective configuration: %w", err)
	}
	return string(b), nil
}
