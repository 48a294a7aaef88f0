// Package failclosed proves the chart's fail-closed admission policies on a
// real API server, each admitted pod's annotations then read by NRI's own
// default validator, as containerd and CRI-O read them.
package failclosed
