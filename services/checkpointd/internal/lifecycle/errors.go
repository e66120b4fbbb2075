package lifecycle

import (
	"errors"
	"fmt"
	"syscall"

	"nodeconfig.io/proto/nodeconfig/records"
)

// The lifecycle's own errors. Besides them, the store's errors
// (store.ErrNotFound, store.ErrConflict, store.ErrReferenced, and failures
// of the store itself) pass through as the store returns them.

// ErrRefused marks a change the records do not allow as they stand: a
// checkpoint that is not stored, a config not yet active or still soaking.
// Nothing changed; the error's text says why.
var ErrRefused = errors.New("refused by the records")

// ErrTooManyWatchers: every place for a records watch is taken.
var ErrTooManyWatchers = errors.New("too many watchers")

type refusal struct{ reason string }

func (r refusal) Error() string        { return r.reason }
func (r refusal) Is(target error) bool { return target == ErrRefused }

func refusedf(format string, args ...any) error {
	return refusal{fmt.Sprintf(format, args...)}
}

// WriteFailedError is a target file that could not be written or removed.
// The node has recorded it as the early error records.ReasonWriteFailed, so that
// its status says why its config is not in place.
type WriteFailedError struct {
	// Reason is the early error recorded: records.ReasonWriteFailed, or
	// records.ReasonNodeFilesUnreadable for the node's own files it cannot read.
	Reason string
	// Message says what could not be written where, and why.
	Message string
	// Err is the file system's error.
	Err error
}

func (e *WriteFailedError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = records.ReasonWriteFailed
	}
	return fmt.Sprintf("%s (recorded as an early error %s; retry)", e.Message, reason)
}

func (e *WriteFailedError) Unwrap() error { return e.Err }

// NoSpace reports whether the disk or the quota is full: a retry succeeds
// only once space is freed.
func (e *WriteFailedError) NoSpace() bool {
	return errors.Is(e.Err, syscall.ENOSPC) || errors.Is(e.Err, syscall.EDQUOT) || errors.Is(e.Err, syscall.EFBIG)
}

// TargetError is a target file that cannot be brought in line with the
// active record while nothing is assigned: a fault of the node, neither of
// the request nor of the store. It does not unwrap, so that a checkpoint
// missing underneath never reads as a missing checkpoint of the request.
type TargetError struct{ Err error }

func (e *TargetError) Error() string { return e.Err.Error() }
