package main

import (
	"os"
	"strings"
	"testing"
)

// The README's complete program is this directory's main.go, byte for
// byte, inside a ```go fence: the two cannot drift apart.
func TestREADMEShowsMain(t *testing.T) {
	main, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "\n```go\n"+string(main)+"```\n") {
		t.Error("README.md does not show examples/quickstart/main.go verbatim in a ```go fence; copy the file into the README's program")
	}
}
