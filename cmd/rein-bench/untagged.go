//go:build !reinbench

// Command rein-bench measures rein against the disk it runs on. It needs
// the storage backends' raw ceilings, which only a build with the tag
// reinbench compiles in; built without it, it says how to build it.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "rein-bench: this binary was built without the reinbench tag, which compiles in what the bench compares rein against; build it with: go build -tags reinbench -o .bin/rein-bench ./cmd/rein-bench")
	os.Exit(2)
}
