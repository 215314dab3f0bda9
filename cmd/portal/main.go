// Command portal is the Kubernetes security control plane: one binary whose
// subcommands run the controller (`portal run`), a local control plane
// (`portal dev`) and the offline tools (`portal eval`, `portal migrate-rules`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// Exit codes shared by the subcommands.
const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
)

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "portal:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "portal:", err)
	return exitUsage
}

// usageError marks err as the user's to fix: exit code 2.
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }
