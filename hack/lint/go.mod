module github.com/elector-sidecar/elector-sidecar/hack/lint

go 1.26.8

require (
	github.com/gordonklaus/ineffassign v0.2.0
	github.com/kisielk/errcheck v1.30.0
	golang.org/x/tools v0.52.0
	honnef.co/go/tools v0.8.2
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
