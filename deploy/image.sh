#!/usr/bin/env bash
# deploy/image.sh build|test: build the sluice image with whichever of docker, podman or
# buildah is here (make image, make image-test).
#
#   build  the full multi-stage build of deploy/Dockerfile (its build stage pulls the Go
#          image, so a registry must be reachable)
#   test   builds the binary on the host as the Dockerfile does (cmd/sluice's
#          TestImageBinary, which also runs it as the image would), builds the image from
#          it with FILES=prebuilt (FROM scratch: nothing is pulled), then checks the
#          image's user, entrypoint, command and health check and runs the binary found
#          in the image's own file system. No container is run.
#
# IMAGE names the image (default sluice:dev), VERSION its version (default: git describe).
# PODMAN_STORAGE_DRIVER (default vfs) is podman's and buildah's --storage-driver: vfs works
# in unprivileged sandboxes and containers without overlay support.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-sluice:dev}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
driver=${PODMAN_STORAGE_DRIVER:-vfs}

builder() {
	if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
		echo docker
	elif command -v podman >/dev/null 2>&1; then
		echo podman
	elif command -v buildah >/dev/null 2>&1; then
		echo buildah
	elif command -v docker >/dev/null 2>&1; then
		# The CLI is here, its daemon is not: say so, with what docker itself says.
		local why
		why=$(docker info 2>&1 >/dev/null | grep -m1 -i -E 'cannot connect|error|permission' || true)
		echo "docker is installed but its daemon does not answer${why:+ ($why)}: start it (sudo systemctl start docker, or Docker Desktop), or install podman or buildah (Debian/Ubuntu: apt-get install podman)" >&2
		return 1
	else
		echo "no image builder: install docker, podman or buildah (Debian/Ubuntu: apt-get install podman)" >&2
		return 1
	fi
}

# build TOOL ARGS...: an image build with TOOL.
build() {
	local tool=$1
	shift
	case $tool in
	docker) docker build "$@" ;;
	podman) podman --storage-driver "$driver" build --format docker "$@" ;;
	buildah) buildah --storage-driver "$driver" build --format docker "$@" ;;
	esac
}

cmd=${1:-}
case $cmd in
build)
	tool=$(builder)
	echo "== $tool: $IMAGE ($VERSION)"
	build "$tool" -f deploy/Dockerfile --build-arg VERSION="$VERSION" -t "$IMAGE" .
	;;
test)
	tool=$(builder)
	if [ "$tool" = buildah ]; then
		echo "image-test inspects the image with docker or podman; install podman (apt-get install podman)" >&2
		exit 1
	fi
	run() { if [ "$tool" = podman ]; then podman --storage-driver "$driver" "$@"; else docker "$@"; fi; }
	files=deploy/.image
	rm -rf "$files"
	mkdir -p "$files/etc/ssl/certs"
	echo "== the binary, built as deploy/Dockerfile builds it (TestImageBinary)"
	SLUICE_IMAGE_FILES="$PWD/$files" go test -count=1 -run '^TestImageBinary$' ./cmd/sluice
	cp /etc/ssl/certs/ca-certificates.crt "$files/etc/ssl/certs/"
	echo "== $tool: $IMAGE from the prebuilt binary"
	build "$tool" -q -f deploy/Dockerfile --build-arg FILES=prebuilt -t "$IMAGE" . >/dev/null
	got=$(run image inspect --format '{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.Healthcheck.Test}}' "$IMAGE")
	want='65532:65532 ["sluice"] ["serve"] ["CMD","sluice","check","--health"]'
	if [ "$got" != "$want" ]; then
		echo "image config: got  $got" >&2
		echo "              want $want" >&2
		exit 1
	fi
	if [ "$tool" = podman ]; then
		root=$(run image mount "$IMAGE")
		trap 'run image unmount "$IMAGE" >/dev/null' EXIT
		listing=$(cd "$root" && find . -type f | sort | tr '\n' ' ')
		if [ "$listing" != "./etc/ssl/certs/ca-certificates.crt ./usr/local/bin/sluice " ]; then
			echo "the image holds: $listing; want only the CA certificates and the binary" >&2
			exit 1
		fi
		# The image's own binary, outside a container (running one is not always allowed).
		help=$(env -i "$root/usr/local/bin/sluice" check --help)
		if ! grep -q -- '--health' <<<"$help"; then
			echo "the image's sluice check has no --health" >&2
			exit 1
		fi
	fi
	size=$(run image inspect --format '{{.Size}}' "$IMAGE")
	echo "image-test: ok: $IMAGE, user 65532:65532, entrypoint sluice serve, health check sluice check --health, $((size / 1024 / 1024)) MiB"
	;;
*)
	echo "usage: deploy/image.sh build|test" >&2
	exit 2
	;;
esac
