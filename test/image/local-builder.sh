#!/usr/bin/env bash
# Makes a local build-stage image for the Dockerfile (its GO_IMAGE argument)
# from this machine's own Go toolchain, for machines that cannot pull
# golang:1.26 (the project's CI machine reaches no image registry). The image
# holds $(go env GOROOT) at /usr/local/go, a /bin/sh (the machine's dash and
# the libraries it links), the CA bundle (to reach the Go module proxy), /tmp,
# and the official golang image's environment (GOPATH=/go). An image that
# already exists is reused. Prints the image name on stdout.
#
# Usage: local-builder.sh [buildah global flags, e.g. --root DIR --storage-driver vfs]
set -euo pipefail

goroot="$(go env GOROOT)"
image="localhost/leader-elector-go-builder:$(go env GOVERSION)"
buildah=(buildah "$@")

if "${buildah[@]}" inspect --type image "$image" >/dev/null 2>&1; then
	echo "$image"
	exit 0
fi
sh="$(readlink -f /bin/sh)"
for f in "$goroot/bin/go" "$sh" /etc/ssl/certs/ca-certificates.crt; do
	[[ -e "$f" ]] || { echo "local-builder.sh: $f is missing" >&2; exit 1; }
done
echo "making $image from $goroot and $sh" >&2
ctr="$("${buildah[@]}" from scratch)"
trap '"${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
mnt="$("${buildah[@]}" mount "$ctr")"
mkdir -p "$mnt/usr/local" "$mnt/bin" "$mnt/etc/ssl/certs" "$mnt/go" "$mnt/root"
mkdir -m 1777 "$mnt/tmp"
cp -a "$goroot" "$mnt/usr/local/go"
cp "$sh" "$mnt/bin/sh"
# The shared libraries /bin/sh needs, at the paths the loader looks for them.
for lib in $(ldd "$sh" | grep -oE '/[^ ]+'); do
	mkdir -p "$mnt$(dirname "$lib")"
	cp -L "$lib" "$mnt$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
"${buildah[@]}" umount "$ctr" >/dev/null
"${buildah[@]}" config \
	--env PATH=/go/bin:/usr/local/go/bin:/usr/bin:/bin \
	--env GOPATH=/go \
	--env GOTOOLCHAIN=local \
	--env HOME=/root \
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--env GOPROXY="$(go env GOPROXY)" \
	--env GOSUMDB="$(go env GOSUMDB)" \
	--workingdir /src \
	"$ctr"
"${buildah[@]}" commit --quiet "$ctr" "$image" >/dev/null
echo "$image"
