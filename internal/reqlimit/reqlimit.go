// Package reqlimit says what a request may cost the server before it is
// decoded, on every port: how long its wire form may be, request by
// request, and what decoding it would allocate, by an estimate made from
// its bytes without decoding them.
//
// Decoding materialises far more than the wire holds: an empty
// google.protobuf.Value is two bytes on the wire and about a hundred in
// memory, and `{}` in JSON three bytes and about three hundred. A limit on
// the wire size alone therefore lets twenty 4 MiB requests of empty
// values hold gigabytes. So each face checks, before decoding, that the
// request is within its method's wire limit (WireLimit), estimates what
// its decoding allocates (Estimate, EstimateJSON), refuses it if that is
// more than the whole decoding budget, and holds its estimate in a Budget
// (a byte-weighted semaphore) until the call is answered. docs/operating.md
// (Request limits) gives the figures.
package reqlimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Wire limits by request, below --max-msg-bytes (never above it).
const (
	// SmallRequest bounds a request that names things and carries no
	// payload: a read, a list, a cancel, GetBlobs' 1,000 hashes. A ListRuns
	// with thousands of label filters fits; four megabytes of them does
	// not.
	SmallRequest = 128 << 10
	// contractRequest bounds a request carrying a contract (StartRun,
	// CreateSchedule): the contract's own limit (contractBytes, which a
	// test holds to contract.MaxBytes) and room for the rest.
	contractRequest = contractBytes + 64<<10
	contractBytes   = 2 << 20
	// textRequest bounds a request carrying a person's text of at most
	// 65,536 characters (ProvideInput, SteerRun).
	textRequest = 65536*utf8.UTFMax + 16<<10
)

// wireLimits are the requests allowed more than SmallRequest; 0 means
// the server's whole limit (--max-msg-bytes).
var wireLimits = map[protoreflect.FullName]int64{
	"rein.v1.StartRunRequest":       contractRequest,
	"rein.v1.CreateScheduleRequest": contractRequest,
	"rein.v1.ProvideInputRequest":   textRequest,
	"rein.v1.SteerRunRequest":       textRequest,
	// A revised proposal's arguments, and a whole run's export: as large
	// as the server takes.
	"rein.v1.DecideApprovalRequest": 0,
	"rein.v1.ImportRunRequest":      0,
}

// WireLimit is the most bytes a request of type name may take on the wire
// (protobuf encoded), on a server whose largest request is max bytes.
func WireLimit(name protoreflect.FullName, max int64) int64 {
	limit, ok := wireLimits[name]
	switch {
	case !ok:
		limit = SmallRequest
	case limit == 0:
		return max
	}
	return min(limit, max)
}

// Budget bounds what the requests being decoded may cost at once, by
// estimate: a byte-weighted semaphore.
type Budget struct {
	sem   *semaphore.Weighted
	total int64
}

// NewBudget is a budget of total bytes.
func NewBudget(total int64) *Budget {
	return &Budget{sem: semaphore.NewWeighted(total), total: total}
}

// Total is the budget's size: the most one request may cost.
func (b *Budget) Total() int64 { return b.total }

// ErrOverBudget is Acquire's answer to a cost larger than the whole
// budget, which no wait would make room for.
var ErrOverBudget = errors.New("reqlimit: the cost is over the whole budget")

// Acquire waits until n bytes are free in the budget (or ctx ends), takes
// them, and returns what gives them back, once however often it is
// called.
func (b *Budget) Acquire(ctx context.Context, n int64) (release func(), err error) {
	if n > b.total {
		return nil, ErrOverBudget
	}
	n = max(n, 1)
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }, nil
}

// TooLarge says why a request of type name, n bytes long, is refused
// over its limit, and what to do.
func TooLarge(name protoreflect.FullName, n, limit int64) string {
	what := "send a smaller one"
	if _, ok := wireLimits[name]; !ok {
		what = "send a smaller one: a request that names things (a read, a list, a cancel) carries no payload"
	} else if wireLimits[name] == contractRequest {
		what = fmt.Sprintf("a contract may be at most %d bytes: put large inputs in the workspace or behind a tool, and read them when needed", contractBytes)
	}
	return fmt.Sprintf("the request (%s) is %d bytes, over the %d this server accepts for it: %s", name, n, limit, what)
}

// TooDear says why a request of type name, n bytes long, whose decoding
// would cost about cost bytes, is refused over a budget of total bytes,
// and what to do.
func TooDear(name protoreflect.FullName, n, cost, total int64) string {
	return fmt.Sprintf("the request (%s, %d bytes) would take about %d MiB of memory to decode, over this server's limit of %d MiB for the requests it decodes at once: "+
		"a list of many small or empty values costs far more decoded than sent; send fewer, larger values, or put large inputs in the workspace or behind a tool",
		name, n, cost>>20, total>>20)
}

// Busy says why a request is refused when the budget stayed full while it
// waited.
func Busy(total int64) string {
	return fmt.Sprintf("the server is decoding as many large requests as it may at once (%d MiB by estimate); retry in a moment", total>>20)
}
