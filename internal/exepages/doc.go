// Package exepages gives back to the kernel the pages of the running
// executable that start-up touched (Linux only; elsewhere Drop does
// nothing), so that resident memory follows the pages a long-running
// process goes on using rather than the whole binary.
package exepages
