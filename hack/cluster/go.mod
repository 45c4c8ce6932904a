module github.com/elector-sidecar/elector-sidecar/hack/cluster

go 1.26
