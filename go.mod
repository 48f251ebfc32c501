module github.com/sluicehq/sluice

go 1.26

require (
	github.com/fsnotify/fsnotify v1.10.1
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
