//go:build !failpoints

package failpoint

// Inject does nothing: this binary was built without the failpoints tag.
func Inject(string) {}
