# syntax=docker/dockerfile:1
#
# leader-elector: a static Go binary on distroless static (nonroot), and
# nothing else — no shell, no package manager, uid/gid 65532.
#
#   make image                      # linux/amd64 + linux/arm64 with buildah (see the Makefile)
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v1.2.3 .
#
# The build stage runs on the build machine and cross-compiles for the
# target platform (no emulation). The final stage only copies the binary in.
# The cache mounts need BuildKit (docker buildx) or buildah; the legacy
# `docker build` builder does not support them.
#
# Build arguments:
#   VERSION     reported by --version and in the image labels
#   REVISION    the git commit, for the labels and leader_elector_build_info
#   GO_IMAGE    the build stage's image; needs the Go toolchain of go.mod and
#               access to a Go module proxy. Where no image can be pulled (as
#               on the project's CI machine), pass a locally made image that
#               holds the toolchain: test/image/local-builder.sh makes one
#               from the machine's own Go.
#   BASE_IMAGE  the runtime base. The shipped image uses distroless static
#               nonroot. Where no image can be pulled, pass `scratch`: the
#               binary needs nothing from the base (it reads the in-cluster CA
#               from the service-account volume, logs to stderr and writes no
#               files), and USER below is numeric, so the result behaves the
#               same; it only lacks distroless's /etc/passwd, CA bundle and
#               tzdata.
# BUILDPLATFORM is set by BuildKit; buildah (1.28) needs it passed as a
# build argument, and declared here to use it in FROM --platform.
ARG BUILDPLATFORM
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/leader-elector .

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="leader-elector" \
      org.opencontainers.image.description="Kubernetes leader-election sidecar: a coordination.k8s.io Lease, a localhost HTTP API, readiness only on the leader" \
      org.opencontainers.image.source="https://github.com/leader-elector/leader-elector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/leader-elector /leader-elector
USER 65532:65532
ENTRYPOINT ["/leader-elector"]
