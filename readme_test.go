package corral_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

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

// The README's "Invalidating groups" shows the body of
// ExampleCache_InvalidateTags (which go test runs against a real Redis),
// unindented.
func TestReadmeInvalidateTags(t *testing.T) {
	t.Parallel()
	readmetest.Snippet(t, "README.md", "### Invalidating groups: tags, Clear, Expire", "example_groups_test.go", "ExampleCache_InvalidateTags")
}

// The Install section's commands, run as the README words them in a new
// module (the clone's path, ../corral there, is this repository's), get the
// library, and the Quick start's program builds against it: the way to use
// corral before it is on the module proxy works.
func TestReadmeQuickStartFromAClone(t *testing.T) {
	readme := readmetest.Read(t, "README.md")
	install, ok := readmetest.Between(readme, "\n## Install\n", "\n## ")
	if !ok {
		t.Fatal("README.md: no Install section")
	}
	commands, ok := readmetest.Between(install, "```sh\n", "```")
	if !ok {
		t.Fatal("the Install section has no commands")
	}
	text, ok := readmetest.Between(readme, "\n## Quick start\n", "\n## ")
	if !ok {
		t.Fatal("README.md: no Quick start")
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
			t.Fatalf("the Install section's command %q is not a go command", line)
		}
		run(fields[0], fields[1:]...)
		ran++
	}
	if ran == 0 {
		t.Fatal("the Install section runs no command")
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

// Every relative link in the repository's Markdown (README.md, docs/*.md,
// CHANGELOG.md, BENCHMARKS.md) names a file or directory that exists, and
// its #anchor, if any, a heading of the page it names, slugged as GitHub
// slugs them: the README sends readers to docs/ for most things, and a
// page moved or a heading reworded must not leave a link dangling.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md", "CHANGELOG.md", "BENCHMARKS.md")
	var checked int
	for _, page := range pages {
		for _, link := range markdownLinks(readmetest.Read(t, page)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := page
			if path != "" {
				target = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %q: %v", page, link, err)
					continue
				}
			}
			if anchor != "" && !slices.Contains(headingAnchors(readmetest.Read(t, target)), anchor) {
				t.Errorf("%s: link %q: %s has no heading with that anchor", page, link, target)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the check is broken")
	}
}

// markdownLinks returns the targets of the inline links and images of a
// Markdown text, outside fenced code blocks and code spans.
func markdownLinks(text string) []string {
	var links []string
	for _, line := range outsideCode(text) {
		for {
			_, rest, ok := strings.Cut(line, "](")
			if !ok {
				break
			}
			end := strings.IndexAny(rest, ") ")
			if end < 0 {
				break
			}
			links = append(links, rest[:end])
			line = rest[end:]
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives a Markdown text's
// headings: lower case, punctuation dropped, spaces as dashes, and -1, -2,
// ... after a repeated one.
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, line := range outsideFences(text) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", anchor, n))
		} else {
			anchors = append(anchors, anchor)
		}
		seen[anchor]++
	}
	return anchors
}

// outsideCode returns a Markdown text's lines outside fenced code blocks,
// with their code spans removed.
func outsideCode(text string) []string {
	lines := outsideFences(text)
	for i, line := range lines {
		parts := strings.Split(line, "`")
		for j := 1; j < len(parts); j += 2 {
			parts[j] = ""
		}
		lines[i] = strings.Join(parts, "")
	}
	return lines
}

// outsideFences returns a Markdown text's lines outside fenced code blocks.
func outsideFences(text string) []string {
	var lines []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}
