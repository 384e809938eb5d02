package step

// What each model call is sent of the transcript: the parts it shares with
// the previous call, its prefix and cache, its token estimate, and the parts
// the store has not been given yet.

import "time"

// newInput is the next call's input as model_requested records it: how
// many parts it shares with the previous call's, and the hashes of the rest.
func (t *transcript) newInput() (carried uint32, blobs []string) {
	n := len(t.parts)
	return uint32(t.carried), t.parts[t.carried:n:n]
}

// requested notes that a model call was sent the current input, at;
// resumed, that it repeats a call whose reply was lost.
func (t *transcript) requested(at time.Time, resumed bool) {
	if !resumed {
		t.stepPrefix = t.carriedBytes
	}
	t.carried, t.carriedBytes, t.sent, t.lastCall = len(t.parts), t.size, t.size, at
}

// prefix is the next call's input that the previous call's begins with,
// byte for byte, in bytes and estimated tokens: what a provider's prompt
// cache can serve. A resumed call repeats the call whose reply was lost,
// so its prefix is that call's: what the previous step's call began, as a
// run never cut records it, since the provider may never have seen the
// lost call.
func (t *transcript) prefix(resumed bool) (bytes, tokens uint64) {
	n := t.carriedBytes
	if resumed {
		n = t.stepPrefix
	}
	return uint64(n), uint64(n) / 4
}

// cachedTokens is how much of the next call's input the provider is
// expected to hold in its cache: what it held after the latest call, or,
// when the input no longer begins with all of that call's (a compaction),
// no more than the prefix that is left.
func (t *transcript) cachedTokens() uint64 {
	if t.carriedBytes < t.sent {
		_, n := t.prefix(false)
		return min(t.cached, n)
	}
	return t.cached
}

// breakpoints are where a call asks the provider to cache its input, in
// parts from the start: after the head (the goal, inputs and tools) and
// after the last entry.
func (t *transcript) breakpoints() []uint32 {
	if len(t.parts) <= 1 {
		return []uint32{1}
	}
	return []uint32{1, uint32(len(t.parts))}
}

// reported notes the input tokens the provider reported for the latest
// call: what it counted beyond rein's estimate of that call's input is
// added to every later estimate, until the next report. A reply with no
// input count (0) is no report and changes nothing.
func (t *transcript) reported(input uint64) {
	if input == 0 {
		return
	}
	t.overcount = 0
	if est := bytesTokens(t.sent); input > est {
		t.overcount = input - est
	}
}

// loaded is called once a run's log has been read into the transcript: the
// parts an earlier call was sent were stored with its model_requested, so
// only the parts not sent yet are kept for the store.
func (t *transcript) loaded() {
	keep := make(map[string][]byte, len(t.parts)-t.carried)
	for _, h := range t.parts[t.carried:] {
		if b, ok := t.unstored[h]; ok {
			keep[h] = b
		}
	}
	t.unstored = keep
}

// takeBlobs returns the parts the store has not been given, and forgets
// them. The store keeps one copy of each, so giving one twice (after a
// restart) costs nothing but the bytes sent.
func (t *transcript) takeBlobs() map[string][]byte {
	if len(t.unstored) == 0 {
		return nil
	}
	b := t.unstored
	t.unstored = map[string][]byte{}
	return b
}

// estimateTokens is the next call's input tokens for a model that cannot
// count them: 4 bytes a token, plus the overcount of the latest call the
// provider reported on. That is the provider's count of the latest input
// plus the estimate of what the input gained since (or lost, to a
// compaction), and never less than 4 bytes a token: a provider that counts
// the same input consistently cannot be sent more than the estimate says,
// after its first report. The first call has no report, so its input is
// only estimated and can be low.
func (t *transcript) estimateTokens() uint64 { return bytesTokens(t.size) + t.overcount }

// bytesTokens is a rough token count of n bytes of input: 4 bytes a token.
func bytesTokens(n int) uint64 { return uint64(n+3) / 4 }
