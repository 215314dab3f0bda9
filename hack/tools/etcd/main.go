// Command etcd is the etcd server the test control plane runs. It is built from
// the etcd module so tests never depend on a downloaded release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
