// Command hello is a tiny static binary the mkimage tests put into an image and run.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("hello test-version")
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "--id" {
		fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
		return
	}
	fmt.Println("hello")
}
