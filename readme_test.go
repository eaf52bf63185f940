package corral_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// The README's Quick start is a complete program whose main is the body of
// Example (which go test runs against a real Redis), with the test server's
// address replaced by "localhost:6379": the two must not drift apart.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	readmetest.Program(t, "README.md", "Quick start", "example_test.go")
}

// The README's "Many keys at once" shows the body of ExampleCache_FetchMany
// (which go test runs against a real Redis), unindented.
func TestReadmeFetchMany(t *testing.T) {
	t.Parallel()
	readmetest.Snippet(t, "README.md", "### Many keys at once: FetchMany", "example_batch_test.go", "ExampleCache_FetchMany")
}

// The README's "Values that set their own TTL" shows the body of
// ExampleCache_FetchEntry (which go test runs against a real Redis),
// unindented.
func TestReadmeFetchEntry(t *testing.T) {
	t.Parallel()
	readmetest.Snippet(t, "README.md", "### Values that set their own TTL: FetchEntry", "example_entry_test.go", "ExampleCache_FetchEntry")
}

// The Quick start's commands, run as the README words them in a new module
// (the clone's path, ../corral there, is this repository's), get the
// library, and the Quick start's program builds against it: the way to use
// corral before it is on the module proxy works.
func TestReadmeQuickStartFromAClone(t *testing.T) {
	text, ok := readmetest.Between(readmetest.Read(t, "README.md"), "\n## Quick start\n", "\n## ")
	if !ok {
		t.Fatal("README.md: no Quick start")
	}
	commands, ok := readmetest.Between(text, "```sh\n", "```")
	if !ok {
		t.Fatal("the Quick start has no commands")
	}
	program, ok := readmetest.Between(text, "```go\n", "```")
	if !ok {
		t.Fatal("the Quick start has no program")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("go", "mod", "init", "example.com/app")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	var ran int
	for _, line := range strings.Split(commands, "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(strings.ReplaceAll(line, "../corral", repo))
		if len(fields) == 0 {
			continue
		}
		if fields[0] != "go" {
			t.Fatalf("the Quick start's command %q is not a go command", line)
		}
		run(fields[0], fields[1:]...)
		ran++
	}
	if ran == 0 {
		t.Fatal("the Quick start runs no command")
	}
	run("go", "mod", "tidy")
	run("go", append(append([]string{"build"}, raceFlags...), "-o", os.DevNull, ".")...)
}

// The repository has a license, and the README says which.
func TestLicense(t *testing.T) {
	t.Parallel()
	license := readmetest.Read(t, "LICENSE")
	if !strings.Contains(license, "Apache License") || !strings.Contains(license, "Version 2.0, January 2004") {
		t.Fatal("LICENSE is not the Apache License, Version 2.0")
	}
	if text, ok := readmetest.Between(readmetest.Read(t, "README.md"), "\n## License\n", "\n## "); !ok && !strings.Contains(readmetest.Read(t, "README.md"), "\n## License\n") {
		t.Fatal("README.md has no License section")
	} else if ok && !strings.Contains(text, "Apache License, Version 2.0") {
		t.Fatal("the README's License section does not name the Apache License, Version 2.0")
	}
}
