package devcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The reaper is a copy of the running executable, started with these
// variables, that outlives a crash of the process that started the node.
// A test that panics or times out ends its binary without deferred calls
// or TestMain's cleanup; the reaper sees the end of its pipe and removes
// the node, holding the host lock until it is done, so the next node
// starts on a clean host.
const (
	reaperDirEnv = "PORTAL_DEVCLUSTER_NODE_REAPER_DIR"
	reaperBinEnv = "PORTAL_DEVCLUSTER_NODE_REAPER_BINDIR"
)

// released is what the node's process writes to the reaper's pipe after
// its own cleanup: the reaper then exits without doing anything.
const released = 'd'

// init turns this process into the reaper when it was started as one
// (the only way the variables are set); every binary that can start a node
// links this package, so `portal dev` and test binaries both work.
func init() {
	dir := os.Getenv(reaperDirEnv)
	if dir == "" {
		return
	}
	os.Exit(runReaper(dir, os.Getenv(reaperBinEnv)))
}

func runReaper(dir, binDir string) int {
	pipe := os.NewFile(3, "reaper-pipe")
	lock := os.NewFile(4, "node-lock") // held until this process exits
	defer lock.Close()
	var b [1]byte
	if n, _ := pipe.Read(b[:]); n == 1 && b[0] == released {
		return 0
	}
	// The node's process died without cleaning up.
	if err := cleanHost(dir, binDir); err != nil {
		log, _ := os.OpenFile(filepath.Join(os.TempDir(), "portal-devcluster-node-reaper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if log != nil {
			fmt.Fprintf(log, "%s: cleaning up after pid %d: %v\n", time.Now().Format(time.RFC3339), os.Getppid(), err)
			log.Close()
		}
		return 1
	}
	return 0
}

type reaper struct {
	cmd  *exec.Cmd
	pipe *os.File
	// unpin lets the collector have pipe again; see pin.
	unpin func()
}

// startReaper starts the reaper with the read end of a pipe and the lock.
// It runs in its own session so Ctrl-C on the terminal does not reach it.
func startReaper(dir, binDir string, lock *os.File) (*reaper, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("devcluster: the reaper needs this executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), reaperDirEnv+"="+dir, reaperBinEnv+"="+binDir)
	cmd.ExtraFiles = []*os.File{r, lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("devcluster: starting the reaper: %w", err)
	}
	return &reaper{cmd: cmd, pipe: w, unpin: pin(w)}, nil
}

// pin keeps f reachable until unpin is called. The collector closes an
// *os.File nothing references any more, and the end of its pipe is how the
// reaper learns that this process died: a caller that drops its Cluster
// without Stop (a test helper meant to crash with a running node, or any
// program that keeps only the Cluster's Config) would have the reaper
// remove the running node under it at the next collection, its bridge and
// NodeIP with it.
func pin(f *os.File) (unpin func()) {
	done := make(chan struct{})
	go func() {
		<-done
		runtime.KeepAlive(f)
	}()
	return sync.OnceFunc(func() { close(done) })
}

// release tells the reaper the node is gone and waits for it to exit.
func (r *reaper) release() error {
	_, werr := r.pipe.Write([]byte{released})
	cerr := r.pipe.Close()
	r.unpin()
	err := r.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("devcluster: the reaper: %w", err)
	}
	if werr != nil && !errors.Is(werr, io.ErrClosedPipe) {
		return errors.Join(werr, cerr, err)
	}
	return errors.Join(cerr, err)
}
