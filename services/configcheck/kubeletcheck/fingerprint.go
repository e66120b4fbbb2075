package kubeletcheck

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
)

// Fingerprint is a digest of the node's own files as the kubelet reads
// them at start: the --config file and every drop-in but Own, by path and
// content. It changes when one of them changes, appears or goes; an error
// is a NodeFilesError.
func (n NodeFiles) Fingerprint() (string, error) {
	files, err := n.dropIns(false)
	if err != nil {
		return "", &NodeFilesError{Err: err}
	}
	h := sha256.New()
	for _, path := range append(baseFiles(n.BaseConfig), files...) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", &NodeFilesError{Err: err}
		}
		// Lengths first, so that no two file sets hash alike by shifting
		// bytes from one name or content to the next.
		fmt.Fprintf(h, "%d:%s%d:", len(path), path, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
