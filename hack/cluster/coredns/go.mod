module example.com/cache-operator/hack/cluster/coredns

go 1.26.0
