package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/devcluster"
)

// Pages whose marked blocks TestRunnableDocBlocks runs, in this order, against
// one portal dev. Getting-started pages run in a directory of their own, as a
// reader following them would; the cookbook's commands name repository paths
// and run from the repository.
var runnablePages = []struct {
	glob   string
	inRepo bool
}{
	{"docs/getting-started/first-rule.md", false},
	{"docs/cookbook/[a-z]*-*.md", true},
}

// A block is runnable when the line before its opening fence is a marker:
//
//	<!-- runnable: save NAME -->   the block's content is written to the file NAME
//	<!-- runnable -->              a console block: each "$ " line is run, and
//	                               the lines after it are its expected output
var runnableMarker = regexp.MustCompile(`^<!-- runnable(?:: save ([A-Za-z0-9._-]+))? -->$`)

type docBlock struct {
	page    string
	inRepo  bool
	line    int
	save    string // file name for a save block; empty for a console block
	content string
}

func readRunnableBlocks(t *testing.T, root, page string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		m := runnableMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: a runnable marker must be right above a fenced block", page, i+1)
		}
		if m[1] == "" && strings.TrimPrefix(lines[i+1], "```") != "console" {
			t.Fatalf("%s:%d: <!-- runnable --> marks console blocks (\"$ \" commands and their output)", page, i+1)
		}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 {
			t.Fatalf("%s:%d: unterminated block", page, i+2)
		}
		out = append(out, docBlock{page: page, line: i + 2, save: m[1], content: strings.Join(lines[i+2:i+2+end], "\n") + "\n"})
		i += 2 + end
	}
	if len(out) == 0 {
		t.Fatalf("%s has no runnable blocks", page)
	}
	return out
}

type docCommand struct {
	cmd  string
	want []string
}

func parseConsole(content string) []docCommand {
	var cmds []docCommand
	for _, l := range strings.Split(strings.TrimSuffix(content, "\n"), "\n") {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			cmds = append(cmds, docCommand{cmd: c})
		} else if len(cmds) > 0 {
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
		}
	}
	return cmds
}

// Ages and durations differ from run to run (AGE 1s, ready in 7.3s).
var durations = regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h)\b`)

func normalize(lines []string) string {
	var out []string
	for _, l := range lines {
		if l = strings.Join(strings.Fields(durations.ReplaceAllString(l, "<duration>")), " "); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// changes reports whether a command changes the cluster, so that it must run
// exactly once; other commands are read again until their output matches,
// since Portal updates status asynchronously.
func changes(cmd string) bool {
	for _, verb := range []string{" apply ", " create ", " delete ", " edit ", " patch ", " label ", " annotate "} {
		if strings.Contains(" "+cmd+" ", verb) {
			return true
		}
	}
	return false
}

// TestRunnableDocBlocks runs the blocks of the getting-started and cookbook
// pages that are marked runnable, against a real portal dev, as a reader would
// type them:
// the files they save, the commands they show, and the output they promise.
// A page whose commands or output drift from what Portal does fails here.
func TestRunnableDocBlocks(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	for _, p := range runnablePages {
		pages, err := filepath.Glob(filepath.Join(root, p.glob))
		if err != nil || len(pages) == 0 {
			t.Fatalf("no page matches %s: %v", p.glob, err)
		}
		for _, page := range pages {
			rel, _ := filepath.Rel(root, page)
			for _, b := range readRunnableBlocks(t, root, rel) {
				b.inRepo = p.inRepo
				blocks = append(blocks, b)
			}
		}
	}

	binDir := t.TempDir()
	bin := filepath.Join(binDir, "portal")
	build := exec.Command("go", "build", "-o", bin, "./cmd/portal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Symlink(filepath.Join(root, "bin", "k8s", "kubectl"), filepath.Join(binDir, "kubectl")); err != nil {
		t.Fatal(err)
	}
	workDir := t.TempDir()
	kubeconfig := filepath.Join(workDir, ".portal-dev", "kubeconfig")
	dev := exec.Command(bin, "dev", "--kubeconfig-out", kubeconfig,
		"--k8s-bin-dir", filepath.Join(root, "bin", "k8s"),
		"--webhook-port", fmt.Sprint(freePort(t)),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--waf-cache-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	dev.Dir = root
	dev.Stderr = os.Stderr
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "portal dev: ready") {
				close(ready)
			}
		}
		exited <- dev.Wait()
	}()
	t.Cleanup(func() {
		_ = dev.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = dev.Process.Kill()
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("portal dev exited before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("portal dev not ready within 2 minutes")
	}

	env := append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "PATH=")
	}), "KUBECONFIG="+kubeconfig, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	lastStatus := 0
	for _, b := range blocks {
		if b.save != "" {
			if err := os.WriteFile(filepath.Join(workDir, b.save), []byte(b.content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, c := range parseConsole(b.content) {
			want := normalize(c.want)
			var got string
			prevStatus := lastStatus
			run := func() {
				// $? is the status of the previous command, as in a terminal.
				sh := exec.Command("sh", "-c", fmt.Sprintf("(exit %d); %s", prevStatus, c.cmd))
				sh.Dir, sh.Env = workDir, env
				if b.inRepo {
					sh.Dir = root
				}
				var out bytes.Buffer
				sh.Stdout, sh.Stderr = &out, &out
				err := sh.Run()
				lastStatus = 0
				if ee, ok := err.(*exec.ExitError); ok {
					lastStatus = ee.ExitCode()
				} else if err != nil {
					t.Fatalf("%s:%d: %s: %v", b.page, b.line, c.cmd, err)
				}
				got = normalize(strings.Split(out.String(), "\n"))
			}
			if changes(c.cmd) {
				run()
			} else {
				_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
					run()
					return got == want, nil
				})
			}
			if got != want {
				t.Errorf("%s:%d: $ %s\nthe page shows:\n%s\nPortal printed:\n%s", b.page, b.line, c.cmd, want, got)
			}
		}
	}
}
