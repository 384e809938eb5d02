package step

// Output is where the text of a run's model call goes as the model writes
// it: the server's watch hub, which streams it to the run's watchers. It is
// not an event: nothing of it is stored, and a fold or a replay never sees
// it. Its methods are called on the step's goroutine and must not block.
type Output interface {
	// Streams says whether runID's next model call is to stream: someone
	// watches the run's output. A call nobody watches is sent without
	// streaming, as the provider's plain call.
	Streams(runID string) bool
	// Begin says an attempt of a model call of run runID is sent: its text
	// starts over.
	Begin(runID string, call OutputCall)
	// Write is text the model wrote in the attempt begun last, in order.
	Write(runID, text string)
	// End says the attempt returned (with a reply or not).
	End(runID string)
}

// OutputCall names an attempt of a model call.
type OutputCall struct {
	// Requested is the sequence of the call's model_requested event.
	Requested uint64
	// Step is the call's step; Attempt is 1, or 2 for its one retry.
	Step, Attempt uint32
	// Resumed says the call repeats one whose reply was lost: a crash, or
	// the run's deadline, cut it.
	Resumed bool
}
