// Package deploytest tests what deploy/ ships against the sluice it deploys: the Grafana
// dashboard's and the alert rules' PromQL against the metrics a running `sluice serve`
// exports (TestPromQL), and the Helm chart's rendered manifests (TestChart, run by
// `make chart-test`). It is a module of its own, so that Prometheus and the Kubernetes
// API types stay out of sluice's go.mod; it runs the sluice binary, built from the
// module two directories up, and real redis-server processes.
package deploytest
