// Command htpasswd writes one line of an htpasswd file, USER:BCRYPT-HASH,
// for distribution's basic auth, which reads bcrypt hashes only:
//
//	htpasswd USER PASSWORD >> FILE
//
// At bcrypt's lowest cost: the registry checks the hash on every request,
// and at the default cost (10) that is 60 ms of CPU each, which makes a
// test of a few hundred requests take a minute. The tests' passwords
// protect nothing.
package main

import (
	"fmt"
	"os"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: htpasswd USER PASSWORD")
		os.Exit(2)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(os.Args[2]), bcrypt.MinCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], hash)
}
