package devcluster

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when this process dies, so a
// crashed portal dev leaves no node component running.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// unmountDetached unmounts mp lazily, as umount -l does.
func unmountDetached(mp string) error { return syscall.Unmount(mp, syscall.MNT_DETACH) }
