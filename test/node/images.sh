#!/usr/bin/env bash
# Builds the two images the real-node tests need besides leader-elector's
# own (which `make image-test` builds from the shipped Dockerfile), as OCI
# archives in the directory given as $1:
#   pause.oci.tar    the pod sandbox image: test/node/pause, static
#   busybox.oci.tar  the demo app's image: Debian's static busybox with its
#                    applets, standing in for docker.io/library/busybox,
#                    which cannot be pulled here (the example runs a
#                    busybox shell script: sh, httpd, wget)
#   echoapp.oci.tar  the proxy proof's app: test/node/echoapp, static, an
#                    HTTP server that keeps connections alive
#   exactlyonce.oci.tar  the exactly-once worker (examples/exactlyonce's
#                    command), static
# Archives that exist are reused, but for exactlyonce's: it is built each
# time (seconds), because it is the project's own code and changes with it.
# Needs buildah and busybox-static
# (make node-deps installs them).
#
# Usage: images.sh <output dir> [buildah global flags]
set -euo pipefail

out="$1"
shift
buildah=(buildah "$@")
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"

# image <archive> <name> <rootfs dir> <entrypoint json>
image() {
	local archive="$1" name="$2" rootfs="$3" entrypoint="$4" ctr
	ctr="$("${buildah[@]}" from scratch)"
	"${buildah[@]}" copy --quiet "$ctr" "$rootfs" / >/dev/null
	"${buildah[@]}" config --entrypoint "$entrypoint" --user 65532:65532 "$ctr"
	"${buildah[@]}" commit --quiet "$ctr" "$name" >/dev/null
	"${buildah[@]}" rm "$ctr" >/dev/null
	rm -f "$archive.tmp"
	"${buildah[@]}" push --quiet "$name" "oci-archive:$archive.tmp:$name"
	"${buildah[@]}" rmi "$name" >/dev/null
	mv "$archive.tmp" "$archive"
	echo "built $name into $archive" >&2
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ ! -s "$out/pause.oci.tar" ]]; then
	mkdir -p "$work/pause"
	(cd "$here/../.." && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/pause/pause" ./test/node/pause)
	image "$out/pause.oci.tar" localhost/leader-elector-test/pause:1 "$work/pause" '["/pause"]'
fi

if [[ ! -s "$out/echoapp.oci.tar" ]]; then
	mkdir -p "$work/echoapp"
	(cd "$here/../.." && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/echoapp/echoapp" ./test/node/echoapp)
	image "$out/echoapp.oci.tar" localhost/leader-elector-test/echoapp:1 "$work/echoapp" '["/echoapp"]'
fi

mkdir -p "$work/exactlyonce"
(cd "$here/../.." && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/exactlyonce/exactlyonce" ./examples/exactlyonce/cmd/exactlyonce)
image "$out/exactlyonce.oci.tar" localhost/leader-elector-test/exactlyonce:1 "$work/exactlyonce" '["/exactlyonce"]'

if [[ ! -s "$out/busybox.oci.tar" ]]; then
	busybox="$(command -v busybox || true)"
	if [[ -z "$busybox" ]] || ! file -L "$busybox" | grep -q 'statically linked'; then
		echo "images.sh: a static busybox is needed (Debian's busybox-static; make node-deps installs it)" >&2
		exit 1
	fi
	mkdir -p "$work/busybox/bin" "$work/busybox/tmp"
	chmod 1777 "$work/busybox/tmp"
	cp "$busybox" "$work/busybox/bin/busybox"
	"$work/busybox/bin/busybox" --install -s "$work/busybox/bin"
	# --install -s links to the absolute path of the running binary.
	for l in "$work"/busybox/bin/*; do
		[[ -L "$l" ]] && ln -sf /bin/busybox "$l"
	done
	image "$out/busybox.oci.tar" localhost/leader-elector-test/busybox:1 "$work/busybox" '["/bin/sh"]'
fi
