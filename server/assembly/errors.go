package assembly

import (
	"errors"

	"github.com/reinhq/rein/internal/etcdflags"
	"github.com/reinhq/rein/internal/replica"
	"github.com/reinhq/rein/internal/storeformat"
)

// Kind says what a failed Start means to its caller.
type Kind int

const (
	// Unavailable: something the server needs does not answer or is
	// taken (a port, the store, etcd); the same Config may start later.
	Unavailable Kind = iota
	// Refused: the Config cannot be served as it is (a flag, a file, a
	// name another server holds, a store this build cannot serve); it
	// must change first.
	Refused
	// Failed: anything else, such as a directory that could not be made.
	Failed
)

// Error is an error of Start, with its Kind. Its message is the cause's.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// KindOf is the Kind of an error Start returned: Refused for a cause that
// a retry will not help (a store format this build cannot serve, a name
// taken, a wrong etcd flag), else the Kind Start gave it, else
// Unavailable.
func KindOf(err error) Kind {
	var ue *etcdflags.UsageError
	if errors.Is(err, storeformat.ErrIncompatible) || errors.Is(err, replica.ErrNameTaken) || errors.As(err, &ue) {
		return Refused
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Unavailable
}

func refused(err error) error     { return &Error{Kind: Refused, Err: err} }
func unavailable(err error) error { return &Error{Kind: Unavailable, Err: err} }
