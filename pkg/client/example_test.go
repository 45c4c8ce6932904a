package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// A main container next to the sidecar: it asks for the fencing token,
// follows the election with Watch, and steps down with Release.
func Example() {
	sidecar := startSidecar(nil, leading) // in a pod: the sidecar's local API
	defer sidecar.Close()

	c, err := client.New(sidecar.URL) // in a pod: client.New("") for http://127.0.0.1:4040
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	tok, err := c.Token(ctx)
	switch {
	case errors.Is(err, client.ErrNotLeader):
		fmt.Println("a follower: no token")
	case err != nil:
		log.Fatal(err)
	default:
		// Fence each write with tok.Fencing() (package fencing), and start
		// one only while time.Until(tok.Deadline) exceeds what it takes.
		fmt.Printf("token %d of lease %s\n", tok.Token, tok.Lease)
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	err = c.Watch(wctx, func(s localapi.LeaderResponse) {
		fmt.Printf("isLeader=%v holder=%q\n", s.IsLeader, s.Holder)
		if s.IsLeader {
			// Hand the Lease over, e.g. before a long maintenance task.
			if err := c.Release(ctx, 0); err != nil {
				log.Fatal(err)
			}
			return
		}
		stop() // Watch returns
	})
	fmt.Println("watch:", err)

	_, err = c.Token(ctx)
	fmt.Println(errors.Is(err, client.ErrNotLeader), err)
	// Output:
	// token 7 of lease ns/l
	// isLeader=true holder="pod-a"
	// isLeader=false holder=""
	// watch: context canceled
	// true GET /token: 409 Conflict: not the leader: nobody holds the lease
}

// Work that runs only while this pod leads, like client-go's
// OnStartedLeading: fn's context ends when the term does (here the work
// itself steps down).
func ExampleClient_RunWhileLeading() {
	sidecar := startSidecar(nil, leading) // in a pod: the sidecar's local API
	defer sidecar.Close()

	c, err := client.New(sidecar.URL) // in a pod: client.FromEnv() ($ELECTOR_URL, as the chart sets it)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	err = c.RunWhileLeading(ctx, func(ctx context.Context, tok client.Token) {
		fmt.Println("leading with token", tok.Token)
		// The work: fence each write with tok.Fencing(); here, hand the
		// Lease over.
		if err := c.Release(context.Background(), 0); err != nil {
			log.Fatal(err)
		}
		<-ctx.Done()
		fmt.Println("stopped:", context.Cause(ctx))
		stop() // RunWhileLeading returns
	})
	fmt.Println("RunWhileLeading:", err)
	// Output:
	// leading with token 7
	// stopped: leadership ended: token 7 stopped; nobody holds the lease
	// RunWhileLeading: context canceled
}
