module github.com/sluicehq/sluice

go 1.26

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
