package runtime

import "os"

// SetOpenFile makes in open files with open instead of os.Open.
func SetOpenFile(in *FileInput, open func(name string) (*os.File, error)) { in.openFile = open }
