module github.com/containers/nri-plugins/pkg/topology

go 1.22

require golang.org/x/sys v0.18.0
