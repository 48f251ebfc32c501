// Package deploytest is the module that tests what deploy/ ships against the sluice it
// deploys: package promql checks the Grafana dashboard's and the alert rules' PromQL
// against the metrics a running `sluice serve` exports (make test), and package chart
// checks the Helm chart's rendered manifests (make chart-test). It is a module of its own,
// so that Prometheus and the Kubernetes API types stay out of sluice's go.mod; its tests
// run the sluice binary, built from the module two directories up, and real
// redis-server processes (package internal/sluicetest).
package deploytest
