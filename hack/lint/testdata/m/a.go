package m

import (
	"fmt"
	"os"
	"sync"
)

func unusedHelper() {} // want "unused: func unusedHelper is unused"

func Errors() {
	os.Remove("x")                // want "errcheck: error return value of `os.Remove` is not checked"
	os.Remove("y")                //nolint:errcheck // silenced for this linter
	os.Remove("z")                //nolint // silenced for every linter
	os.Remove("w")                //nolint:unused // another linter: still reported // want "errcheck: error return value"
	fmt.Fprintln(os.Stdout, "ok") // excluded (errcheckExcluded)
	_ = os.Remove("v")            // an assignment to _ is a decision
}

func Vet(mu sync.Mutex) { // want "copylocks: Vet passes lock by value: sync.Mutex"
	mu.Lock()
	defer mu.Unlock()
}

func Ineffective() int {
	x := 1 // want "ineffassign: ineffectual assignment to x"
	x = 2
	return x
}

func Staticcheck(ok bool) int {
	if ok == true { // want "S1002: should omit comparison to bool constant"
		return 1
	}
	return 0
}
