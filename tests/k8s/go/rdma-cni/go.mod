module sriov-rdma-cni.invalid/tests/k8s/rdma-cni

go 1.26.0

tool github.com/k8snetworkplumbingwg/rdma-cni/cmd/rdma

require (
	github.com/Mellanox/rdmamap v1.1.0 // indirect
	github.com/containernetworking/cni v1.3.0 // indirect
	github.com/containernetworking/plugins v1.9.0 // indirect
	github.com/k8snetworkplumbingwg/rdma-cni v1.6.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.19 // indirect
	github.com/rs/zerolog v1.34.0 // indirect
	github.com/spf13/afero v1.15.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
)
