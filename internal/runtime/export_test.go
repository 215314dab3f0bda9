package runtime

import "os"

// SetOpenFile makes in open files with open instead of os.Open.
func SetOpenFile(in *FileInput, open func(name string) (*os.File, error)) { in.openFile = open }

// SetReadDir makes in list directories with readDir instead of os.ReadDir.
func SetReadDir(in *FileInput, readDir func(name string) ([]os.DirEntry, error)) {
	in.readDir = readDir
}
