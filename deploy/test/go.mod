module github.com/sluicehq/sluice/deploy/test

go 1.26.0
