//go:build !unix

package configfile

// nonblock is 0 where there are no FIFOs to wait on.
const nonblock = 0
